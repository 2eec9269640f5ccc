"""The Ascend BERT scripts' loss-scale flag, as a helper users' own scripts can call.

Ascend ModelZoo's BERT scripts choose the loss-scale manager from one integer flag,
``--npu_bert_loss_scale``:

* ``0`` — dynamic: ``ExponentialUpdateLossScaleManager(init_loss_scale=<init>,
  incr_every_n_steps=1000, decr_every_n_nan_or_inf=2, decr_ratio=0.5)``, where ``<init>`` is
  ``--init_loss_scale_value`` (default ``2**32``);
* ``>= 1`` — fixed: ``FixedLossScaleManager(loss_scale=<flag>)``;
* anything else — an error.

Example::

    from npu_loss_scale.ascend.flags import loss_scale_manager_from_flag
    manager = loss_scale_manager_from_flag(FLAGS.npu_bert_loss_scale,
                                           init_loss_scale_value=FLAGS.init_loss_scale_value)
    opt = NPULossScaleOptimizer(opt, manager, is_distributed=hvd_size > 1)
"""
import math
import numbers

# The Ascend BERT defaults of the dynamic manager.
BERT_INCR_EVERY_N_STEPS = 1000
BERT_DECR_EVERY_N_NAN_OR_INF = 2
BERT_DECR_RATIO = 0.5
DEFAULT_INIT_LOSS_SCALE = 2.0 ** 32

_ACCEPTED = ("0 (dynamic loss scaling, Ascend BERT defaults) or a number >= 1 "
             "(a fixed loss scale of that value)")


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def loss_scale_manager_from_flag(npu_bert_loss_scale, init_loss_scale_value=DEFAULT_INIT_LOSS_SCALE):
    """Returns the loss-scale manager the Ascend BERT scripts build for this flag value.

    Args:
      npu_bert_loss_scale: ``0`` for the dynamic manager, a real number ``>= 1`` for a fixed
        scale. Strings holding a number (as flags may arrive) are accepted too.
      init_loss_scale_value: starting scale of the dynamic manager (ignored for a fixed scale),
        a real number >= 1; default ``2**32``.

    Raises:
      ValueError: the flag is negative, between 0 and 1, not finite or not a number, naming the
        argument, the value received and what is accepted. Invalid ``init_loss_scale_value``
        raises the manager's own error.
    """
    from npu_loss_scale.scaling import (  # imported here: TensorFlow loads only when a manager is built
        managers as policy)

    value = npu_bert_loss_scale
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            value = npu_bert_loss_scale
    if not _is_real(value) or math.isnan(float(value)) or math.isinf(float(value)):
        raise ValueError("npu_bert_loss_scale must be %s; got %r"
                         % (_ACCEPTED, npu_bert_loss_scale))
    if value == 0:
        return policy.ExponentialUpdateLossScaleManager(
            init_loss_scale=init_loss_scale_value,
            incr_every_n_steps=BERT_INCR_EVERY_N_STEPS,
            decr_every_n_nan_or_inf=BERT_DECR_EVERY_N_NAN_OR_INF,
            decr_ratio=BERT_DECR_RATIO)
    if value >= 1:
        return policy.FixedLossScaleManager(loss_scale=float(value))
    raise ValueError("npu_bert_loss_scale must be %s; got %r" % (_ACCEPTED, npu_bert_loss_scale))


__all__ = ["loss_scale_manager_from_flag", "DEFAULT_INIT_LOSS_SCALE", "BERT_INCR_EVERY_N_STEPS",
           "BERT_DECR_EVERY_N_NAN_OR_INF", "BERT_DECR_RATIO"]
