"""The README's Megatron section: every example in it runs as written, in one graph."""
import os
import re

import numpy as np
import tensorflow as tf

import npu_loss_scale as nls

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")
TITLE = "### Megatron-LM's grad scalers and mixed-precision optimizer"


def _section_examples():
    with open(README) as f:
        text = f.read()
    start = text.index(TITLE)
    end = text.index("\n### ", start + len(TITLE))
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


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
            exec(compile(code, README, "exec"), namespace)  # pylint: disable=exec-used
        assert np.isfinite(namespace["norm"]) and namespace["zeros"] == 0
        assert sess.run(namespace["scaler"].scale) == 2.0 ** 16
        halving = namespace["HalvingScaler"](8.0)
        sess.run(tf.compat.v1.variables_initializer(halving.variables))
        sess.run(halving.update_loss_scale(False))
        assert sess.run(halving.scale) == 4.0
