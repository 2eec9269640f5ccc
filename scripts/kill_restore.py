"""Kill and restore: a run SIGKILLed at random points ends bit-identical to an uninterrupted one.

A small seeded fp16 model trains with ``NPULossScaleOptimizer`` (emulation backend, overflows
injected at seeded iterations, so steps are skipped), a loss-scale manager
(``ExponentialUpdateLossScaleManager``, or Megatron's ``DynamicGradScaler`` with
``--manager megatron``), Adam inside a ``ParamGroupOptimizer`` driven by an
``OptimizerParamScheduler``, and saves a checkpoint every ``--every`` iterations with
``tf.compat.v1.train.Saver``. The batch of an iteration is a function of the seed and of the
checkpointed ``iteration`` counter only, so a restarted run sees the same data.

The parent process runs the job once uninterrupted (the reference), then runs it again as a
child that it kills with SIGKILL ``--kills`` times, each at a seeded random point - mid-step,
between the phases of a save, or while TensorFlow's temporary save files exist - restarting
it from its latest valid checkpoint each time, until the job completes. It then compares every
saved variable (model, Adam slots, loss scale and counters, scheduler state, ``global_step``,
``iteration``) and the skipped-step count of the two runs byte for byte (``numpy.tobytes``).

A save is three phases, each atomic on a POSIX file system:

1. ``Saver.save(..., write_state=False)``: TensorFlow writes the shards under a temporary
   ``<prefix>_temp`` directory and moves the merged ``.index`` / ``.data`` files into place;
2. a manifest ``<prefix>.manifest.json`` (sizes and SHA-256 of those files), written to a
   temporary name, synced and renamed;
3. the ``checkpoint`` state file (TensorFlow writes it to a temporary name and renames it).

A restart takes the checkpoints the state file lists, newest first, and uses the first one
whose manifest exists and matches the files and that the Saver restores without error; anything
else (a kill before phase 3, a truncated or altered data file, a missing index, a state file
naming a prefix that is gone) is rejected with the reason printed, and the previous checkpoint
is used. With no valid checkpoint the run starts from the initial values.

Usage::

    python scripts/kill_restore.py                       # the full run (README figures)
    python scripts/kill_restore.py --steps 40 --kills 3  # a short one
    python scripts/kill_restore.py --manager megatron

It prints one line per kill and restart, then ``bit-identical: yes`` (exit status 0) or the
variables that differ (exit status 1).
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MANIFEST_SUFFIX = ".manifest.json"
PREFIX_NAME = "model.ckpt"
KEEP = 3
DIN, HIDDEN, DOUT, BATCH = 8, 16, 4, 8


# -- checkpoint files (no TensorFlow needed) --------------------------------------------------
def checkpoint_files(prefix):
    """The data and index files of the checkpoint ``prefix`` (as found on disk)."""
    directory, base = os.path.split(prefix)
    names = []
    if os.path.isdir(directory):
        for name in sorted(os.listdir(directory)):
            if name == base + ".index" or name.startswith(base + ".data-"):
                names.append(name)
    return names


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _atomic_write(path, text):
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_manifest(prefix):
    """Records the size and SHA-256 of the checkpoint's files in ``<prefix>.manifest.json``."""
    directory = os.path.dirname(prefix)
    files = {}
    for name in checkpoint_files(prefix):
        path = os.path.join(directory, name)
        files[name] = {"size": os.path.getsize(path), "sha256": _sha256(path)}
    if not any(name.endswith(".index") for name in files):
        raise RuntimeError("checkpoint %s has no index file to record" % prefix)
    _atomic_write(prefix + MANIFEST_SUFFIX, json.dumps({"files": files}, sort_keys=True))


def verify_manifest(prefix):
    """None if the checkpoint's files are exactly those its manifest records, else why not."""
    path = prefix + MANIFEST_SUFFIX
    if not os.path.exists(path):
        return "no manifest (the save did not complete)"
    try:
        with open(path) as f:
            recorded = json.load(f)["files"]
    except (ValueError, KeyError, OSError) as err:
        return "unreadable manifest: %s" % err
    directory = os.path.dirname(prefix)
    present = set(checkpoint_files(prefix))
    for name, entry in sorted(recorded.items()):
        file_path = os.path.join(directory, name)
        if name not in present:
            return "%s is missing" % name
        size = os.path.getsize(file_path)
        if size != entry["size"]:
            return "%s has %d bytes, the manifest says %d" % (name, size, entry["size"])
        if _sha256(file_path) != entry["sha256"]:
            return "%s does not match its SHA-256 in the manifest" % name
    extra = present - set(recorded)
    if extra:
        return "files not in the manifest: %s" % ", ".join(sorted(extra))
    return None


