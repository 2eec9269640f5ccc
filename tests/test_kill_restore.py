"""Kill and restore: restarts from checkpoints are bit-identical; torn checkpoints never load.

The training job and the kill campaign are ``scripts/kill_restore.py``; these tests use it
in-process (restarts in fresh graphs and sessions, torn checkpoints made by hand) and run one
short campaign of SIGKILLed processes.
"""
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import kill_restore  # noqa: E402  pylint: disable=wrong-import-position
from tf_versions import tf2_only  # noqa: E402  pylint: disable=wrong-import-position

SEED = 3


def _quiet(_line):
    pass


class _Log:
    def __init__(self):
        self.lines = []

    def __call__(self, line):
        self.lines.append(line)


def _job(**kwargs):
    # op determinism stays off in the test process (it is global); the subprocess campaign
    # below turns it on like the script does
    return kill_restore.Job(SEED, deterministic=False, **kwargs)


def _same(a, b):
    return kill_restore.compare(a, b)


@pytest.fixture(scope="module")
def reference():
    """An uninterrupted 12-iteration run: its final state."""
    job = _job()
    job.train(os.path.join(_module_tmp(), "reference"), 12, 4, _quiet, restore=False)
    return job.snapshot()


_TMP = {}


def _module_tmp():
    if "dir" not in _TMP:
        import tempfile  # pylint: disable=import-outside-toplevel
        _TMP["dir"] = tempfile.mkdtemp(prefix="kill_restore_test_")
    return _TMP["dir"]


def teardown_module(module):  # pylint: disable=unused-argument
    if "dir" in _TMP:
        shutil.rmtree(_TMP["dir"], ignore_errors=True)


@pytest.fixture(scope="module")
def saved_run():
    """A directory with the checkpoints of iterations 4 and 8 (and the final state at 8)."""
    directory = os.path.join(_module_tmp(), "saved")
    job = _job()
    job.train(directory, 8, 4, _quiet, restore=False)
    return directory, job.snapshot()


def _copy(saved_run, tmp_path):
    directory, state = saved_run
    target = str(tmp_path / "ckpt")
    shutil.copytree(directory, target)
    return target, state


def _data_files(directory, step):
    return sorted(name for name in os.listdir(directory)
                  if name.startswith("model.ckpt-%d.data-" % step))


def test_the_job_skips_steps_and_changes_its_loss_scale(reference):
    # the premise of the other tests: overflows happen, are skipped and move the scale
    overflows = kill_restore.overflow_iterations(SEED, 12)
    assert overflows, "the seed must inject at least one overflow"
    assert int(reference["skipped_steps"]) == len(overflows)
    assert int(reference["global_step"]) == 12 - len(overflows)
    assert int(reference["iteration"]) == 12
    assert float(reference["loss_scale_value"]) != 2.0 ** 12 or \
        int(reference["good_steps_value"]) > 0


def test_restarting_from_a_checkpoint_in_a_new_graph_is_bit_identical(reference, saved_run,
                                                                      tmp_path):
    directory, _ = _copy(saved_run, tmp_path)
    job = _job()
    assert os.path.basename(job.train(directory, 12, 4, _quiet)) == "model.ckpt-8"
    assert _same(reference, job.snapshot()) == []


def test_without_checkpoint_skipped_steps_a_restart_loses_the_skipped_count(reference, saved_run,
                                                                            tmp_path):
    # the control: the comparison notices when state is not carried over
    directory, _ = _copy(saved_run, tmp_path)
    overflows = sorted(kill_restore.overflow_iterations(SEED, 12))
    job = _job(checkpoint_skipped_steps=False)
    job.train(directory, 12, 4, _quiet)
    snapshot = job.snapshot()
    assert [d.split(":")[0] for d in _same(reference, snapshot)] == ["skipped_steps"]
    assert int(snapshot["skipped_steps"]) == sum(1 for i in overflows if i >= 8)


