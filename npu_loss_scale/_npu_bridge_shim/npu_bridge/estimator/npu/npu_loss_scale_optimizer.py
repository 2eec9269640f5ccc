"""Shim of ``npu_bridge.estimator.npu.npu_loss_scale_optimizer``.

``NPULossScaleOptimizer`` is npu_loss_scale's, with the device's one-rank behaviour: with
``is_distributed=True`` and a single rank (RANK_SIZE unset or 1), the all-reduce of the overflow
status is the identity on the device, so the status is used as is (no agreement layer is
needed). The real module also makes the loss-scale managers importable from here.

Step report (off by default): when the environment variable ``NPU_LOSS_SCALE_EMULATE_REPORT``
names a file (``python -m npu_loss_scale.emulate --report FILE`` sets it), every train op this
class builds also counts, when it runs, whether the step was applied or skipped for an overflow,
and after each step and at exit the file holds one JSON object: ``{"optimizers_built": n, "train_ops_built": n,
"steps_applied": n, "steps_skipped": n}`` (``FILE.rankN`` for rank N of an N-rank run). The counting runs after the train op (a host
callback with a control dependency on it); it changes no value the step computes.
"""
import atexit
import json
import os

from npu_loss_scale.optimizers import loss_scale as _optimizer
from npu_loss_scale._internal.compat import py_func
from npu_loss_scale.scaling.managers import ExponentialUpdateLossScaleManager, FixedLossScaleManager, LossScaleManager  # noqa: F401

from npu_bridge import _ranks

REPORT_ENV_VAR = "NPU_LOSS_SCALE_EMULATE_REPORT"
_report = {"optimizers_built": 0, "train_ops_built": 0, "steps_applied": 0, "steps_skipped": 0}
_report_state = {"registered": False}


def _report_path():
    return os.environ.get(REPORT_ENV_VAR, "").strip() or None


def _write_report():
    path = _report_path()
    if path is None:
        return
    if _ranks.rank_size() > 1:  # one file per rank of an N-rank run
        path = "%s.rank%d" % (path, _ranks.rank_id())
    with open(path, "w", encoding="utf-8") as out:
        json.dump(_report, out, sort_keys=True)
        out.write("\n")


def _note(key):
    _report[key] += 1
    if not _report_state["registered"]:
        _report_state["registered"] = True
        atexit.register(_write_report)


def _count_step(finite):
    _report["steps_applied" if bool(finite) else "steps_skipped"] += 1
    _write_report()  # also now: a run stopped by a timeout or a signal keeps its evidence
    return True


class NPULossScaleOptimizer(_optimizer.NPULossScaleOptimizer):
    """:class:`npu_loss_scale.NPULossScaleOptimizer`; ``is_distributed=True`` at one rank is the
    device's identity all-reduce (``requested_distributed`` keeps what the script asked for)."""

    def __init__(self, opt, loss_scale_manager, is_distributed=False, **kwargs):
        self.requested_distributed = is_distributed
        if is_distributed is True and _ranks.rank_size() == 1:
            is_distributed = False
        super().__init__(opt, loss_scale_manager, is_distributed, **kwargs)
        if _report_path() is not None:
            _note("optimizers_built")

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        train_op = super().apply_gradients(grads_and_vars, global_step=global_step, name=name)
        if _report_path() is None:
            return train_op
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        _note("train_ops_built")
        try:
            finite = self.overflow_status_reduce_all
        except RuntimeError:  # no overflow check (or an accumulating micro step): counted as applied
            finite = tf.constant(True)
        if tf.executing_eagerly():
            _count_step(finite.numpy())
            return train_op
        with tf.control_dependencies([train_op]):
            counted = py_func.numpy_function(_count_step, [finite], tf.bool, stateful=True)
        return tf.group(train_op, counted, name=getattr(train_op, "name", "train").split(":")[0]
                        .rsplit("/", 1)[-1] + "_counted")


__all__ = ["NPULossScaleOptimizer", "LossScaleManager", "FixedLossScaleManager",
           "ExponentialUpdateLossScaleManager"]
