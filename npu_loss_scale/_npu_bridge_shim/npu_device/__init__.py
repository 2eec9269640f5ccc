"""CPU shim of Ascend's TF2 adapter ``npu_device`` (from npu-loss-scale).

Provided: ``open(device_id=None).as_default()`` (the emulated device; nothing to place on),
``set_device_sat_mode(mode)``/``get_device_sat_mode()`` (the emulated device's overflow
mode, as ``npu_bridge``'s ``npu_plugin`` sets it), ``global_options()`` (every option scripts set, nested ``dump_config``/``profiling_config``/
``experimental.multi_branches_config`` included: validated and recorded; ``open()`` applies
``precision_mode`` (with ``modify_mixlist``, :mod:`npu_loss_scale.device.precision_lists`)
through :mod:`npu_loss_scale.device.precision`: for TF2 code to every eligible
op built (``tf.function``, Keras ``fit``) or run eagerly after it, in float16 with saturation;
after ``compat.enable_v1()`` to the ``tf.compat.v1`` sessions), ``compat.enable_v1()``,
``compat.v1.npu_init`` (the npu_bridge one), ``distribute.all_reduce/broadcast/
shard_and_rebatch_dataset/npu_distributed_keras_optimizer_wrapper`` (the identity at one rank, as
the device computes it; TF collectives across the processes of ``emulate --ranks N``, whose
``open()`` reports ``workers_num``/``worker_id``), ``train.optimizer.NpuLossScaleOptimizer`` (the
package's Keras loss-scale optimizer, :mod:`npu_loss_scale.keras`, agreeing on overflow across
the ranks), ``gen_npu_ops`` (also as ``npu_device.npu_device.gen_npu_ops``): the dropout kernels
``drop_out_gen_mask``/``drop_out_do_mask`` and their ``_v3`` forms, ``fast_gelu``,
``fast_gelu_grad``, with the device's semantics (:mod:`npu_loss_scale.ascend.device_kernels`),
and ``ops.gelu``. Not emulated (an error names them): every other ``gen_npu_ops`` kernel (fused
Adam/LAMB/LARS, LSTM/GRU cells and their gradients, layer norm, ...) and every other ``ops`` name.
"""
from npu_bridge._shim import module_getattr as _module_getattr

__npu_loss_scale_shim__ = True

_NESTED = {
    "dump_config": {"enable_dump": False, "dump_path": None, "dump_step": None,
                    "dump_mode": "output", "enable_dump_debug": False, "dump_debug_mode": "all",
                    "dump_data": "tensor", "dump_layer": None},
    "profiling_config": {"enable_profiling": False, "profiling_options": None},
}


class _Group:
    """A group of options: known names only, each set value recorded in ``recorded``."""

    def __init__(self, path, defaults, children=None):
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_values", dict(defaults))
        object.__setattr__(self, "_children", dict(children or {}))
        object.__setattr__(self, "recorded", {})

    def __getattr__(self, name):
        if name in self._children:
            return self._children[name]
        if name in self._values:
            return self._values[name]
        raise AttributeError("%s has no option %r; options: %s" % (
            self._path, name, ", ".join(sorted(set(self._values) | set(self._children)))))

    def __setattr__(self, name, value):
        if name not in self._values:
            raise AttributeError("%s has no option %r; options: %s" % (
                self._path, name, ", ".join(sorted(self._values))))
        if name == "precision_mode" and value is not None:
            from npu_loss_scale.device import precision  # pylint: disable=import-outside-toplevel
            value = precision.check_precision_mode(value)
        self._values[name] = value
        self.recorded[name] = value


def _make_options():
    from npu_bridge.estimator.npu.npu_config import NPU_OPTION_DEFAULTS  # pylint: disable=import-outside-toplevel
    defaults = {k: v for k, v in NPU_OPTION_DEFAULTS.items()
                if k not in ("dump_config", "profiling_config", "experimental_config")}
    children = {name: _Group("global_options()." + name, values)
                for name, values in _NESTED.items()}
    multi = _Group("global_options().experimental.multi_branches_config",
                   {"input_shape": None, "dynamic_node_type": None, "dynamic_dims": None})
    children["experimental"] = _Group("global_options().experimental",
                                      {"logical_device_cluster_deploy_mode": None,
                                       "logical_device_id": None},
                                      {"multi_branches_config": multi})
    return _Group("npu_device.global_options()", defaults, children)


_options = []


def global_options():
    """The device options (one object per process), set before ``open()`` as on the device."""
    if not _options:
        _options.append(_make_options())
    return _options[0]


class _Device:
    """The emulated NPU of this process: ``workers_num`` ranks (RANK_SIZE), this one
    ``worker_id`` (RANK_ID); several in a rank of ``--ranks N`` (see :mod:`npu_device._cluster`)."""

    def __init__(self, device_id, workers_num=1, worker_id=0):
        self.device_id = device_id
        self.workers_num = workers_num
        self.worker_id = worker_id

    def is_cluster_worker(self):
        """Whether this device is one of several ranks (its collectives reach the others)."""
        return self.workers_num > 1 and 0 <= self.worker_id < self.workers_num

    def as_default(self):
        return self


def open(device_id=None):  # pylint: disable=redefined-builtin
    """Opens the emulated device and applies the options set so far (see the package docstring)."""
    from npu_loss_scale.device import precision  # pylint: disable=import-outside-toplevel
    from npu_device import _cluster  # pylint: disable=import-outside-toplevel
    workers_num, worker_id = _cluster.join("npu_device.open")
    mode = global_options().precision_mode
    mixlist = global_options().modify_mixlist
    if mixlist is not None:   # also the sessions' (after compat.enable_v1()) list
        from npu_loss_scale.device import (  # pylint: disable=import-outside-toplevel
            precision_lists)
        precision_lists.set_modify_mixlist(mixlist)
    if mode is not None:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        if tf.compat.v1.executing_eagerly_outside_functions():
            # TF2 code: every eligible op built (tf.function, Keras) or run eagerly from now on
            precision.install_op_precision(mode, mixlist)
        # tf.compat.v1 sessions (all of them after compat.enable_v1()) get the mode too
        precision.set_default_precision_mode(mode)
        precision.install_session_hook()
    return _cluster.opened(lambda: _Device(device_id, workers_num, worker_id))


def set_device_sat_mode(mode):
    """The emulated device's overflow mode, as the adapter's own function sets it for the process:
    0 saturation (the Atlas training series' only mode), 1 INF/NaN; see
    :mod:`npu_loss_scale.device.register`."""
    from npu_loss_scale.device import register  # pylint: disable=import-outside-toplevel
    register.set_device_sat_mode(mode)


def get_device_sat_mode():
    """The emulated device's overflow mode: 0 saturation, 1 INF/NaN."""
    from npu_loss_scale.device import register  # pylint: disable=import-outside-toplevel
    return register.get_device_sat_mode()


def global_npu_ctx():
    """The device ``open()`` returned, or None before it."""
    from npu_device import _cluster  # pylint: disable=import-outside-toplevel
    return _cluster.global_npu_ctx()


from npu_device import compat, distribute  # noqa: E402,F401  pylint: disable=wrong-import-position

# gen_npu_ops, ops and npu_device (the module the adapter re-exports from) load on first use
__all__ = ["open", "global_options", "global_npu_ctx", "set_device_sat_mode",
           "get_device_sat_mode", "compat", "distribute", "gen_npu_ops",
           "ops", "npu_device"]
__getattr__ = _module_getattr(__name__, __all__, package=True)