def test_the_skipped_count_is_only_in_checkpoints_when_asked_for(tmp_path):
    def keys(flag):
        with tf.Graph().as_default():
            x = tf.compat.v1.get_variable("x", initializer=1.0, use_resource=True)
            opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                            nls.FixedLossScaleManager(8.0), backend="inf_nan",
                                            checkpoint_skipped_steps=flag)
            train = opt.minimize(x * x)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(train)
                path = tf.compat.v1.train.Saver().save(sess, str(tmp_path / ("c%d" % flag)))
        return sorted(name for name, _ in tf.train.list_variables(path))

    assert "skipped_steps_table-keys" not in keys(False)
    assert {"skipped_steps_table-keys", "skipped_steps_table-values"} <= set(keys(True))


def test_checkpoint_skipped_steps_must_be_a_bool():
    with pytest.raises(TypeError, match="checkpoint_skipped_steps must be True or False"):
        nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                  nls.FixedLossScaleManager(8.0), checkpoint_skipped_steps=1)


# -- torn checkpoints ---------------------------------------------------------------------------
def _restore(directory):
    job = _job()
    log = _Log()
    prefix = job.restore_latest(directory, log)
    return job, (os.path.basename(prefix) if prefix else None), log.lines


def _plain_restore_error(directory, prefix):
    """What TensorFlow's own Saver says about ``prefix`` (None if it restores)."""
    job = _job()
    with job.graph.as_default():
        try:
            job.saver.restore(job.sess, os.path.join(directory, prefix))
        except (tf.errors.OpError, ValueError) as err:
            return err
    return None


def test_an_intact_directory_restores_the_newest_checkpoint(saved_run, tmp_path):
    directory, state = _copy(saved_run, tmp_path)
    job, prefix, log = _restore(directory)
    assert prefix == "model.ckpt-8" and log == []
    assert _same(state, job.snapshot()) == []


def test_a_truncated_data_file_is_refused_and_the_previous_checkpoint_is_used(saved_run, tmp_path):
    directory, _ = _copy(saved_run, tmp_path)
    for name in _data_files(directory, 8):
        path = os.path.join(directory, name)
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size // 2)
    assert isinstance(_plain_restore_error(directory, "model.ckpt-8"), tf.errors.OpError)
    job, prefix, log = _restore(directory)
    assert prefix == "model.ckpt-4"
    assert len(log) == 1 and "model.ckpt-8" in log[0] and "the manifest says" in log[0]
    assert int(job.snapshot()["iteration"]) == 4


