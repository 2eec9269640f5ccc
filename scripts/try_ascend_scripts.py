"""Run a seeded sample of real Ascend loss-scale training scripts on CPU and say which train.

Usage::

    python scripts/try_ascend_scripts.py CORPUS_DIR [--sample N] [--seed S] [--list FILE]
                                         [--timeout SEC] [--jobs J] [--python PY] [--keep DIR]
                                         [--only TEXT] [--recipes DIR | --no-recipes]
                                         [--compare-plain]

``CORPUS_DIR`` is a folder of Ascend TensorFlow scripts, for example a checkout of Ascend's public
ModelZoo-TensorFlow (nothing of it belongs in this repository). The script

1. finds the loss-scale model directories exactly as ``scripts/survey_ascend_scripts.py`` does
   (it imports that script);
2. picks one *training entry script* per model directory: a ``.py`` file of the directory with a
   ``__main__`` guard or a top-level ``tf.app.run()``/``app.run()``, preferring the loss-scale
   file itself, then a file importing a loss-scale file's module, then names starting with
   ``train``/``main``/``run``; files named as tests, export, evaluation, inference or data
   preparation tools are never chosen; directories with no such file are left out (counted);
3. draws a seeded random sample of ``N`` model directories among those with an entry script
   (``--list FILE`` instead runs the entry scripts listed in FILE, one path relative to
   CORPUS_DIR per line, optionally followed by extra arguments, which come after the generic or
   the recipe's ones; a listed script's model directory gets its recipe too);
4. runs each, unmodified, as ``python -m npu_loss_scale.emulate --report R [--tf1] script ...``
   from the script's folder with a timeout. ``--tf1`` is passed unless the model directory uses
   the TF2 adapter ``npu_device`` or the interpreter (``--python``) has TensorFlow 1.x, where
   the scripts run on the TensorFlow they were written for. The arguments are generic, never per script: for each flag the
   script defines (``flags.DEFINE_*("name", ...)``, ``add_argument("--name", ...)``) whose name
   says what it is, a small value: data folders and files get a folder of tiny synthetic data
   (MNIST in its IDX files, CIFAR-10 in its binary batches, both a few records), output folders
   an empty folder, step counts 2, epochs 1, batch sizes 2; the environment of a one-rank Ascend
   launch (``RANK_SIZE=1``, ``RANK_ID=0``, ``DEVICE_ID=0``, ``ASCEND_DEVICE_ID=0``, ``JOB_ID``);
   Where ``scripts/ascend_recipes`` (or ``--recipes DIR``) has a *recipe* for a sampled model
   directory, the recipe's arguments and synthetic data in the script's own format are used
   instead (see ``scripts/ascend_recipes/__init__.py``: what a user writes to run the script in
   CI; never a change to the script); the summary counts runs with and without a recipe apart;
5. decides *trained through NPULossScaleOptimizer* from evidence only: the emulate report
   (``--report``) says an ``NPULossScaleOptimizer`` train op ran at least one step (applied or
   skipped for an overflow). It prints, per script, the outcome, the first barrier (the exception
   type and message ending the run, or "timeout", with a coarse kind: npu name not emulated, TF1
   API not mapped, third-party module missing, data or arguments, timeout, other) and a summary:
   the count of scripts that trained and the others' first barriers by kind.

With ``--compare-plain`` each script runs twice, back to back in its own folders: once as
above (the *emulated* run) and once as ``npu-emulate --plain`` (the *plain* run: the stand-in
names only, no ``precision_mode`` applied, float32 as written), the order alternating from one
script to the next. It prints both outcomes and wall times per script and, in the summary, which
scripts that train plain also train emulated, and the total wall time of the scripts that trained
in both runs and ended on their own, emulated against plain (the emulated device's cost on real
scripts), and that of every script whose runs both ended on their own, whatever their outcome;
one that ran into the timeout (a script that trains until stopped) is compared by the steps each
run made.

Outcomes: ``trained`` (>= 1 step through NPULossScaleOptimizer, clean exit), ``trained, then
failed`` / ``trained, then timeout`` (>= 1 step, the run ended otherwise: evaluation on missing
data, a later phase...), ``failed`` / ``timeout`` (no step), ``no-loss-scale-step`` (clean exit,
no step through NPULossScaleOptimizer). The figure "trains through NPULossScaleOptimizer" counts
the first three.
"""
import argparse
import ast
import gzip
import json
import os
import random
import re
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# Variables TensorFlow 2 sets in its own process when imported (a recipe writing JPEG or
# TFRecord data imports it here). Inherited, TF2_BEHAVIOR=1 turns a TensorFlow 1.15 script's
# graph mode into eager execution: each script gets them as they were before.
_SET_BY_TF_IMPORT = {name: os.environ.get(name) for name in ("TF2_BEHAVIOR", "TPU_ML_PLATFORM")}
sys.path.insert(0, HERE)
import survey_ascend_scripts as survey  # noqa: E402  pylint: disable=wrong-import-position
import ascend_recipes as recipes  # noqa: E402  pylint: disable=wrong-import-position

