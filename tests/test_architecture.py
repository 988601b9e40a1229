"""The layering of ARCHITECTURE.md, checked on the source: no import cycles, dependencies point down,
heavy optional packages stay in their own module, and every module imports first in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import evotune

PACKAGE = Path(evotune.__file__).parent


def module_name(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path, root: Path = PACKAGE.parent) -> str:
    return module_name(path, root) if path.name == "__init__.py" else module_name(path, root).rsplit(".", 1)[0]


def imported_modules(source: str, package: str) -> set[str]:
    """Every module a source in `package` imports: at module level, under `if TYPE_CHECKING:` and inside
    functions (a lazy or type-only import still ties two modules together, so all count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            target = imported_from(node, package)
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}  # `from . import x` imports module x
    return found


def imported_from(node: ast.ImportFrom, package: str) -> str:
    """The absolute module name of a `from X import ...` statement in `package`."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[:len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of the package folder `package` and the package's modules it imports."""
    root = package.parent
    modules = {module_name(path, root): path for path in package.rglob("*.py")}
    return {name: {target for target in imported_modules(path.read_text(), package_of(path, root))
                   if target in modules and target != name}
            for name, path in modules.items()}


GRAPH = import_graph(PACKAGE)
MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}
BENCH = PACKAGE.parents[1] / "bench"  # the studies' package beside src/


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """The first import cycle found (as the trail of modules that closes it), or None."""
    visiting, done = set(), set()

    def visit(name: str, trail: list[str]) -> list[str] | None:
        if name in done:
            return None
        if name in visiting:
            return trail + [name]
        visiting.add(name)
        for target in sorted(graph[name]):
            # a package's __init__ importing its own submodules is how packages export names
            if not target.startswith(name + "."):
                found = visit(target, trail + [name])
                if found:
                    return found
        visiting.discard(name)
        done.add(name)
        return None

    for name in sorted(graph):
        found = visit(name, [])
        if found:
            return found
    return None


def test_the_graph_counts_type_checking_and_function_level_imports():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .trainer import Trainer\n"
              "def f():\n    from .sweep import sweep\n")
    assert {"evotune.trainer", "evotune.sweep"} <= imported_modules(source, "evotune")


@pytest.mark.parametrize("package", [PACKAGE, BENCH], ids=["evotune", "bench"])
def test_no_import_cycles_between_modules(package):
    """Lazy imports inside functions count: they hid two circles in bench/ (method_matrix's job <-> restore, and
    scaling's cell -> predict -> fit -> run -> cell)."""
    graph = import_graph(package)
    assert len(graph) > 20
    cycle = import_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_planted_circle():
    graph = import_graph(BENCH)
    graph["bench.scaling.workloads"] = graph["bench.scaling.workloads"] | {"bench.scaling.fit"}  # fit imports it
    assert import_cycle(graph) is not None


def test_only_the_trainer_class_is_imported_from_trainer_py():
    """trainer.py is the ES loop; shared helpers live in generation.py, tracking.py, backends/base.py."""
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and imported_from(node, package_of(path)) == "evotune.trainer":
                assert [alias.name for alias in node.names] == ["Trainer"], f"{name} imports helpers from trainer.py"


def imports_of(prefix: str) -> set[str]:
    return {target for name, targets in GRAPH.items() if name.startswith(prefix) for target in targets}


# Bottom leaves: atomic file writing, the checkpoint format and PEFT adapter files (files/), the update rules on
# the search mean (optimizers/). They import nothing of evotune but errors, so every layer may use them.
BOTTOM_LEAVES = ("evotune.files", "evotune.optimizers")

# Everything above the core layers, bottom to top: a module may import those below it, never those above.
# config/ (typed settings) and tracking/ (metrics and loggers) know nothing of runs or evaluation; evaluation/
# scores a model it is given; builders make the parts from a config; runs/ (directories, loading a run's model,
# compare, export) builds on them; callbacks and the loop come next; the drivers (CLI, sweeps, doctor) last.
LAYERS = (("evotune.config",), ("evotune.tracking",), ("evotune.evaluation",), ("evotune.builders",),
          ("evotune.runs",), ("evotune.callbacks",),
          ("evotune.trainer", "evotune.es_trainer", "evotune.sft", "evotune.baselines"),
          ("evotune.cli", "evotune.sweep", "evotune.doctor"))
