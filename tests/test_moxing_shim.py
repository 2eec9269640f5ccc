"""The emulator's moxing shim (ModelArts' mox.file) on local paths: each operation does what
ModelArts documents for it, expected results written out here from the files the test makes;
remote paths (OBS/S3 URLs) and anything not emulated raise errors naming them; bad arguments
name the argument; the shim is importable only under the emulator."""
import builtins
import glob as glob_module
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tf_versions import tf2_only

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


@pytest.fixture
def mox(npu_shim, tmp_path, monkeypatch):  # pylint: disable=unused-argument
    import moxing  # pylint: disable=import-outside-toplevel
    monkeypatch.chdir(tmp_path)
    return moxing


@pytest.fixture
def not_emulated(npu_shim):  # pylint: disable=unused-argument
    from npu_bridge._shim import NotEmulatedError  # pylint: disable=import-outside-toplevel
    return NotEmulatedError


def _tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def _contents(root):
    """{relative path: text} of every file below root, and the set of folders."""
    files, dirs = {}, set()
    for top, subdirs, names in os.walk(root):
        rel = os.path.relpath(top, root)
        dirs |= {os.path.normpath(os.path.join(rel, d)) for d in subdirs}
        for name in names:
            with open(os.path.join(top, name), encoding="utf-8") as handle:
                files[os.path.normpath(os.path.join(rel, name))] = handle.read()
    return files, dirs


DATA = {"train/0.rec": "zero", "train/1.rec": "one!", "labels.txt": "a b c",
        "deep/er/x.bin": "xx"}


# -- copies -----------------------------------------------------------------------------------------
def test_copy_parallel_copies_the_folder_contents_into_dst_merging_and_overwriting(mox):
    _tree("obs_data", DATA)
    os.makedirs("obs_data/empty")
    _tree("cache", {"kept.txt": "mine", "labels.txt": "old"})
    mox.file.copy_parallel("obs_data", "cache")
    files, dirs = _contents("cache")
    want = {os.path.normpath(k): v for k, v in DATA.items()}
    want["kept.txt"] = "mine"  # files of dst that src lacks stay
    assert files == want  # contents land in dst itself (not dst/obs_data), labels overwritten
    assert "empty" in dirs
    mox.file.copy_parallel(src_url="obs_data", dst_url="new/a/b")  # dst and its parents created
    assert _contents("new/a/b")[0] == {os.path.normpath(k): v for k, v in DATA.items()}


def test_copy_parallel_file_list_copies_only_those_relative_paths(mox):
    _tree("ckpt", {"model-7.index": "i", "model-7.data": "d", "model-6.index": "old",
                   "sub/events": "e"})
    mox.file.copy_parallel("ckpt", "up", file_list=["model-7.index", "model-7.data", "sub/events"])
    assert _contents("up")[0] == {"model-7.index": "i", "model-7.data": "d",
                                  os.path.join("sub", "events"): "e"}
    with pytest.raises(ValueError, match=r"file_list\[0\]='/etc/passwd' must be a path relative"):
        mox.file.copy_parallel("ckpt", "up", file_list=["/etc/passwd"])
    with pytest.raises(ValueError, match=r"file_list\[1\]='\.\./x' must be a path relative"):
        mox.file.copy_parallel("ckpt", "up", file_list=["model-7.data", "../x"])
    with pytest.raises(FileNotFoundError, match=r"file_list\[0\]='model-9\.index' is not a file"):
        mox.file.copy_parallel("ckpt", "up", file_list=["model-9.index"])
    with pytest.raises(TypeError, match="file_list must be a list of paths .* got 'model-7.data'"):
        mox.file.copy_parallel("ckpt", "up", file_list="model-7.data")


def test_copy_parallel_refuses_a_file_a_missing_folder_and_a_dst_inside_src(mox):
    _tree("d", {"f.txt": "f"})
    with pytest.raises(NotADirectoryError, match=r"src_url='d/f\.txt' is a file: use "
                                                 r"moxing\.file\.copy"):
        mox.file.copy_parallel("d/f.txt", "out")
    with pytest.raises(NotADirectoryError, match="src_url='nothing' is missing"):
        mox.file.copy_parallel("nothing", "out")
    with pytest.raises(ValueError, match="dst_url='d/inner' is src_url='d' or inside it"):
        mox.file.copy_parallel("d", "d/inner")
    for arg, value, match in (("threads", -1, "threads must be an int >= 0; got -1"),
                              ("threads", "8", "threads must be an int >= 0; got '8'"),
                              ("is_processing", 0, "is_processing must be True or False; got 0"),
                              ("use_queue", None, "use_queue must be True or False; got None")):
        with pytest.raises((TypeError, ValueError), match=match):
            mox.file.copy_parallel("d", "out", **{arg: value})
    mox.file.copy_parallel("d", "out", threads=0, is_processing=False)  # the documented remedy
    assert _contents("out")[0] == {"f.txt": "f"}