ENTRY_PREFIXES = ("train", "main", "run")
NOT_TRAINING_RE = re.compile(r"test|export|eval|infer|predict|convert|freeze|frozen|pb_|_pb|demo|"
                             r"ckpt2|offline|preprocess|download|build_|setup", re.I)
FLAG_DEF_RE = re.compile(
    r"""(?:DEFINE_(?P<kind>string|integer|float|bool|boolean|enum|list|multi_string)\s*\(\s*
         (?:name\s*=\s*)?['"](?P<flag>\w+)['"])
      | (?:add_argument\s*\(\s*['"](?:-\w\s*['"]\s*,\s*['"])?--(?P<arg>[\w-]+)['"]
         (?P<rest>[^)]*))""", re.X)

# name patterns -> kind of value; the first match wins (order matters: "data_dir" before "dir")
_FLAG_KINDS = (
    ("output", re.compile(r"^(model_dir|output_dir|out_dir|train_dir|ckpt_dir|checkpoint_dir|"
                          r"log_dir|logdir|save_dir|save_path|output_path|result_dir|"
                          r"result_path|train_url|summary_dir|checkpoint_path|ckpt_path|"
                          r"model_path|export_dir|output)$", re.I)),
    ("data", re.compile(r"^(data_dir|data_path|dataset_dir|dataset_path|data_url|datadir|"
                        r"dataset|data|train_data_dir|train_dir_data|data_root|root_dir|"
                        r"input_dir|train_data_path|train_path|image_dir|tfrecord_dir|"
                        r"record_dir)$", re.I)),
    ("steps", re.compile(r"^(train_steps|max_steps|num_steps|steps|iterations|iteration|"
                         r"max_iter|max_iters|num_iterations|num_train_steps|train_step|"
                         r"max_train_steps|total_steps|steps_per_epoch|iterations_per_loop|"
                         r"iter_num|max_step|num_iter|train_iters)$", re.I)),
    ("epochs", re.compile(r"^(epochs|num_epochs|epoch|train_epochs|max_epochs|max_epoch|"
                          r"num_train_epochs|n_epochs|epoch_num|nb_epoch)$", re.I)),
    ("batch", re.compile(r"^(batch_size|train_batch_size|batchsize|batch|bs|"
                         r"global_batch_size)$", re.I)),
)
_VALUES = {"steps": "2", "epochs": "1", "batch": "2"}


# -- choosing entry scripts ------------------------------------------------------------------------
def _read(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def _has_entry(tree):
    """Does a parsed module start a run: ``if __name__ == "__main__"`` or top-level ``app.run``?"""
    for node in tree.body:
        if isinstance(node, ast.If):
            test = ast.dump(node.test)
            if "__name__" in test and "__main__" in test:
                return True
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            chain = survey._dotted(node.value.func)  # pylint: disable=protected-access
            if chain and chain[-2:] == ["app", "run"]:
                return True
    return False


def _imported_modules(tree):
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.rsplit(".", 1)[-1] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.module:
                out.add(node.module.rsplit(".", 1)[-1])
            out.update(a.name for a in node.names)
    return out


def entry_script(model_dir, loss_scale_files):
    """The training entry script of a model directory (see the module docstring), or None."""
    candidates = []
    ls_modules = {os.path.splitext(os.path.basename(p))[0] for p in loss_scale_files}
    for path in survey._py_files(model_dir):  # pylint: disable=protected-access
        try:
            tree = ast.parse(_read(path))
        except (SyntaxError, ValueError):
            continue
        if not _has_entry(tree):
            continue
        base = os.path.basename(path).lower()
        if NOT_TRAINING_RE.search(base):
            continue  # tests, export/inference/evaluation tools, data preparation
        if path in loss_scale_files:
            rank = 0
        elif _imported_modules(tree) & ls_modules:
            rank = 1
        elif base.startswith(ENTRY_PREFIXES):
            rank = 2
        else:
            continue
        # among equals: training names first, then the shallowest path, then the name
        named = 0 if base.startswith(ENTRY_PREFIXES) else 1
        candidates.append((rank, named, path.count(os.sep), path))
    return min(candidates)[3] if candidates else None


def loss_scale_entries(corpus):
    """{model dir (absolute): entry script or None}, for every loss-scale model directory."""
    files = [p for p in survey._py_files(corpus)  # pylint: disable=protected-access
             if survey._is_loss_scale_file(p)]  # pylint: disable=protected-access
    dirs = {}
    for path in files:
        dirs.setdefault(survey.model_dir(path, corpus), []).append(path)
    return {d: entry_script(d, dirs[d]) for d in sorted(dirs)}


def uses_npu_device(model_dir):
    pattern = re.compile(r"^\s*(import|from)\s+npu_device\b", re.M)
    return any(pattern.search(_read(p))
               for p in survey._py_files(model_dir))  # pylint: disable=protected-access


# -- synthetic data -----------------------------------------------------------------------------
def _write_idx(path, magic, dims, payload):
    with gzip.open(path, "wb") as out:
        out.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims))
        out.write(payload)


