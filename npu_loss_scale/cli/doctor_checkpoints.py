"""Each run of ``npu-loss-scale doctor`` starts where the script would start without the doctor:
never from a checkpoint an earlier run of the same doctor wrote.

The doctor runs the script several times with the same arguments; a script that resumes from a
folder named on its command line (an Estimator's ``model_dir``, a ``Saver`` restoring
``tf.train.latest_checkpoint``, ``MonitoredTrainingSession``, ``tf.train.CheckpointManager``)
would otherwise resume the second run from the first run's last checkpoint. Nothing of the user's
is moved or deleted. Inside each run (:mod:`npu_loss_scale.cli.doctor_run`):

* every checkpoint written through TensorFlow's checkpoint state (the ``checkpoint`` file that
  ``Saver.save``, ``Checkpoint.save`` and ``CheckpointManager.save`` update) is recorded;
* the checkpoint lookup (``get_checkpoint_state``, which ``latest_checkpoint``, Estimators,
  ``SessionManager`` and ``CheckpointManager`` use) leaves out the checkpoints earlier runs
  wrote, unless this run wrote the same prefix again; when nothing is left, the folder's state
  as the first run found it (the user's own checkpoints, before the doctor wrote any) is used.

The parent (:mod:`npu_loss_scale.cli.doctor`) passes what earlier runs wrote in each run's
config (``earlier_checkpoints``, ``checkpoint_states``) and collects each run's result keys
``checkpoints_written``, ``checkpoint_states`` and ``checkpoints_ignored``.
"""
import os

__all__ = ["install", "Ledger"]


def _norm(path):
    return os.path.normpath(os.path.abspath(path))


def _key(checkpoint_dir, latest_filename):
    return "%s|%s" % (_norm(checkpoint_dir), latest_filename or "checkpoint")


class Ledger:
    """The parent's account of the checkpoints its runs wrote, in the order of the runs."""

    def __init__(self):
        self.written = []   # {"prefix", "run"}
        self.states = {}    # folder key -> its paths before the doctor wrote there

    def config(self):
        """What a new run's config carries."""
        return {"earlier_checkpoints": list(self.written),
                "checkpoint_states": dict(self.states)}

    def add(self, name, result):
        """Takes in what the run ``name`` wrote and found."""
        known = {w["prefix"] for w in self.written}
        for prefix in result.get("checkpoints_written", []):
            if prefix not in known:
                self.written.append({"prefix": prefix, "run": name})
                known.add(prefix)
        for key, paths in (result.get("checkpoint_states") or {}).items():
            self.states.setdefault(key, paths)


def describe(ignored):
    """The outcome detail's words for the checkpoints a run left out."""
    if not ignored:
        return ""
    runs = {}
    for item in ignored:
        runs.setdefault(item["run"], []).append(os.path.basename(item["prefix"]))
    return "; started without the checkpoints of earlier runs of this doctor (%s)" % "; ".join(
        "%s run: %s" % (run, ", ".join(names)) for run, names in runs.items())


class _Filter:
    def __init__(self, rec, config):
        self.rec = rec
        self.earlier = {_norm(e["prefix"]): e["run"]
                        for e in config.get("earlier_checkpoints") or []}
        self.states = dict(config.get("checkpoint_states") or {})
        rec.checkpoints_written, rec.checkpoint_states, rec.checkpoints_ignored = [], {}, []

    def foreign(self, path):
        path = _norm(path)
        return path in self.earlier and path not in self.rec.checkpoints_written

    def note_written(self, model_checkpoint_path):
        path = _norm(model_checkpoint_path)   # a path as saved: absolute or from the cwd
        if path not in self.rec.checkpoints_written:
            self.rec.checkpoints_written.append(path)

    def _ignore(self, path):
        path = _norm(path)
        if all(i["prefix"] != path for i in self.rec.checkpoints_ignored):
            self.rec.checkpoints_ignored.append({"prefix": path, "run": self.earlier[path]})

    def state(self, ckpt, checkpoint_dir, latest_filename):
        """``ckpt`` (a CheckpointState or None) without the earlier runs' checkpoints."""
        if ckpt is None:
            return None
        key = _key(checkpoint_dir, latest_filename)
        paths = list(ckpt.all_model_checkpoint_paths) or [ckpt.model_checkpoint_path]
        if ckpt.model_checkpoint_path not in paths:
            paths.append(ckpt.model_checkpoint_path)
        kept = [p for p in paths if not self.foreign(p)]
        for path in paths:
            if self.foreign(path):
                self._ignore(path)
        mine = any(_norm(p) in self.rec.checkpoints_written for p in paths)
        if key not in self.states and key not in self.rec.checkpoint_states and not mine:
            self.rec.checkpoint_states[key] = [_norm(p) for p in kept]  # as the user left it
        if len(kept) == len(paths):
            return ckpt
        if not kept:
            kept = [p for p in self.states.get(key, []) if not self.foreign(p)]
        if not kept:
            return None
        stamps = dict(zip(ckpt.all_model_checkpoint_paths, ckpt.all_model_checkpoint_timestamps))
        del ckpt.all_model_checkpoint_paths[:]
        ckpt.all_model_checkpoint_paths.extend(kept)
        del ckpt.all_model_checkpoint_timestamps[:]   # CheckpointManager pairs the two lists
        if all(p in stamps for p in kept):
            ckpt.all_model_checkpoint_timestamps.extend(stamps[p] for p in kept)
        ckpt.model_checkpoint_path = kept[-1]
        return ckpt


def _module():
    try:
        from tensorflow.python.checkpoint import (  # pylint: disable=import-outside-toplevel
            checkpoint_management)
        if hasattr(checkpoint_management, "get_checkpoint_state"):
            return checkpoint_management
    except ImportError:
        pass
    from tensorflow.python.training import (  # pylint: disable=import-outside-toplevel
        checkpoint_management)
    return checkpoint_management


def install(rec, config):
    """Patches TensorFlow's checkpoint state for ``rec`` (a Recorder) and ``config`` (the run's)."""
    import sys  # pylint: disable=import-outside-toplevel
    module = _module()
    keep = _Filter(rec, config)
    get_state, update = module.get_checkpoint_state, module.update_checkpoint_state_internal

    def get_checkpoint_state(checkpoint_dir, latest_filename=None):
        return keep.state(get_state(checkpoint_dir, latest_filename), checkpoint_dir,
                          latest_filename)

    def update_checkpoint_state_internal(save_dir, model_checkpoint_path, *args, **kwargs):
        keep.note_written(model_checkpoint_path)
        return update(save_dir, model_checkpoint_path, *args, **kwargs)

    module.update_checkpoint_state_internal = update_checkpoint_state_internal
    for loaded in list(sys.modules.values()):  # the aliases (tf.train, saver's own name)
        try:   # the module's own dict: no lazy loading, no moved-module warning
            if vars(loaded).get("get_checkpoint_state") is get_state:
                loaded.get_checkpoint_state = get_checkpoint_state
        except TypeError:  # an object without __dict__ in sys.modules
            continue
