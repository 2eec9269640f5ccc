"""An Ascend-shaped TF1 session script under allow_mix_precision with one matmul built in
``npu_scope.keep_dtype_scope()`` (test fixture; nothing in it names npu_loss_scale).

Both matmuls are [300, 1] . [300, 1] = 90001, beyond float16's 65504. The session config asks
for ``allow_mix_precision`` and names no ``modify_mixlist``, so a list given for the whole run
(``npu-emulate --modify-mixlist FILE``) decides the second matmul. Prints one JSON line: both
values (each read through a consumer, as the model would see it) and whether the device's
float-status register saw an overflow.
"""
import json

import tensorflow as tf
from npu_bridge.npu_init import *  # noqa: F401,F403
from npu_bridge.estimator.npu import npu_scope
from npu_bridge.helper import helper

gen_npu_ops = helper.get_gen_ops()


def main():
    x = tf.constant([[300.0, 1.0]])
    w = tf.constant([[300.0], [1.0]])
    with npu_scope.keep_dtype_scope():
        kept = tf.matmul(x, w) * 1.0
    lowered = tf.matmul(x, w) * 1.0
    status = gen_npu_ops.npu_get_float_status_v2()
    config = npu_config_proto()  # noqa: F405
    custom = config.graph_options.rewrite_options.custom_optimizers[0]
    custom.parameter_map["precision_mode"].s = tf.compat.as_bytes("allow_mix_precision")
    with tf.Session(config=config) as sess:
        kept_value, lowered_value = sess.run([kept, lowered])
        overflowed = bool(sess.run(status).any())
    print(json.dumps({"kept": float(kept_value[0, 0]), "lowered": float(lowered_value[0, 0]),
                      "overflowed": overflowed}))


if __name__ == "__main__":
    main()