def make_synthetic_data(folder, records=16, seed=0):
    """A folder of tiny datasets in the formats of the public files scripts read: MNIST (IDX,
    gzipped, both name spellings) and CIFAR-10 (binary batches). Values are random."""
    rng = random.Random(seed)
    os.makedirs(folder, exist_ok=True)
    for prefix in ("train", "t10k"):
        images = bytes(rng.randrange(256) for _ in range(records * 28 * 28))
        labels = bytes(rng.randrange(10) for _ in range(records))
        for sep in ("-", "."):
            _write_idx(os.path.join(folder, "%s-images%sidx3-ubyte.gz" % (prefix, sep)),
                       2051, (records, 28, 28), images)
            _write_idx(os.path.join(folder, "%s-labels%sidx1-ubyte.gz" % (prefix, sep)),
                       2049, (records,), labels)
    cifar = os.path.join(folder, "cifar-10-batches-bin")
    os.makedirs(cifar, exist_ok=True)
    for name in ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]:
        rows = b"".join(bytes([rng.randrange(10)]) + bytes(rng.randrange(256) for _ in range(3072))
                        for _ in range(records))
        for where in (folder, cifar):
            with open(os.path.join(where, name), "wb") as out:
                out.write(rows)
    return folder


# -- arguments ------------------------------------------------------------------------------------
def defined_flags(script):
    """{flag name: 'absl' or 'argparse'} for the flags the script (and its folder's files) define."""
    out = {}
    folder = os.path.dirname(script)
    texts = [_read(script)] + [_read(os.path.join(folder, n)) for n in sorted(os.listdir(folder))
                               if n.endswith(".py") and os.path.join(folder, n) != script
                               and re.search(r"flag|config|param|arg|option", n, re.I)]
    for text in texts:
        for match in FLAG_DEF_RE.finditer(text):
            if match.group("flag"):
                out.setdefault(match.group("flag"), "absl")
            elif match.group("arg") and "store_true" not in (match.group("rest") or "") \
                    and "store_false" not in (match.group("rest") or ""):
                out.setdefault(match.group("arg"), "argparse")
    return out


def generic_arguments(script, data_dir, out_dir):
    """The generic arguments for one script (see the module docstring)."""
    args = []
    for name in sorted(defined_flags(script)):
        key = name.replace("-", "_")
        for kind, pattern in _FLAG_KINDS:
            if pattern.match(key):
                value = {"data": data_dir, "output": out_dir}.get(kind, _VALUES.get(kind))
                args.append("--%s=%s" % (name, value))
                break
    return args


# -- running ------------------------------------------------------------------------------------
# an exception line: ``[module.]Name: message`` where Name ends as exception names do, bare
# ``Exception: ...`` included (Keras raises one when a weights download fails)
_ERROR_LINE_RE = re.compile(r"^((?:\w+\.)*\w*(?:Error|Exception|Exit|NotFound\w*|Interrupt)\b.*"
                            r"|[\w.]+Error)$")


def first_barrier(stderr, returncode):
    """The exception ending a run (its last traceback's final line), or a short exit note."""
    lines = [l.rstrip() for l in stderr.splitlines()]
    last_tb = max((i for i, l in enumerate(lines) if l.startswith("Traceback (most recent call")),
                  default=None)
    if last_tb is not None:
        for line in lines[last_tb + 1:]:
            if _ERROR_LINE_RE.match(line.strip()) and not line.startswith(" "):
                return line.strip()[:300]
    errors = [l.strip() for l in lines if _ERROR_LINE_RE.match(l.strip())]
    if errors:
        return errors[-1][:300]
    tail = [l for l in lines if l.strip()]
    return ("exit code %d%s" % (returncode, (": " + tail[-1][:200]) if tail else ""))


