"""The shape of the code, read from its own imports: no import circles in steps/ or schedules/,
each layer of steps/ importing only from the layers below it, and one kind of entry point.

The graph is built from the source (ast), not by importing it: every ``import`` and ``from ...
import`` anywhere in a module counts, those inside functions too, since an import deferred to a
function is still a dependency (it only hides a circle from the interpreter). ``from package
import name`` depends on the submodule ``package.name`` where that is a module, else on the
package's ``__init__``. A package's ``__init__`` being run before its submodules is Python's,
not a dependency the code chose, so it is not an edge.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import schedules

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("steps", "schedules")

# The layers, top first: a module may import from its own layer and the layers below it.
# The top of steps/ is the entry points (stepN.py, __main__.py, bench.py, ...). schedules/ is
# four (docs/maintaining.md): where the ladder meets TVM (integration/), the ladder itself (the
# registry, the base computation and the rungs at the top of schedules/), what the rungs are
# built from (transforms/), what happens after TVM lowers them (lowering/); the rungs' configs
# are plain data that every layer reads, so they sit at the bottom.
LAYERS = ("steps", "steps.commands", "steps.report", "steps.measure", "steps.results",
          "schedules.integration", "schedules", "schedules.transforms", "schedules.lowering", "schedules.config")


def module_files(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the packages (a package is its __init__)."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `name` (at `path`) imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()

    def add(target: str, names=()):
        roots = {m.split(".")[0] for m in modules}
        if target.split(".")[0] not in roots:
            return
        for alias in names:
            if f"{target}.{alias}" in modules:  # from package import submodule
                found.add(f"{target}.{alias}")
            elif target in modules:
                found.add(target)
        if not names and target in modules:
            found.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                # `import a.b.c` runs a, a.b and a.b.c; the module named is the one it depends on
                add(next((".".join(parts[:i]) for i in range(len(parts), 0, -1)
                          if ".".join(parts[:i]) in modules), alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            add(target, [a.name for a in node.names if a.name != "*"])
    found.discard(name)
    return found


def import_graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    modules = module_files(root, packages)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each as a cycle to read."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(_cycle_through(sorted(component), graph))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _cycle_through(component: list[str], graph) -> list[str]:
    """One path a -> ... -> a inside a strongly connected component, for the failure message."""
    members, start = set(component), component[0]
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for w in sorted(graph[path[-1]] & members):
            if w == start:
                return path + [start]
            if w not in seen:
                seen.add(w)
                paths.append(path + [w])
    return component


def layer_of(module: str) -> str:
    return max((layer for layer in LAYERS if module == layer or module.startswith(layer + ".")), key=len)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    order = {layer: n for n, layer in enumerate(LAYERS)}
    return [f"{a} ({layer_of(a)}) imports {b} ({layer_of(b)})"
            for a, deps in sorted(graph.items()) for b in sorted(deps)
            if order[layer_of(b)] < order[layer_of(a)]]


# --- the project -----------------------------------------------------------------------------


def test_no_import_circles_in_steps_or_schedules():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_each_layer_of_steps_imports_only_from_the_layers_below():
    graph = import_graph()
    assert {layer_of(m) for m in graph} == set(LAYERS), "a module outside the known layers"
    assert not upward_imports(graph), "\n".join(upward_imports(graph))


def test_schedules_has_its_four_layers():
    """Each part of schedules/ holds what docs/maintaining.md says it does: the rungs at the top,
    the transforms, the lowering passes and TVM's side in folders of their own."""
    layers = {m: layer_of(m) for m in import_graph()}
    assert {layers[s.module.__name__] for s in schedules.STEPS} == {"schedules"}
    for module, layer in [("schedules.matmul", "schedules"), ("schedules.dispatch", "schedules"),
                          ("schedules.transforms.cuda_core", "schedules.transforms"),
                          ("schedules.transforms.wgmma", "schedules.transforms"),
                          ("schedules.lowering.nvrtc", "schedules.lowering"),
                          ("schedules.integration.ladder_rule", "schedules.integration"),
                          ("schedules.integration.relax_dispatch", "schedules.integration")]:
        assert layers[module] == layer, module


def test_the_graph_sees_imports_inside_functions():
    """The ladder saves its plots through an import inside a function: the graph has it."""
    assert "steps.report.plot" in import_graph()["steps.commands.ladder"]


