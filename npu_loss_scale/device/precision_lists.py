"""The device's precision lists under a mixed ``precision_mode``: ``modify_mixlist`` and
``keep_dtype_scope``.

Under ``allow_mix_precision`` (and its ``_fp16`` / ``_bf16`` forms) the device lowers an op to
float16 by its op type's list: white (lowered), black (kept in float32) or gray (follows the op
upstream of it). A ``modify_mixlist`` JSON file moves op types between the lists::

    {"black-list": {"to-add": ["MatMulV2"], "to-remove": []},
     "white-list": {"to-add": ["Exp"]},
     "gray-list": {"to-remove": []}}

``to-add`` puts an op type into that list (out of the one it was in); ``to-remove`` takes it out
of that list, to the gray list. The names are the device's (Ascend IR) op types, which
:data:`ASCEND_TO_TF` maps to the TensorFlow op types the emulation rewrites (``MatMulV2`` is
TensorFlow's ``MatMul``); a name it does not know is taken as the TensorFlow op type of the same
name, with one :class:`ModifyMixlistWarning` naming it. In the emulation the white list is the
mode's op types (:data:`~npu_loss_scale.device.precision_rules.RULES`) and a gray op stays as
the script built it, as before, so a list changes exactly which op types are lowered: an op type
put on the black or gray list (or taken off the white list) is no longer lowered, one put on the
white list is. Other modes ignore the lists, as the device does.

Where a list comes from, first match wins: for a TF1 session, its config's ``NpuOptimizer``
``parameter_map["modify_mixlist"]`` (``NPURunConfig(modify_mixlist=...)`` puts it there); for
TF2 code, ``npu_device.global_options().modify_mixlist`` at ``open()``; then the process-wide
one of :func:`set_modify_mixlist` (``npu-emulate --modify-mixlist FILE``); then the file named by
the environment variable ``NPU_LOSS_SCALE_MODIFY_MIXLIST``.

``npu_scope.keep_dtype_scope()`` marks the ops built inside it with the node attribute
``_keep_dtype``, as the device's adapter does; :func:`keeps_dtype` tells the TF1 rewrite and the
TF2 op rounding to leave them as built, whatever the mode; ops run eagerly inside it (no node to
mark) are left alone too (:func:`keeping_dtype`).

Importing this module needs no TensorFlow.
"""
import contextlib
import json
import os
import threading
import warnings

from npu_loss_scale._internal.messages import NpuLossScaleWarning
from npu_loss_scale.device.precision_modes import PRECISION_MODES

__all__ = ["ASCEND_TO_TF", "ascend_op_type", "MIXLIST_MODES", "ENV_VAR", "ModifyMixlist",
           "ModifyMixlistWarning", "load_modify_mixlist", "set_modify_mixlist",
           "default_modify_mixlist", "modify_mixlist_of", "npu_parameter", "lowered_types",
           "keeps_dtype", "keeping_dtype", "keeping_dtype_now", "KEEP_DTYPE_ATTR"]

#: The modes that consult the lists (the others lower what they lower whatever a list says).
MIXLIST_MODES = ("allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16")
assert set(MIXLIST_MODES) <= set(PRECISION_MODES)

#: The environment variable naming a modify_mixlist file for the whole process (and its children).
ENV_VAR = "NPU_LOSS_SCALE_MODIFY_MIXLIST"
#: The node attribute ``keep_dtype_scope()`` sets.
KEEP_DTYPE_ATTR = "_keep_dtype"