_CATEGORIES = (  # (category, pattern on the first barrier), first match wins
    ("npu name not emulated", re.compile(r"not emulated on CPU by npu_loss_scale")),
    ("TF1 API not mapped", re.compile(r"tensorflow\.contrib|tf\.contrib|not mapped to TensorFlow 2|"
                                      r"module 'tensorflow[\w.]*' has no attribute|tf_keras|"
                                      r"not available with Keras 3")),
    ("third-party module missing", re.compile(r"^ModuleNotFoundError: No module named")),
    ("data or arguments", re.compile(r"FileNotFoundError|NotFoundError|DataLossError|"
                                     r"must have a value other than None|KeyError|No such file|"
                                     r"Unable to load|IllegalFlagValue|UnrecognizedFlag|"
                                     r"error: the following arguments are required|"
                                     r"OutOfRangeError|IndexError|exit code 2|"
                                     r"URL fetch failure")),
    ("timeout", re.compile(r"^timeout")),
)


def barrier_category(result):
    """A coarse kind of first barrier, for the summary (``-`` when the run trained)."""
    if trained(result):
        return "-"
    for name, pattern in _CATEGORIES:
        if pattern.search(result["barrier"]):
            return name
    return "other"


def tensorflow_version(python):
    """The TensorFlow version ``python`` imports (asked once, in a child process), or a
    ``ValueError`` saying why there is none."""
    try:
        proc = subprocess.run([python, "-c", "import tensorflow as tf; print(tf.__version__)"],
                              capture_output=True, text=True, check=False,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    except OSError as err:
        raise ValueError("--python must be a Python interpreter; got %r (%s)" % (python, err))
    lines = proc.stdout.split()
    if proc.returncode != 0 or not lines:
        raise ValueError("--python must be a Python interpreter that imports tensorflow; %r "
                         "does not:\n%s" % (python, proc.stderr.strip()[-2000:]))
    return lines[-1]


def script_timeout(timeout, recipe=None):
    """Seconds one script gets: ``--timeout``, or the recipe's ``TIMEOUT`` where that is longer.

    A recipe's ``TIMEOUT`` is the time its script needs on two free cores; on a machine busy with
    other work, a longer ``--timeout`` must still give the script more."""
    return max(timeout, getattr(recipe, "TIMEOUT", 0) or 0)


def in_mount_namespace(cmd, fixed, cwd=None):
    """``cmd`` run in a private mount namespace where each absolute path of ``fixed`` shows the
    folder it maps to (a recipe's ``FIXED_PATHS``, its model copy): a path that exists is bound
    over; else an empty tmpfs covers its deepest existing ancestor (in that namespace only) and
    the path is made in it. ``cwd``, entered again after the mounts, is seen through them.
    Nothing changes outside the run's own namespace; it needs root and ``unshare``."""
    if os.name != "posix" or os.geteuid() != 0 or shutil.which("unshare") is None:
        raise RuntimeError("the recipe's FIXED_PATHS (%s) need a private mount namespace: run as "
                           "root on Linux with unshare (util-linux)" % ", ".join(sorted(fixed)))
    lines = ["set -e"]
    covered = set()
    for path, source in sorted(fixed.items()):
        if not os.path.isabs(path) or os.path.normpath(path) == "/":
            raise ValueError("FIXED_PATHS keys must be absolute paths below /; got %r" % path)
        if not os.path.exists(path):
            ancestor = os.path.dirname(os.path.normpath(path))
            while not os.path.exists(ancestor):
                ancestor = os.path.dirname(ancestor)
            if ancestor == "/":
                raise ValueError("FIXED_PATHS: no folder below / to cover for %r" % path)
            if any(os.path.commonpath([ancestor, os.path.abspath(src)]) == ancestor
                   for src in fixed.values()):
                raise ValueError("FIXED_PATHS: %r would be covered to make %r, and it holds a "
                                 "recipe folder" % (ancestor, path))
            if ancestor not in covered:
                lines.append("mount -t tmpfs tmpfs %s" % shlex.quote(ancestor))
                covered.add(ancestor)
            lines.append("mkdir -p %s" % shlex.quote(path))
        lines.append("mount --bind %s %s" % (shlex.quote(source), shlex.quote(path)))
    if cwd is not None:
        lines.append("cd %s" % shlex.quote(cwd))
    lines.append('exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines),
            "sh"] + list(cmd)


def run_one(corpus, script, extra_args, python, timeout, work, recipe=None, native_tf1=False,
            launcher=None):
    """Runs one script; ``native_tf1``: ``python`` has TensorFlow 1.x (no ``--tf1`` then).

    ``launcher``: the arguments after ``python`` that run the script, ``--tf1`` and the script
    coming after them (default ``-m npu_loss_scale.emulate --report <work>/report.json``;
    ``scripts/doctor_ascend_scripts.py`` gives the doctor's)."""
    model = survey.model_dir(script, corpus)
    tf1 = not uses_npu_device(model)
    data = make_synthetic_data(os.path.join(work, "data"))
    out = os.path.join(work, "out")
    os.makedirs(out, exist_ok=True)
    report = os.path.join(work, "report.json")
    args = generic_arguments(script, data, out)
    recipe_env = {}
    cwd = os.path.dirname(script)
    if recipe is not None:
        tf1 = getattr(recipe, "TF1", tf1)
        timeout = script_timeout(timeout, recipe)
        ctx = recipes.Context(os.path.join(work, "recipe"), data, out, model, script, args,
                              corpus, python=python, package_root=REPO)
        os.makedirs(ctx.work, exist_ok=True)
        if getattr(recipe, "MODEL_COPY", False):
            ctx.copy_model()
        args, recipe_env = recipe.prepare(ctx)
        args, recipe_env = list(args), dict(recipe_env or {})
        if getattr(recipe, "CWD", None) == "work":
            cwd = ctx.work
    args += list(extra_args)
    tf1 = tf1 and not native_tf1
    if launcher is None:
        launcher = ["-m", "npu_loss_scale.emulate", "--report", report]
    cmd = [python] + list(launcher) + (["--tf1"] if tf1 else [])
    cmd += [script] + args
    env = dict(os.environ)
    for name, value in _SET_BY_TF_IMPORT.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env.update({"RANK_SIZE": "1", "RANK_ID": "0", "DEVICE_ID": "0", "ASCEND_DEVICE_ID": "0",
                "JOB_ID": "10086", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join([REPO] + [p for p in [env.get("PYTHONPATH")] if p])})
    base_path = env["PYTHONPATH"]
    env.update(recipe_env)
    if recipe_env.get("PYTHONPATH"):  # a model's source root, as its launcher exports it
        env["PYTHONPATH"] = os.pathsep.join([REPO, recipe_env["PYTHONPATH"]]
                                            + base_path.split(os.pathsep)[1:])
    start = time.time()
    fixed = {}
    if recipe is not None:
        fixed = {path: os.path.join(ctx.work, folder)
                 for path, folder in (getattr(recipe, "FIXED_PATHS", None) or {}).items()}
        if ctx.model_copy is not None:
            fixed[model] = ctx.model_copy
    if fixed:
        try:
            cmd = in_mount_namespace(cmd, fixed, cwd)
        except (RuntimeError, ValueError) as err:
            return {"script": os.path.relpath(script, corpus), "tf1": tf1, "args": args,
                    "recipe": os.path.basename(recipe.__file__), "outcome": "failed",
                    "barrier": str(err), "report": {}, "seconds": 0.0, "stderr_tail": ""}
    timed_out = False
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL)
        stderr, returncode = proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        timed_out = True
        stderr = err.stderr.decode("utf-8", "replace") if isinstance(err.stderr, bytes) \
            else (err.stderr or "")
        returncode = None
    steps = {}
    if os.path.exists(report):
        try:
            with open(report, encoding="utf-8") as handle:
                steps = json.load(handle)
        except ValueError:
            steps = {}
    ran = steps.get("steps_applied", 0) + steps.get("steps_skipped", 0)
    if timed_out:
        outcome = "trained, then timeout" if ran else "timeout"
        barrier = "timeout after %ds" % timeout
    elif returncode == 0:
        outcome = "trained" if ran else "no-loss-scale-step"
        barrier = "-"
    else:
        outcome = "trained, then failed" if ran else "failed"
        barrier = first_barrier(stderr, returncode)
    return {"script": os.path.relpath(script, corpus), "tf1": tf1, "args": args,
            "recipe": os.path.basename(recipe.__file__) if recipe is not None else None,
            "outcome": outcome, "barrier": barrier, "report": steps,
            "seconds": round(time.time() - start, 1), "stderr_tail": stderr[-4000:]}


