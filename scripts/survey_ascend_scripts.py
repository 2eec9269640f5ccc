"""Static survey of the npu_bridge / npu_device surface that Ascend loss-scale scripts use.

Usage::

    python scripts/survey_ascend_scripts.py CORPUS_DIR [--top N] [--json OUT.json] [--missing]

``CORPUS_DIR`` is a folder of Ascend TensorFlow scripts, for example a checkout of Ascend's public
ModelZoo-TensorFlow (nothing of it belongs in this repository). The survey

1. finds the *loss-scale files*: Python files whose code names ``NPULossScaleOptimizer``,
   ``NpuLossScaleOptimizer`` or a loss-scale manager (``*LossScaleManager``), MindSpore files
   (which have managers of the same names) excepted;
2. groups them by *model directory*: the nearest folder holding ``modelzoo_level.txt``, else the
   nearest folder named as ModelZoo names models (``..._ID1234_...`` or ``..._for_TensorFlow``),
   else the nearest folder with a README/LICENSE/requirements file, else the file's own folder;
3. parses every ``.py`` file of those model directories (no code is run) and collects each
   npu_bridge / npu_device / hccl / moxing name it imports or uses (moxing, ModelArts' file
   library, is part of the shim too): ``from npu_bridge.x import y``,
   attribute chains on imported npu modules (``npu_ops.dropout``), and the free names a file takes
   from a star import (``from npu_bridge.npu_init import *`` followed by ``NPURunConfig(...)``);
   names are reported by where they are defined (``npu_init`` re-exports are followed);
4. ranks the names by the number of model directories using them and marks each name the CPU
   shim of ``python -m npu_loss_scale.emulate`` provides. What the shim provides is found by
   importing the shim and resolving each name in it, not from a list;
5. prints the table and the coverage figure: model directories whose every used name the shim
   provides.

Files that do not parse as Python 3 (Python 2 scripts) are counted and reported, not guessed.
"""
import argparse
import ast
import builtins
import collections
import importlib
import json
import os
import re
import sys

NPU_TOPS = ("npu_bridge", "npu_device", "hccl", "moxing")
LOSS_SCALE_RE = re.compile(r"\b(NPULossScaleOptimizer|NpuLossScaleOptimizer|\w*LossScaleManager)\b")
MINDSPORE_RE = re.compile(r"^\s*(import|from)\s+mindspore\b", re.M)
MODEL_DIR_NAME_RE = re.compile(r"(_ID\d{3,5}|_for_(tensorflow|acl))", re.I)
MODEL_DIR_MARKERS = ("README.md", "LICENSE", "requirements.txt")

# Where the names of ``from npu_bridge.npu_init import *`` come from in the Ascend TF adapter (a
# fact about its public API, used to report a star-imported name by its defining module). Names
# not defined in npu_bridge/hccl (tf, os, RewriterConfig, ...) stay "npu_bridge.npu_init.<name>".
_EST = "npu_bridge.estimator"
_NPU = _EST + ".npu"
NPU_INIT_ORIGINS = {
    "NPURunConfig": _NPU + ".npu_config", "ProfilingConfig": _NPU + ".npu_config",
    "DumpConfig": _NPU + ".npu_config", "DynamicInputConfig": _NPU + ".npu_config",
    "NPUEstimator": _NPU + ".npu_estimator", "NPUEstimatorSpec": _NPU + ".npu_estimator",
    "NPUDistributedOptimizer": _NPU + ".npu_optimizer", "NPUOptimizer": _NPU + ".npu_optimizer",
    "KerasDistributeOptimizer": _NPU + ".npu_optimizer",
    "npu_distributed_optimizer_wrapper": _NPU + ".npu_optimizer",
    "npu_allreduce": _NPU + ".npu_optimizer",
    "NPUBroadcastGlobalVariablesCallback": _NPU + ".npu_callbacks",
    "NPUCheckpointSaverHook": _NPU + ".npu_hook", "NPUOutputTensorHook": _NPU + ".npu_hook",
    "NPUBroadcastGlobalVariablesHook": _NPU + ".npu_hook",
    "NPULossScaleOptimizer": _NPU + ".npu_loss_scale_optimizer",
    "FixedLossScaleManager": _NPU + ".npu_loss_scale_manager",
    "ExponentialUpdateLossScaleManager": _NPU + ".npu_loss_scale_manager",
    "npu_ops": _EST, "npu_rnn": _NPU, "npu_scope": _NPU, "util": _NPU, "keras_to_npu": _NPU,
    "npu_strategy": _NPU, "npu_unary_ops": _EST + ".npu_unary_ops", "hccl_ops": "npu_bridge.hccl",
    "npu_close": _NPU + ".npu_plugin",
    "create_group": "hccl.manage.api", "destroy_group": "hccl.manage.api",
    "get_rank_size": "hccl.manage.api", "get_local_rank_size": "hccl.manage.api",
    "get_rank_id": "hccl.manage.api", "get_local_rank_id": "hccl.manage.api",
    "get_world_rank_from_group_rank": "hccl.manage.api",
    "get_group_rank_from_world_rank": "hccl.manage.api",
    "set_split_strategy_by_idx": "hccl.split.api", "set_split_strategy_by_size": "hccl.split.api",
}
NPU_INIT_OWN = (  # defined in npu_init itself, or re-exported from TensorFlow / the stdlib
    "npu_session_config_init", "npu_run_config_init", "npu_hooks_append", "npu_config_proto",
    "npu_graph_options", "npu_optimizer_options", "set_keras_session_npu_config", "init_resource",
    "shutdown_resource", "close_session", "get_npu_rank_id", "get_npu_local_rank_id",
    "get_npu_rank_size", "config_pb2", "rewriter_config_pb2", "RewriterConfig", "session", "tf",
    "os", "atexit", "npu_callbacks_append", "NpuEmptyHook", "npu_keras_optimizer",
    "npu_tf_optimizer", "npu_clear_session", "experimental_options", "backend",
    "session_run_hook")