_BATCH_MATMULS = ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_SAME_NAME = (
    "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3D", "Sub", "Mul", "RealDiv",
    "BiasAdd", "BiasAddGrad", "Relu", "ReluGrad", "Relu6", "Elu", "Selu", "Sigmoid",
    "SigmoidGrad", "Tanh", "TanhGrad", "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Pow", "Softplus",
    "MaxPool", "AvgPool", "AvgPoolGrad", "MaxPoolGrad", "SoftmaxCrossEntropyWithLogits",
)
#: Ascend IR op type -> the TensorFlow op types the emulation sees for it.
ASCEND_TO_TF = dict(
    [(name, (name,)) for name in _SAME_NAME]
    + [(name, _BATCH_MATMULS) for name in _BATCH_MATMULS]
    + [("MatMul", ("MatMul",)), ("MatMulV2", ("MatMul",)), ("MatMulV3", ("MatMul",)),
       ("Add", ("Add", "AddV2")), ("AddV2", ("AddV2",)),
       ("Conv3DBackpropInput", ("Conv3DBackpropInputV2",)),
       ("Conv3DBackpropFilter", ("Conv3DBackpropFilterV2",)),
       ("DepthwiseConv2D", ("DepthwiseConv2dNative",)),
       ("DepthwiseConv2DBackpropInput", ("DepthwiseConv2dNativeBackpropInput",)),
       ("DepthwiseConv2DBackpropFilter", ("DepthwiseConv2dNativeBackpropFilter",)),
       ("SoftmaxV2", ("Softmax",)), ("LogSoftmaxV2", ("LogSoftmax",)),
       ("ReduceSum", ("Sum",)), ("ReduceSumD", ("Sum",)),
       ("ReduceMean", ("Mean",)), ("ReduceMeanD", ("Mean",))])

# TensorFlow op type -> the Ascend IR name a modify_mixlist file gives it (where several IR names
# map to it, the one the device's adapter turns it into); the others are the same name
_TF_TO_ASCEND = {"MatMul": "MatMulV2", "Add": "Add", "AddV2": "AddV2"}
for _name, _types in ASCEND_TO_TF.items():
    for _tf_type in _types:
        if _tf_type != _name and _tf_type not in _TF_TO_ASCEND \
                and _tf_type not in ASCEND_TO_TF:
            _TF_TO_ASCEND[_tf_type] = _name


def ascend_op_type(tf_op_type):
    """The Ascend IR op type a modify_mixlist file names for the TensorFlow op type
    ``tf_op_type`` (``MatMul`` -> ``MatMulV2``, ``DepthwiseConv2dNative`` -> ``DepthwiseConv2D``;
    a type of the same name on both sides, or one the table does not know, as it is): what to
    write in a list to move ops of that type."""
    return _TF_TO_ASCEND.get(tf_op_type, tf_op_type)


_LISTS = ("black-list", "white-list", "gray-list")
_ACTIONS = ("to-add", "to-remove")


class ModifyMixlistWarning(NpuLossScaleWarning):
    """A modify_mixlist names an op type the emulation has no mapping for (it is taken as the
    TensorFlow op type of the same name)."""


_warned = set()
_warned_lock = threading.Lock()


def _tf_types(name):
    types = ASCEND_TO_TF.get(name)
    if types is not None:
        return types
    with _warned_lock:
        first = name not in _warned
        _warned.add(name)
    if first:
        warnings.warn("modify_mixlist names the op type %r, which the emulation does not know as "
                      "an Ascend IR op type; it is taken as the TensorFlow op type %r (known: %s)"
                      % (name, name, ", ".join(sorted(ASCEND_TO_TF))),
                      ModifyMixlistWarning, stacklevel=3)
    return (name,)