def trained(result):
    return result["outcome"].startswith("trained")


def add_arguments(parser):
    """The command line's arguments (``scripts/doctor_ascend_scripts.py`` shares them)."""
    parser.add_argument("corpus", metavar="CORPUS_DIR", help="folder of Ascend scripts")
    parser.add_argument("--sample", type=int, default=20, help="model directories to sample")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    parser.add_argument("--list", metavar="FILE",
                        help="run these entry scripts instead (paths relative to CORPUS_DIR, "
                             "optionally followed by extra arguments; recipes apply as in a "
                             "sample)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per script")
    parser.add_argument("--jobs", type=int, default=1, help="scripts run at once")
    parser.add_argument("--python", default=sys.executable, help="Python running the scripts")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep each run's data, output and stderr under DIR")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    parser.add_argument("--dry-run", action="store_true", help="only print the sample")
    parser.add_argument("--only", metavar="TEXT", action="append", default=[],
                        help="run only the sampled scripts whose path contains TEXT (repeatable; "
                             "the sample is drawn first, so the seed keeps its meaning)")
    parser.add_argument("--recipes", metavar="DIR", default=recipes.HERE,
                        help="folder of recipe modules (default: scripts/ascend_recipes)")
    parser.add_argument("--compare-plain", action="store_true",
                        help="run each script as npu-emulate --plain too and compare outcomes "
                             "and wall times (the emulated device against plain TensorFlow)")
    parser.add_argument("--no-recipes", action="store_true",
                        help="generic arguments and data only, even where scripts/ascend_recipes "
                             "has a recipe for the model directory")


