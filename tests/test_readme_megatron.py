"""The Megatron guide (docs/guides/megatron.md, once the README's Megatron section): every example
in it runs as written, in one graph."""
import os
import re

import numpy as np
import tensorflow as tf

import npu_loss_scale as nls

GUIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "guides",
                     "megatron.md")


def _section_examples():
    with open(GUIDE, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_every_example_of_the_megatron_section_runs():
    examples = _section_examples()
    assert len(examples) == 7
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        w = tf.compat.v1.get_variable("w", initializer=np.array([1.0, -2.0], np.float32))
        w16 = tf.compat.v1.get_variable("w16", initializer=np.array([1.0, -2.0], np.float16))
        namespace = {"tf": tf, "nls": nls, "np": np, "sess": sess,
                     "loss": tf.reduce_sum(tf.square(w)),
                     "loss16": tf.reduce_sum(tf.square(tf.cast(w16, tf.float32)))}
        for code in examples:
            exec(compile(code, GUIDE, "exec"), namespace)  # pylint: disable=exec-used
        assert np.isfinite(namespace["norm"]) and namespace["zeros"] == 0
        assert sess.run(namespace["scaler"].scale) == 2.0 ** 16
        halving = namespace["HalvingScaler"](8.0)
        sess.run(tf.compat.v1.variables_initializer(halving.variables))
        sess.run(halving.update_loss_scale(False))
        assert sess.run(halving.scale) == 4.0
