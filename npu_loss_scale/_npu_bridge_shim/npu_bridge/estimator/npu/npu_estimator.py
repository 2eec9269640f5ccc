"""Shim of ``npu_bridge.estimator.npu.npu_estimator``: NPUEstimator on TensorFlow's Estimator.

``NPUEstimator(model_fn, model_dir=None, config=None, params=None, ...)`` is
``tf.compat.v1.estimator.Estimator`` with the device's behaviour where it shows on CPU:

* ``config.iterations_per_loop`` (an :class:`NPURunConfig`) is honoured: in training, one session
  run of the train op executes N steps (global step advances by N per call, hooks see one call
  per loop), as on the device;
* ``config.precision_mode`` is honoured through the session config (eligible ops in float16 with
  saturation, see :mod:`npu_loss_scale.device.precision`);
* ``model_fn`` may return an :class:`NPUEstimatorSpec` (an ``EstimatorSpec`` that also takes
  ``host_call=(fn, tensors)``; ``fn(*tensors)`` is built into the training step).

Needs ``tensorflow-estimator`` (TF <= 2.15); without it constructing either class raises an
ImportError that says so.
"""
import inspect

import tensorflow as tf

from npu_loss_scale.ascend import loops
from npu_bridge import _estimator
from npu_bridge._shim import module_getattr as _module_getattr
from npu_bridge.estimator.npu import npu_config

_OPTIONAL_ARGS = ("labels", "mode", "params", "config")


def _accepted_args(fn):
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return set(_OPTIONAL_ARGS)
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return set(_OPTIONAL_ARGS)
    return set(params) & set(_OPTIONAL_ARGS)


def _as_plain_spec(spec, lib):
    if isinstance(spec, lib.EstimatorSpec) and type(spec) is not lib.EstimatorSpec:  # pylint: disable=unidiomatic-typecheck
        return lib.EstimatorSpec(**{f: getattr(spec, f) for f in lib.EstimatorSpec._fields})
    return spec


def _host_call_ops(host_call):
    fn, tensors = host_call
    out = fn(**tensors) if isinstance(tensors, dict) else fn(*tensors)
    flat = [t for t in tf.nest.flatten(out) if isinstance(t, (tf.Tensor, tf.Operation))]
    return flat


def _wrap_model_fn(model_fn, lib):
    accepted = _accepted_args(model_fn)

    def npu_model_fn(features, labels, mode, params, config):
        kwargs = {"labels": labels, "mode": mode, "params": params, "config": config}
        spec = model_fn(features, **{k: v for k, v in kwargs.items() if k in accepted})
        host_call = getattr(spec, "host_call", None)
        spec = _as_plain_spec(spec, lib)
        if mode == lib.ModeKeys.TRAIN and spec.train_op is not None:
            train_op = spec.train_op
            if host_call is not None:
                train_op = tf.group(train_op, *_host_call_ops(host_call))
            op = train_op if isinstance(train_op, tf.Operation) else train_op.op
            iterations = getattr(config, "iterations_per_loop", 1)

            if iterations > 1:
                loops.install_run_hook()
                loops.mark_loop(op, iterations)
            spec = spec._replace(train_op=train_op)
        return spec

    return npu_model_fn


_classes = {}


def _classes_for_estimator():
    if _classes:
        return _classes
    lib = _estimator.estimator_lib()

    class NPUEstimatorSpec(lib.EstimatorSpec):
        """``EstimatorSpec`` plus ``host_call=(fn, tensors)`` (built into the training step)."""

        def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None,
                    export_outputs=None, training_chief_hooks=None, training_hooks=None,
                    scaffold=None, evaluation_hooks=None, prediction_hooks=None, host_call=None):
            if host_call is not None and (not isinstance(host_call, (tuple, list))
                                          or len(host_call) != 2 or not callable(host_call[0])):
                raise ValueError("host_call must be (fn, tensors) with fn callable; got %r"
                                 % (host_call,))
            spec = super().__new__(cls, mode, predictions=predictions, loss=loss,
                                   train_op=train_op, eval_metric_ops=eval_metric_ops,
                                   export_outputs=export_outputs,
                                   training_chief_hooks=training_chief_hooks,
                                   training_hooks=training_hooks, scaffold=scaffold,
                                   evaluation_hooks=evaluation_hooks,
                                   prediction_hooks=prediction_hooks)
            spec.host_call = host_call
            return spec

    class NPUEstimator(lib.Estimator):
        """TensorFlow's Estimator with iterations_per_loop and precision_mode honoured."""

        def __init__(self, model_fn, model_dir=None, config=None, params=None, job_start_file="",
                     warm_start_from=None):
            del job_start_file  # a device-cluster start marker: nothing to wait for on CPU
            if config is None:
                config = npu_config.NPURunConfig()
            if not isinstance(config, lib.RunConfig):
                raise TypeError("config must be an NPURunConfig (or a RunConfig); got %r "
                                "(type %s)" % (config, type(config).__name__))
            if not callable(model_fn):
                raise TypeError("model_fn must be callable; got %r" % (model_fn,))
            super().__init__(model_fn=_wrap_model_fn(model_fn, lib), model_dir=model_dir,
                             config=config, params=params, warm_start_from=warm_start_from)

    _classes["NPUEstimatorSpec"] = NPUEstimatorSpec
    _classes["NPUEstimator"] = NPUEstimator
    return _classes


class _WithoutEstimator:
    def __init__(self, *args, **kwargs):
        del args, kwargs
        _estimator.estimator_lib()

    def __new__(cls, *args, **kwargs):  # pylint: disable=unused-argument
        _estimator.estimator_lib()
        return super().__new__(cls)


if _estimator.available():
    NPUEstimator = _classes_for_estimator()["NPUEstimator"]
    NPUEstimatorSpec = _classes_for_estimator()["NPUEstimatorSpec"]
else:
    NPUEstimator = type("NPUEstimator", (_WithoutEstimator,), {})
    NPUEstimatorSpec = type("NPUEstimatorSpec", (_WithoutEstimator,), {})

__all__ = ["NPUEstimator", "NPUEstimatorSpec"]
__getattr__ = _module_getattr(__name__, __all__)
