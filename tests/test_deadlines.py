"""Deadlines on ops TensorFlow cannot bound: the watchdog, its graph bracket, and the process exit
that keeps a TF 1.15 collective's timeout (npu_loss_scale/_internal/deadlines.py)."""
import subprocess
import sys
import textwrap
import threading
import time

import tensorflow as tf

from npu_loss_scale._internal import deadlines
from npu_loss_scale._internal.compat import collectives


def _run_python(code):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)


def test_a_deadline_that_passes_while_its_op_waits_ends_the_process_with_status_124():
    started = time.monotonic()
    done = _run_python("""
        import time
        import tensorflow as tf
        from npu_loss_scale._internal import deadlines

        def waits(value):          # an op that waits far longer than its timeout
            time.sleep(60)
            return value

        dog = deadlines.Watchdog(deadlines.exit_process)
        graph = tf.Graph()
        with graph.as_default():
            _, out = deadlines.bracket(
                dog, tf.constant(1.0), 0.5,
                lambda armed: tf.compat.v1.py_func(waits, [armed], tf.float32, stateful=True),
                name="waits", label="the test's all-reduce")
            with tf.compat.v1.Session(graph=graph) as sess:
                sess.run(out)
        print("still here")
        """)
    assert done.returncode == 124, done.stdout
    assert "still here" not in done.stdout
    assert "the test's all-reduce waited" in done.stdout, done.stdout
    assert "more than its timeout of 0.5 s" in done.stdout, done.stdout
    assert "exits with status 124" in done.stdout, done.stdout
    assert time.monotonic() - started < 50


def test_a_deadline_left_armed_by_a_failed_step_is_dropped_not_fatal():
    """No thread runs TensorFlow: the op is not waiting (its step failed after it finished)."""
    done = _run_python("""
        import logging, time
        from npu_loss_scale._internal import deadlines
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        dog = deadlines.Watchdog(deadlines.exit_process)
        dog.arm(0.3, label="the test's all-reduce")
        time.sleep(1.5)
        print("still here", dog.fired is not None)
        """)
    assert done.returncode == 0, done.stdout
    assert "still here True" in done.stdout
    assert "INFO the deadline of the test's all-reduce passed while no TensorFlow run" \
        in done.stdout, done.stdout


def test_a_deadline_disarmed_in_time_leaves_the_process_alone():
    done = _run_python("""
        import time
        from npu_loss_scale._internal import deadlines
        dog = deadlines.Watchdog(deadlines.exit_process)
        dog.disarm(dog.arm(0.3, key=1))
        dog.arm(0.3, key=2)                # a run that failed elsewhere, never disarmed ...
        dog.disarm(dog.arm(0.3, key=2))    # ... is replaced by the next run of the same op
        time.sleep(1.0)
        print("finished", dog.fired)
        """)
    assert done.returncode == 0, done.stdout
    assert "finished None" in done.stdout


def _session_run_bracketed(op_seconds, timeout):
    """Runs a bracketed op that takes ``op_seconds`` under a deadline of ``timeout``; returns
    (what the watchdog's on_late received, the op's value)."""
    late = []
    dog = deadlines.Watchdog(lambda *args: late.append(args))

    def slow(value):
        time.sleep(op_seconds)
        return value * 2

    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant([1.0, 2.0])
        _, done = deadlines.bracket(
            dog, x, timeout,
            lambda armed: tf.compat.v1.py_func(slow, [armed], tf.float32, stateful=True),
            name="slow_op", label="the slow op")
        with tf.compat.v1.Session(graph=graph) as sess:
            value = sess.run(done)
    time.sleep(0.6)   # the watchdog looks every 0.2 s
    return late, value.tolist()


def test_the_bracket_fires_while_the_op_waits_and_keeps_its_value():
    late, value = _session_run_bracketed(op_seconds=1.5, timeout=0.3)
    assert value == [2.0, 4.0]
    assert len(late) == 1
    timeout, waited, label = late[0]
    assert timeout == 0.3 and 0.3 <= waited < 1.5 and label == "the slow op"


def test_the_bracket_stays_silent_when_the_op_finishes_in_time():
    late, value = _session_run_bracketed(op_seconds=0.0, timeout=1.0)
    assert value == [2.0, 4.0] and late == []


def _op_types_of_a_collective(timeout, merge_op="Add"):
    graph = tf.Graph()
    with graph.as_default():
        collectives.all_reduce(tf.constant([1.0]), merge_op, group_size=2, group_key=1,
                               instance_key=1, timeout=timeout, name="status_sum")
    return [op.type for op in graph.get_operations()]


def test_a_collective_without_a_timeout_of_its_own_is_bracketed_by_the_watchdog():
    """TF 1.15's CollectiveReduce takes no timeout: the package's deadline keeps it there (two
    PyFunc ops around it); TF 2's CollectiveReduceV2 keeps its own (no PyFunc)."""
    for merge_op in ("Add", "Max"):
        bounded = _op_types_of_a_collective(5.0, merge_op)
        assert bounded.count("PyFunc") == (0 if collectives.HAS_TIMEOUT else 2), bounded
    assert "PyFunc" not in _op_types_of_a_collective(0.0)   # no limit asked: nothing to keep


def _probe_into(seen):
    """An op's function that appends to ``seen`` whether the watchdog's thread, started from
    inside the op, finds TensorFlow running."""
    def probe(value):
        found = []
        checker = threading.Thread(target=lambda: found.append(deadlines._tensorflow_running()))
        checker.start()
        checker.join()
        seen.append(found[0])
        return value
    return probe


def test_a_running_graph_is_seen_and_an_eager_op_on_tf2_is_not():
    """What deadlines._tensorflow_running's docstring says it sees: a Session's run and a
    tf.function's call; not an op run eagerly on TF 2 (why Horovod's watchdog does not use it)."""
    seen = []
    graph = tf.Graph()
    with graph.as_default():
        out = tf.compat.v1.py_func(_probe_into(seen), [tf.constant(1.0)], tf.float32,
                                   stateful=True)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(out)
    assert seen == [True]
    assert not deadlines._tensorflow_running()       # this thread is not inside TensorFlow now
    if not tf.executing_eagerly():
        return                                        # TF 1.15: graphs only
    seen = []
    probe = _probe_into(seen)

    @tf.function
    def traced(value):
        return tf.numpy_function(probe, [value], tf.float32)

    traced(tf.constant(1.0))
    tf.numpy_function(probe, [tf.constant(1.0)], tf.float32)
    assert seen == [True, False]
