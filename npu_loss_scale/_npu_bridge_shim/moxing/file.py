"""Shim of ``moxing.file`` (``mox.file``) on local paths.

ModelArts documents each ``mox.file`` operation as the counterpart of a Python one; on local
paths this module does what that Python operation does:

=======================================================  ==========================================
``mox.file``                                             local behaviour
=======================================================  ==========================================
``copy(src_url, dst_url)``                               copies one file (``shutil.copyfile``); a
                                                         folder is refused (use ``copy_parallel``);
                                                         missing folders above ``dst_url`` are
                                                         created (uploads to OBS need none)
``copy_parallel(src_url, dst_url, file_list=None, ...)`` copies the *contents* of folder
                                                         ``src_url`` into ``dst_url`` (created if
                                                         missing, merged into if present, files
                                                         overwritten); ``file_list``: only these
                                                         paths, relative to ``src_url``;
                                                         ``threads``, ``is_processing``,
                                                         ``use_queue`` are checked and the copy is
                                                         sequential
``exists``, ``is_directory``, ``get_size``, ``stat``     ``os.path.exists``, ``os.path.isdir``,
                                                         ``os.path.getsize`` (``recursive=True``:
                                                         the total of a folder's files),
                                                         ``os.stat``
``list_directory(url, recursive=False, ...)``            ``os.listdir``, sorted; ``recursive=True``
                                                         lists everything below, as relative paths
``make_dirs``, ``mk_dir``                                ``os.makedirs`` (an existing folder is
                                                         fine), ``os.mkdir``
``remove(url, recursive=False)``                         ``os.remove``; ``recursive=True``:
                                                         ``shutil.rmtree`` for a folder
``rename``, ``glob``, ``walk``, ``scan_dir``             ``os.rename``, ``glob.glob`` (sorted),
                                                         ``os.walk``, ``os.scandir``
``File(url, mode)``, ``read``, ``write``, ``append``     ``open``; read a file, write (create or
                                                         overwrite), append
``shift('os', 'mox')`` / ``shift('mox', 'os')``          the documented one-line switch that makes
                                                         ``os``/``open``/``shutil``/``glob`` accept
                                                         OBS paths: here those functions refuse a
                                                         remote path with :class:`NotEmulatedError`
                                                         and do as before otherwise; undone by
                                                         ``shift('mox', 'os')``
=======================================================  ==========================================

Remote storage is not emulated: a path that is a URL (``obs://``, ``s3://``, ...) raises
:class:`NotEmulatedError` naming the function, the argument and the path. A path must be a
``str`` or ``os.PathLike``; other bad arguments raise ``TypeError``/``ValueError`` naming the
argument, the value and what is accepted. Any other ``mox.file`` name raises
:class:`NotEmulatedError` naming it.
"""
import builtins
import functools
import glob as _glob
import numbers
import os
import re
import shutil

from npu_bridge._shim import NotEmulatedError
from npu_bridge._shim import module_getattr as _module_getattr

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _path(func, arg, value):
    """``value`` as a local path string; a URL raises NotEmulatedError, a non-path TypeError."""
    if isinstance(value, (str, os.PathLike)) and not isinstance(value, bytes):
        path = os.fspath(value)
        if isinstance(path, str):
            if _URL.match(path):
                raise NotEmulatedError(
                    "moxing.file.%s: %s=%r is a remote URL (OBS, S3, ...); remote storage is not "
                    "emulated on CPU by npu_loss_scale (python -m npu_loss_scale.emulate); "
                    "moxing.file works on local paths only: copy the data to a local folder and "
                    "pass that folder" % (func, arg, path), name="moxing.file")
            if not path:
                raise ValueError("moxing.file.%s: %s must be a non-empty path; got ''"
                                 % (func, arg))
            return path
    raise TypeError("moxing.file.%s: %s must be a path (str or os.PathLike); got %r (%s)"
                    % (func, arg, value, type(value).__name__))


def _flag(func, arg, value):
    if not isinstance(value, bool):
        raise TypeError("moxing.file.%s: %s must be True or False; got %r" % (func, arg, value))
    return value


# -- queries -------------------------------------------------------------------------------------------
def exists(url):
    """Whether ``url`` exists (``os.path.exists``)."""
    return os.path.exists(_path("exists", "url", url))


