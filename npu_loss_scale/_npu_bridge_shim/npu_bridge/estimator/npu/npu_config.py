"""Shim of ``npu_bridge.estimator.npu.npu_config``: NPURunConfig, DumpConfig, ProfilingConfig.

``NPURunConfig`` is TensorFlow's Estimator ``RunConfig`` plus the device options. Every option
the adapter accepts is accepted here, checked as the device checks it, and recorded in
``config.npu_options`` (name -> value, for every option given). What they do on CPU:

* ``iterations_per_loop``: honoured by :class:`NPUEstimator` (one session run = N steps);
* ``precision_mode``: honoured — it goes into the session config's ``NpuOptimizer``
  ``parameter_map`` and the eligible ops compute in float16 with saturation
  (:mod:`npu_loss_scale.device.precision`);
* ``modify_mixlist``: honoured — the path goes into the same ``parameter_map`` and changes the
  op types a mixed ``precision_mode`` lowers (:mod:`npu_loss_scale.device.precision_lists`);
* ``dump_config``: a ``DumpConfig(enable_dump_debug=True)`` (the device's overflow dump) turns
  on overflow localisation (:mod:`npu_loss_scale.device.localisation`) for the graphs built after it
  and writes its JSON-lines report to ``<dump_path>/overflow_report.jsonl``; a tensor dump
  (``enable_dump=True``) is recorded only (fetch the tensors instead);
* ``profiling_config``: recorded (no device to profile);
* compilation, memory, tuning, HCCL and placement options: recorded only; they steer the
  device's graph compiler and runtime, which a CPU does not have.

Unknown keyword arguments are a TypeError naming them (a misspelt option never passes silently).
"""
import json  # noqa: F401  (exported by the adapter's module, which scripts star-import)
import numbers
import os
import time  # noqa: F401  (idem)
from enum import Enum

from npu_loss_scale.device import precision as _precision
from npu_bridge import _estimator
from npu_bridge._shim import module_getattr as _module_getattr


class ProfilingConfig:
    """Profiling settings of the device (recorded; nothing to profile on CPU)."""

    def __init__(self, enable_profiling=False, profiling_options=None):
        if not isinstance(enable_profiling, bool):
            raise TypeError("enable_profiling must be True or False; got %r" % (enable_profiling,))
        if profiling_options is not None and not isinstance(profiling_options, str):
            raise TypeError("profiling_options must be a JSON string or None; got %r"
                            % (profiling_options,))
        self._enable_profiling = enable_profiling
        self._profiling_options = profiling_options


_DUMP_MODES = ("input", "output", "all")
_DUMP_DEBUG_MODES = ("aicore_overflow", "atomic_overflow", "all")


class DumpConfig:
    """Dump settings of the device. The overflow dump (``enable_dump_debug=True``) becomes
    overflow localisation on CPU (see the module); tensor dumps are recorded only."""

    def __init__(self, enable_dump=False, dump_path=None, dump_step=None, dump_mode="output",
                 enable_dump_debug=False, dump_debug_mode="all", dump_data="tensor",
                 dump_layer=None):
        for name, value in (("enable_dump", enable_dump), ("enable_dump_debug", enable_dump_debug)):
            if not isinstance(value, bool):
                raise TypeError("%s must be True or False; got %r" % (name, value))
        if dump_mode not in _DUMP_MODES:
            raise ValueError("dump_mode must be one of %s; got %r" % (", ".join(_DUMP_MODES),
                                                                      dump_mode))
        if dump_debug_mode not in _DUMP_DEBUG_MODES:
            raise ValueError("dump_debug_mode must be one of %s; got %r"
                             % (", ".join(_DUMP_DEBUG_MODES), dump_debug_mode))
        self._enable_dump = enable_dump
        self._dump_path = dump_path
        self._dump_step = dump_step
        self._dump_mode = dump_mode
        self._enable_dump_debug = enable_dump_debug
        self._dump_debug_mode = dump_debug_mode
        self._dump_data = dump_data
        self._dump_layer = dump_layer
        self.overflow_report = None
        if enable_dump_debug:
            from npu_loss_scale.device import localisation  # pylint: disable=import-outside-toplevel
            self.overflow_report = localisation.enable_for_device_dump(dump_path)


class DynamicInputConfig:
    """Dynamic-shape settings of the device (recorded)."""

    def __init__(self, input_shape, dynamic_dims, dynamic_node_type):
        self._input_shape = input_shape
        self._dynamic_dims = dynamic_dims
        self._dynamic_node_type = dynamic_node_type


class NpuExecutePlacement(Enum):
    """Where the device runs an op or keeps a variable (npu_scope.npu_variable_scope)."""
    ALL = "all"
    CUBE = "cube"
    VECTOR = "vector"
    TAISHAN = "taishan"
    DVPP = "dvpp"
    HOST = "host"