NPU_INIT = "npu_bridge.npu_init"
NPU_INIT_NAMES = set(NPU_INIT_ORIGINS) | set(NPU_INIT_OWN)
_BUILTINS = set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__builtins__", "__spec__",
                                  "__package__", "__loader__", "__path__", "__class__"}


def _is_npu(module):
    return bool(module) and module.split(".", 1)[0] in NPU_TOPS


def _canonical(module, name):
    """The qualified name of ``name`` taken from ``module``."""
    if module == NPU_INIT and name in NPU_INIT_ORIGINS:
        return NPU_INIT_ORIGINS[name] + "." + name
    return module + "." + name


def _dotted(node):
    """['a', 'b', 'c'] for the expression a.b.c, or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def _parameter_names(args):
    """The names an ``ast.arguments`` binds (``posonlyargs`` exists from Python 3.8)."""
    every = (getattr(args, "posonlyargs", []) + args.args + args.kwonlyargs
             + [args.vararg, args.kwarg])
    return {arg.arg for arg in every if arg is not None}


class _FileScan(ast.NodeVisitor):
    """Bindings, star imports, defined names and dotted uses of one module."""

    def __init__(self):
        self.bound = {}          # local name -> qualified npu name it is bound to
        self.star_modules = []   # modules star-imported (npu or not), in order
        self.defined = set()
        self.uses = []           # dotted name lists used as values (longest chains)
        self.imported = set()    # qualified npu names imported explicitly

    def visit_Import(self, node):
        for alias in node.names:
            if alias.asname:
                self.defined.add(alias.asname)
                if _is_npu(alias.name):
                    self.bound[alias.asname] = alias.name
                    self.imported.add(alias.name)
            else:
                top = alias.name.split(".", 1)[0]
                self.defined.add(top)
                if _is_npu(alias.name):
                    self.bound[top] = top
                    self.imported.add(alias.name)

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if node.level:  # relative import: a local module, never npu
            module = "." * node.level + module
        for alias in node.names:
            if alias.name == "*":
                self.star_modules.append(module)
                continue
            local = alias.asname or alias.name
            self.defined.add(local)
            if _is_npu(module):
                qualified = _canonical(module, alias.name)
                self.bound[local] = qualified
                self.imported.add(qualified)

    def visit_FunctionDef(self, node):
        self.defined.add(node.name)
        self.defined.update(_parameter_names(node.args))
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self.defined.update(_parameter_names(node.args))
        self.generic_visit(node)

    def visit_ClassDef(self, node):
        self.defined.add(node.name)
        self.generic_visit(node)

    def visit_ExceptHandler(self, node):
        if node.name:
            self.defined.add(node.name)
        self.generic_visit(node)

    def visit_Global(self, node):
        self.defined.update(node.names)

    def visit_Name(self, node):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.defined.add(node.id)
        else:
            self.uses.append([node.id])

    def visit_Attribute(self, node):
        parts = _dotted(node)
        if parts is not None and isinstance(node.ctx, ast.Load):
            self.uses.append(parts)
            return  # the chain's inner nodes are covered by this use
        self.generic_visit(node)


def _local_module_names(path, module, cache):
    """Top-level names of a star-imported module that is a file next to ``path``, or None."""
    if _is_npu(module.lstrip(".")) and not module.startswith("."):
        return None
    rel = module.lstrip(".").replace(".", os.sep)
    here = os.path.dirname(path)
    for base in (here, os.path.dirname(here)):
        for candidate in (os.path.join(base, rel + ".py"), os.path.join(base, rel, "__init__.py")):
            if os.path.isfile(candidate):
                if candidate not in cache:
                    scan = _scan_file(candidate)[0]
                    cache[candidate] = set() if scan is None else scan.defined
                return cache[candidate]
    return None


def _scan_file(path):
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
        return None, path
    scan = _FileScan()
    scan.visit(tree)
    return scan, path


_NOT_NPU_MODULES = {"tf", "os", "atexit", "config_pb2", "rewriter_config_pb2", "session",
                    "backend", "session_run_hook", "time", "json"}


def _module_chain(base, rest):
    """The part of an attribute chain that names npu API: it stops after a class (``Spec.x``)
    and is empty after TensorFlow's or Python's modules re-exported by npu_init (``tf.x``)."""
    last = base.rsplit(".", 1)[-1]
    if last in _NOT_NPU_MODULES or last[:1].isupper():
        return []
    kept = []
    for part in rest:
        kept.append(part)
        if part[:1].isupper():
            break
    return kept


def names_used(path, cache=None):
    """The qualified npu names one file uses, or None when it does not parse as Python 3."""
    cache = {} if cache is None else cache
    scan, _ = _scan_file(path)
    if scan is None:
        return None
    names = set(scan.imported)
    npu_stars = [m for m in scan.star_modules if _is_npu(m)]
    other_star_names = set()
    for module in scan.star_modules:
        if not _is_npu(module):
            other_star_names |= _local_module_names(path, module, cache) or set()
    for parts in scan.uses:
        head = parts[0]
        if head in scan.bound:
            base = scan.bound[head]
        elif head in scan.defined or head in _BUILTINS or head in other_star_names:
            continue
        elif npu_stars:
            if NPU_INIT in npu_stars and head in NPU_INIT_NAMES:
                base = _canonical(NPU_INIT, head)
            elif set(npu_stars) == {NPU_INIT}:
                continue  # not something npu_init exports: another star import or an error
            else:
                base = _canonical([m for m in npu_stars if m != NPU_INIT][0], head)
        else:
            continue
        rest = _module_chain(base, parts[1:])
        names.add(".".join([base] + rest))
    return names


def _is_loss_scale_file(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return False
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    if MINDSPORE_RE.search(code):
        return False  # MindSpore has managers of the same names: not a TensorFlow script
    return bool(LOSS_SCALE_RE.search(code))


def model_dir(path, root):
    """The model directory of a file (see the module docstring)."""
    root = os.path.abspath(root)
    start = os.path.dirname(os.path.abspath(path))
    chain = []
    d = start
    while d.startswith(root) and d != root:
        chain.append(d)
        d = os.path.dirname(d)
    for d in chain:
        if os.path.isfile(os.path.join(d, "modelzoo_level.txt")):
            return d
    for d in chain:
        if MODEL_DIR_NAME_RE.search(os.path.basename(d)):
            return d
    for d in chain:
        if any(os.path.isfile(os.path.join(d, m)) for m in MODEL_DIR_MARKERS):
            return d
    return start


def _py_files(folder):
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(n for n in dirnames if not n.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


# -- what the shim provides ------------------------------------------------------------------------
def shim_resolver():
    """A function qualified-name -> bool: does the emulate shim provide it? (imports the shim)"""
    from npu_loss_scale.cli import emulate  # pylint: disable=import-outside-toplevel
    emulate.install_shim()
    star_cache = {}

    def star_names(module):
        if module not in star_cache:
            mod = importlib.import_module(module)
            exported = getattr(mod, "__all__", None)
            if exported is None:
                exported = [n for n in vars(mod) if not n.startswith("_")]
            star_cache[module] = set(exported)
        return star_cache[module]

    def provides(qualified):
        parts = qualified.split(".")
        if parts[:2] == ["npu_bridge", "npu_init"] and len(parts) >= 3:
            try:
                if parts[2] not in star_names(NPU_INIT):
                    return False
            except Exception:  # pylint: disable=broad-except
                return False
        for cut in range(len(parts), 0, -1):
            module_name = ".".join(parts[:cut])
            try:
                obj = importlib.import_module(module_name)
            except ImportError:
                continue
            except Exception:  # pylint: disable=broad-except
                return False
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except Exception:  # pylint: disable=broad-except  (AttributeError / not emulated)
                return False
            return True
        return False

    return provides


def survey(corpus, provides=None):
    """The survey as a dict (see the module docstring); ``provides`` defaults to the shim's."""
    corpus = os.path.abspath(corpus)
    if not os.path.isdir(corpus):
        raise ValueError("CORPUS_DIR must be a folder of scripts; got %r" % corpus)
    loss_scale_files = [p for p in _py_files(corpus) if _is_loss_scale_file(p)]
    dirs = collections.OrderedDict()
    for path in loss_scale_files:
        dirs.setdefault(model_dir(path, corpus), []).append(path)
    cache = {}
    per_dir = {}
    unparsable = []
    for d in dirs:
        used = set()
        for path in _py_files(d):
            names = names_used(path, cache)
            if names is None:
                unparsable.append(path)
            else:
                used |= names
        per_dir[d] = used
    all_names = sorted(set().union(*per_dir.values())) if per_dir else []
    if provides is None:
        from npu_loss_scale.cli import emulate  # pylint: disable=import-outside-toplevel
        installed_before = emulate.SHIM_DIR in sys.path
        try:
            provides = shim_resolver()
            provided = {n: bool(provides(n)) for n in all_names}
        finally:
            if not installed_before:
                emulate.uninstall_shim()  # leave the process as it was
    else:
        provided = {n: bool(provides(n)) for n in all_names}
    counts = collections.Counter(n for used in per_dir.values() for n in used)
    covered = [d for d, used in per_dir.items() if all(provided[n] for n in used)]
    rel = lambda d: os.path.relpath(d, corpus)  # noqa: E731
    return {
        "corpus": corpus,
        "loss_scale_files": len(loss_scale_files),
        "model_dirs": len(dirs),
        "covered_dirs": len(covered),
        "unparsable_files": len(unparsable),
        "names": [{"name": n, "dirs": counts[n], "provided": provided[n],
                   "only_missing_in": sum(1 for used in per_dir.values()
                                          if [m for m in used if not provided[m]] == [n])}
                  for n in sorted(all_names, key=lambda n: (-counts[n], n))],
        "dirs": {rel(d): {"files": [os.path.relpath(p, d) for p in dirs[d]],
                          "missing": sorted(n for n in per_dir[d] if not provided[n])}
                 for d in dirs},
    }