def is_directory(url):
    """Whether ``url`` is a folder (``os.path.isdir``)."""
    return os.path.isdir(_path("is_directory", "url", url))


def get_size(url, recursive=False):
    """Size in bytes of a file; with ``recursive=True``, of all files below a folder."""
    path = _path("get_size", "url", url)
    _flag("get_size", "recursive", recursive)
    if os.path.isdir(path):
        if not recursive:
            raise IsADirectoryError("moxing.file.get_size: url=%r is a folder; pass "
                                    "recursive=True for the total size of its files" % path)
        return sum(os.path.getsize(os.path.join(top, name))
                   for top, _, names in os.walk(path) for name in names)
    return os.path.getsize(path)


def stat(url):
    """``os.stat`` of ``url``."""
    return os.stat(_path("stat", "url", url))


def list_directory(url, recursive=False, remove_sep=False, skip_file=False, skip_dir=False):
    """Names in folder ``url`` (``os.listdir``), sorted; ``recursive=True``: every file and
    folder below it as a path relative to ``url`` ('/'-separated). ``skip_file``/``skip_dir``
    leave files/folders out; ``remove_sep`` concerns OBS keys and changes nothing locally."""
    path = _path("list_directory", "url", url)
    for arg, value in (("recursive", recursive), ("remove_sep", remove_sep),
                       ("skip_file", skip_file), ("skip_dir", skip_dir)):
        _flag("list_directory", arg, value)
    if not os.path.isdir(path):
        raise NotADirectoryError("moxing.file.list_directory: url=%r is not a folder%s"
                                 % (path, "" if os.path.exists(path) else " (it does not exist)"))
    entries = []
    if recursive:
        for top, dirs, files in os.walk(path):
            rel = os.path.relpath(top, path)
            prefix = "" if rel == os.curdir else rel.replace(os.sep, "/") + "/"
            entries += [(prefix + d, True) for d in dirs] + [(prefix + f, False) for f in files]
    else:
        entries = [(name, os.path.isdir(os.path.join(path, name))) for name in os.listdir(path)]
    return sorted(name for name, is_dir in entries
                  if not (is_dir and skip_dir) and not (not is_dir and skip_file))


def glob(url):
    """Paths matching the pattern ``url`` (``glob.glob``), sorted."""
    return sorted(_ORIGINAL["glob.glob"](_path("glob", "url", url)))


def walk(url, topdown=True, onerror=None):
    """``os.walk`` of ``url``."""
    _flag("walk", "topdown", topdown)
    return _ORIGINAL["os.walk"](_path("walk", "url", url), topdown=topdown, onerror=onerror)


def scan_dir(url):
    """``os.scandir`` of ``url``."""
    return _ORIGINAL["os.scandir"](_path("scan_dir", "url", url))


# -- changes ------------------------------------------------------------------------------------------
def make_dirs(url):
    """Creates folder ``url`` and any missing parents; an existing folder is fine."""
    os.makedirs(_path("make_dirs", "url", url), exist_ok=True)


def mk_dir(url):
    """Creates folder ``url`` (``os.mkdir``: its parent must exist)."""
    _ORIGINAL["os.mkdir"](_path("mk_dir", "url", url))


def remove(url, recursive=False):
    """Removes file ``url``; a folder needs ``recursive=True`` and goes with all it holds."""
    path = _path("remove", "url", url)
    _flag("remove", "recursive", recursive)
    if os.path.isdir(path) and not os.path.islink(path):
        if not recursive:
            raise IsADirectoryError("moxing.file.remove: url=%r is a folder; pass recursive=True "
                                    "to remove it and everything in it" % path)
        _ORIGINAL["shutil.rmtree"](path)
    else:
        _ORIGINAL["os.remove"](path)


def rename(src_url, dst_url):
    """Moves file or folder ``src_url`` to ``dst_url`` (``os.rename``)."""
    _ORIGINAL["os.rename"](_path("rename", "src_url", src_url),
                           _path("rename", "dst_url", dst_url))


def _make_parent(path):
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)


