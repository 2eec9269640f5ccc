"""``npu_bridge.npu_cpu.npu_cpu_ops`` of the emulate shim: RandomChoiceWithMask on CPU, used as a
detection script's anchor sampler uses it (fixed fg/bg counts out of bool masks, in a graph)."""
import numpy as np
import pytest
import tensorflow as tf


@pytest.fixture
def ops(npu_shim):  # pylint: disable=unused-argument
    from npu_bridge.npu_cpu import npu_cpu_ops  # pylint: disable=import-outside-toplevel
    yield npu_cpu_ops


def _run(*fetches):
    with tf.compat.v1.Session() as sess:
        return sess.run(fetches)


def test_samples_count_true_indices_and_pads_with_a_false_mask(ops):
    with tf.Graph().as_default():
        overlap = tf.constant([0.9, 0.1, 0.8, 0.0, 0.75, 0.2])
        fg = tf.greater_equal(overlap, 0.7)                   # 3 true: 0, 2, 4
        inds_fg, mask_fg = ops.randomchoicewithmask(x=fg, count=2)
        inds_all, mask_all = ops.randomchoicewithmask(x=fg, count=5)
        assert inds_fg.shape.as_list() == [2, 1] and mask_fg.shape.as_list() == [2]
        assert inds_fg.dtype == tf.int32 and mask_fg.dtype == tf.bool
        fg_index = tf.squeeze(inds_fg)
        gathered = tf.gather(overlap, fg_index)
        got_fg, got_mask, got_all, got_all_mask, got_gathered = _run(
            inds_fg, mask_fg, inds_all, mask_all, gathered)
    assert set(got_fg[:, 0]) <= {0, 2, 4} and len(set(got_fg[:, 0])) == 2
    assert got_mask.tolist() == [True, True]
    assert sorted(got_all[:3, 0]) == [0, 2, 4] and got_all[3:].tolist() == [[0], [0]]
    assert got_all_mask.tolist() == [True, True, True, False, False]
    assert (got_gathered >= 0.7).all()


def test_count_zero_returns_every_true_element_of_a_2d_mask(ops):
    with tf.Graph().as_default():
        x = tf.constant([[True, False], [False, True], [True, True]])
        y, mask = ops.randomchoicewithmask(x, 0)
        got, got_mask = _run(y, mask)
    assert sorted(map(tuple, got)) == [(0, 0), (1, 1), (2, 0), (2, 1)]
    assert got_mask.tolist() == [True] * 4


def test_seeds_make_the_choice_repeatable_and_it_is_a_shuffle(ops):
    x = np.zeros(200, bool)
    x[::3] = True
    with tf.Graph().as_default():
        first = ops.randomchoicewithmask(tf.constant(x), 20, seed=1, seed2=7)[0]
        again = ops.randomchoicewithmask(tf.constant(x), 20, seed=1, seed2=7)[0]
        free = ops.randomchoicewithmask(tf.constant(x), 0)[0]
        got_first, got_again, got_free = _run(first, again, free)
    np.testing.assert_array_equal(got_first, got_again)
    assert sorted(got_free[:, 0]) == list(range(0, 200, 3))
    assert got_free[:, 0].tolist() != sorted(got_free[:, 0])


def test_inputs_are_checked_and_other_names_are_not_emulated(ops):
    with tf.Graph().as_default():
        with pytest.raises(TypeError, match="bool x"):
            ops.randomchoicewithmask(tf.constant([1.0, 0.0]), 1)
        with pytest.raises(TypeError, match="count is an op attribute"):
            ops.randomchoicewithmask(tf.constant([True]), tf.constant(1))
        with pytest.raises(ValueError, match="count must be >= 0"):
            ops.randomchoicewithmask(tf.constant([True]), -1)
    with pytest.raises(ImportError, match=r"npu_cpu_ops\.dense_image_warp is not emulated.*"
                                          r"provides: randomchoicewithmask"):
        ops.dense_image_warp  # pylint: disable=pointless-statement