def _short(name):
    for prefix in ("npu_bridge.estimator.npu.", "npu_bridge.estimator.", "npu_bridge.",
                   "hccl.manage.api.", "hccl.split.api."):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def format_table(result, top=None):
    lines = ["| rank | name | model dirs | provided by the shim | only missing name in |",
             "|---:|---|---:|:---:|---:|"]
    names = result["names"] if top is None else result["names"][:top]
    for i, entry in enumerate(names, 1):
        lines.append("| %d | `%s` | %d | %s | %d |" % (
            i, _short(entry["name"]), entry["dirs"], "yes" if entry["provided"] else "**no**",
            entry["only_missing_in"]))
    return "\n".join(lines)


def format_summary(result):
    return ("loss-scale files: %d in %d model directories; unparsable .py files in them: %d\n"
            "coverage: the shim provides every npu_bridge/npu_device/hccl/moxing name used in %d of %d "
            "model directories (%.0f%%)" % (
                result["loss_scale_files"], result["model_dirs"], result["unparsable_files"],
                result["covered_dirs"], result["model_dirs"],
                100.0 * result["covered_dirs"] / max(1, result["model_dirs"])))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("corpus", metavar="CORPUS_DIR", help="folder of Ascend scripts")
    parser.add_argument("--top", type=int, default=None, help="print only the N most used names")
    parser.add_argument("--json", metavar="OUT", help="also write the full survey as JSON")
    parser.add_argument("--missing", action="store_true",
                        help="also list each model directory with the names it still misses")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.corpus):
        parser.error("CORPUS_DIR must be an existing folder; got %r" % args.corpus)
    result = survey(args.corpus)
    print(format_table(result, args.top))
    print()
    print(format_summary(result))
    if args.missing:
        for d, info in sorted(result["dirs"].items()):
            if info["missing"]:
                print("%s: %s" % (d, ", ".join(_short(n) for n in info["missing"])))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
