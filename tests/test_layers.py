"""The folder tree is the architecture: layers import only the layers below them, never a sibling
of their own layer, and no module of the package is part of an import circle.

Read from the source with ``ast`` (no TensorFlow, milliseconds). Every import counts, those inside
functions too, and so does ``importlib.import_module`` of a literal package name: a lazy import
is still knowledge of the module imported. docs/architecture.md draws the same layers.
"""
import ast
import os

import pytest

PACKAGE = "npu_loss_scale"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PACKAGE)

# bottom to top; a unit is a first-level folder or module of the package ("" is __init__.py)
LAYERS = (
    ("_internal",),
    ("scaling", "device", "schedules"),
    ("agreement",),
    ("detection",),
    ("optimizers",),
    ("frontends", "tools"),
    ("ascend",),
    ("",),  # the public table (npu_loss_scale/__init__.py): it imports only _internal at once
    ("cli", "keras"),
    ("pytest_plugin", "__main__", "emulate"),
)
# the CPU shim of npu_bridge, npu_device, hccl and moxing is the Ascend layer's, not a unit
SHIM = "_npu_bridge_shim"
UNIT_ALIASES = {SHIM: "ascend"}
LAYER_OF = {unit: level for level, units in enumerate(LAYERS) for unit in units}
# The one module that names Huawei's adapter (npu_bridge, ...) outside the shim: it probes for the
# real one, and where the emulator installed the shim it is handed the shim's modules by the
# installer (ascend/shim.py) rather than importing them by name. Anywhere else in the package a
# name of the adapter is the shim under the emulator, a module of the Ascend layer.
ADAPTER_GATE = PACKAGE + "._internal.probe"


def module_files(root=ROOT):
    """{dotted module name: file path} for every .py file of the package."""
    files = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".")
                files[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return files


def _imported(node, module, is_package):
    """The dotted names one import statement (or import_module call) names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = module.split(".")[:len(module.split(".")) - node.level + bool(is_package)]
            base = ".".join(parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        return ["%s.%s" % (base, alias.name) for alias in node.names]
    if (isinstance(node, ast.Call) and node.args
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"):
        literal = _string(node.args[0])
        return [literal] if literal is not None else []
    return []


def _string(node):
    """A string literal's value (ast.Str before Python 3.8, ast.Constant after), else None."""
    value = getattr(node, "value", getattr(node, "s", None))
    return value if isinstance(value, str) and isinstance(node, (ast.Constant, ast.Str)) else None


def import_graph(files=None):
    """{module: set of package modules it imports}; ``x.y`` counts as ``x.y`` when that module
    exists, else as ``x`` (an attribute of it); ``from x import y`` of a module ``x.y`` does not
    count ``x`` (a package's ``__init__`` runs first, as it does for any import in the package).
    A name of Huawei's adapter that the shim stands in for (``npu_bridge.hccl.hccl_ops``) is the
    shim's module (``npu_loss_scale._npu_bridge_shim.npu_bridge.hccl.hccl_ops``): inside the shim
    that is what it imports, and anywhere else but :data:`ADAPTER_GATE` it is what the name
    resolves to under the emulator."""
    files = module_files() if files is None else files
    shim = "%s.%s." % (PACKAGE, SHIM)
    tops = {name[len(shim):].split(".")[0] for name in files if name.startswith(shim)}
    graph = {}
    for module, path in files.items():
        with open(path) as source:
            tree = ast.parse(source.read(), path)
        edges = set()
        for node in ast.walk(tree):
            for name in _imported(node, module, path.endswith("__init__.py")):
                if name.split(".")[0] in tops and module != ADAPTER_GATE:
                    name = shim + name  # an adapter's name: the shim's module under the emulator
                while name and name not in files:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    edges.add(name)
        graph[module] = edges
    return graph


def unit_of(module):
    parts = module.split(".")
    unit = parts[1] if len(parts) > 1 else ""
    return UNIT_ALIASES.get(unit, unit)


def layer_violations(graph):
    """Imports from a higher layer, or from a sibling unit of the same layer."""
    bad = []
    for module, edges in sorted(graph.items()):
        for target in sorted(edges):
            source_unit, target_unit = unit_of(module), unit_of(target)
            if source_unit == target_unit:
                continue
            source, dest = LAYER_OF[source_unit], LAYER_OF[target_unit]
            if dest > source:
                bad.append("%s imports %s (layer %d above %d)" % (module, target, dest, source))
            elif dest == source:
                bad.append("%s imports %s (a sibling unit of layer %d)" % (module, target, dest))
    return bad


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_unit_of_the_package_has_a_layer():
    units = {unit_of(module) for module in module_files()}
    assert sorted(units - set(LAYER_OF)) == []


def test_no_import_comes_from_a_higher_layer_or_a_sibling():
    assert layer_violations(import_graph()) == []


def test_no_import_circle():
    assert cycles(import_graph()) == []


# Mutation checks: the edges the old flat layout had, put back one at a time, each fail a test.
OLD_EDGES = [
    ("npu_loss_scale.device.localisation", "npu_loss_scale.tools.advisor"),
    ("npu_loss_scale.device.register", "npu_loss_scale.detection.backends"),
    ("npu_loss_scale.device.localisation", "npu_loss_scale.device.register"),
    ("npu_loss_scale.agreement.discovery", "npu_loss_scale.detection.backends"),
    ("npu_loss_scale.ascend.tf1_contrib", "npu_loss_scale"),
    # the two circles the shim had and the agreement's import of the adapter (the shim under the
    # emulator)
    ("npu_loss_scale._npu_bridge_shim.npu_bridge._keras_ranks",
     "npu_loss_scale._npu_bridge_shim.npu_bridge.estimator.npu.npu_optimizer"),
    ("npu_loss_scale._npu_bridge_shim.npu_device.distribute",
     "npu_loss_scale._npu_bridge_shim.npu_device"),
    ("npu_loss_scale.agreement.hccl", "npu_loss_scale._npu_bridge_shim.npu_bridge.hccl.hccl_ops"),
]


@pytest.mark.parametrize("edge", OLD_EDGES, ids=["%s->%s" % e for e in OLD_EDGES])
def test_putting_back_an_old_edge_fails(edge):
    graph = import_graph()
    source, target = edge
    assert target not in graph[source]
    graph[source].add(target)
    assert layer_violations(graph) or cycles(graph)


def test_the_checks_see_a_circle_and_a_lazy_import(tmp_path):
    package = tmp_path / PACKAGE
    (package / "device").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "device" / "__init__.py").write_text("")
    (package / "device" / "a.py").write_text("from npu_loss_scale.device import b\n")
    (package / "device" / "b.py").write_text(
        "def f():\n    import importlib\n    return importlib.import_module('npu_loss_scale.device.a')\n")
    graph = import_graph(module_files(str(package)))
    assert cycles(graph) == [["npu_loss_scale.device.a", "npu_loss_scale.device.b"]]