CORE = ("evotune.strategies", "evotune.spaces", "evotune.backends", "evotune.tasks", "evotune.distributed")


def test_bottom_leaves_import_only_errors():
    for leaf in BOTTOM_LEAVES:
        outside = {target for target in imports_of(leaf) if not target.startswith(leaf)}
        assert outside <= {"evotune.errors"}, f"{leaf} imports {sorted(outside)}"


def test_dependencies_point_down():
    """The core may use config/ and tracking/ (typed settings and metrics, which import no core module but a
    task's defaults), never evaluation/ or anything above it."""
    upper = tuple(name for layer in LAYERS[2:] for name in layer)
    for layer in CORE:
        assert not {t for t in imports_of(layer) if t.startswith(upper)}, layer
    assert not {t for t in imports_of("evotune.strategies") if t.startswith(("evotune.spaces", "evotune.backends"))}
    assert not {t for t in imports_of("evotune.spaces") if t.startswith(("evotune.backends", "evotune.tasks"))}
    assert not {t for t in imports_of("evotune.tasks") if t.startswith(("evotune.spaces", "evotune.backends"))}


def test_layers_above_the_core_import_only_downward():
    for position, layer in enumerate(LAYERS):
        above = tuple(name for higher in LAYERS[position + 1:] for name in higher)
        upward = {f"{name} -> {target}" for name, targets in GRAPH.items() if name.startswith(layer)
                  for target in targets if target.startswith(above)}
        assert not upward, f"{layer} imports from a layer above it: {sorted(upward)}"


def test_the_layer_rules_catch_an_upward_import(monkeypatch):
    """The rule has no exemption list: an evaluation module importing the builders fails it."""
    monkeypatch.setitem(GRAPH, "evotune.evaluation.evaluate",
                        GRAPH["evotune.evaluation.evaluate"] | {"evotune.builders"})
    with pytest.raises(AssertionError, match="evotune.evaluation.evaluate -> evotune.builders"):
        test_layers_above_the_core_import_only_downward()


def test_the_top_level_holds_only_the_loop_and_small_shared_modules():
    top = {path.stem for path in PACKAGE.glob("*.py")}
    assert top == {"__init__", "_legacy_paths", "trainer", "es_trainer", "sft", "builders", "callbacks",
                   "doctor", "sweep", "errors", "import_utils", "seeds", "types"}, sorted(top)


def all_imports(path: Path) -> set[str]:
    """Every imported top-level package, lazy imports included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_heavy_optional_packages_stay_in_their_own_module():
    owners = {"vllm": {"evotune.backends.vllm", "evotune.backends.vllm_cpu", "evotune.backends.vllm_lora",
                       "evotune.backends.vllm_weights"},
              "ray": {name for name in MODULES if name.split(".")[:3] == ["evotune", "distributed", "ray"]},
              "trl": {"evotune.baselines.grpo", "evotune.baselines.grpo_logging"},
              "bitsandbytes": {"evotune.backends.quantized"}, "wandb": {"evotune.tracking.loggers"},
              "trackio": {"evotune.tracking.loggers"}}
    for package, allowed in owners.items():
        users = {name for name, path in MODULES.items() if package in all_imports(path)}
        assert users <= allowed, f"{package} imported by {sorted(users - allowed)}"
    assert "torch" not in set().union(*(all_imports(p) for n, p in MODULES.items()
                                        if n.startswith("evotune.strategies")))


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module imported with no evotune module loaded before it (cycles show up only in some orders)."""
    script = (
        "import gc, importlib, sys\n"
        "gc.disable()  # each module's import runs again ~80 times: the collector's passes would be most of it\n"
        f"names = {sorted(MODULES)!r}\n"
        "failed = []\n"
        "for name in names:\n"
        "    for loaded in [m for m in sys.modules if m == 'evotune' or m.startswith('evotune.')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {exc!r}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
