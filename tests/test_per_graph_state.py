"""Per-graph state in one style (``_internal.graphs.PerGraph``): Megatron's main parameters and the
parameter scheduler's graph variables are found in the outermost graph being built, not with
``tf.init_scope``, which from inside a ``tf.cond`` branch lands in eager mode in a script that
turned eager execution off inside ``main`` (``absl.app.run``)."""
import os
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

import npu_loss_scale as nls

from tf_versions import tf2_only

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ABSL_MEGATRON = textwrap.dedent("""
    from absl import app
    import tensorflow as tf
    import npu_loss_scale as nls

    def main(_):
        tf.compat.v1.disable_eager_execution()
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0], tf.float16))
        loss = tf.reduce_sum(tf.cast(w, tf.float32))
        scaler = nls.DynamicGradScaler(2.0 ** 10, 1.0, 2.0, 0.5, 1000, 2)
        opt = nls.MegatronMixedPrecisionOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.5), scaler, fp16=True)
        train = opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)
            print("RESULT", sess.run(w).tolist(), sess.run(opt.main_param(w)).tolist())

    app.run(main)
""")


@pytest.mark.slow
@tf2_only
def test_megatron_main_params_are_the_graphs_inside_the_finite_branch_of_an_absl_script(
        tmp_path):
    script = tmp_path / "script.py"
    script.write_text(ABSL_MEGATRON)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2", NPU_LOSS_SCALE_BACKEND="emulation")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT")][0]
    # one SGD step, lr 0.5, gradients [1, 1], on the float32 main copy, copied back
    assert line == "RESULT [0.5, 1.5] [0.5, 1.5]", line


def test_megatron_main_params_are_shared_by_a_cond_branch_and_kept_per_graph():
    tables = []
    for _ in range(2):
        with tf.Graph().as_default():
            w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0], tf.float16))
            processor = nls.MegatronGradientProcessor(
                tf.compat.v1.train.GradientDescentOptimizer(0.1))
            made = processor.build_main_params([w])
            inside = tf.cond(tf.constant(True), lambda: tf.identity(
                tf.constant(float(processor.main_param(w) is made[0]))), lambda: 0.0)
            with tf.compat.v1.Session() as sess:
                assert sess.run(inside) == 1.0
            tables.append(processor.main_params())
    assert len(tables[0]) == len(tables[1]) == 1 and tables[0][0][1] is not tables[1][0][1]
