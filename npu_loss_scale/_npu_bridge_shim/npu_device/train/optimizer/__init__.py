"""Shim of ``npu_device.train.optimizer``: ``NpuLossScaleOptimizer``, the package's Keras one.

``NpuLossScaleOptimizer(inner_optimizer, dynamic=True, initial_scale=None,
dynamic_growth_steps=None)`` is :class:`npu_loss_scale.keras.NpuLossScaleOptimizer` (the TF2
adapter's constructor and ``last_step_finite``; it reads the emulated float-status register)
which, as the device's does, sums the overflow status over the ranks when the opened device has
several (a rank of ``python -m npu_loss_scale.emulate --ranks N``): one rank's overflow makes
every rank skip the step and move its scale the same way. With one rank it decides alone.
As the adapter's of TF 2.4/2.6 it takes the optimizers of that time too, legacy ones in TF 2.15
terms (``OptimizerV2``: ``tf.keras.optimizers.legacy``, TensorFlow Addons' ``LAMB``...): those
give ``NpuLegacyLossScaleOptimizer``, the same on Keras's loss-scale optimizer for them.
Keras is imported only when the name is used.

With ``python -m npu_loss_scale.emulate --report FILE`` the class also counts, in the same report
as npu_bridge's ``NPULossScaleOptimizer``, the optimizers built and each step applied or skipped
(a host callback after the step's decision; it changes no value).
"""
from npu_bridge._shim import module_getattr as _module_getattr

__all__ = ["NpuLossScaleOptimizer"]
_missing = _module_getattr(__name__, __all__)
_built = {}


def _agreement_class():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from npu_loss_scale import agreement  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.agreement import failures  # pylint: disable=import-outside-toplevel
    from npu_device import distribute  # pylint: disable=import-outside-toplevel
    from npu_device.distribute import _collectives  # pylint: disable=import-outside-toplevel

    class RankAgreement(agreement.Agreement):
        """The device's status all-reduce (sum) over the ranks of the opened device; the status
        itself when the device has one rank."""

        name = "npu_device"

        def reduce(self, status):
            device = distribute._cluster_device(  # pylint: disable=protected-access
                "npu_device.train.optimizer.NpuLossScaleOptimizer", distribute.WORLD_GROUP)
            if device is None:
                return status
            out = _collectives.all_reduce([status], "sum", device.workers_num,
                                          name=agreement.STATUS_ALLREDUCE_NAME)[0]
            if not tf.executing_eagerly():
                failures.record_reduce(
                    out, self.name, _collectives.cluster().timeout,
                    "TF CollectiveReduceV2 over %d emulated ranks" % device.workers_num)
            return out

    return RankAgreement


def _add_report_counting(cls):
    """Makes ``cls`` count its optimizers and steps in the emulate report."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from npu_bridge.estimator.npu import npu_loss_scale_optimizer as report  # pylint: disable=import-outside-toplevel
    from npu_loss_scale._internal.compat import py_func  # pylint: disable=import-outside-toplevel

    def count(optimizer):
        finite = optimizer.last_step_finite
        if tf.executing_eagerly():
            report._count_step(bool(finite.numpy()))  # pylint: disable=protected-access
        else:  # read after the step's decision (automatic control dependencies keep the order)
            py_func.numpy_function(report._count_step, [tf.convert_to_tensor(finite)],  # pylint: disable=protected-access
                                   tf.bool, stateful=True)

    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        report._note("optimizers_built")  # pylint: disable=protected-access

    cls.__init__ = __init__
    base = cls.__mro__[1]
    if hasattr(base, "stateless_apply"):           # Keras 3: every step goes through apply()
        def apply(self, grads, trainable_variables=None):
            result = base.apply(self, grads, trainable_variables)
            count(self)
            return result
        cls.apply = apply
    else:                                          # Keras 2: through apply_gradients()
        def apply_gradients(self, grads_and_vars, *args, **kwargs):
            result = base.apply_gradients(self, grads_and_vars, *args, **kwargs)
            count(self)
            return result
        cls.apply_gradients = apply_gradients


def _build():
    from npu_bridge.estimator.npu import npu_loss_scale_optimizer as report  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.frontends import keras  # pylint: disable=import-outside-toplevel
    base = keras.NpuLossScaleOptimizer
    agreement_class = _agreement_class()

    class NpuLossScaleOptimizer(base):  # pylint: disable=abstract-method
        __doc__ = base.__doc__

        def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
                     dynamic_growth_steps=None, **kwargs):
            if "is_distributed" not in kwargs and "agreement" not in kwargs:
                kwargs.update(is_distributed=True, agreement=agreement_class())
            super().__init__(inner_optimizer, dynamic, initial_scale, dynamic_growth_steps,
                             **kwargs)

    NpuLossScaleOptimizer.__module__ = __name__
    NpuLossScaleOptimizer.__qualname__ = "NpuLossScaleOptimizer"
    classes = [NpuLossScaleOptimizer]
    legacy = getattr(base, "_npu_legacy_class", None)
    if legacy is not None:   # Keras 2: NpuLossScaleOptimizer(an OptimizerV2 optimizer) builds it
        class NpuLegacyLossScaleOptimizer(legacy):  # pylint: disable=abstract-method
            __doc__ = legacy.__doc__

            def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
                         dynamic_growth_steps=None, **kwargs):
                if "is_distributed" not in kwargs and "agreement" not in kwargs:
                    kwargs.update(is_distributed=True, agreement=agreement_class())
                super().__init__(inner_optimizer, dynamic, initial_scale, dynamic_growth_steps,
                                 **kwargs)

        NpuLegacyLossScaleOptimizer.__module__ = __name__
        NpuLegacyLossScaleOptimizer.__qualname__ = "NpuLegacyLossScaleOptimizer"
        NpuLossScaleOptimizer._npu_legacy_class = NpuLegacyLossScaleOptimizer  # pylint: disable=protected-access
        classes.append(NpuLegacyLossScaleOptimizer)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    for cls in classes:
        if report._report_path() is not None:  # pylint: disable=protected-access
            _add_report_counting(cls)
        try:
            tf.keras.utils.register_keras_serializable(package="npu_device")(cls)
        except (AttributeError, ValueError):  # pragma: no cover - registration is a convenience
            pass
    return NpuLossScaleOptimizer


def __getattr__(name):
    if name == "NpuLossScaleOptimizer":
        if name not in _built:
            _built[name] = _build()
        return _built[name]
    return _missing(name)
