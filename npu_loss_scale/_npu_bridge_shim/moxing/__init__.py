"""CPU shim of Huawei ModelArts' MoXing (``import moxing as mox``), from npu-loss-scale.

Ascend's training scripts use ``mox.file`` to copy their data and checkpoints between OBS
object storage and the local disk of a ModelArts job. Under ``python -m npu_loss_scale.emulate``
this package stands in for it on local paths: ``mox.file`` does what ModelArts documents for each
operation (``copy``, ``copy_parallel``, ``exists``, ``list_directory``, ``make_dirs``,
``mk_dir``, ``remove``, ``rename``, ``glob``, ``File``, ``shift``, ...; see :mod:`moxing.file`).
A remote path (``obs://``, ``s3://`` or any other URL) raises :class:`NotEmulatedError`: remote
storage is not emulated. ``moxing.tensorflow`` (MoXing's training framework) and any other
name raise the same error naming them. A real ``moxing`` earlier on ``sys.path`` wins (the shim
folder is appended at the end).
"""
from npu_bridge._shim import NotEmulatedError  # noqa: F401
from npu_bridge._shim import module_getattr as _module_getattr

__npu_loss_scale_shim__ = True

from moxing import file  # noqa: E402  pylint: disable=wrong-import-position,redefined-builtin

__all__ = ["file"]
__getattr__ = _module_getattr(__name__, __all__, package=True)