class ModifyMixlist:
    """One modify_mixlist, checked: ``changes[list][action]`` is a tuple of op type names
    (Ascend IR), ``source`` where it came from (a path, or ``"<dict>"``)."""

    def __init__(self, spec, source="<dict>", what="modify_mixlist"):
        self.source = source
        self.changes = _checked(spec, "%s: %s" % (what, "the dict" if source == "<dict>"
                                                   else "the file %r" % (source,)))

    def as_dict(self):
        """The list as its JSON file holds it (every list and action, empty ones included)."""
        return {lst: {act: list(self.changes[lst][act]) for act in _ACTIONS} for lst in _LISTS}

    def lowered(self, white):
        """The TensorFlow op types lowered when the white list is ``white`` (TensorFlow op
        types) before this list is applied."""
        white = set(white)
        for lst, act in (("black-list", "to-add"), ("gray-list", "to-add"),
                         ("white-list", "to-remove")):
            for name in self.changes[lst][act]:
                white.difference_update(_tf_types(name))
        for name in self.changes["white-list"]["to-add"]:
            white.update(_tf_types(name))
        for lst in ("black-list", "gray-list"):   # back to gray: not lowered, as before
            for name in self.changes[lst]["to-remove"]:
                _tf_types(name)
        return frozenset(white)

    def __eq__(self, other):
        return isinstance(other, ModifyMixlist) and self.changes == other.changes

    def __hash__(self):
        return hash(tuple(sorted((k, tuple(sorted(v.items()))) for k, v in self.changes.items())))

    def __repr__(self):
        return "ModifyMixlist(%r, source=%r)" % (self.as_dict(), self.source)


def _checked(spec, where):
    if not isinstance(spec, dict):
        raise ValueError("%s must hold a JSON object with the keys %s; got %s"
                         % (where, ", ".join(repr(k) for k in _LISTS), type(spec).__name__))
    unknown = sorted(set(spec) - set(_LISTS), key=str)
    if unknown:
        raise ValueError("%s has the key(s) %s; accepted keys: %s" % (
            where, ", ".join(repr(k) for k in unknown), ", ".join(repr(k) for k in _LISTS)))
    changes = {}
    for lst in _LISTS:
        entry = spec.get(lst, {})
        if not isinstance(entry, dict):
            raise ValueError('%s: "%s" must be an object with the keys "to-add" and/or '
                             '"to-remove"; got %r' % (where, lst, entry))
        bad = sorted(set(entry) - set(_ACTIONS), key=str)
        if bad:
            raise ValueError('%s: "%s" has the key(s) %s; accepted keys: "to-add", "to-remove"'
                             % (where, lst, ", ".join(repr(k) for k in bad)))
        changes[lst] = {}
        for act in _ACTIONS:
            names = entry.get(act, [])
            if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
                raise ValueError('%s: "%s" "%s" must be an array of op type names (non-empty '
                                 'strings such as "MatMulV2"); got %r' % (where, lst, act, names))
            changes[lst][act] = tuple(dict.fromkeys(names))
        both = sorted(set(changes[lst]["to-add"]) & set(changes[lst]["to-remove"]))
        if both:
            raise ValueError('%s: "%s" both adds and removes %s' % (where, lst, ", ".join(both)))
    added = {}
    for lst in _LISTS:
        for name in changes[lst]["to-add"]:
            if name in added:
                raise ValueError('%s: %r is added to both "%s" and "%s"; an op type is in one '
                                 'list' % (where, name, added[name], lst))
            added[name] = lst
    return changes


_file_cache = {}


def load_modify_mixlist(source, what="modify_mixlist"):
    """``source`` as a :class:`ModifyMixlist`: a path (str, bytes or path-like) to the JSON
    file, a dict of its shape, or a ModifyMixlist. A missing or unreadable file, one that is not
    JSON, or one of the wrong shape is a ValueError naming ``what``, the path and what is
    accepted. A file is read again only when it changed."""
    if isinstance(source, ModifyMixlist):
        return source
    if isinstance(source, dict):
        return ModifyMixlist(source, what=what)
    if isinstance(source, bytes):
        source = source.decode("utf-8", "replace")
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError("%s must be the path of a JSON file (str or path-like), a dict of its "
                        "shape or None; got %r" % (what, source))
    path = os.fspath(source)
    try:
        stat = os.stat(path)
    except OSError as err:
        raise ValueError("%s: cannot read the file %r (%s); it must be the path of a JSON file "
                         "with the keys black-list, white-list, gray-list"
                         % (what, path, err.strerror or err)) from None
    key = (os.path.abspath(path), stat.st_mtime_ns, stat.st_size)
    cached = _file_cache.get(key)
    if cached is not None:
        return cached
    try:
        with open(path, encoding="utf-8") as handle:
            spec = json.load(handle)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError("%s: the file %r is not JSON (%s); it must hold an object with the "
                         "keys black-list, white-list, gray-list" % (what, path, err)) from None
    result = ModifyMixlist(spec, source=path, what=what)
    _file_cache.clear()
    _file_cache[key] = result
    return result


