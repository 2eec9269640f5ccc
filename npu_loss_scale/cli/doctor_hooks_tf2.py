"""What one doctor run patches to see a TF2 script's steps (:mod:`npu_loss_scale.cli.doctor_run`).

* ``GradScaler.update()`` ends an iteration: eagerly it records the step at once; inside a
  ``tf.function`` it adds a host callback after the update that records the step when it runs.
* The Keras ``NpuLossScaleOptimizer`` (``npu_loss_scale.keras``, and npu_device's, its subclass;
  Keras 2 and 3): each ``apply_gradients`` (``model.fit``'s steps and custom loops alike) records
  the step the same way; its constructor's settings are recorded (scaler kind ``keras``) and
  those the config names replaced.
* Either records the scale the step used, the scale after it, whether it was applied, and the
  loss the script handed to ``scaler.scale(loss)`` / ``get_scaled_loss(loss)`` /
  ``scale_loss(loss)`` when that call ran in the same function (else None).
* A host callback cannot end the run (its exception becomes a TensorFlow error the script may
  catch): it only sets the recorder's limit, and every ``tf.function`` call raises
  :class:`StepLimit` once it returns to eager Python with the limit reached. Steps a function
  runs past the limit (a whole loop traced into one function) are not recorded.
* Each traced step leaves its graph, loss and applied gradients for its sites' verdicts
  (:mod:`npu_loss_scale.cli.doctor_verdicts_tf2`, :func:`site_verdict`).
"""
import importlib.abc
import importlib.util
import inspect
import sys

import numpy as np

from npu_loss_scale.cli import doctor_verdicts_tf2 as verdicts
from npu_loss_scale.cli.doctor_hooks import wrap_init
from npu_loss_scale.cli.doctor_record import StepLimit
from npu_loss_scale.tools.doctor.mode_findings import KERAS_FRONT_END

__all__ = ["install", "site_verdict"]

_KERAS_MODULES = ("npu_loss_scale.frontends._keras2", "npu_loss_scale.frontends._keras3")


# -- one step ------------------------------------------------------------------------------------
def _here(tensor):
    """True when ``tensor`` can be read where ops are being built (or run) now."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if not isinstance(tensor, tf.Tensor):
        return False
    try:
        graph = tensor.graph
    except AttributeError:   # an eager tensor
        return tf.executing_eagerly()
    return not tf.executing_eagerly() and graph is tf.compat.v1.get_default_graph()


def _record(rec, scale, next_scale, finite, loss, gradients):
    """Records one step (eagerly: now, raising :class:`StepLimit` at the limit; in a graph: a
    host callback that runs after ``next_scale`` and ``finite`` are read, and the graph kept for
    the verdicts with ``loss`` and the applied ``gradients``). ``loss`` may be None or a tensor
    of another function (then None is recorded)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from npu_loss_scale._internal.compat import py_func  # pylint: disable=import-outside-toplevel
    loss = loss if _here(loss) else None
    mean = None if loss is None else tf.reduce_mean(tf.cast(loss, tf.float64))
    values = (scale, next_scale, finite, mean)
    if tf.executing_eagerly():
        verdicts.ran("eagerly")
        _note(rec, *[None if v is None else float(np.asarray(v)) for v in values])
        if rec.limit_reached:
            raise StepLimit()
        return None
    verdicts.ran("in a tf.function")
    verdicts.remember(tf.compat.v1.get_default_graph(), loss, gradients)
    present = [v is not None for v in values]
    inputs = [tf.cast(v, tf.float64) if ok else tf.constant(np.nan, tf.float64)
              for v, ok in zip(values, present)]

    def note(*got):
        if not rec.limit_reached:   # steps a function runs past the limit are not recorded
            _note(rec, *[float(v) if ok else None for v, ok in zip(got, present)])
        return np.int64(len(rec.steps))

    return py_func.numpy_function(note, inputs, tf.int64, stateful=True, name="doctor_step")


def _note(rec, scale, next_scale, finite, loss):
    rec.step(scale, next_scale, None if finite is None else bool(finite), loss)


