"""The loss-scale manager's contract and its state: :class:`LossScaleManager`, the base of
Ascend's managers (:mod:`.managers`) and Megatron's scalers (:mod:`.megatron`).

A manager owns a few non-trainable variables and exposes ``get_loss_scale()`` and
``update_loss_scale(finite_grads)``; this base creates its variables once per outermost graph,
under Ascend's checkpoint names (:class:`_WholeVariable` keys ``loss_scale``), and restores them
all or nothing. :func:`as_manager` views any object with those two calls as a manager (a
contrib or Ascend adapter manager). The rules that move the scale are the subclasses'.
"""
import abc

import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import gradients as _gradients
from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal import staged as _staged
from npu_loss_scale._internal import state_io as _state_io
from npu_loss_scale._internal.compat.loss_scale_optimizer import MANAGER_BASES
from npu_loss_scale._internal.compat.variables import Variable


# The float32 tensor a script can fetch by name: ``loss_scale:0`` (see ascend-facts §3).
LOSS_SCALE_TENSOR_NAME = "loss_scale"


class _WholeVariable(tf.Variable.SaveSliceInfo):
    """Save-slice info that covers the whole variable: its only effect is the checkpoint key.

    A name-based Saver keys a graph-mode variable by its op name, and the op that a script
    fetches as ``loss_scale:0`` must be the float value, not a resource handle. The variable's
    own op is therefore named ``loss_scale_value`` and this "slice" (the whole tensor, empty
    slice spec) gives it the key ``loss_scale``.
    """

    @property
    def spec(self):
        return ""


class LossScaleManager(_staged.StagedChildren, *MANAGER_BASES, metaclass=abc.ABCMeta):
    """Base class of loss-scale managers.

    Subclasses implement :meth:`get_loss_scale` and :meth:`update_loss_scale` (the contract of
    ``tf.contrib.mixed_precision``'s managers and Ascend's: a manager that keeps its own
    variables needs nothing else, and may skip this constructor), and may override
    :meth:`_build_state`, :meth:`get_enable_overflow_check`, :meth:`next_loss_scale` and
    :meth:`get_config`.

    Per-graph state, for subclasses: :meth:`_state` returns a dict built by ``_build_state()``
    the first time the manager is used in the current outermost graph; ``_build_state`` runs in
    that graph with no control dependencies and outside any cond, loop or function body, and
    creates its variables with :meth:`_add_weight` (checkpoint key = ``name``; in a
    ``tf.compat.v1`` graph ``<name>:0`` also fetches the value). The dict is stored on the graph,
    so it dies with it.

    Only :class:`~npu_loss_scale.NPULossScaleOptimizer` updates a manager: TensorFlow's own
    ``MixedPrecisionLossScaleOptimizer`` calls ``update(grads)`` only for a dynamic
    ``tf.compat.v1.mixed_precision`` loss scale, and never for a manager.
    """

    def __init__(self):
        super().__init__()
        self._per_graph = _graphs.PerGraph("manager")

    def __getattr__(self, attr):
        # A subclass whose constructor does not call this one (contrib's managers have no
        # constructor to call) gets its per-graph state holder on first use.
        if attr == "_per_graph":
            holder = _graphs.PerGraph("manager")
            self.__dict__["_per_graph"] = holder
            return holder
        raise AttributeError("%r object has no attribute %r" % (type(self).__name__, attr))

    @abc.abstractmethod
    def get_loss_scale(self):
        """Returns the current loss scale as a scalar float32 tensor."""

    @abc.abstractmethod
    def update_loss_scale(self, finite_grads):
        """Returns an op that updates the loss scale; ``finite_grads`` is a scalar bool."""

    def get_enable_overflow_check(self):
        """Whether an optimizer using this manager must check for overflow (True by default)."""
        return True

    def next_loss_scale(self, finite_grads):  # pylint: disable=unused-argument
        """The scale ``update_loss_scale(finite_grads)`` would leave, as a tensor that changes
        nothing (None when the manager cannot tell). Hooks use it to report the new scale
        without a second ``session.run``."""
        return None

    # -- TensorFlow LossScale interface -------------------------------------------------------
    def __call__(self):
        return self.get_loss_scale()

    def update(self, grads):
        finite = _gradients.all_finite(tf.nest.flatten(grads))
        return self.update_loss_scale(finite), finite

    # -- helpers for subclasses ---------------------------------------------------------------
    def _state(self):
        """The per-graph state dict, built by ``_build_state`` on first use in a graph."""
        return self._per_graph.get(self._build_state_with_weights)

    def _build_state_with_weights(self):
        self._pending_weights = {}
        try:
            state = self._build_state()
            state.setdefault("_weights", {}).update(self._pending_weights)
        finally:
            self._pending_weights = None
        if state["_weights"]:
            state["_staged"] = _staged.StagedState(type(self).__name__, state["_weights"])
            self._restore_deferred(state["_staged"])
        if state.get("loss_scale") is not None and state["_weights"]:
            # the graph's scale, used by every step, waits for the check of the whole state
            with tf.control_dependencies([self._restored_state_check(state)]):
                state["checked_loss_scale"] = tf.identity(state["loss_scale"])
        return state

    def _restore_deferred(self, staged):
        """Restores what a checkpoint read before these weights existed holds for them, all or
        nothing (see :class:`npu_loss_scale._internal.staged.StagedState`)."""
        self._maybe_initialize_trackable()
        deferred = self._deferred_dependencies
        for name in staged.children:
            for position in deferred.get(name, ()):
                staged.expect(name, position.checkpoint.restore_uid)
        for name, child in staged.children.items():
            self._handle_deferred_dependencies(name=name, trackable=child)

    def _state_limits(self):
        """``{checkpoint key: (minimum, min_inclusive, maximum, accepted-text)}`` for state
        variables whose accepted values are not the defaults of ``_state_io.LIMITS``."""
        return {}

    def _restored_state_check(self, state):
        """An op refusing a restored state no rule can reach (see
        :func:`npu_loss_scale._internal.state_io.restored_state_check`)."""
        return _state_io.restored_state_check(type(self).__name__, state["_weights"],
                                              self._state_limits())

    def _build_state(self):
        """Creates this manager's tensors and variables in the current graph; returns a dict.

        The default creates nothing: a manager that keeps its own variables needs no per-graph
        state.
        """
        return {}

    def get_config(self):
        """The constructor arguments, for ``from_config``; a subclass that wants to be
        serialised overrides it (there is no way to guess its arguments)."""
        raise NotImplementedError(
            "%s does not implement get_config(): override it to return the constructor's "
            "arguments as a dict" % type(self).__name__)

    @tf.autograph.experimental.do_not_convert   # graph building only: nothing to convert
    def _scale_of_variable(self):
        """The scale of a manager whose state holds it as ``scale_var`` (made by
        :meth:`_add_weight`) and ``loss_scale`` (that weight's fetchable value, or None): the
        value of ``loss_scale:0`` in a graph, the variable's value in eager or under a strategy;
        either way read after :meth:`_restored_state_check` of the whole state, so a step after
        the restore of an impossible state fails before anything uses the scale.
        """
        s = self._state()
        if s["loss_scale"] is not None and not tf.distribute.has_strategy():
            return s["checked_loss_scale"]
        with tf.control_dependencies([self._restored_state_check(s)]):
            return tf.identity(s["scale_var"])

    def _add_weight(self, name, initial_value, dtype=None):
        """Creates a non-trainable state variable (call it from ``_build_state``).

        In a ``tf.compat.v1`` graph the variable's op is ``<name>_value``, ``<name>:0`` is its
        value and a name-based Saver uses the key ``<name>`` (uniquified like any op name). In
        eager execution it is a plain variable named ``name``. Object-based checkpoints track it
        as ``name``.
        """
        graph = _graphs.outermost_graph()
        variable = Variable(initial_value, name=name if graph is None else name + "_value",
                            dtype=dtype, trainable=False,
                            synchronization=tf.VariableSynchronization.AUTO,
                            aggregation=tf.VariableAggregation.NONE)
        if graph is not None and hasattr(variable, "_set_save_slice_info") \
                and not tf.distribute.has_strategy():
            value = tf.identity(tf.convert_to_tensor(variable), name=name)
            variable._set_save_slice_info(_WholeVariable(value.op.name, [], [], []))  # pylint: disable=protected-access
            variable._npu_loss_scale_value = value  # pylint: disable=protected-access
        pending = getattr(self, "_pending_weights", None)
        if pending is not None:
            pending[name] = variable      # restored with the others once all exist
        else:
            self._handle_deferred_dependencies(name=name, trackable=variable)
        return variable

    def _staged_state(self):
        per_graph = self.__dict__.get("_per_graph")   # None while constructing
        state = per_graph.peek() if per_graph is not None else None
        return state.get("_staged") if state is not None else None

    @staticmethod
    def _finite_flag(finite_grads):
        return _checks.finite_flag("finite_grads", finite_grads)