def test_the_checks_read_the_adapters_names_as_the_shim(tmp_path):
    """Inside the shim ``from npu_bridge import x`` is the shim's module, so its circles show; in
    a lower layer a name of the adapter is the shim's module too (what it is under the
    emulator), except in the probe, the one module that names the adapter."""
    package = tmp_path / PACKAGE
    bridge = package / SHIM / "npu_bridge"
    bridge.mkdir(parents=True)
    for folder in (package, package / "agreement", package / "_internal"):
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").write_text("")
    (bridge / "__init__.py").write_text("")
    (bridge / "a.py").write_text("from npu_bridge import b\n")
    (bridge / "b.py").write_text("def f():\n    from npu_bridge.a import g\n")
    call = "import importlib\nimportlib.import_module('npu_bridge.a')\n"
    (package / "agreement" / "hccl.py").write_text(call)
    (package / "_internal" / "probe.py").write_text(call)
    graph = import_graph(module_files(str(package)))
    shim = "%s.%s.npu_bridge." % (PACKAGE, SHIM)
    assert cycles(graph) == [[shim + "a", shim + "b"]]
    assert layer_violations(graph) == [
        "%s.agreement.hccl imports %sa (layer 6 above 2)" % (PACKAGE, shim)]
    assert graph[ADAPTER_GATE] == set()


def test_the_architecture_page_names_the_same_layers():  # pylint: disable=missing-function-docstring
    page = os.path.join(os.path.dirname(ROOT), "docs", "architecture.md")
    with open(page) as text:
        content = text.read()
    for units in LAYERS:
        for unit in units:
            if unit:
                assert "`%s" % unit in content, unit


@pytest.mark.slow
@pytest.mark.parametrize("front_end", ["npu_loss_scale_optimizer", "grad_scaler"])
def test_one_training_step_never_calls_back_up_a_layer(front_end):
    """At run time too: scripts/step_path.py records every call of one step between package
    files; none goes from a file into a file of a higher layer."""
    import json  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    script = os.path.join(os.path.dirname(ROOT), "scripts", "step_path.py")
    out = subprocess.run([sys.executable, script, "--json", "--front-end", front_end],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out.splitlines()[-1])
    assert report["calls_up"] == []
    assert report["files"][0].startswith("npu_loss_scale/" + (
        "optimizers/" if front_end == "npu_loss_scale_optimizer" else "frontends/"))
