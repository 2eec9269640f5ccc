"""What one doctor run patches to see the script's steps (:mod:`npu_loss_scale.cli.doctor_run`):
``NPULossScaleOptimizer``'s train op (a host callback after it reads the step's report and
loss), the ``Session`` (the step limit, and the verdicts once the steps are done or the session
closes), the managers' constructors (their settings recorded, those the config names replaced)
and ``set_device_sat_mode`` (each call recorded)."""
import inspect
import os

from npu_loss_scale.cli.doctor_record import StepLimit, Stopped
from npu_loss_scale.cli.doctor_replay import judge

__all__ = ["install", "wrap_init", "in_estimator"]


# -- NPULossScaleOptimizer -----------------------------------------------------------------------
def in_estimator():
    return any("estimator" in (frame.filename or "") and "tensorflow_estimator" in frame.filename
               for frame in inspect.stack(context=0))


def patch_optimizer(rec):
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from npu_loss_scale._internal.compat import py_func  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.optimizers import loss_scale  # pylint: disable=import-outside-toplevel
    cls = loss_scale.NPULossScaleOptimizer
    compute, apply = cls.compute_gradients, cls.apply_gradients

    def compute_gradients(self, loss, *args, **kwargs):
        if isinstance(loss, tf.Tensor):
            self._doctor_loss = loss  # pylint: disable=protected-access
        return compute(self, loss, *args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        if rec.front_end is None:
            rec.front_end = "Estimator" if in_estimator() else "NPULossScaleOptimizer"
        train_op = apply(self, grads_and_vars, global_step=global_step, name=name)
        if tf.executing_eagerly():
            return train_op
        try:
            scale = self.loss_scale_manager.get_loss_scale()   # the graph's one scale tensor
        except Exception:  # pylint: disable=broad-except  # a user's manager
            scale = None
        try:
            report = self.step_report
        except RuntimeError:
            if getattr(self, "_check_overflow", True):
                return train_op          # not built: nothing to record
            # enable_overflow_check=False: a step with its scale and no verdict (skipped null)
            report = {"loss_scale": scale} if isinstance(scale, tf.Tensor) else {}
        loss = getattr(self, "_doctor_loss", None)
        grads = [getattr(g, "values", g) for g, _ in grads_and_vars if g is not None]
        rec.targets[tf.compat.v1.get_default_graph()] = (
            loss, grads, scale if isinstance(scale, tf.Tensor) else None)
        keys = ("loss_scale", "next_loss_scale", "finite")
        inputs = [tf.cast(report[k], tf.float64) if k in report else tf.constant(np.nan, tf.float64)
                  for k in keys]
        inputs.append(tf.cast(tf.reduce_mean(loss), tf.float64) if loss is not None
                      else tf.constant(np.nan, tf.float64))
        present = [k in report for k in keys] + [loss is not None]
        facing = _float16_facing(tf, grads, rec)   # their largest magnitude (-1: none)
        # max |g| in g's own dtype (exact), widened as a scalar: no float64 copy of g
        inputs.append(tf.reduce_max(tf.stack([tf.cast(tf.reduce_max(tf.abs(g)), tf.float64)
                                              for g in facing])) if facing
                      else tf.constant(-1.0, tf.float64))

        def note(scale, next_scale, finite, value, largest):
            vals = [v if ok else None for v, ok in zip((scale, next_scale, finite, value),
                                                       present)]
            finite = None if vals[2] is None else bool(vals[2])
            rec.step(vals[0], vals[1], finite, vals[3],
                     max_safe_scale=_max_safe_scale(finite, float(largest)))
            return np.int64(len(rec.steps))

        with tf.control_dependencies([train_op]):
            noted = py_func.numpy_function(note, inputs, tf.int64, stateful=True,
                                           name="doctor_step")
        return tf.group(train_op, noted, name="doctor_train_op")

    cls.compute_gradients, cls.apply_gradients = compute_gradients, apply_gradients


def _judge(rec, sess):
    """doctor_replay.judge, cut short when the run is asked to stop (no further replay starts;
    the sites left are marked not judged)."""
    if not rec.judge:
        return
    rec.judging = list(rec.pending)
    try:
        if not rec.stop_requested:
            judge(rec, sess)
    finally:
        if rec.stop_requested:
            rec.mark_not_judged()
        rec.judging = []


def _float16_facing(tf, grads, rec):
    """The applied gradients that meet float16: the float16 ones; and the float32 ones too when
    the graph computes in float16 (a mixed model's float32 weights get their gradients through
    float16 casts) or the run's precision_mode turns float32 into float16. Records whether the
    graph holds float16 ops (its own roundings to float16 count: the emulation's fused rounding
    computes in float32 what the device computes in float16)."""
    from npu_loss_scale.tools.doctor.verdicts import (  # pylint: disable=import-outside-toplevel
        FUSED_ROUNDING)
    graph = tf.compat.v1.get_default_graph()
    # a float16 op, or the package's rounding to float16 (round_to_float16: one float32 op)
    rec.float16_graph = rec.float16_graph or any(
        op.type in FUSED_ROUNDING or any(t.dtype == tf.float16 for t in op.outputs)
        for op in graph.get_operations() if "_precision/" not in op.name)
    if rec.float16_graph or rec.settings_precision in (
            "allow_fp32_to_fp16", "allow_mix_precision", "allow_mix_precision_fp16"):
        return [g for g in grads if g.dtype in (tf.float16, tf.float32)]
    return [g for g in grads if g.dtype == tf.float16]


def _max_safe_scale(finite, largest):
    """The largest power-of-two scale the step's float16-facing gradients allow
    (config_findings' ``max_safe_scale``), from ``largest``, their largest magnitude as applied
    (the optimizer's compute_gradients returns them unscaled): "inf" with no such gradient, 0
    for a step that overflowed at its own scale, None when the step's finiteness is not known
    or the gradients are all 0."""
    from npu_loss_scale.tools.advisor import (  # pylint: disable=import-outside-toplevel
        _largest_safe_scale)
    if largest < 0:
        return "inf"
    if finite is False:
        return 0.0
    if finite is None:
        return None
    return _largest_safe_scale(largest, 65504.0)


def patch_session(rec):
    from tensorflow.python.client import session  # pylint: disable=import-outside-toplevel
    original, original_close = session.BaseSession.run, session.BaseSession.close

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if rec.in_replay:   # the replay's own runs (doctor_replay calls BaseSession.run)
            if rec.stop_requested:
                raise Stopped()
            return original(self, fetches, feed_dict, options, run_metadata)
        before = len(rec.steps)
        out = original(self, fetches, feed_dict, options, run_metadata)
        if len(rec.steps) > before:
            rec.last_feeds[self.graph] = feed_dict
        if rec.limit_reached:
            _judge(rec, self)
            raise StepLimit()
        return out

    def close(self):
        if not rec.in_replay and not getattr(self, "_closed", True):
            _judge(rec, self)
        return original_close(self)

    session.BaseSession.run, session.BaseSession.close = run, close


# -- managers, the mode ------------------------------------------------------------------
_MANAGER_KINDS = {"ExponentialUpdateLossScaleManager": "ascend_exponential",
                  "FixedLossScaleManager": "ascend_fixed"}


def wrap_init(rec, cls, kind, front_end=None):
    original = cls.__init__
    signature = inspect.signature(original)

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        settings = dict(bound.arguments)
        settings.pop("self", None)
        for key, value in rec.settings.items():
            if key in settings:
                settings[key] = value
        if front_end is not None and rec.front_end is None:
            rec.front_end = front_end
        if rec.scaler["kind"] is None:
            rec.scaler = {"kind": kind, "settings": {
                k: v for k, v in settings.items() if isinstance(v, (int, float, bool))}}
        original(self, **settings)

    cls.__init__ = __init__


def patch_managers(rec):
    from npu_loss_scale.scaling import managers  # pylint: disable=import-outside-toplevel
    for name, kind in _MANAGER_KINDS.items():
        wrap_init(rec, getattr(managers, name), kind)


def patch_sat_mode(rec):
    from npu_loss_scale.device import register  # pylint: disable=import-outside-toplevel
    original = register.set_device_sat_mode

    def set_device_sat_mode(mode):
        caller = inspect.stack(context=0)[1]
        rec.sat_mode_calls.append({"mode": mode, "file": os.path.basename(caller.filename),
                                   "line": caller.lineno})
        return original(mode)

    register.set_device_sat_mode = set_device_sat_mode


def install(rec):
    """Patches the TF1 front end, the managers and the mode call for ``rec``."""
    patch_optimizer(rec)
    patch_session(rec)
    patch_managers(rec)
    patch_sat_mode(rec)