def patch_function_call(rec):
    """Every ``tf.function`` call called eagerly raises :class:`StepLimit` once it returns with
    the steps done (its host callbacks recorded the last of them)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    cls = type(tf.function(lambda: None))
    call = cls.__call__

    def __call__(self, *args, **kwargs):
        eager = tf.executing_eagerly()
        out = call(self, *args, **kwargs)
        if eager and rec.limit_reached:
            raise StepLimit()
        return out

    cls.__call__ = __call__


# -- GradScaler --------------------------------------------------------------------------------
def patch_grad_scaler(rec):
    from npu_loss_scale.frontends import grad_scaler  # pylint: disable=import-outside-toplevel
    cls = grad_scaler.GradScaler
    wrap_init(rec, cls, "grad_scaler", front_end="GradScaler")
    scale, step, update = cls.scale, cls.step, cls.update

    def scale_and_keep(self, outputs):
        self.__dict__["_doctor_loss"] = outputs
        return scale(self, outputs)

    def step_and_keep(self, optimizer, grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        if self._py.enabled and not self._async():   # pylint: disable=protected-access
            kept = self.__dict__.setdefault("_doctor_grads", [])   # until update() takes them
            kept.extend(p[0] for p in grads_and_vars  # step() itself refuses all but pairs
                        if isinstance(p, tuple) and len(p) == 2 and p[0] is not None)
        return step(self, optimizer, grads_and_vars, *args, **kwargs)

    def update_and_record(self, new_scale=None):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        if not self._py.enabled or self._async():   # pylint: disable=protected-access
            return update(self, new_scale)   # nothing to record / steps of an optimizer thread
        states = self._per_optimizer_states.values()  # pylint: disable=protected-access
        found = [s["found_inf"] for s in states if s.get("found_inf") is not None]
        used = self.get_scale()
        out = update(self, new_scale)
        loss = self.__dict__.pop("_doctor_loss", None)
        grads = self.__dict__.pop("_doctor_grads", [])
        finite = None
        if found:   # step() skipped the update when one of them is set
            finite = tf.equal(tf.add_n([tf.cast(f, tf.float32) for f in found]), 0.0)
        if tf.executing_eagerly():
            _record(rec, used, self.get_scale(), finite, loss, grads)
            return out
        with tf.control_dependencies([out] if out is not None else []):
            noted = _record(rec, used, self.get_scale(), finite, loss, grads)
        return tf.group(out, noted, name="doctor_update") if out is not None else noted

    cls.scale, cls.step, cls.update = scale_and_keep, step_and_keep, update_and_record


# -- the Keras NpuLossScaleOptimizer -----------------------------------------------------------
def patch_keras(rec):
    """Wraps the Keras classes as :mod:`npu_loss_scale.frontends.keras` builds them, once the
    script imports the modules that build them (the doctor imports no Keras of its own)."""
    for name in _KERAS_MODULES:
        if name in sys.modules:
            _wrap_build(rec, sys.modules[name])
    sys.meta_path.insert(0, _AfterImport(_KERAS_MODULES, lambda module: _wrap_build(rec, module)))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` once each module named in ``names`` is imported."""

    def __init__(self, names, then):
        self.names, self.then = set(names), then

    def find_spec(self, fullname, path, target=None):  # pylint: disable=unused-argument
        if fullname not in self.names:
            return None
        self.names.discard(fullname)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        execute, then = spec.loader.exec_module, self.then

        def exec_module(module):
            execute(module)
            then(module)

        spec.loader.exec_module = exec_module
        return spec


def _wrap_build(rec, module):
    build = module.build

    def build_and_patch(*args, **kwargs):
        cls = build(*args, **kwargs)
        for one in {cls, getattr(cls, "_npu_legacy_class", cls)}:
            _patch_keras_class(rec, one, keras3=module.__name__.endswith("_keras3"))
        return cls

    module.build = build_and_patch


def _patch_keras_class(rec, cls, keras3):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    _wrap_keras_init(rec, cls)
    name = "scale_loss" if keras3 else "get_scaled_loss"
    scale_loss = getattr(cls, name)

    def keep_loss(self, loss):
        self.__dict__["_doctor_loss"] = loss
        return scale_loss(self, loss)

    setattr(cls, name, keep_loss)
    if keras3:   # the scale a step uses exists once the optimizer is built, in apply()
        check = cls.check_finite

        def check_finite(self, grads):
            self.__dict__["_doctor_scale"] = tf.convert_to_tensor(self.loss_scale)
            return check(self, grads)

        cls.check_finite = check_finite
    name, first = ("apply", "grads") if keras3 else ("apply_gradients", "grads_and_vars")
    apply = getattr(cls, name)

    def apply_and_record(self, *args, **kwargs):
        # Keras 3: apply(grads, ...), gradients; Keras 2: apply_gradients(grads_and_vars, ...),
        # (gradient, variable) pairs; either may be an iterator, read once here
        if args:
            grads = list(args[0])
            args = (grads,) + args[1:]
        elif first in kwargs:
            grads = kwargs[first] = list(kwargs[first])
        else:
            return apply(self, *args, **kwargs)   # Keras's own error names what is missing
        if not keras3:
            self.__dict__["_doctor_scale"] = tf.convert_to_tensor(self.loss_scale)
        out = apply(self, *args, **kwargs)
        used = self.__dict__.pop("_doctor_scale", None)
        loss = self.__dict__.pop("_doctor_loss", None)
        if not _here(used):
            return out   # no step decided here (no gradients, or another replica's function)
        finite = tf.convert_to_tensor(self.last_step_finite)
        applied = grads if keras3 else [g for g, _ in grads]
        noted = _record(rec, used, tf.convert_to_tensor(self.loss_scale), finite, loss,
                        [g for g in applied if g is not None])
        if noted is None or not isinstance(out, tf.Operation):
            return out   # a graph keeps the callback (a stateful op of the function)
        return tf.group(out, noted, name="doctor_apply")

    setattr(cls, name, apply_and_record)


def _wrap_keras_init(rec, cls):
    """The constructor's settings recorded (kind ``keras``), those the config names replaced."""
    init = cls.__init__
    signature = inspect.signature(init)

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        for key, value in rec.settings.items():
            if key in signature.parameters and key != "self":
                bound.arguments[key] = value
        if rec.front_end is None:
            rec.front_end = KERAS_FRONT_END
        if rec.scaler["kind"] is None:
            bound.apply_defaults()
            rec.scaler = {"kind": "keras", "settings": {
                k: v for k, v in bound.arguments.items()
                if k in ("dynamic", "initial_scale", "dynamic_growth_steps")
                and isinstance(v, (int, float, bool))}}
        init(*bound.args, **bound.kwargs)

    cls.__init__ = __init__


def site_verdict(op_name, front_end):
    """The verdict of a site of a TF2 step (:func:`.doctor_verdicts_tf2.verdict`)."""
    return verdicts.verdict(op_name, front_end)


def install(rec):
    """Patches the TF2 front ends (the GradScaler; the Keras optimizer on TensorFlow 2) and
    ``tf.function`` calls for ``rec``."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    patch_grad_scaler(rec)
    if int(tf.__version__.split(".", 1)[0]) >= 2:
        patch_function_call(rec)
        patch_keras(rec)