# Device options beyond RunConfig's own arguments, with their defaults.
NPU_OPTION_DEFAULTS = {
    "iterations_per_loop": 1, "profiling_config": None, "enable_data_pre_proc": True,
    "precision_mode": None, "enable_reduce_precision": False, "variable_format_optimize": True,
    "mix_compile_mode": False, "hcom_parallel": False, "graph_memory_max_size": None,
    "variable_memory_max_size": None, "auto_tune_mode": None, "dump_config": None,
    "stream_max_parallel_num": None, "is_tailing_optimization": False, "horovod_mode": False,
    "graph_run_mode": 1, "op_debug_level": 0, "enable_scope_fusion_passes": None,
    "enable_exception_dump": 0, "op_select_implmode": None, "optypelist_for_implmode": None,
    "dynamic_input_config": None, "aoe_mode": None, "work_path": None,
    "buffer_optimize": "l2_optimize", "enable_small_channel": 0, "fusion_switch_file": None,
    "enable_compress_weight": False, "compress_weight_conf": None,
    "op_compiler_cache_mode": None, "op_compiler_cache_dir": None, "debug_dir": None,
    "hcom_multi_mode": False, "dynamic_input": False,
    "dynamic_graph_execute_mode": "dynamic_execute", "dynamic_inputs_shape_range": None,
    "local_rank_id": None, "local_device_list": None, "session_device_id": None,
    "distribute_config": None, "modify_mixlist": None, "op_precision_mode": None,
    "device_type": "default_device_type", "soc_config": None, "hccl_timeout": None,
    "op_wait_timeout": None, "op_execute_timeout": None, "HCCL_algorithm": None,
    "customize_dtypes": None, "op_debug_config": None, "memory_config": None,
    "experimental_config": None, "topo_sorting_mode": None, "insert_op_file": None,
    "stream_sync_timeout": -1, "event_sync_timeout": -1, "external_weight": False,
    "es_cluster_config": None, "deterministic": 0, "frozen_variable": False,
    "variable_placement": "Device", "jit_compile": "auto", "precision_mode_v2": None,
    "ac_parallel_enable": None, "quant_dumpable": None, "input_fusion_size": 131072,
    "compile_dynamic_mode": None, "graph_max_parallel_model_num": 1,
    "graph_compiler_cache_dir": None, "oo_constant_folding": None, "export_compile_stat": 1,
    "atomic_clean_policy": 0, "graph_slice": None, "enable_graph_parallel": None,
    "graph_parallel_option_path": None, "oo_level": None,
}
RUN_CONFIG_ARGS = ("model_dir", "tf_random_seed", "save_summary_steps", "save_checkpoints_steps",
                   "save_checkpoints_secs", "session_config", "keep_checkpoint_max",
                   "keep_checkpoint_every_n_hours", "log_step_count_steps", "distribute",
                   "train_distribute", "eval_distribute")
_ONE_OF = {
    "op_select_implmode": ("high_precision", "high_performance", "high_precision_for_all",
                           "high_performance_for_all"),
    "buffer_optimize": ("l2_optimize", "off_optimize"),
    "dynamic_graph_execute_mode": ("dynamic_execute", "lazy_recompile"),
    "aoe_mode": ("1", "2", "3", "4", "5"),
    "graph_run_mode": (0, 1),
    "op_debug_level": (0, 1, 2, 3, 4),
    "enable_small_channel": (0, 1),
    "variable_placement": ("Device", "Host"),
}
_BOOLS = ("enable_data_pre_proc", "enable_reduce_precision", "variable_format_optimize",
          "mix_compile_mode", "hcom_parallel", "is_tailing_optimization", "horovod_mode",
          "enable_compress_weight", "hcom_multi_mode", "dynamic_input", "external_weight",
          "frozen_variable")
_CPU_HONOURED = ("iterations_per_loop", "precision_mode", "modify_mixlist")


def _check_options(options):
    iterations = options["iterations_per_loop"]
    if isinstance(iterations, bool) or not isinstance(iterations, numbers.Integral) \
            or iterations < 1:
        raise ValueError("iterations_per_loop must be an int >= 1; got %r" % (iterations,))
    for name in _BOOLS:
        if not isinstance(options[name], bool):
            raise TypeError("%s must be True or False; got %r" % (name, options[name]))
    for name, accepted in _ONE_OF.items():
        value = options[name]
        if value is not None and value not in accepted:
            raise ValueError("%s must be one of %s (or None); got %r"
                             % (name, ", ".join(repr(a) for a in accepted), value))
    if options["mix_compile_mode"] and iterations != 1:
        raise ValueError("iterations_per_loop must be 1 when mix_compile_mode is True; got %r"
                         % iterations)
    if options["precision_mode"] is not None:
        options["precision_mode"] = _precision.check_precision_mode(options["precision_mode"])
    if options["modify_mixlist"] is not None:
        mixlist = options["modify_mixlist"]
        if not isinstance(mixlist, (str, os.PathLike)):
            raise TypeError("modify_mixlist must be the path of a JSON file (str) or None; got %r"
                            % (mixlist,))
        options["modify_mixlist"] = os.fspath(mixlist)
    for name, cls in (("dump_config", DumpConfig), ("profiling_config", ProfilingConfig),
                      ("dynamic_input_config", DynamicInputConfig)):
        if options[name] is not None and not isinstance(options[name], cls):
            raise TypeError("%s must be a %s or None; got %r" % (name, cls.__name__,
                                                                  options[name]))
    exception_dump = options["enable_exception_dump"]
    if isinstance(exception_dump, bool) or not isinstance(exception_dump, numbers.Integral) \
            or exception_dump < 0:
        raise ValueError("enable_exception_dump must be an int >= 0; got %r" % (exception_dump,))