_process_list = [None]


def set_modify_mixlist(mixlist):
    """Sets the modify_mixlist of the whole process: for TF1 sessions whose config names none
    and for TF2 code whose ``npu_device.global_options()`` names none (what
    ``npu-emulate --modify-mixlist FILE`` does). ``mixlist``: a JSON file's path, a dict of its
    shape, a :class:`ModifyMixlist`, or None to fall back to ``NPU_LOSS_SCALE_MODIFY_MIXLIST``.
    It is checked now (see :func:`load_modify_mixlist`) and returned as a ModifyMixlist (or
    None). TF2 ops already built keep their rounding; set it before ``npu_device.open()`` (or
    :func:`~npu_loss_scale.device.op_precision.install_op_precision`), as on the device."""
    value = None if mixlist is None else load_modify_mixlist(mixlist, "set_modify_mixlist")
    _process_list[0] = value
    return value


def default_modify_mixlist():
    """The process-wide list: :func:`set_modify_mixlist`'s, else the file named by
    ``NPU_LOSS_SCALE_MODIFY_MIXLIST``, else None."""
    if _process_list[0] is not None:
        return _process_list[0]
    path = os.environ.get(ENV_VAR)
    if not path:
        return None
    return load_modify_mixlist(path, "the environment variable %s" % ENV_VAR)


def npu_parameter(config, name):
    """The ``parameter_map[name]`` (an AttrValue) a session ``ConfigProto`` gives the
    ``NpuOptimizer`` custom optimizer, or None."""
    if config is None:
        return None
    try:
        custom = config.graph_options.rewrite_options.custom_optimizers
    except AttributeError:
        return None
    for optimizer in custom:
        if optimizer.name == "NpuOptimizer" and name in optimizer.parameter_map:
            return optimizer.parameter_map[name]
    return None


def modify_mixlist_of(config):
    """The modify_mixlist a session ``ConfigProto`` gives the ``NpuOptimizer`` (loaded), or
    None."""
    value = npu_parameter(config, "modify_mixlist")
    if value is None or not value.s:
        return None
    return load_modify_mixlist(value.s, 'parameter_map["modify_mixlist"]')


def lowered_types(mode, mode_types, mixlist):
    """The TensorFlow op types ``mode`` lowers, its own being ``mode_types``, with ``mixlist``
    (a :class:`ModifyMixlist` or None) applied when the mode consults the lists."""
    if mixlist is None or mode not in MIXLIST_MODES:
        return frozenset(mode_types)
    return mixlist.lowered(mode_types)


_keeping = threading.local()


@contextlib.contextmanager
def keeping_dtype():
    """Context manager: ops this thread runs eagerly inside (which have no node to mark) keep
    their dtype too; ``keep_dtype_scope()`` enters it beside marking the nodes it builds."""
    _keeping.depth = getattr(_keeping, "depth", 0) + 1
    try:
        yield
    finally:
        _keeping.depth -= 1


def keeping_dtype_now():
    """Whether this thread is inside :func:`keeping_dtype`."""
    return getattr(_keeping, "depth", 0) > 0


def keeps_dtype(op):
    """Whether ``op`` was built inside ``keep_dtype_scope()`` (its ``_keep_dtype`` attribute is
    set): the precision mode leaves it as built."""
    try:
        value = op.get_attr(KEEP_DTYPE_ATTR)
    except (ValueError, TypeError):
        return False
    return bool(value)
