"""state_dict(session=) / load_state_dict(session=) reach the session's graph from anywhere.

Called outside ``with graph.as_default()`` (where TensorFlow reports eager execution), they used
to read and write a fresh eager copy of the state instead: a silent stand-in, and a restore that
restored nothing. The fuzz campaign found it (``scripts/fuzz_campaign.py``).
"""
import pytest
import tensorflow as tf

import npu_loss_scale as nls


@pytest.mark.parametrize("make", [
    lambda: nls.DynamicGradScaler(1024.0, 1.0, 2.0, 0.5, growth_interval=1, hysteresis=1),
    lambda: nls.ExponentialUpdateLossScaleManager(1024, 1, decr_every_n_nan_or_inf=1)],
    ids=["megatron_dynamic", "ascend_exponential"])
def test_state_dict_with_a_session_reads_and_writes_that_graph_outside_its_context(make):
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", initializer=[1.0, 2.0])
        manager = make()
        opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                        manager)
        train = opt.minimize(tf.reduce_sum(w))
        init = tf.compat.v1.global_variables_initializer()
        scale = opt.loss_scale
    graph.finalize()                       # reading must add no op either
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(train)
        sess.run(train)                    # two finite steps: 1024 -> 4096
        state = manager.state_dict(session=sess)   # outside the graph's context
        first_key = next(iter(state))
        assert state[first_key] == 4096.0 == sess.run(scale)
        state[first_key] = 8.0
        graph._unsafe_unfinalize()         # loading builds its assign ops once  # pylint: disable=protected-access
        manager.load_state_dict(state, session=sess)
        assert sess.run(scale) == 8.0
        assert manager.state_dict(session=sess)[first_key] == 8.0