def selected_jobs(parser, args):
    """Checks the arguments and prints the selection: (corpus, TensorFlow version, jobs), each job
    ``(script, extra arguments, recipe or None)``; ``parser.error`` on a bad value."""
    if not os.path.isdir(args.corpus):
        parser.error("CORPUS_DIR must be an existing folder; got %r" % args.corpus)
    if args.sample < 1:
        parser.error("--sample must be >= 1; got %d" % args.sample)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1; got %d" % args.jobs)
    corpus = os.path.abspath(args.corpus)
    if os.sep in args.python:  # scripts run from their own folders: a relative path would move
        args.python = os.path.abspath(args.python)
    try:
        version = tensorflow_version(args.python)
    except ValueError as err:
        parser.error(str(err))
    native_tf1 = version.startswith("1.")
    if args.list:
        known = {} if args.no_recipes else recipes.load_recipes(args.recipes)
        jobs = []
        for line in _read(args.list).splitlines():
            parts = line.split()
            if parts and not parts[0].startswith("#"):
                script = os.path.join(corpus, parts[0])
                model = os.path.relpath(survey.model_dir(script, corpus), corpus)
                jobs.append((script, parts[1:], known.get(model)))
        print("%d scripts from %s; with a recipe: %d"
              % (len(jobs), args.list, sum(j[2] is not None for j in jobs)))
    else:
        entries = loss_scale_entries(corpus)
        with_entry = sorted(d for d, e in entries.items() if e)
        print("loss-scale model directories: %d; with a training entry script: %d"
              % (len(entries), len(with_entry)))
        chosen = random.Random(args.seed).sample(with_entry, min(args.sample, len(with_entry)))
        known = {} if args.no_recipes else recipes.load_recipes(args.recipes)
        jobs = []
        for folder in sorted(chosen):
            recipe = known.get(os.path.relpath(folder, corpus))
            script = entries[folder]
            if recipe is not None and getattr(recipe, "ENTRY", None):
                script = os.path.join(folder, recipe.ENTRY)
            jobs.append((script, [], recipe))
        print("sample: %d model directories, seed %d; with a recipe: %d"
              % (len(jobs), args.seed, sum(j[2] is not None for j in jobs)))
    if args.only:
        jobs = [j for j in jobs if any(t in os.path.relpath(j[0], corpus) for t in args.only)]
        print("only: %d of them" % len(jobs))
    for script, _, _ in jobs:
        if not os.path.isfile(script):
            parser.error("no such script: %s" % script)
    if args.dry_run:
        for script, extra, recipe in jobs:
            print("  " + " ".join([os.path.relpath(script, corpus)] + extra)
                  + ("  [recipe %s]" % os.path.basename(recipe.__file__) if recipe else ""))
    else:
        print("TensorFlow %s (%s)%s" % (version, args.python,
                                        ": scripts run without --tf1" if native_tf1 else ""))
    return corpus, version, jobs