def copy(src_url, dst_url, **kwargs):
    """Copies one file to the file path ``dst_url`` (overwritten if present)."""
    src = _path("copy", "src_url", src_url)
    dst = _path("copy", "dst_url", dst_url)
    _no_options("copy", kwargs, ("client_id",))
    if os.path.isdir(src):
        raise IsADirectoryError("moxing.file.copy copies one file; src_url=%r is a folder: use "
                                "moxing.file.copy_parallel(src_url, dst_url) for folders" % src)
    if not os.path.exists(src):
        raise FileNotFoundError("moxing.file.copy: src_url=%r does not exist" % src)
    if os.path.isdir(dst):
        raise IsADirectoryError("moxing.file.copy: dst_url=%r is a folder; dst_url is the path of "
                                "the copy (for example %r)"
                                % (dst, os.path.join(dst, os.path.basename(src))))
    _make_parent(dst)
    _ORIGINAL["shutil.copyfile"](src, dst)


def _no_options(func, kwargs, accepted):
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise TypeError("moxing.file.%s got unexpected keyword argument(s) %s; accepted: %s"
                        % (func, ", ".join(unknown), ", ".join(accepted)))


def _relative_file(src, index, item):
    if not isinstance(item, str):
        raise TypeError("moxing.file.copy_parallel: file_list[%d] must be a str path relative "
                        "to src_url; got %r" % (index, item))
    if not item or os.path.isabs(item) or os.pardir in item.replace("\\", "/").split("/"):
        raise ValueError("moxing.file.copy_parallel: file_list[%d]=%r must be a path relative to "
                         "src_url inside it (not absolute, no '..')" % (index, item))
    full = os.path.join(src, item)
    if not os.path.isfile(full):
        raise FileNotFoundError("moxing.file.copy_parallel: file_list[%d]=%r is not a file in "
                                "src_url=%r" % (index, item, src))
    return item


def copy_parallel(src_url, dst_url, file_list=None, threads=16, is_processing=True,
                  use_queue=True, **kwargs):
    """Copies everything in folder ``src_url`` into folder ``dst_url`` (created if missing;
    existing files there are overwritten, others kept); ``file_list``: only these files, given
    relative to ``src_url``. Locally the copy is sequential; the parallelism options are
    checked only."""
    func = "copy_parallel"
    src = _path(func, "src_url", src_url)
    dst = _path(func, "dst_url", dst_url)
    _no_options(func, kwargs, ("client_id",))
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 0:
        raise ValueError("moxing.file.copy_parallel: threads must be an int >= 0; got %r"
                         % (threads,))
    _flag(func, "is_processing", is_processing)
    _flag(func, "use_queue", use_queue)
    if not os.path.isdir(src):
        raise NotADirectoryError(
            "moxing.file.copy_parallel copies a folder; src_url=%r is %s: use "
            "moxing.file.copy(src_url, dst_url) for one file"
            % (src, "a file" if os.path.exists(src) else "missing"))
    src_real, dst_real = os.path.realpath(src), os.path.realpath(dst)
    if dst_real == src_real or dst_real.startswith(src_real.rstrip(os.sep) + os.sep):
        raise ValueError("moxing.file.copy_parallel: dst_url=%r is src_url=%r or inside it"
                         % (dst, src))
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise NotADirectoryError("moxing.file.copy_parallel: dst_url=%r is a file, not a folder"
                                 % dst)
    if file_list is None:   # every file and folder (walked: Python 3.7 has no dirs_exist_ok)
        items = []
        for root, folders, files in os.walk(src, followlinks=True):
            here = os.path.relpath(root, src)
            for folder in folders:
                os.makedirs(os.path.join(dst, here, folder), exist_ok=True)
            items += [os.path.normpath(os.path.join(here, name)) for name in files]
    elif isinstance(file_list, (str, bytes)) or not isinstance(file_list, (list, tuple)):
        raise TypeError("moxing.file.copy_parallel: file_list must be a list of paths relative "
                        "to src_url, or None; got %r" % (file_list,))
    else:
        items = [_relative_file(src, i, item) for i, item in enumerate(file_list)]
    os.makedirs(dst, exist_ok=True)
    for item in items:
        target = os.path.join(dst, item)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(src, item), target)


# -- file objects ------------------------------------------------------------------------------------
def File(url, mode="r", *args, **kwargs):  # pylint: disable=invalid-name,keyword-arg-before-vararg
    """A file object for ``url`` (``open(url, mode, ...)``)."""
    if not isinstance(mode, str):
        raise TypeError("moxing.file.File: mode must be a str such as 'r', 'rb', 'w', 'a'; got %r"
                        % (mode,))
    return _ORIGINAL["builtins.open"](_path("File", "url", url), mode, *args, **kwargs)