def npu_session_config(session_config, options):
    """``session_config`` (copied, or a new ConfigProto) with the NpuOptimizer custom optimizer
    and its ``parameter_map`` holding the options the CPU emulation honours."""
    from tensorflow.core.protobuf import config_pb2  # pylint: disable=import-outside-toplevel
    config = config_pb2.ConfigProto()
    if session_config is not None:
        config.CopyFrom(session_config)
    custom = None
    for optimizer in config.graph_options.rewrite_options.custom_optimizers:
        if optimizer.name == "NpuOptimizer":
            custom = optimizer
    if custom is None:
        custom = config.graph_options.rewrite_options.custom_optimizers.add()
        custom.name = "NpuOptimizer"
    custom.parameter_map["iterations_per_loop"].i = int(options["iterations_per_loop"])
    if options.get("precision_mode"):
        custom.parameter_map["precision_mode"].s = options["precision_mode"].encode()
    if options.get("modify_mixlist"):
        custom.parameter_map["modify_mixlist"].s = options["modify_mixlist"].encode()
    config.allow_soft_placement = True
    return config


_classes = {}


def _run_config_class():
    if "NPURunConfig" in _classes:
        return _classes["NPURunConfig"]
    run_config_base = _estimator.estimator_lib().RunConfig

    class NPURunConfig(run_config_base):
        """TensorFlow's Estimator RunConfig with the Ascend device options (see the module)."""

        def __init__(self, **kwargs):
            unknown = sorted(set(kwargs) - set(NPU_OPTION_DEFAULTS) - set(RUN_CONFIG_ARGS))
            if unknown:
                raise TypeError("NPURunConfig got unknown option(s) %s; accepted: the RunConfig "
                                "arguments %s and the device options %s"
                                % (", ".join(unknown), ", ".join(RUN_CONFIG_ARGS),
                                   ", ".join(sorted(NPU_OPTION_DEFAULTS))))
            options = dict(NPU_OPTION_DEFAULTS)
            options.update((k, v) for k, v in kwargs.items() if k in NPU_OPTION_DEFAULTS)
            _check_options(options)
            if options["aoe_mode"] is not None or os.getenv("AOE_MODE"):
                options["iterations_per_loop"] = 1  # tuning runs one step per call, as the device
            self.npu_options = {k: options[k] for k in kwargs if k in NPU_OPTION_DEFAULTS}
            self.iterations_per_loop = options["iterations_per_loop"]
            self.precision_mode = options["precision_mode"]
            self.mix_compile_mode = options["mix_compile_mode"]
            self.enable_data_pre_proc = options["enable_data_pre_proc"]
            self.is_tailing_optimization = options["is_tailing_optimization"]
            self.horovod_mode = options["horovod_mode"]
            self.graph_run_mode = options["graph_run_mode"]
            self.op_debug_level = options["op_debug_level"]
            self.enable_exception_dump = options["enable_exception_dump"]
            self._dump_config = options["dump_config"]
            self._profiling_config = options["profiling_config"]
            args = {k: kwargs[k] for k in RUN_CONFIG_ARGS if k in kwargs}
            args.setdefault("save_summary_steps", 0)
            if args.get("save_checkpoints_steps") is None \
                    and args.get("save_checkpoints_secs") is None:
                args["save_checkpoints_steps"] = 100
            distribute = args.pop("distribute", None)
            if distribute is not None:
                args.setdefault("train_distribute", distribute)
            args["session_config"] = npu_session_config(args.get("session_config"), options)
            if options["precision_mode"]:
                _precision.install_session_hook()
            super().__init__(**args)

        @property
        def dump_config(self):
            return self._dump_config

        @property
        def profiling_config(self):
            return self._profiling_config

    _classes["NPURunConfig"] = NPURunConfig
    return NPURunConfig


class _NPURunConfigWithoutEstimator:
    """NPURunConfig on a TensorFlow without the Estimator: importable, not constructible."""

    def __init__(self, *args, **kwargs):
        del args, kwargs
        _estimator.estimator_lib()  # raises the ImportError that says what is missing


NPURunConfig = _run_config_class() if _estimator.available() else _NPURunConfigWithoutEstimator
NPURunConfig.__name__ = "NPURunConfig"

# The star-import surface: the classes, and the modules the adapter's npu_config has at top level
# that scripts take from ``from npu_bridge.estimator.npu.npu_config import *`` (``time``,
# ``os``, ``json``); never ``tf``, which would replace the script's own.
__all__ = ["NPURunConfig", "ProfilingConfig", "DumpConfig", "DynamicInputConfig",
           "NpuExecutePlacement", "NPU_OPTION_DEFAULTS", "npu_session_config", "time", "os",
           "json"]
__getattr__ = _module_getattr(__name__, __all__)
