"""tf.train.Checkpoint of the package's optimizers in TF2 code: each slot saved once, restored.

The wrappers (``NPULossScaleOptimizer``, the Megatron mixed-precision optimizer) reach their inner
optimizer's slots through ``get_slot`` but list none of their own, so the object-based checkpoint
meets every slot exactly once (it refuses a slot met twice, which it did before).
"""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from tf_versions import tf2_only


def _npu():
    return nls.NPULossScaleOptimizer(tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
                                     nls.ExponentialUpdateLossScaleManager(2.0 ** 10, 10))


def _megatron():
    return nls.MegatronMixedPrecisionOptimizer(tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
                                               nls.DynamicGradScaler(2.0 ** 10, 1.0, 2.0, 0.5,
                                                                     10, 2))


@tf2_only
@pytest.mark.parametrize("make", [_npu, _megatron], ids=["npu", "megatron"])
@pytest.mark.slow
def test_object_checkpoint_saves_each_slot_once_and_restores_it(make, tmp_path):
    v = tf.Variable([1.0, 2.0])
    opt = make()

    @tf.function
    def step():
        opt.apply_gradients(opt.compute_gradients(lambda: tf.reduce_sum(v * v), var_list=[v]))

    step()
    # Momentum after one step of d(sum v^2)/dv = 2v at v = [1, 2]: accumulator 2v = [2, 4]
    checkpoint = tf.train.Checkpoint(v=[v], optimizer=opt)
    path = checkpoint.write(str(tmp_path / "ckpt"))
    slot_keys = [k for k, _ in tf.train.list_variables(path) if ".OPTIMIZER_SLOT" in k]
    assert len(slot_keys) == 1, slot_keys
    saved_v = v.numpy().copy()
    step()
    assert not np.array_equal(v.numpy(), saved_v)
    checkpoint.read(path).assert_consumed()
    np.testing.assert_array_equal(v.numpy(), saved_v)
    np.testing.assert_array_equal(tf.train.load_checkpoint(path).get_tensor(slot_keys[0]),
                                  np.array([2.0, 4.0], np.float32))