def test_copy_copies_one_file_to_the_given_path_creating_its_folders(mox):
    _tree("src", {"dataset.zip": "zipped"})
    mox.file.copy(src_url="src/dataset.zip", dst_url="cache/data/dataset.zip")
    mox.file.copy("src/dataset.zip", "copy.zip")
    _tree(".", {"copy.zip": "stale"})
    mox.file.copy("src/dataset.zip", "copy.zip")  # overwritten
    assert _contents("cache")[0] == {os.path.join("data", "dataset.zip"): "zipped"}
    with open("copy.zip", encoding="utf-8") as handle:
        assert handle.read() == "zipped"
    with pytest.raises(IsADirectoryError, match="src_url='src' is a folder: use "
                                                r"moxing\.file\.copy_parallel"):
        mox.file.copy("src", "elsewhere")
    with pytest.raises(IsADirectoryError, match="dst_url='cache' is a folder; dst_url is the path"):
        mox.file.copy("src/dataset.zip", "cache")
    with pytest.raises(FileNotFoundError, match="src_url='src/none.zip' does not exist"):
        mox.file.copy("src/none.zip", "x.zip")


# -- queries and changes ----------------------------------------------------------------------------
def test_exists_is_directory_get_size_and_list_directory(mox):
    _tree("d", DATA)
    assert mox.file.exists("d/labels.txt") and mox.file.exists("d") and not mox.file.exists("e")
    assert mox.file.is_directory("d/train") and not mox.file.is_directory("d/labels.txt")
    assert mox.file.get_size("d/labels.txt") == 5
    assert mox.file.get_size("d", recursive=True) == 4 + 4 + 5 + 2
    with pytest.raises(IsADirectoryError, match="url='d' is a folder; pass recursive=True"):
        mox.file.get_size("d")
    assert mox.file.list_directory("d") == ["deep", "labels.txt", "train"]  # like os.listdir
    assert mox.file.list_directory("d", recursive=True) == [
        "deep", "deep/er", "deep/er/x.bin", "labels.txt", "train", "train/0.rec", "train/1.rec"]
    assert mox.file.list_directory("d", recursive=True, skip_dir=True) == [
        "deep/er/x.bin", "labels.txt", "train/0.rec", "train/1.rec"]
    assert mox.file.list_directory("d", skip_file=True) == ["deep", "train"]
    with pytest.raises(NotADirectoryError, match=r"url='d/labels\.txt' is not a folder"):
        mox.file.list_directory("d/labels.txt")
    assert mox.file.glob("d/train/*.rec") == ["d/train/0.rec", "d/train/1.rec"]
    walked = {os.path.relpath(top, "d"): sorted(files) for top, _, files in mox.file.walk("d")}
    assert walked["train"] == ["0.rec", "1.rec"]
    assert sorted(e.name for e in mox.file.scan_dir("d")) == ["deep", "labels.txt", "train"]
    assert mox.file.stat("d/labels.txt").st_size == 5


def test_make_dirs_mk_dir_remove_and_rename(mox):
    mox.file.make_dirs("a/b/c")
    mox.file.make_dirs("a/b/c")  # an existing folder is fine
    assert os.path.isdir("a/b/c")
    mox.file.mk_dir("a/b/d")
    with pytest.raises(FileNotFoundError):
        mox.file.mk_dir("x/y")  # os.mkdir: the parent must exist
    with pytest.raises(FileExistsError):
        mox.file.mk_dir("a/b/d")
    _tree("a", {"f.txt": "f"})
    mox.file.rename("a/f.txt", "a/b/g.txt")
    assert os.path.isfile("a/b/g.txt") and not os.path.exists("a/f.txt")
    mox.file.remove("a/b/g.txt")
    assert not os.path.exists("a/b/g.txt")
    with pytest.raises(IsADirectoryError, match="url='a' is a folder; pass recursive=True"):
        mox.file.remove("a")
    mox.file.remove("a", recursive=True)
    assert not os.path.exists("a")


