"""Loss-scale advisor: observe a model for N steps, then say which loss scale it can take.

Observation runs the model with overflow localisation in ``observe`` mode
(:mod:`npu_loss_scale.device.localisation`): every saturation site notes, on every step, the largest
magnitude its value reached before saturation. From that, per layer (op):

* the largest forward activation and the largest gradient seen (the gradient divided by the
  loss scale the observation ran at, so it is the unscaled gradient);
* the headroom to float16's range (how many times larger the value could have been);
* the largest power-of-two loss scale at which the layer's gradients would not have overflowed:
  a float16 result overflows when it rounds to inf, i.e. when its magnitude reaches 65520, and
  multiplying by a power of two scales every float16 result exactly, so a gradient ``g``
  observed at scale ``s`` is ``g * S / s`` at scale ``S``;
* the layers whose *forward* values overflow: no loss scale helps those (the loss scale only
  multiplies gradients), they need float32.

The advice: ``init_loss_scale`` = the smallest of the per-layer largest safe scales (capped at
``max_scale``, 2**32 by default), i.e. the largest power of two at which no observed step would
have overflowed in the backward pass; a growth interval (``incr_every_n_steps``) of 1000 steps,
the Ascend BERT scripts' value: at the advised scale the largest gradient is within a factor 2
of the float16 limit, so each growth attempt may cost one skipped step, and one per 1000 steps
is 0.1% of the steps; and the float32 list.

Entry points:

* ``python -m npu_loss_scale.emulate --advise advice.json [--advise-loss-scale S] script.py ...``
  observes an unmodified script (run it with a *fixed* loss scale ``S``, default 1, for example
  ``--npu_bert_loss_scale=1`` for the BERT example) and prints the advice when it ends;
* :func:`observing` (a context manager) around your own graph building and training loop;
* :func:`advise_model` for a model function: builds it with every float16 op saturated, under
  an :class:`~npu_loss_scale.NPULossScaleOptimizer` with a fixed scale, and runs it on batches.

Example::

    import tensorflow as tf
    from npu_loss_scale import advisor

    def model(x):
        w = tf.compat.v1.get_variable("w", initializer=tf.fill([8, 8], 0.5))
        h = tf.matmul(x, tf.cast(w, tf.float16), name="dense")
        return tf.reduce_mean(tf.cast(h, tf.float32) ** 2)

    batches = [{"x": tf.ones([4, 8], tf.float16).numpy() * k} for k in (1.0, 2.0)]
    advice = advisor.advise_model(model, batches,
                                  input_signature={"x": tf.TensorSpec([4, 8], tf.float16)})
    print(advice.report())
    print(advice.init_loss_scale)
"""
import contextlib
import math
import re

from npu_loss_scale.tools.advice import Advice, LayerAdvice, write_advice

FLOAT16_MAX = 65504.0
FLOAT16_OVERFLOW = 65520.0    # the smallest magnitude that rounds to inf in float16
DEFAULT_MAX_SCALE = 2.0 ** 32
DEFAULT_GROWTH_INTERVAL = 1000
_GRAD_PREFIX = re.compile(r"^(.*/)?(gradients(_\d+)?|gradient_tape)/")
_GRAD_SUFFIX = re.compile(r"_grad/[^/]*$")


def layer_of(op_name):
    """The forward op a site belongs to: ``gradients/dense/MatMul_grad/MatMul`` -> ``dense/MatMul``."""
    match = _GRAD_PREFIX.match(op_name)
    if match is None:
        return op_name
    rest = (match.group(1) or "") + op_name[match.end():]
    return _GRAD_SUFFIX.sub("", rest)


def _largest_safe_scale(gradient, limit):
    """The largest power of two S with S * gradient < limit (None: no limit, gradient 0)."""
    if math.isnan(gradient) or math.isinf(gradient):
        return 0.0
    if gradient <= 0.0:
        return None
    k = math.floor(math.log2(limit / gradient))
    while 2.0 ** k * gradient >= limit:   # log2 rounding at an exact power of two
        k -= 1
    while 2.0 ** (k + 1) * gradient < limit:
        k += 1
    return 2.0 ** k


def advise(observations=None, observed_steps=None, loss_scale=1.0, max_scale=DEFAULT_MAX_SCALE,
           growth_interval=DEFAULT_GROWTH_INTERVAL):
    """The :class:`Advice` from site observations (default: those of
    :func:`npu_loss_scale.device.localisation.observations`) made at the fixed ``loss_scale``."""
    from npu_loss_scale.device import localisation  # pylint: disable=import-outside-toplevel
    if not isinstance(loss_scale, (int, float)) or isinstance(loss_scale, bool) \
            or not loss_scale > 0 or math.isinf(loss_scale):
        raise ValueError("loss_scale must be the positive, finite, fixed loss scale the "
                         "observation ran at; got %r" % (loss_scale,))
    if observations is None:
        observations = localisation.observations()
    if observed_steps is None:
        observed_steps = localisation.observed_steps()
    layers = {}
    for obs in observations:
        if obs.dtype != "float16":
            continue   # bfloat16 / float32 have float32's range: nothing to advise
        name = layer_of(obs.op_name)
        layer = layers.get(name)
        if layer is None:
            layer = layers[name] = LayerAdvice(name, obs.site)
        value = obs.max_magnitude
        if obs.direction == "forward":
            layer.forward_max = _max(layer.forward_max, value)
        else:
            layer.gradient_max = _max(layer.gradient_max, value / loss_scale)
    limit, scale, limiting = FLOAT16_OVERFLOW, None, None
    for layer in layers.values():
        if layer.forward_max is not None:
            layer.forward_headroom = _headroom(layer.forward_max)
            layer.forward_overflow = not layer.forward_max < limit
        if layer.gradient_max is not None:
            layer.gradient_headroom = _headroom(layer.gradient_max)
            layer.max_safe_scale = _largest_safe_scale(layer.gradient_max, limit)
        if layer.max_safe_scale is not None and (scale is None or layer.max_safe_scale < scale):
            scale, limiting = layer.max_safe_scale, layer.name
    ordered = sorted(layers.values(), key=lambda l: l.order)
    if not ordered:
        init = None
    elif scale is None or scale > max_scale:
        init, limiting = float(max_scale), None
    else:
        init = scale
    return Advice(ordered, init, growth_interval, observed_steps, float(loss_scale), limiting)