def candidate_prefixes(ckpt_dir):
    """Checkpoint prefixes to try, newest first: those the state file lists, else (no state file,
    or an unreadable one) those with a manifest on disk."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    try:
        state = tf.train.get_checkpoint_state(ckpt_dir)
    except Exception as err:  # pylint: disable=broad-except  # a damaged state file
        print("kill_restore: unreadable checkpoint state file (%s); scanning manifests" % err,
              flush=True)
        state = None
    if state is not None:
        paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
        if state.model_checkpoint_path and state.model_checkpoint_path != paths[-1]:
            paths.append(state.model_checkpoint_path)
        paths = [p if os.path.isabs(p) else os.path.join(ckpt_dir, p) for p in paths]
        return list(reversed(paths))
    found = []
    if os.path.isdir(ckpt_dir):
        for name in os.listdir(ckpt_dir):
            if name.endswith(MANIFEST_SUFFIX):
                prefix = os.path.join(ckpt_dir, name[:-len(MANIFEST_SUFFIX)])
                found.append((int(prefix.rsplit("-", 1)[1]), prefix))
    return [prefix for _, prefix in sorted(found, reverse=True)]


# -- the training job -------------------------------------------------------------------------
def overflow_iterations(seed, steps, rate=0.15):
    rng = random.Random(seed * 7919 + 1)
    return {i for i in range(steps) if rng.random() < rate}


def batch(seed, iteration, overflow):
    import numpy as np  # pylint: disable=import-outside-toplevel
    rng = np.random.RandomState((seed * 100003 + iteration) % (2 ** 31))
    x = rng.uniform(-1.0, 1.0, (BATCH, DIN)).astype(np.float32)
    target = rng.uniform(-1.0, 1.0, (BATCH, DOUT)).astype(np.float32)
    if overflow:
        x = x * np.float32(1e5)   # the fp16 hidden layer saturates: the register is set
    return x, target


class Job:
    """The graph and session of one training process."""

    def __init__(self, seed, manager="exponential", *, checkpoint_skipped_steps=True,
                 deterministic=True, ballast_mb=0.0):
        os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")
        if deterministic:   # TensorFlow 1.15's switch (read at import); 2.9+ has a call as well
            os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
        import numpy as np  # pylint: disable=import-outside-toplevel
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        import npu_loss_scale as nls  # pylint: disable=import-outside-toplevel
        if deterministic and hasattr(tf.config.experimental, "enable_op_determinism"):
            tf.config.experimental.enable_op_determinism()
        self.tf = tf
        self.seed = seed
        self.graph = tf.Graph()
        rng = np.random.RandomState(seed)
        with self.graph.as_default():
            self.x = tf.compat.v1.placeholder(tf.float32, [BATCH, DIN], name="x")
            self.t = tf.compat.v1.placeholder(tf.float32, [BATCH, DOUT], name="t")
            w1 = tf.compat.v1.get_variable(
                "dense1/kernel", initializer=rng.normal(0, 0.4, (DIN, HIDDEN)).astype(np.float32),
                use_resource=True)
            b1 = tf.compat.v1.get_variable("dense1/bias", initializer=np.zeros(HIDDEN, np.float32),
                                           use_resource=True)
            w2 = tf.compat.v1.get_variable(
                "dense2/kernel", initializer=rng.normal(0, 0.4, (HIDDEN, DOUT)).astype(np.float32),
                use_resource=True)
            b2 = tf.compat.v1.get_variable("dense2/bias", initializer=np.zeros(DOUT, np.float32),
                                           use_resource=True)
            if ballast_mb > 0:
                # untrained state that makes a save take long enough to be killed inside
                tf.compat.v1.get_variable(
                    "ballast", shape=[int(ballast_mb * 2 ** 18)], dtype=tf.float32,
                    initializer=tf.compat.v1.constant_initializer(0.5), trainable=False,
                    use_resource=True)
            h16 = nls.saturate(tf.cast(tf.matmul(self.x, w1) + b1, tf.float16))
            h = tf.nn.relu(tf.cast(h16, tf.float32))
            y16 = nls.saturate(tf.cast(tf.matmul(h, w2) + b2, tf.float16))
            loss = tf.reduce_mean(tf.square(tf.cast(y16, tf.float32) - self.t))
            if manager == "exponential":
                self.manager = nls.ExponentialUpdateLossScaleManager(
                    init_loss_scale=2.0 ** 12, incr_every_n_steps=4, decr_every_n_nan_or_inf=1,
                    decr_ratio=0.5)
            elif manager == "megatron":
                self.manager = nls.DynamicGradScaler(
                    initial_scale=2.0 ** 12, min_scale=1.0, growth_factor=2.0,
                    backoff_factor=0.5, growth_interval=4, hysteresis=2)
            else:
                raise ValueError("manager must be 'exponential' or 'megatron'; got %r" % manager)
            groups = nls.ParamGroupOptimizer(
                lambda lr, group: tf.compat.v1.train.AdamOptimizer(lr),
                overrides=[("*bias", nls.ParamGroupOverride(wd_mult=0.0))])
            self.scheduler = nls.OptimizerParamScheduler(
                groups, init_lr=0.0, max_lr=0.02, min_lr=0.001, lr_warmup_steps=5,
                lr_decay_steps=60, lr_decay_style="cosine", start_wd=0.0, end_wd=0.01,
                wd_incr_steps=60, wd_incr_style="linear")
            self.opt = nls.NPULossScaleOptimizer(
                groups, self.manager, checkpoint_skipped_steps=checkpoint_skipped_steps)
            self.global_step = tf.compat.v1.train.get_or_create_global_step()
            self.train_op = self.opt.minimize(loss, global_step=self.global_step)
            self.iteration = tf.compat.v1.Variable(0, dtype=tf.int64, trainable=False,
                                                   name="iteration", use_resource=True)
            self.next_iteration = tf.compat.v1.placeholder(tf.int64, [], name="next_iteration")
            self.set_iteration = self.iteration.assign(self.next_iteration)
            self.skipped = self.opt.skipped_steps
            self.saver = tf.compat.v1.train.Saver(max_to_keep=None, sharded=True)
            self.init = tf.compat.v1.global_variables_initializer()
            self.variables = sorted(tf.compat.v1.global_variables(), key=lambda v: v.op.name)
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                          inter_op_parallelism_threads=1)
        self.sess = tf.compat.v1.Session(graph=self.graph, config=config)

    # -- state ------------------------------------------------------------------------------
    def restore_latest(self, ckpt_dir, log):
        """Restores the newest valid checkpoint; returns its prefix, or None (initial values)."""
        with self.graph.as_default():
            return self._restore_latest(ckpt_dir, log)

    def _restore_latest(self, ckpt_dir, log):
        for prefix in candidate_prefixes(ckpt_dir):
            why = verify_manifest(prefix)
            if why is None:
                try:
                    self.saver.restore(self.sess, prefix)
                except (self.tf.errors.OpError, ValueError) as err:
                    why = "the Saver refused it: %s: %s" % (type(err).__name__, _cause(err))
            if why is None:
                self.scheduler.apply_checkpoint_rules(self.sess)
                return prefix
            log("rejected checkpoint %s: %s" % (os.path.basename(prefix), why))
        self.sess.run(self.init)
        return None

    def save(self, ckpt_dir, iteration, log, pause=0.0):
        """The three-phase save of the module docstring; ``pause`` seconds before each phase
        (so that a parent can kill the process between them)."""
        tf = self.tf
        prefix = os.path.join(ckpt_dir, PREFIX_NAME)
        log("save-begin %d" % iteration)
        time.sleep(pause)
        path = self.saver.save(self.sess, prefix, global_step=iteration, write_meta_graph=False,
                               write_state=False)
        log("save-data %d" % iteration)
        time.sleep(pause)
        write_manifest(path)
        log("save-manifest %d" % iteration)
        time.sleep(pause)
        state = tf.train.get_checkpoint_state(ckpt_dir)
        kept = [] if state is None else [p for p in state.all_model_checkpoint_paths
                                         if os.path.basename(p) != os.path.basename(path)]
        kept.append(path)
        dropped, kept = kept[:-KEEP], kept[-KEEP:]
        # relative names: the directory can be moved or copied
        kept = [os.path.basename(p) for p in kept]
        tf.compat.v1.train.update_checkpoint_state(ckpt_dir, kept[-1],
                                                   all_model_checkpoint_paths=kept)
        log("save-done %d" % iteration)
        for old in dropped:
            old = old if os.path.isabs(old) else os.path.join(ckpt_dir, old)
            for name in checkpoint_files(old) + [os.path.basename(old) + MANIFEST_SUFFIX]:
                try:
                    os.remove(os.path.join(ckpt_dir, name))
                except OSError:
                    pass
        return path

    def snapshot(self):
        """Every variable and the skipped-step count, as numpy arrays by name."""
        with self.graph.as_default():
            return self._snapshot()

    def _snapshot(self):
        names = [v.op.name for v in self.variables]
        values = self.sess.run([v.read_value() if hasattr(v, "read_value") else v
                                for v in self.variables] + [self.skipped])
        import numpy as np  # pylint: disable=import-outside-toplevel
        out = {name: np.asarray(value) for name, value in zip(names, values[:-1])}
        out["skipped_steps"] = np.asarray(values[-1])
        return out

    def train(self, ckpt_dir, steps, every, log, pause=0.0, restore=True):
        """Restores the latest valid checkpoint (``restore``), trains up to iteration ``steps``,
        saving every ``every``; returns the prefix it started from (None: initial values)."""
        with self.graph.as_default():
            return self._train(ckpt_dir, steps, every, log, pause, restore)

    def _train(self, ckpt_dir, steps, every, log, pause, restore):
        os.makedirs(ckpt_dir, exist_ok=True)
        if restore:
            restored = self.restore_latest(ckpt_dir, log)
        else:
            restored = None
            self.sess.run(self.init)
        iteration = int(self.sess.run(self.iteration))
        log("start %d %s" % (iteration, os.path.basename(restored) if restored else "initial"))
        overflows = overflow_iterations(self.seed, steps)
        while iteration < steps:
            x, t = batch(self.seed, iteration, iteration in overflows)
            self.sess.run([self.train_op, self.set_iteration],
                          {self.x: x, self.t: t, self.next_iteration: iteration + 1})
            iteration += 1
            log("step %d" % iteration)
            if iteration % every == 0 or iteration == steps:
                self.save(ckpt_dir, iteration, log, pause)
        log("done %d" % iteration)
        return restored


def _cause(err):
    """The line of a TensorFlow error that says what went wrong (not the op's stack trace)."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    for line in lines:
        if not line.startswith((" ", "\t", "Graph execution error", "Detected at node",
                                "Original stack trace")):
            return line.strip()[:300]
    return lines[0][:300] if lines else ""


def _progress_logger(path):
    def log(line):
        with open(path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        print("kill_restore[%d]: %s" % (os.getpid(), line), flush=True)
    return log


def child_main(args):
    job = Job(args.seed, args.manager, ballast_mb=args.ballast_mb)
    log = _progress_logger(os.path.join(args.dir, "progress.txt"))
    job.train(os.path.join(args.dir, "ckpt"), args.steps, args.every, log, args.pause_in_save)
    snap = job.snapshot()
    import numpy as np  # pylint: disable=import-outside-toplevel
    np.savez(os.path.join(args.dir, "final.npz"), **{k.replace("/", "|"): v
                                                     for k, v in snap.items()})
    return 0


# -- the parent: reference run, killed run, comparison ---------------------------------------
def _child_cmd(args, directory, pause):
    return [sys.executable, os.path.abspath(__file__), "--child", "--dir", directory,
            "--seed", str(args.seed), "--steps", str(args.steps), "--every", str(args.every),
            "--manager", args.manager, "--pause-in-save", str(pause),
            "--ballast-mb", str(args.ballast_mb)]


def _env():
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["NPU_LOSS_SCALE_BACKEND"] = "emulation"
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split() for line in f.read().splitlines() if line.strip()]


def _saves_in_progress(ckpt_dir):
    try:
        return any("_temp" in name or "tempstate" in name for name in os.listdir(ckpt_dir))
    except OSError:
        return False


def _kill_plan(rng, kind, at_least, steps, every):
    """(kind, iteration): kill at a random step after ``at_least``, or in a save of an iteration
    that is a multiple of ``every``; None when the run is too close to its end."""
    if at_least + 1 > steps - 1:
        return None
    if kind == "step":     # within the next checkpoint interval, so that later kills still fit
        return kind, rng.randint(at_least + 1, min(steps - 1, at_least + every))
    saves = [i for i in range(every, steps, every) if i > at_least][:2]
    if not saves:
        return "step", rng.randint(at_least + 1, steps - 1)
    return kind, rng.choice(saves)


def run_killed(args, directory, log=print):
    """Runs the job in ``directory``, killing it ``args.kills`` times; returns the kill records."""
    rng = random.Random(args.seed)
    progress = os.path.join(directory, "progress.txt")
    ckpt_dir = os.path.join(directory, "ckpt")
    kinds = ["step", "save-phase", "save-temp"]
    records = []
    deadline = time.time() + args.hard_limit
    while True:
        lines = _read_lines(progress)
        reached = max([int(p[1]) for p in lines if p[0] == "step"] or [0])
        plan = None if len(records) >= args.kills else _kill_plan(
            rng, kinds[len(records) % len(kinds)], reached, args.steps, args.every)
        if plan is not None and plan[1] <= reached:
            plan = None
        # a pause before each save phase: the kill lands between phases ("save-phase"), or the
        # parent is polling for TensorFlow's temporary files when the write starts ("save-temp")
        pause = args.pause_in_save if plan and plan[0] in ("save-phase", "save-temp") else 0.0
        seen = len(lines)
        proc = subprocess.Popen(_child_cmd(args, directory, pause), env=_env(),
                                stdout=subprocess.DEVNULL if args.quiet else None,
                                stderr=subprocess.STDOUT if args.quiet else None)
        phase = rng.choice(["save-begin", "save-data", "save-manifest"])
        extra = rng.uniform(0.0, 0.02)
        killed = None
        while proc.poll() is None:
            if time.time() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError("kill_restore: the run outlived --hard-limit %gs" % args.hard_limit)
            new = _read_lines(progress)[seen:]
            if plan is not None:
                kind, at = plan
                if kind == "step" and ["step", str(at)] in new:
                    time.sleep(extra)              # somewhere inside the next step (or its save)
                    killed = "after step %d + %.1f ms" % (at, extra * 1000)
                elif kind == "save-phase" and [phase, str(at)] in new:
                    killed = "in the save of iteration %d, after phase '%s'" % (at, phase)
                elif kind == "save-temp" and ["save-begin", str(at)] in new:
                    # poll for TensorFlow's temporary files; kill the moment they exist
                    while proc.poll() is None and not _saves_in_progress(ckpt_dir) \
                            and ["save-data", str(at)] not in _read_lines(progress)[seen:]:
                        pass
                    inside = _saves_in_progress(ckpt_dir)
                    killed = ("in the save of iteration %d, while TensorFlow's temporary files "
                              "existed" % at) if inside else (
                                  "in the save of iteration %d, just after its data phase "
                                  "(temporary files not caught)" % at)
                if killed is not None:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
            time.sleep(0.002)
        if killed is None:
            proc.wait()
            if proc.returncode != 0:
                raise RuntimeError("kill_restore: the child failed with exit status %d"
                                   % proc.returncode)
            log("kill_restore: run completed after %d kills" % len(records))
            return records
        last = [p for p in _read_lines(progress) if p[0] == "step"]
        records.append({"kill": killed, "last_step": int(last[-1][1]) if last else 0,
                        "inside_temp": "temporary files existed" in killed})
        log("kill_restore: SIGKILL #%d %s (last completed step %s)"
            % (len(records), killed, records[-1]["last_step"]))


def load_final(directory):
    import numpy as np  # pylint: disable=import-outside-toplevel
    with np.load(os.path.join(directory, "final.npz")) as data:
        return {k.replace("|", "/"): data[k] for k in data.files}


def compare(reference, other):
    """Names whose dtype, shape or bytes differ (or exist in one run only)."""
    diffs = []
    for name in sorted(set(reference) | set(other)):
        if name not in reference or name not in other:
            diffs.append("%s: present in one run only" % name)
            continue
        a, b = reference[name], other[name]
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            diffs.append("%s: reference %r, restarted %r" % (name, a.tolist(), b.tolist()))
    return diffs


def restarts(directory):
    """The ``start`` lines of the progress file: (iteration, checkpoint) per process start."""
    return [(int(p[1]), p[2]) for p in _read_lines(os.path.join(directory, "progress.txt"))
            if p[0] == "start"]


def rejections(directory):
    path = os.path.join(directory, "progress.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line for line in f.read().splitlines() if line.startswith("rejected")]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=120, help="training iterations")
    p.add_argument("--every", type=int, default=5, help="checkpoint every N iterations")
    p.add_argument("--kills", type=int, default=12, help="SIGKILLs before letting it finish")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--manager", choices=("exponential", "megatron"), default="exponential")
    p.add_argument("--pause-in-save", type=float, default=0.3,
                   help="seconds the child waits before each save phase in runs meant to be "
                        "killed between phases")
    p.add_argument("--ballast-mb", type=float, default=4.0,
                   help="MB of untrained state saved with the model, so that TensorFlow's "
                        "write of a checkpoint lasts long enough to be killed inside it")
    p.add_argument("--hard-limit", type=float, default=1800.0,
                   help="seconds after which the parent kills everything and fails")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--quiet", action="store_true", help="hide the children's output")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.child and (args.steps < 3 or args.every < 1):
        p.error("--steps must be >= 3 and --every >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child_main(args)
    work = args.dir or tempfile.mkdtemp(prefix="kill_restore_")
    os.makedirs(work, exist_ok=True)
    try:
        return run_and_compare(args, work)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


def run_and_compare(args, work, log=print):
    """The whole check; returns 0 when bit-identical, else 1. Prints a summary."""
    return check(args, work, log)["status"]


def check(args, work, log=print):
    """The whole check; returns a dict: ``status`` (0 when bit-identical, else 1), ``kills``
    (records), ``starts`` ((iteration, checkpoint) per process start), ``rejected``, ``diffs``,
    ``reference`` and ``restarted`` (the final states)."""
    start = time.time()
    ref_dir, killed_dir = os.path.join(work, "reference"), os.path.join(work, "killed")
    for d in (ref_dir, killed_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    # the reference runs alongside the killed run (it shares nothing with it but the code)
    ref = subprocess.Popen(_child_cmd(args, ref_dir, 0.0), env=_env(),
                           stdout=subprocess.DEVNULL if args.quiet else None,
                           stderr=subprocess.STDOUT if args.quiet else None)
    try:
        records = run_killed(args, killed_dir, log)
        ref.wait(timeout=max(1.0, args.hard_limit - (time.time() - start)))
    finally:
        if ref.poll() is None:
            ref.kill()
            ref.wait()
    if ref.returncode != 0:
        raise RuntimeError("kill_restore: the reference run failed (exit status %d)"
                           % ref.returncode)
    reference, restarted = load_final(ref_dir), load_final(killed_dir)
    diffs = compare(reference, restarted)
    starts = restarts(killed_dir)
    log("kill_restore: %s manager, %d iterations, checkpoint every %d, seed %d: %d SIGKILLs "
        "(%d mid-step, %d in a save: %d while TensorFlow's temporary files existed), %d "
        "restarts, %d checkpoints rejected, %d skipped steps, %d variables compared, %.0f s"
        % (args.manager, args.steps, args.every, args.seed, len(records),
           sum(r["kill"].startswith("after step") for r in records),
           sum(r["kill"].startswith("in the save") for r in records),
           sum(r["inside_temp"] for r in records), len(starts) - 1,
           len(rejections(killed_dir)), int(reference["skipped_steps"]), len(reference),
           time.time() - start))
    for line in rejections(killed_dir):
        log("kill_restore:   " + line)
    if diffs:
        log("kill_restore: bit-identical: NO")
        for d in diffs:
            log("kill_restore:   " + d)
    else:
        log("kill_restore: bit-identical: yes")
    return {"status": 1 if diffs else 0, "kills": records, "starts": starts,
            "rejected": rejections(killed_dir), "diffs": diffs, "reference": reference,
            "restarted": restarted}


if __name__ == "__main__":
    sys.exit(main())