def run_jobs(args, corpus, version, jobs, work_root, launcher=None, report=None):
    """Runs the jobs (``args.jobs`` at once) in numbered folders of ``work_root``; ``launcher``
    as :func:`run_one`'s for every script (a function of the script's folder); ``report(i,
    result)`` is called as each ends, in order. Returns the results."""
    native_tf1 = version.startswith("1.")
    report = report or _print_result

    def work_dir(i):
        path = os.path.join(work_root, "%02d" % i)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def one(i, script, extra, recipe):
        work = work_dir(i)
        return run_one(corpus, script, extra, args.python, args.timeout, work, recipe,
                       native_tf1, launcher(work) if launcher else None)

    return _in_order(args.jobs, jobs, one, report)


def _in_order(threads, jobs, run, report):
    """``run(i, *job)`` for each job, ``threads`` at once; ``report(i, result)`` in the jobs'
    order as each ends. Returns the results in that order."""
    results = [None] * len(jobs)
    if threads == 1:
        for i, job in enumerate(jobs):
            results[i] = run(i, *job)
            report(i, results[i])
        return results
    from concurrent.futures import ThreadPoolExecutor  # pylint: disable=import-outside-toplevel
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(run, i, *job) for i, job in enumerate(jobs)]
        for i, future in enumerate(futures):
            results[i] = future.result()
            report(i, results[i])
    return results


VARIANTS = ("plain", "emulated")


def _launcher(variant, work):
    """The arguments after ``python`` for a variant of :func:`compare_plain`."""
    return (["-m", "npu_loss_scale.emulate"] + (["--plain"] if variant == "plain" else [])
            + ["--report", os.path.join(work, "report.json")])


def compare_plain(args, corpus, version, jobs, work_root):
    """Runs each job plain and emulated (:data:`VARIANTS`, the first of a pair alternating), in
    folders ``<i>-<variant>`` of ``work_root``, ``args.jobs`` pairs at once; prints each pair as
    it ends. Returns ``[{variant: result}]`` in the jobs' order."""
    native_tf1 = version.startswith("1.")

    def pair(i, script, extra, recipe):
        out = {}
        for variant in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
            work = os.path.join(work_root, "%02d-%s" % (i, variant))
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            out[variant] = run_one(corpus, script, extra, args.python, args.timeout, work,
                                   recipe, native_tf1, _launcher(variant, work))
            with open(os.path.join(work, "stderr.txt"), "w", encoding="utf-8") as handle:
                handle.write(out[variant]["stderr_tail"])   # kept with --keep
        return out

    return _in_order(args.jobs, jobs, pair, _print_pair)


def _print_pair(i, pair):
    first = pair["plain"]
    print("%2d. %s%s%s" % (i + 1, first["script"], " [--tf1]" if first["tf1"] else "",
                           " [recipe %s]" % first["recipe"] if first["recipe"] else ""))
    for variant in VARIANTS:
        result = pair[variant]
        steps = result["report"]
        print("    %-8s %s (applied %d, skipped %d; %.1fs)%s" % (
            variant, result["outcome"], steps.get("steps_applied", 0),
            steps.get("steps_skipped", 0), result["seconds"],
            "" if trained(result) else "; first barrier: %s [%s]" % (
                result["barrier"], barrier_category(result))))
    if _timed_out(pair):
        print("    steps before the timeout: plain %d, emulated %d"
              % (_steps(pair["plain"]), _steps(pair["emulated"])))
    elif trained(pair["plain"]) and trained(pair["emulated"]):
        print("    emulated / plain: %.2fx" % (pair["emulated"]["seconds"]
                                               / max(pair["plain"]["seconds"], 1e-9)))
    sys.stdout.flush()


def _timed_out(pair, how=any):
    """Whether any (or, ``how=all``, both) of a pair's runs ran into the timeout."""
    return how(pair[v]["outcome"].endswith("timeout") for v in VARIANTS)


def _total(pairs, variant):
    """The wall time of ``variant``'s runs of ``pairs``, in s."""
    return sum(p[variant]["seconds"] for p in pairs)


def _steps(result):
    report = result["report"]
    return report.get("steps_applied", 0) + report.get("steps_skipped", 0)


