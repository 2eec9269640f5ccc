"""What one doctor run patches to see a TF2 script's steps (:mod:`npu_loss_scale.cli.doctor_run`):
``GradScaler.update()`` records the iteration it ends (eager loops)."""
from npu_loss_scale.cli.doctor_hooks import wrap_init
from npu_loss_scale.cli.doctor_record import StepLimit, scalar

__all__ = ["install"]


def install(rec):
    """Patches the ``GradScaler`` front end for ``rec``."""
    from npu_loss_scale.frontends import grad_scaler  # pylint: disable=import-outside-toplevel
    cls = grad_scaler.GradScaler
    wrap_init(rec, cls, "grad_scaler", front_end="GradScaler")
    update = cls.update

    def update_and_record(self, new_scale=None):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        eager = tf.executing_eagerly()
        scale = scalar(self.get_scale()) if eager else None
        report = getattr(self, "step_report", None) if eager else None
        out = update(self, new_scale)
        if eager:
            overflow = None if report is None else report.get("overflow")
            rec.step(scale, scalar(self.get_scale()),
                     None if overflow is None else not bool(overflow), None)
            if rec.limit_reached:
                raise StepLimit()
        return out

    cls.update = update_and_record