def read(url, binary=False):
    """The content of file ``url``: str, or bytes with ``binary=True``."""
    path = _path("read", "url", url)
    _flag("read", "binary", binary)
    with File(path, "rb" if binary else "r") as handle:
        return handle.read()


def _write(func, url, content, binary, mode):
    path = _path(func, "url", url)
    _flag(func, "binary", binary)
    want = bytes if binary else str
    if not isinstance(content, want):
        raise TypeError("moxing.file.%s: content must be %s with binary=%s; got %s"
                        % (func, want.__name__, binary, type(content).__name__))
    with File(path, mode + ("b" if binary else "")) as handle:
        handle.write(content)


def write(url, content, binary=False):
    """Writes ``content`` to file ``url`` (created, or overwritten if present)."""
    _write("write", url, content, binary, "w")


def append(url, content, binary=False):
    """Appends ``content`` to file ``url`` (created if missing)."""
    _write("append", url, content, binary, "a")


# -- shift: the one-line switch of os/open to mox.file ------------------------------------------------
_TARGETS = {  # what the documented switch maps, as (module, attribute)
    "os.listdir": (os, "listdir"), "os.makedirs": (os, "makedirs"), "os.mkdir": (os, "mkdir"),
    "os.path.exists": (os.path, "exists"), "os.path.getsize": (os.path, "getsize"),
    "os.path.isdir": (os.path, "isdir"), "os.remove": (os, "remove"),
    "os.rename": (os, "rename"), "os.scandir": (os, "scandir"), "os.stat": (os, "stat"),
    "os.walk": (os, "walk"), "builtins.open": (builtins, "open"),
    "shutil.copyfile": (shutil, "copyfile"), "shutil.copytree": (shutil, "copytree"),
    "shutil.rmtree": (shutil, "rmtree"), "glob.glob": (_glob, "glob"),
}
_ORIGINAL = {name: getattr(module, attr) for name, (module, attr) in _TARGETS.items()}
_shifted = []


def _guarded(name, original):
    @functools.wraps(original)
    def call(*args, **kwargs):
        # the path arguments of every mapped function come first (or by keyword)
        for value in list(args[:2]) + list(kwargs.values()):
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if isinstance(value, os.PathLike):
                value = os.fspath(value)
            if isinstance(value, str) and _URL.match(value):
                raise NotEmulatedError(
                    "%s(%r) after moxing.file.shift('os', 'mox'): remote storage is not "
                    "emulated on CPU by npu_loss_scale (python -m npu_loss_scale.emulate); only "
                    "local paths work" % (name, value), name="moxing.file")
        return original(*args, **kwargs)
    call.__npu_loss_scale_shift__ = True
    return call


def shift(src, dst):
    """``shift('os', 'mox')``: ``os``/``open``/``shutil``/``glob`` functions take the ``mox.file``
    behaviour (here: refuse remote paths, else unchanged); ``shift('mox', 'os')`` undoes it."""
    pair = (src, dst)
    if pair == ("os", "mox"):
        if not _shifted:
            for name, (module, attr) in _TARGETS.items():
                setattr(module, attr, _guarded(name, _ORIGINAL[name]))
            _shifted.append(True)
        return
    if pair == ("mox", "os"):
        _unshift()
        return
    raise ValueError("moxing.file.shift: accepted are shift('os', 'mox') and shift('mox', 'os'); "
                     "got shift(%r, %r)" % (src, dst))


def _unshift():
    if _shifted:
        for name, (module, attr) in _TARGETS.items():
            if getattr(getattr(module, attr), "__npu_loss_scale_shift__", False):
                setattr(module, attr, _ORIGINAL[name])
        _shifted.clear()


__npu_loss_scale_uninstall__ = _unshift  # called by emulate.uninstall_shim

__all__ = ["exists", "is_directory", "get_size", "stat", "list_directory", "glob", "walk",
           "scan_dir", "make_dirs", "mk_dir", "remove", "rename", "copy", "copy_parallel", "File",
           "read", "write", "append", "shift"]
__getattr__ = _module_getattr(__name__, __all__)
