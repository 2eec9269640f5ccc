"""Where per-graph state lives: the outermost graph, found without ``tf.init_scope``.

Loss-scale state (a manager's variables, an optimizer's counters, the emulated register) exists
once per *outermost* graph: the ``tf.compat.v1`` graph a session runs, or eager execution for
``tf.function``s. Cond and loop bodies and ``tf.function`` traces are inner graphs
(``FuncGraph``) and share the state of the graph they are built in.

``tf.init_scope`` is not used to find that graph: in a program that turned eager execution off
inside ``main`` (``absl.app.run`` + ``tf.compat.v1.disable_eager_execution()``) and builds into
the implicit global graph, ``init_scope`` from inside a ``tf.cond`` branch lands in *eager* mode,
and whatever it creates cannot be used by the graph. :func:`outermost_graph` walks the chain of
``FuncGraph.outer_graph`` instead.

State is stored on the graph object itself (an attribute named per owner), never in a dict held
by the owner: when the user drops a graph, its state goes with it, whatever optimizers and
managers outlive it. Eager state is held by the owner.
"""
import contextlib
import itertools
import threading
import weakref

import tensorflow as tf

# Functions that build ops run as written when called from code AutoGraph converts (a
# tf.distribute replica function, a tf.function): converting them would gain nothing. The package
# marks them with this decorator.
as_is = tf.autograph.experimental.do_not_convert

_ids = itertools.count()
_lock = threading.RLock()


# TensorFlow keeps one global default graph per thread. A tf.function traced from eager code in
# one thread (say the main thread) may be run by a replica thread of a tf.distribute strategy,
# whose own global graph is another object: the function's graph chain ends at the *tracing*
# thread's global graph. Every global graph seen from any thread is remembered here (weakly), so
# either one is recognised as "eager, not a graph anybody builds into".
_global_graphs = weakref.WeakSet()


def _global_graph():
    from tensorflow.python.framework import ops  # pylint: disable=import-outside-toplevel
    graph = ops._default_graph_stack._GetGlobalDefaultGraph()  # pylint: disable=protected-access
    _global_graphs.add(graph)
    return graph


def _is_a_global_graph(graph):
    return graph is _global_graph() or graph in _global_graphs or \
        graph is _eager_root_of_replica_thread()


def _eager_root_of_replica_thread():
    """In a replica thread of a ``tf.distribute`` strategy started from eager code: the global
    graph the starting thread's function graphs hang from, else None.

    That graph is another thread's, and it may be newer than any seen before: ``clear_session()``
    and ``tf.test.TestCase.setUp`` replace the global graph. The replica thread records that it
    was started eagerly (``_init_in_eager``) and from which graph (``_init_graph``).
    """
    thread = threading.current_thread()
    if not getattr(thread, "_init_in_eager", False):
        return None
    graph = getattr(thread, "_init_graph", None)
    while getattr(graph, "outer_graph", None) is not None:
        graph = graph.outer_graph
    return graph


def _eager_by_default():
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    return context.default_execution_mode == context.EAGER_MODE


def outermost_graph():
    """The outermost graph being built, or None when the outermost context is eager."""
    if tf.executing_eagerly():
        return None
    graph = tf.compat.v1.get_default_graph()
    while getattr(graph, "building_function", False) and getattr(graph, "outer_graph", None) \
            is not None:
        graph = graph.outer_graph
    if getattr(graph, "building_function", False):
        return None  # a function traced from eager code, without an outer graph
    if _eager_by_default() and _is_a_global_graph(graph):
        # A tf.function traced from eager code: its chain ends at the (unused) global graph.
        return None
    return graph


@contextlib.contextmanager
def outer_scope(graph):
    """Builds in ``graph`` (None: eager) with no control dependencies or control-flow context."""
    if graph is None:
        with tf.init_scope():
            yield
        return
    with graph.as_default(), tf.control_dependencies(None):
        yield


def replica_id():
    """Which local replica of a tf.distribute strategy is building ops (0 if only one is local).

    Each Ascend device has its own register, so each replica this process runs gets its own
    emulated register: with a shared one, one replica's clear could erase another replica's
    overflow. A process with a single local replica (one worker of a multi-worker strategy, or no
    strategy) has one register, used from replica and cross-replica contexts alike.
    """
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return 0
    local = len(tf.distribute.get_strategy().extended.worker_devices or ())
    if local <= 1:
        return 0
    context = tf.distribute.get_replica_context()
    value = None if context is None else tf.get_static_value(context.replica_id_in_sync_group)
    return int(value) % local if value is not None else 0


class PerGraph:
    """State of one owner (a manager, an optimizer) in each outermost graph, held weakly.

    ``get(build)`` returns the state of the current outermost graph, calling ``build()`` (in that
    graph, outside any control dependency, control flow or function body) the first time.
    ``peek()`` returns it or None, creating nothing.
    """

    def __init__(self, label="state"):
        self._attr = "_npu_loss_scale_%s_%d" % (label, next(_ids))
        self._eager = None

    def peek(self, graph=False):
        graph = outermost_graph() if graph is False else graph
        if graph is None:
            return self._eager
        return getattr(graph, self._attr, None)

    def get(self, build):
        graph = outermost_graph()
        state = self.peek(graph)
        if state is not None:
            return state
        with _lock:
            state = self.peek(graph)
            if state is None:
                with outer_scope(graph):
                    state = build()
                if graph is None:
                    self._eager = state
                else:
                    setattr(graph, self._attr, state)
        return state

    def reset_eager(self):
        self._eager = None


_global_graph()   # the importing thread's (usually the main thread's)


def orders_resource_uses():
    """True while the default graph is a function graph whose stateful ops TensorFlow orders
    itself: a ``tf.function`` being traced, or a cond or loop body inside one (automatic control
    dependencies). There every use of a resource (the emulated register, a variable) waits for
    the uses built before it, and the function ends only after all of them; a ``tf.compat.v1``
    graph, and a gradient function built outside such a trace, order nothing."""
    return bool(getattr(tf.compat.v1.get_default_graph(), "_add_control_dependencies", False))