def test_file_read_write_append(mox):
    with pytest.raises(FileNotFoundError):
        mox.file.write("out/notes.txt", "Hello")  # as open(): the folder must exist
    os.makedirs("out")
    mox.file.write("out/notes.txt", "Hello")
    mox.file.append("out/notes.txt", " World!")
    assert mox.file.read("out/notes.txt") == "Hello World!"
    mox.file.write("out/notes.txt", "new")  # overwritten
    with mox.file.File("out/notes.txt", "r") as handle:
        assert handle.readlines() == ["new"]
    with mox.file.File("out/raw.bin", "wb") as handle:
        handle.write(b"\x00\x01")
    assert mox.file.read("out/raw.bin", binary=True) == b"\x00\x01"
    with pytest.raises(TypeError, match="content must be bytes with binary=True; got str"):
        mox.file.write("out/raw.bin", "text", binary=True)
    with pytest.raises(TypeError, match="binary must be True or False; got 'yes'"):
        mox.file.read("out/raw.bin", binary="yes")
    with pytest.raises(TypeError, match="mode must be a str .* got 1"):
        mox.file.File("out/raw.bin", 1)


def test_bad_paths_name_the_argument_the_value_and_what_is_accepted(mox):
    with pytest.raises(TypeError, match=r"moxing\.file\.exists: url must be a path \(str or "
                                        r"os\.PathLike\); got 3 \(int\)"):
        mox.file.exists(3)
    with pytest.raises(TypeError, match=r"copy_parallel: dst_url must be a path .* got None"):
        mox.file.copy_parallel(".", None)
    with pytest.raises(ValueError, match="make_dirs: url must be a non-empty path"):
        mox.file.make_dirs("")
    with pytest.raises(TypeError, match="list_directory: recursive must be True or False; "
                                        "got 'yes'"):
        mox.file.list_directory(".", recursive="yes")
    with pytest.raises(TypeError, match="copy got unexpected keyword argument.*overwrite"):
        mox.file.copy("a", "b", overwrite=True)


# -- remote paths and names that are not emulated ---------------------------------------------------
REMOTE_CALLS = [
    ("copy_parallel", lambda f, p: f.copy_parallel(p, "local"), "src_url"),
    ("copy_parallel", lambda f, p: f.copy_parallel(".", p), "dst_url"),
    ("copy", lambda f, p: f.copy(p, "local.txt"), "src_url"),
    ("copy", lambda f, p: f.copy("local.txt", p), "dst_url"),
    ("exists", lambda f, p: f.exists(p), "url"),
    ("list_directory", lambda f, p: f.list_directory(p), "url"),
    ("make_dirs", lambda f, p: f.make_dirs(p), "url"),
    ("mk_dir", lambda f, p: f.mk_dir(p), "url"),
    ("remove", lambda f, p: f.remove(p, recursive=True), "url"),
    ("rename", lambda f, p: f.rename("local.txt", p), "dst_url"),
    ("glob", lambda f, p: f.glob(p + "/*"), "url"),
    ("File", lambda f, p: f.File(p, "w"), "url"),
    ("write", lambda f, p: f.write(p, "x"), "url"),
    ("append", lambda f, p: f.append(p, "x"), "url"),
    ("read", lambda f, p: f.read(p), "url"),
    ("get_size", lambda f, p: f.get_size(p), "url"),
    ("is_directory", lambda f, p: f.is_directory(p), "url"),
]


@pytest.mark.parametrize("func,call,arg", REMOTE_CALLS)
@pytest.mark.parametrize("url", ["obs://bucket/job/output", "s3://bucket/data"])
def test_remote_paths_raise_not_emulated_and_touch_nothing(mox, not_emulated, func, call, arg,
                                                           url):
    _tree(".", {"local.txt": "l"})
    before = _contents(".")
    with pytest.raises(not_emulated, match=r"moxing\.file\.%s: %s='%s[^']*' is a remote URL "
                                           r".*remote storage is not emulated" % (func, arg, url)):
        call(mox.file, url)
    assert _contents(".") == before  # no local 'obs:' folder or file made instead


def test_other_names_and_moxing_tensorflow_are_named_as_not_emulated(mox, not_emulated):
    with pytest.raises(not_emulated, match=r"moxing\.file\.set_auth is not emulated.*provides: "
                                           r"File, append, copy, copy_parallel"):
        mox.file.set_auth(is_secure=False)
    with pytest.raises(not_emulated, match=r"moxing\.tensorflow \(ModelArts' MoXing training "
                                           r"framework.*is not emulated"):
        mox.tensorflow.run  # pylint: disable=pointless-statement
    with pytest.raises(ImportError, match=r"moxing\.tensorflow .*is not emulated"):
        exec("import moxing.tensorflow.executor.ops_adapter as ops_adapter", {})  # pylint: disable=exec-used
    with pytest.raises(ModuleNotFoundError, match=r"moxing\.framework is not emulated"):
        exec("from moxing.framework import file", {})  # pylint: disable=exec-used