def comparison_summary(pairs):
    """The summary lines of :func:`compare_plain`'s results. Wall times are compared where both
    runs trained and ended on their own; a script that ran into the timeout in both (one that
    trains until stopped) is compared by the steps each run made in that time."""
    plain = [p for p in pairs if trained(p["plain"])]
    both = [p for p in plain if trained(p["emulated"])]
    lines = ["trained plain: %d of %d; of those, trained emulated too: %d"
             % (len(plain), len(pairs), len(both))]
    for p in plain:
        if not trained(p["emulated"]):
            lines.append("  trains plain only: %s (emulated: %s, %s)" % (
                p["plain"]["script"], p["emulated"]["outcome"], p["emulated"]["barrier"]))
    for p in pairs:
        if trained(p["emulated"]) and not trained(p["plain"]):
            lines.append("  trains emulated only: %s (plain: %s, %s)" % (
                p["plain"]["script"], p["plain"]["outcome"], p["plain"]["barrier"]))
    timed_out = [p for p in both if _timed_out(p)]
    ended = [p for p in both if not _timed_out(p)]
    if ended:
        t_plain, t_emulated = _total(ended, "plain"), _total(ended, "emulated")
        ratios = sorted(p["emulated"]["seconds"] / max(p["plain"]["seconds"], 1e-9)
                        for p in ended)
        lines.append("total wall time of the %d trained in both that ended on their own: plain "
                     "%.1f s, emulated %.1f s: %.2fx (per script %.2fx-%.2fx, median %.2fx)"
                     % (len(ended), t_plain, t_emulated, t_emulated / max(t_plain, 1e-9),
                        ratios[0], ratios[-1], statistics.median(ratios)))
    finished = [p for p in pairs if not _timed_out(p)]
    if finished:
        t_plain, t_emulated = _total(finished, "plain"), _total(finished, "emulated")
        lines.append("total wall time of the %d that ended on their own in both runs, whatever "
                     "their outcome: plain %.1f s, emulated %.1f s: %.2fx"
                     % (len(finished), t_plain, t_emulated, t_emulated / max(t_plain, 1e-9)))
    for p in timed_out:
        lines.append("  ran into the timeout (%s): %s: plain %d steps in %.0f s (%s), emulated %d "
                     "steps in %.0f s (%s)"
                     % ("both" if _timed_out(p, all) else "one run", p["plain"]["script"],
                        _steps(p["plain"]), p["plain"]["seconds"], p["plain"]["outcome"],
                        _steps(p["emulated"]), p["emulated"]["seconds"], p["emulated"]["outcome"]))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    corpus, version, jobs = selected_jobs(parser, args)
    if args.dry_run:
        return 0
    work_root = args.keep or tempfile.mkdtemp(prefix="try_ascend_")
    if args.compare_plain:
        pairs = compare_plain(args, corpus, version, jobs, work_root)
        if not args.keep:
            shutil.rmtree(work_root, ignore_errors=True)
        print()
        print("\n".join(comparison_summary(pairs)))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump(pairs, handle, indent=1)
        return 0
    results = run_jobs(args, corpus, version, jobs, work_root)
    if args.keep:
        for i, result in enumerate(results):
            with open(os.path.join(work_root, "%02d" % i, "stderr.txt"), "w",
                      encoding="utf-8") as out:
                out.write(result["stderr_tail"])
    else:
        shutil.rmtree(work_root, ignore_errors=True)
    n_trained = sum(trained(r) for r in results)
    clean = sum(r["outcome"] == "trained" for r in results)
    print()
    kinds = {}
    for result in results:
        if not trained(result):
            kinds[barrier_category(result)] = kinds.get(barrier_category(result), 0) + 1
    print("first barriers of the others: " + (", ".join(
        "%s %d" % kv for kv in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))) or "-"))
    print("trained through NPULossScaleOptimizer (>= 1 step): %d of %d (%d with a clean exit)"
          % (n_trained, len(results), clean))
    with_recipe = [r for r in results if r["recipe"]]
    print("  with a recipe: %d of %d trained; generic arguments only: %d of %d trained"
          % (sum(trained(r) for r in with_recipe), len(with_recipe),
             n_trained - sum(trained(r) for r in with_recipe), len(results) - len(with_recipe)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
    return 0


def _print_result(i, result):
    steps = result["report"]
    print("%2d. %s%s%s\n    outcome: %s (applied %d, skipped %d; %.0fs)\n    first barrier: %s%s\n"
          "    args: %s" % (
              i + 1, result["script"], " [--tf1]" if result["tf1"] else "",
              " [recipe %s]" % result["recipe"] if result["recipe"] else "", result["outcome"],
              steps.get("steps_applied", 0), steps.get("steps_skipped", 0), result["seconds"],
              result["barrier"], "" if trained(result) else " [%s]" % barrier_category(result),
              " ".join(result["args"]) or "-"), flush=True)


if __name__ == "__main__":
    sys.exit(main())
