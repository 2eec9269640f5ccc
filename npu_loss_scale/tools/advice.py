"""What the loss-scale advisor (:mod:`npu_loss_scale.tools.advisor`) finds: per layer
(:class:`LayerAdvice`) and for the model (:class:`Advice`), rendered as a text report or as
JSON data (:func:`write_advice`)."""
import json
import math

__all__ = ["Advice", "LayerAdvice", "write_advice"]


class LayerAdvice:  # pylint: disable=too-few-public-methods,too-many-instance-attributes
    """What the observation found for one layer (forward op).

    ``name``; ``forward_max`` (largest forward activation magnitude before saturation, None if
    no forward site); ``gradient_max`` (largest *unscaled* gradient magnitude, None if no
    backward site); ``forward_headroom`` / ``gradient_headroom`` (float16 max divided by them:
    > 1 fits); ``max_safe_scale`` (largest power-of-two loss scale without a gradient overflow;
    None = unbounded, 0 = the gradient overflowed even at the observed scale);
    ``forward_overflow`` (the forward values overflow float16 whatever the scale); ``order``.
    """

    def __init__(self, name, order):
        self.name = name
        self.order = order
        self.forward_max = None
        self.gradient_max = None
        self.forward_headroom = None
        self.gradient_headroom = None
        self.max_safe_scale = None
        self.forward_overflow = False

    def to_dict(self):
        def num(v):
            return v if v is None or math.isfinite(v) else ("nan" if math.isnan(v) else "inf")
        return {"name": self.name, "forward_max": num(self.forward_max),
                "gradient_max": num(self.gradient_max),
                "forward_headroom": num(self.forward_headroom),
                "gradient_headroom": num(self.gradient_headroom),
                "max_safe_scale": num(self.max_safe_scale),
                "forward_overflow": self.forward_overflow}


class Advice:
    """The advisor's result: ``layers`` (list of :class:`LayerAdvice`, execution order),
    ``init_loss_scale`` (the largest power of two without an observed overflow, capped at
    ``max_scale``; None when nothing was observed, 0 when a gradient overflowed even at the
    observed scale), ``growth_interval``, ``float32_layers``
    (names whose forward pass overflows float16), ``observed_steps`` and
    ``observed_loss_scale``. :meth:`report` renders it as text, :meth:`to_dict` as JSON data."""

    def __init__(self, layers, init_loss_scale, growth_interval, observed_steps,
                 observed_loss_scale, limiting_layer):
        self.layers = layers
        self.init_loss_scale = init_loss_scale
        self.growth_interval = growth_interval
        self.observed_steps = observed_steps
        self.observed_loss_scale = observed_loss_scale
        self.limiting_layer = limiting_layer
        self.float32_layers = [layer.name for layer in layers if layer.forward_overflow]

    def to_dict(self):
        return {"init_loss_scale": self.init_loss_scale, "growth_interval": self.growth_interval,
                "observed_steps": self.observed_steps,
                "observed_loss_scale": self.observed_loss_scale,
                "limiting_layer": self.limiting_layer, "float32_layers": self.float32_layers,
                "layers": [layer.to_dict() for layer in self.layers]}

    def report(self, max_rows=40):
        """A text report: the advice, then the layers closest to float16's limit."""
        lines = ["loss-scale advice from %d observed steps at loss scale %g"
                 % (self.observed_steps, self.observed_loss_scale)]
        if self.init_loss_scale is None:
            lines.append("  nothing observed: was the model built with localisation in observe "
                         "mode and did a loss-scale optimizer read the overflow status?")
            return "\n".join(lines)
        if self.init_loss_scale == 0:
            lines.append("  no advice on the scale: gradients overflowed even at the observed "
                         "loss scale (%s); keep the layers below in float32 or observe again at "
                         "a lower fixed scale" % self.limiting_layer)
        else:
            lines.append("  recommended init_loss_scale = %s (2**%d)%s" % (
                _scale(self.init_loss_scale), int(math.log2(self.init_loss_scale)),
                "" if self.limiting_layer is None else ", limited by %s" % self.limiting_layer))
            lines.append("  recommended growth interval (incr_every_n_steps) = %d, "
                         "decr_every_n_nan_or_inf = 2" % self.growth_interval)
            lines.append("    e.g. ExponentialUpdateLossScaleManager(init_loss_scale=%s, "
                         "incr_every_n_steps=%d, decr_every_n_nan_or_inf=2, decr_ratio=0.5)"
                         % (_scale(self.init_loss_scale), self.growth_interval))
        if self.float32_layers:
            lines.append("  %d layer(s) overflow float16 in the forward pass whatever the loss "
                         "scale; keep them in float32:" % len(self.float32_layers))
            for name in self.float32_layers:
                lines.append("    " + name)
            lines.append("    how: compute them in float32 (cast their inputs with "
                         "tf.cast(x, tf.float32) and build them outside saturate_every_op); "
                         "where precision_mode lowers them (on the device, and here under "
                         "npu-emulate --precision-mode), build them under npu_bridge's "
                         "npu_scope.keep_dtype_scope() or add their op types to the black list "
                         "of a modify_mixlist file (npu-emulate --modify-mixlist FILE tries that "
                         "without editing the script)")
        else:
            lines.append("  no layer overflows float16 in the forward pass")
        lines.append("  %-60s %12s %10s %12s %10s %14s" % (
            "layer (closest to the float16 limit first)", "fwd max", "fwd room", "grad max",
            "grad room", "max safe scale"))

        def room(layer):
            values = [v for v in (layer.forward_headroom, layer.gradient_headroom and
                                  layer.gradient_headroom * self.observed_loss_scale)
                      if v is not None]
            return min(values) if values else float("inf")
        ranked = sorted(self.layers, key=lambda l: (not l.forward_overflow,
                                                    l.max_safe_scale is None,
                                                    l.max_safe_scale or 0.0, room(l)))
        for layer in ranked[:max_rows]:
            lines.append("  %-60s %12s %10s %12s %10s %14s" % (
                layer.name[-60:], _fmt(layer.forward_max), _fmt(layer.forward_headroom),
                _fmt(layer.gradient_max), _fmt(layer.gradient_headroom),
                "-" if layer.max_safe_scale is None else _fmt(layer.max_safe_scale)))
        if len(ranked) > max_rows:
            lines.append("  ... %d more layers" % (len(ranked) - max_rows))
        return "\n".join(lines)


def _scale(value):
    return "%d" % value if value >= 1 and value == int(value) else "%g" % value


def _fmt(value):
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return "%.3g" % value


def write_advice(advice, path):
    """Writes ``advice.to_dict()`` as JSON to ``path``."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(advice.to_dict(), handle, indent=1)
        handle.write("\n")
