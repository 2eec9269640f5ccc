"""ParamGroupOptimizer composed with NPULossScaleOptimizer, clipping and Horovod's
DistributedOptimizer: one loss-scale decision, the schedule advances on applied steps only."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

def run_graph(wrap=lambda opt: opt, distributed=False):
    """Two variables in two groups (a bias without decay), SGD, clipping to global norm 1 between
    compute and apply, a FixedLossScaleManager; three iterations, the middle one with an inf
    loss. Returns w, b, global_step, num_steps and skipped_steps as one list."""
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("dense/kernel", initializer=tf.constant([1.0, 2.0]),
                                      use_resource=True)
        b = tf.compat.v1.get_variable("dense/bias", initializer=tf.constant([1.0, 2.0]),
                                      use_resource=True)
        x = tf.compat.v1.placeholder(tf.float32, [2])
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = nls.ParamGroupOptimizer(
            lambda lr, group: tf.compat.v1.train.GradientDescentOptimizer(lr),
            overrides=[("*/bias", nls.ParamGroupOverride(wd_mult=0.0))])
        scheduler = nls.OptimizerParamScheduler(
            opt, init_lr=0.5, max_lr=1.0, min_lr=0.0, lr_warmup_steps=1, lr_decay_steps=4,
            lr_decay_style="linear", start_wd=0.1, end_wd=0.1, wd_incr_steps=4,
            wd_incr_style="constant")
        lso = nls.NPULossScaleOptimizer(wrap(opt), nls.FixedLossScaleManager(loss_scale=8.0),
                                        is_distributed=distributed)
        grads_and_vars = lso.compute_gradients(tf.reduce_sum(w * x) + tf.reduce_sum(b * x))
        grads, variables = zip(*grads_and_vars)
        clipped, _ = tf.clip_by_global_norm(list(grads), 1.0)
        train = lso.apply_gradients(zip(clipped, variables), global_step=step)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for feed in ([3.0, 4.0], [np.inf, 1.0], [3.0, 4.0]):
                session.run(train, {x: feed})
            return session.run(w).tolist() + session.run(b).tolist() + [
                float(v) for v in session.run([step, scheduler.num_steps_variable,
                                               lso.skipped_steps])]


_HOROVOD_PROGRAM = """
import sys
sys.path.insert(0, {here!r})
import horovod.tensorflow as hvd
import test_param_scheduler_composition as t
hvd.init()
print("RESULT", *t.run_graph(hvd.DistributedOptimizer, distributed=True))
"""


def _expected():
    """By hand: w and b both get the gradient (3, 4), global norm sqrt(50), clipped to norm 1.
    Applied step 0: lr 0.5, step 1 (after the skipped one): lr 1.0; w decays by lr * 0.1 before
    its update, b (a bias) not at all."""
    w, b = np.array([1.0, 2.0]), np.array([1.0, 2.0])
    g = np.array([3.0, 4.0]) / np.sqrt(50.0)
    for lr in (0.5, 1.0):
        w = w - lr * 0.1 * w - lr * g
        b = b - lr * g
    return list(w) + list(b) + [2, 2, 1]


def test_clipping_between_compute_and_apply_with_groups_and_a_skipped_step():
    np.testing.assert_allclose(run_graph(), _expected(), rtol=1e-6)


def _horovod_missing():
    try:
        import horovod.tensorflow  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except Exception as err:  # pylint: disable=broad-except
        return str(err) or type(err).__name__
    return None


@pytest.mark.distributed
@pytest.mark.skipif(_horovod_missing() is not None,
                    reason="horovod is not importable here (%s); build it with "
                           "`bash scripts/build_horovod.sh <venv>`" % _horovod_missing())
def test_horovod_distributed_optimizer_between_groups_and_the_loss_scale_optimizer():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NPU_LOSS_SCALE_BACKEND="emulation",
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")]
                                                    if p]))
    done = subprocess.run([sys.executable, "-c", _HOROVOD_PROGRAM.format(here=HERE)],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    line = [l for l in done.stdout.splitlines() if l.startswith("RESULT")][-1]
    np.testing.assert_allclose([float(v) for v in line.split()[1:]], _expected(), rtol=1e-6)