class _ForeignManager(LossScaleManager):
    """A manager that is not a :class:`LossScaleManager`, seen as one.

    Any object with ``get_loss_scale()`` and ``update_loss_scale(finite_grads)`` (the contract
    of ``tf.contrib.mixed_precision`` and of Ascend's adapter) works with
    :class:`~npu_loss_scale.NPULossScaleOptimizer`: its two methods are called as they are, and
    ``get_enable_overflow_check()`` when it has one (else the check is on).
    """

    def __init__(self, manager):
        super().__init__()
        self.manager = manager

    def get_loss_scale(self):
        return self.manager.get_loss_scale()

    def update_loss_scale(self, finite_grads):
        return self.manager.update_loss_scale(finite_grads)

    def get_enable_overflow_check(self):
        check = getattr(self.manager, "get_enable_overflow_check", None)
        return True if check is None else check()

    def __repr__(self):
        return repr(self.manager)


def as_manager(manager):
    """``manager`` itself when it is a :class:`LossScaleManager`, else a view of it as one.

    Raises TypeError for an object without callable ``get_loss_scale`` and
    ``update_loss_scale``.
    """
    if isinstance(manager, LossScaleManager):
        return manager
    missing = [m for m in ("get_loss_scale", "update_loss_scale")
               if not callable(getattr(manager, m, None))]
    if missing:
        raise TypeError(
            "loss_scale_manager must be a LossScaleManager (FixedLossScaleManager, "
            "ExponentialUpdateLossScaleManager) or an object with get_loss_scale() and "
            "update_loss_scale(finite_grads); got %r (type %s), which has no %s"
            % (manager, type(manager).__name__, " and no ".join(m + "()" for m in missing)))
    return _ForeignManager(manager)


__all__ = ["LossScaleManager", "as_manager", "LOSS_SCALE_TENSOR_NAME"]
