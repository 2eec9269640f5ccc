"""What :class:`~npu_loss_scale.frontends.hooks.LossScaleHook` writes for a step's record: the
periodic log line and the TensorBoard scalars (their tags, :data:`SUMMARY_TAGS`, are part of the
package's contract)."""
import tensorflow as tf

__all__ = ["SUMMARY_TAGS", "format_scale", "status_line", "summary"]

SUMMARY_TAGS = {
    "scale": "loss_scale/scale",
    "overflow": "loss_scale/overflow",
    "skipped_steps": "loss_scale/skipped_steps",
    "global_step": "loss_scale/global_step",
    "loss": "loss_scale/loss",
    "grad_norm": "loss_scale/grad_norm",
    "num_zeros_in_grad": "loss_scale/num_zeros_in_grad",
    "overflow_sites": "loss_scale/overflow_sites",
    "first_overflow": "loss_scale/first_overflow",
}


#: (tag of SUMMARY_TAGS, key of the step's record) of each scalar written, in this order.
_SCALARS = (("scale", "loss_scale"), ("overflow", "overflow"), ("skipped_steps", "skipped_steps"),
            ("global_step", "global_step"), ("loss", "loss"), ("grad_norm", "grad_norm"),
            ("num_zeros_in_grad", "num_zeros_in_grad"))


def format_scale(value):
    """A loss scale as the log lines show it."""
    return "%g" % value


def status_line(record, new_scale, interval_skipped):
    """The periodic log line of one step's record (``interval_skipped``: the steps skipped since
    the previous line)."""
    overflow = {None: "n/a (overflow check off)", True: "yes", False: "no"}[record["overflow"]]
    parts = ["loss scale %s" % format_scale(new_scale),
             "overflow %s" % overflow,
             "skipped steps %d (+%d)" % (record["skipped_steps"] or 0, interval_skipped)]
    if record["global_step"] is not None:
        parts.append("global step %d" % record["global_step"])
    parts.append("iteration %d" % record["iteration"])
    if record["loss"] is not None:
        parts.append("loss %.4f" % record["loss"])
    if record.get("grad_norm") is not None:
        parts.append("grad norm %.4g" % record["grad_norm"])
    if record.get("num_zeros_in_grad") is not None:
        parts.append("zeros in grad %d" % record["num_zeros_in_grad"])
    return " | ".join(parts)


def summary(record):
    """The TensorBoard ``Summary`` of one step's record (tags :data:`SUMMARY_TAGS`)."""
    values = [tf.compat.v1.Summary.Value(tag=SUMMARY_TAGS[tag], simple_value=float(record[key]))
              for tag, key in _SCALARS if record.get(key) is not None]
    located = record.get("overflow_record")
    if located is not None:
        values.append(tf.compat.v1.Summary.Value(tag=SUMMARY_TAGS["overflow_sites"],
                                                 simple_value=float(len(located.sites))))
        text = tf.compat.v1.Summary.Value(tag=SUMMARY_TAGS["first_overflow"])
        text.metadata.plugin_data.plugin_name = "text"
        text.tensor.dtype = tf.string.as_datatype_enum
        text.tensor.string_val.append(located.summary().encode("utf-8"))
        values.append(text)
    return tf.compat.v1.Summary(value=values)