def test_a_flipped_bit_in_the_data_is_refused(saved_run, tmp_path):
    directory, _ = _copy(saved_run, tmp_path)
    path = os.path.join(directory, _data_files(directory, 8)[-1])
    with open(path, "r+b") as f:
        raw = bytearray(f.read())
        raw[len(raw) // 2] ^= 0x01
        f.seek(0)
        f.write(bytes(raw))
    # TensorFlow checks each tensor's CRC32C: its own Saver refuses it too
    assert isinstance(_plain_restore_error(directory, "model.ckpt-8"), tf.errors.DataLossError)
    _, prefix, log = _restore(directory)
    assert prefix == "model.ckpt-4" and "SHA-256" in log[0]


def test_a_missing_index_is_refused(saved_run, tmp_path):
    directory, _ = _copy(saved_run, tmp_path)
    os.remove(os.path.join(directory, "model.ckpt-8.index"))
    # TensorFlow's own Saver refuses it too
    assert "not a valid checkpoint" in str(_plain_restore_error(directory, "model.ckpt-8"))
    _, prefix, log = _restore(directory)
    assert prefix == "model.ckpt-4" and "model.ckpt-8.index is missing" in log[0]


def test_a_state_file_naming_a_missing_prefix_falls_back(saved_run, tmp_path):
    directory, _ = _copy(saved_run, tmp_path)
    tf.compat.v1.train.update_checkpoint_state(
        directory, "model.ckpt-12",
        all_model_checkpoint_paths=["model.ckpt-4", "model.ckpt-8", "model.ckpt-12"])
    # TensorFlow's own lookup gives up (a driver using it would start from scratch)
    assert tf.train.latest_checkpoint(directory) is None
    _, prefix, log = _restore(directory)
    assert prefix == "model.ckpt-8" and "no manifest" in log[0]


def test_a_save_killed_before_its_manifest_is_not_used(saved_run, tmp_path):
    # a kill between phase 1 (data and index in place) and phase 2, or a state file that got
    # ahead of the manifest: the files are complete, but nothing vouches for them
    directory, _ = _copy(saved_run, tmp_path)
    os.remove(os.path.join(directory, "model.ckpt-8" + kill_restore.MANIFEST_SUFFIX))
    # what a kill inside TensorFlow's write leaves: a temp directory with a partial shard
    temp = os.path.join(directory, "model.ckpt-12_temp")
    os.makedirs(temp)
    source = os.path.join(directory, _data_files(directory, 8)[0])
    with open(source, "rb") as f, \
            open(os.path.join(temp, "part-00000-of-00002.data-00000-of-00001"), "wb") as g:
        g.write(f.read()[:7])
    _, prefix, log = _restore(directory)
    assert prefix == "model.ckpt-4" and "no manifest" in log[0]


def test_with_no_valid_checkpoint_the_run_starts_from_the_initial_values(saved_run, tmp_path):
    directory, _ = _copy(saved_run, tmp_path)
    for step in (4, 8):
        os.remove(os.path.join(directory, "model.ckpt-%d.index" % step))
    job, prefix, log = _restore(directory)
    assert prefix is None and len(log) == 2
    assert int(job.snapshot()["iteration"]) == 0


def test_an_unreadable_state_file_falls_back_to_the_manifests(saved_run, tmp_path):
    directory, _ = _copy(saved_run, tmp_path)
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write("model_checkpoint_path: \"model.ck")     # torn text
    _, prefix, _ = _restore(directory)
    assert prefix == "model.ckpt-8"


# -- the campaign: real processes, real SIGKILLs --------------------------------------------------
@pytest.mark.slow
def test_a_run_killed_three_times_ends_bit_identical_to_an_uninterrupted_one(tmp_path):
    args = kill_restore.parse_args(["--steps", "16", "--every", "4", "--kills", "3",
                                    "--seed", str(SEED), "--pause-in-save", "0.3",
                                    "--hard-limit", "240", "--quiet"])
    result = kill_restore.check(args, str(tmp_path), log=_quiet)
    assert result["diffs"] == [] and result["status"] == 0
    kills = [k["kill"] for k in result["kills"]]
    assert len(kills) == 3
    assert any(k.startswith("after step") for k in kills), kills
    # two kills are aimed at saves; on a loaded machine one may land just after the save
    # instead, but at least one must hit a save in progress
    assert sum(k.startswith("in the save") for k in kills) >= 1, kills
    assert len(result["starts"]) == 4           # the first start and one restart per kill
    assert result["starts"][0] == (0, "initial")
    assert all(it > 0 for it, _ in result["starts"][2:]), result["starts"]
    assert int(result["reference"]["skipped_steps"]) > 0
    assert int(result["reference"]["iteration"]) == 16
    assert np.array_equal(result["reference"]["global_step"], result["restarted"]["global_step"])


@tf2_only
def test_an_object_based_checkpoint_carries_the_skipped_count_when_asked_for(tmp_path):
    def optimizer():
        return nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                         nls.FixedLossScaleManager(8.0), backend="inf_nan",
                                         checkpoint_skipped_steps=True)

    x = tf.Variable(1.0)
    opt = optimizer()
    opt.minimize(lambda: x * float("inf"))      # skipped
    opt.minimize(lambda: x * x)                 # applied
    assert int(opt.skipped_steps) == 1
    path = tf.train.Checkpoint(opt=opt, x=x).save(str(tmp_path / "c"))
    assert any("skipped_steps" in name for name, _ in tf.train.list_variables(path))
    restored = optimizer()
    x2 = tf.Variable(0.0)
    tf.train.Checkpoint(opt=restored, x=x2).restore(path).assert_existing_objects_matched()
    assert int(restored.skipped_steps) == 1 and float(x2) == float(x)