# -- shift --------------------------------------------------------------------------------------------
def test_shift_makes_os_functions_refuse_remote_paths_and_shift_back_restores_them(mox,
                                                                                  not_emulated):
    originals = (os.listdir, os.path.exists, builtins.open, shutil.copytree, glob_module.glob)
    _tree("d", {"f.txt": "f"})
    mox.file.shift("os", "mox")
    mox.file.shift("os", "mox")  # a second call changes nothing
    try:
        with pytest.raises(not_emulated, match=r"os\.path\.exists\('obs://b/x'\) after "
                                               r"moxing\.file\.shift\('os', 'mox'\)"):
            os.path.exists("obs://b/x")
        with pytest.raises(not_emulated, match=r"builtins\.open\('s3://b/y'\)"):
            open("s3://b/y", encoding="utf-8")  # pylint: disable=consider-using-with
        with pytest.raises(not_emulated, match=r"shutil\.copytree\('obs://b/z'\)"):
            shutil.copytree(src="obs://b/z", dst="here")
        assert os.listdir("d") == ["f.txt"] and os.path.exists("d/f.txt")  # local: unchanged
        with open("d/f.txt", encoding="utf-8") as handle:
            assert handle.read() == "f"
    finally:
        mox.file.shift("mox", "os")
    assert (os.listdir, os.path.exists, builtins.open, shutil.copytree,
            glob_module.glob) == originals
    with pytest.raises(ValueError, match=r"accepted are shift\('os', 'mox'\) and "
                                         r"shift\('mox', 'os'\); got shift\('os', 'obs'\)"):
        mox.file.shift("os", "obs")


def test_uninstalling_the_shim_undoes_a_shift(npu_shim):  # pylint: disable=unused-argument
    from npu_loss_scale.cli import emulate  # pylint: disable=import-outside-toplevel
    import moxing  # pylint: disable=import-outside-toplevel
    listdir = os.listdir
    moxing.file.shift("os", "mox")
    assert os.listdir is not listdir
    emulate.uninstall_shim()
    assert os.listdir is listdir and "moxing" not in sys.modules
    emulate.install_shim()  # for the fixture's own teardown


# -- only under the emulator, and a script of the corpus's shape ------------------------------------
def test_moxing_is_only_importable_under_the_emulator_and_not_by_the_package():
    code = ("import sys, npu_loss_scale, npu_loss_scale.emulate\n"
            "assert 'moxing' not in sys.modules\n"
            "try:\n    import moxing\nexcept ModuleNotFoundError:\n    print('absent')\n")
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "absent"


MODELARTS_SCRIPT = """
    import argparse, json, os
    import numpy as np
    import tensorflow as tf
    import moxing as mox

    parser = argparse.ArgumentParser()
    parser.add_argument("--data_url")
    parser.add_argument("--train_url")
    args = parser.parse_args()

    local_data = os.path.abspath("cache/data")  # ModelArts scripts use /cache/...
    local_out = os.path.abspath("cache/out")
    mox.file.copy_parallel(src_url=args.data_url, dst_url=local_data)
    if not mox.file.exists(local_out):
        mox.file.make_dirs(local_out)
    x = np.load(os.path.join(local_data, "x.npy"))
    w = tf.Variable(tf.zeros([x.shape[1], 1]))
    opt = tf.keras.optimizers.SGD(0.1)
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
    tf.train.Checkpoint(w=w).write(os.path.join(local_out, "model"))
    mox.file.copy_parallel(local_out, args.train_url)
    print(json.dumps({"loss": float(loss), "listed": mox.file.list_directory(args.train_url)}))
"""


@pytest.mark.slow
@tf2_only
def test_a_modelarts_shaped_script_runs_on_local_paths_through_the_emulator(tmp_path):
    data = tmp_path / "bucket" / "data"
    data.mkdir(parents=True)
    import numpy as np  # pylint: disable=import-outside-toplevel
    np.save(str(data / "x.npy"), np.ones((8, 3), np.float32))
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(MODELARTS_SCRIPT))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("RANK_SIZE", None)
    out_dir = tmp_path / "bucket" / "output"
    run = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", str(script),
                          "--data_url", str(data), "--train_url", str(out_dir)], cwd=str(tmp_path),
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["loss"] < 1.0
    assert "model.index" in result["listed"] and (out_dir / "model.index").is_file()
    remote = subprocess.run([sys.executable, "-m", "npu_loss_scale.emulate", str(script),
                             "--data_url", "obs://bucket/data", "--train_url", str(out_dir)],
                            cwd=str(tmp_path), env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    assert remote.returncode != 0
    assert "src_url='obs://bucket/data' is a remote URL" in remote.stderr