def _max(current, value):
    if current is None:
        return value
    if math.isnan(value) or math.isnan(current):
        return float("nan")
    return max(current, value)


def _headroom(value):
    if math.isnan(value):
        return float("nan")
    if value == 0:
        return float("inf")
    return FLOAT16_MAX / value


class Observation:
    """What :func:`observing` yields: call :meth:`advice` after the steps ran."""

    def __init__(self, loss_scale, max_scale, growth_interval):
        self.loss_scale = loss_scale
        self.max_scale = max_scale
        self.growth_interval = growth_interval

    def advice(self):
        return advise(loss_scale=self.loss_scale, max_scale=self.max_scale,
                      growth_interval=self.growth_interval)


@contextlib.contextmanager
def observing(loss_scale=1.0, max_scale=DEFAULT_MAX_SCALE,
              growth_interval=DEFAULT_GROWTH_INTERVAL):
    """Context manager: graphs built inside are observed (localisation ``observe`` mode) and the
    observations of earlier runs are cleared. Run the steps inside, at the fixed ``loss_scale``,
    then call ``.advice()`` on what it yields (inside or after)."""
    from npu_loss_scale.device import localisation  # pylint: disable=import-outside-toplevel
    localisation.clear_observations()
    with localisation.localising(localisation.OBSERVE):
        yield Observation(loss_scale, max_scale, growth_interval)


def advise_model(model_fn, batches, input_signature, loss_scale=1.0, learning_rate=0.0,
                 max_scale=DEFAULT_MAX_SCALE, growth_interval=DEFAULT_GROWTH_INTERVAL):
    """Observes ``model_fn`` on ``batches`` and returns the :class:`Advice`.

    ``model_fn(**inputs)`` builds the loss (a scalar) from the inputs named in
    ``input_signature`` (a dict name -> ``tf.TensorSpec``); it runs in a fresh graph with every
    float16 op saturated (:func:`~npu_loss_scale.device.saturation.saturate_every_op`), under an
    :class:`~npu_loss_scale.NPULossScaleOptimizer` with a fixed ``loss_scale`` around plain SGD
    at ``learning_rate`` (default 0: the weights stay as initialised, each batch is observed on
    the same model). ``batches`` is a list of dicts name -> array, one step each.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.detection import backends as detection
    from npu_loss_scale.device import saturation  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.optimizers.loss_scale import (  # pylint: disable=import-outside-toplevel
        NPULossScaleOptimizer)
    from npu_loss_scale.scaling.managers import (  # pylint: disable=import-outside-toplevel
        FixedLossScaleManager)
    if not callable(model_fn):
        raise TypeError("model_fn must be a callable building the loss; got %r" % (model_fn,))
    if not isinstance(input_signature, dict) or not all(
            isinstance(v, tf.TensorSpec) for v in input_signature.values()):
        raise TypeError("input_signature must be a dict name -> tf.TensorSpec; got %r"
                        % (input_signature,))
    batches = list(batches)
    if not batches:
        raise ValueError("batches must hold at least one batch (a dict name -> array)")
    if detection.get_backend_name() != "emulation":
        raise ValueError("advise_model needs the emulation backend (NPU_LOSS_SCALE_BACKEND="
                         "emulation); the backend in force is %r" % detection.get_backend_name())
    with tf.Graph().as_default():
        with observing(loss_scale, max_scale, growth_interval) as observation:
            with saturation.saturate_every_op():
                inputs = {name: tf.compat.v1.placeholder(spec.dtype, spec.shape, name=name)
                          for name, spec in input_signature.items()}
                loss = model_fn(**inputs)
                optimizer = NPULossScaleOptimizer(
                    tf.compat.v1.train.GradientDescentOptimizer(learning_rate),
                    FixedLossScaleManager(loss_scale))
                train_op = optimizer.minimize(loss)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                for batch in batches:
                    missing = set(inputs) - set(batch)
                    if missing:
                        raise ValueError("a batch lacks the inputs %s (batches must be dicts "
                                         "with every name of input_signature)" % sorted(missing))
                    sess.run(train_op, {inputs[k]: v for k, v in batch.items()})
            return observation.advice()


__all__ = ["advise", "advise_model", "observing", "Advice", "LayerAdvice", "layer_of",
           "write_advice", "FLOAT16_MAX", "FLOAT16_OVERFLOW", "DEFAULT_MAX_SCALE",
           "DEFAULT_GROWTH_INTERVAL"]