def test_every_top_level_module_of_steps_is_an_entry_point():
    """Two kinds of module at the top of steps/ was the old layout's confusion: each one now
    imports one ``main`` and calls it under ``__main__``, nothing else."""
    for path in sorted((ROOT / "steps").glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        assert len(body) == 2, f"{path.name}: an entry point is an import and a __main__ guard"
        imp, guard = body
        assert isinstance(imp, ast.ImportFrom) and [a.name for a in imp.names] == ["main"], path.name
        assert isinstance(guard, ast.If) and "__main__" in ast.unparse(guard.test), path.name
        assert ast.get_docstring(tree, clean=False).startswith("python -m steps"), path.name


def test_every_registered_step_has_its_entry_point():
    for step in schedules.STEPS:
        path = ROOT / "steps" / f"step{step.number}.py"
        assert path.exists(), f"step {step.number} is registered but steps/step{step.number}.py is missing"
        tree = ast.parse(path.read_text())
        assert ast.unparse(tree.body[-1]).endswith(f"raise SystemExit(main({step.number}))"), path.name
        assert f"schedules/{step.module.__name__.split('.')[-1]}.py" in ast.get_docstring(tree), path.name
    numbers = sorted(int(p.stem[4:]) for p in (ROOT / "steps").glob("step*.py"))
    assert numbers == [s.number for s in schedules.STEPS], "a stepN.py for a step the registry lacks"


def test_importing_steps_installs_no_import_hook():
    """The package itself changes no import machinery (TVM, imported by the step command,
    adds finders of its own: only the project's would count)."""
    code = ("import sys; before = list(sys.meta_path), list(sys.path_hooks)\n"
            "import steps\n"
            "assert (list(sys.meta_path), list(sys.path_hooks)) == before, sys.meta_path\n"
            "import steps.step4, steps.bench, steps.__main__\n"
            "ours = [f for f in sys.meta_path + sys.path_hooks\n"
            "        if (f if isinstance(f, type) else type(f)).__module__.split('.')[0] in ('steps', 'schedules')]\n"
            "assert not ours, ours\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_the_results_layer_needs_no_tvm():
    """steps/results/ reads and writes documents: a machine without TVM (or a GPU) can load them."""
    code = ("import sys\n"
            "import steps.results, steps.results.shapes, steps.results.shapeset, steps.results.crosscheck\n"
            "bad = sorted({m.split('.')[0] for m in sys.modules} & {'tvm', 'tvm_ffi', 'schedules', 'numpy'})\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


# --- the checks themselves fail where they should ------------------------------------------


def _package(root: Path, name: str, files: dict[str, str]) -> None:
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_planted_circle_is_found(tmp_path):
    """Three modules in a ring, one link deferred into a function as the old bench/plot one was."""
    _package(tmp_path, "pkg", {
        "a.py": "from . import b\n",
        "b.py": "from .c import thing\n",
        "c.py": "def thing():\n    from .a import x\n",
        "d.py": "from . import a\n",  # depends on the ring, not part of it
        "sub/__init__.py": "",
        "sub/e.py": "from .. import d\nfrom ..sub import f\n",
        "sub/f.py": "import pkg.sub.e\n",
    })
    found = circles(import_graph(tmp_path, ("pkg",)))
    assert sorted(map(tuple, found)) == [("pkg.a", "pkg.b", "pkg.c", "pkg.a"),
                                         ("pkg.sub.e", "pkg.sub.f", "pkg.sub.e")]


def test_names_from_a_package_init_are_edges_to_the_init(tmp_path):
    _package(tmp_path, "pkg", {"__init__.py": "from .a import VALUE\n", "a.py": "VALUE = 1\n",
                               "b.py": "from . import VALUE, a\n"})
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.b"] == {"pkg", "pkg.a"} and graph["pkg"] == {"pkg.a"}
    assert circles(graph) == []


@pytest.mark.parametrize("importer, imported", [("steps.results.shapes", "steps.report.table"),
                                                ("steps.measure.harness", "steps.commands.cli"),
                                                ("schedules.config", "steps.results"),
                                                ("schedules.transforms.padding", "schedules.step11_split_k"),
                                                ("schedules.lowering.pipelines", "schedules.transforms.wgmma"),
                                                ("schedules.step4_cooperative_fetch", "schedules.integration.ladder_rule"),
                                                ("schedules.config", "schedules.matmul")])
def test_an_upward_import_is_reported(importer, imported):
    graph = {m: set(d) for m, d in import_graph().items()}
    graph[importer].add(imported)
    assert upward_imports(graph) == [f"{importer} ({layer_of(importer)}) imports {imported} ({layer_of(imported)})"]
