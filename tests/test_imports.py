"""The package's import graph: ``planner`` imports nothing from ``sim``, ``slurm``,
``node``, ``daemon``, ``devices``, ``memory`` or ``demo``; ``node`` (the hooks on every
GPU node) nothing of ``daemon``, ``planner`` or ``sim``; the shared ``slurm`` nothing of
``node``, ``daemon`` or ``sim``; ``memory`` only what mig-run's Slurm mode needs; the
product never imports the demo tooling; no two modules import each other, directly or
through others, nor does ``slurm`` with a top-level module or another package;
``daemon.cycle`` is imported through its package only; and no private name crosses a
package (imports inside functions count: a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import slurm_mig

ROOT = Path(slurm_mig.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_imports(tree: ast.AST) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:`` (for type checkers only)."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for branch in node.body:
                ids.update(id(sub) for sub in ast.walk(branch))
    return ids


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports when it runs, anywhere in its code
    (a lazy import inside a function counts); an import only under ``if
    TYPE_CHECKING:`` does not, and leaves the module's other imports of the same
    target counted."""
    files = {_module_name(p): p for p in ROOT.rglob("*.py") if "inject" not in p.parts}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        typing_only = _type_checking_imports(tree)
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                # ``from . import sub`` needs the module sub, not what its package's
                # __init__ imports; ``from pkg import name`` needs pkg
                base = _resolve(module, is_package, node)
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = [t for t in subs if t in files]
                if len(targets) < len(subs):
                    targets.append(base)
            for t in targets:
                if t in files and t != module:
                    graph[module].add(t)
    return graph


def private_imports() -> list[str]:
    """``module -> target.name`` for each private name (or module) a module imports from
    another package (a module's package: itself for a package, else its parent)."""
    files = {_module_name(p): p for p in ROOT.rglob("*.py") if "inject" not in p.parts}
    bad = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        home = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                pairs = [tuple(a.name.rsplit(".", 1)) for a in node.names if "." in a.name]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, is_package, node)
                pairs = [(base, a.name) for a in node.names]
            else:
                continue
            for base, name in pairs:
                if not base.startswith("slurm_mig"):
                    continue
                is_dir = (ROOT.parent / base.replace(".", "/")).is_dir()
                there = base if is_dir else base.rpartition(".")[0]
                private = [p for p in f"{base}.{name}".split(".") if p.startswith("_")]
                if there != home and any(not p.startswith("__") for p in private):
                    bad.append(f"{module} -> {base}.{name}")
    return sorted(bad)


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_planner_imports_no_executor():
    graph = import_graph()
    forbidden = {"sim", "slurm", "node", "daemon", "devices", "memory", "demo", "cli"}
    bad = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if _package_of(m) == "planner"
        for t in targets
        if _package_of(t) in forbidden
    )
    assert bad == []


def test_the_plan_validator_shares_nothing_with_the_planners():
    """slurm_mig.plan checks every planner's output: no import of the planners, lazy
    ones included (a shared bug would hide behind it)."""
    graph = import_graph()
    assert sorted(t for t in graph["slurm_mig.plan"] if _package_of(t) == "planner") == []


def test_the_product_never_imports_the_demo_tooling():
    graph = import_graph()
    allowed = {"demo", "cli"}  # `slurm-mig demo --live` runs it
    bad = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if _package_of(m) not in allowed
        for t in targets
        if _package_of(t) == "demo"
    )
    assert bad == []


def _crossings(graph: dict[str, set[str]], source: str, targets: set[str]) -> list[str]:
    return sorted(
        f"{m} -> {t}"
        for m, ts in graph.items()
        if _package_of(m) == source
        for t in ts
        if _package_of(t) in targets
    )


def test_the_node_imports_nothing_of_the_daemon_the_planner_or_the_simulator():
    """What runs on every GPU node (the hooks, node-flush, node-sweep's work) needs none
    of the controller's code; lazy imports count."""
    graph = import_graph()
    assert _crossings(graph, "node", {"daemon", "planner", "sim", "demo", "cli"}) == []
    assert any(_package_of(t) == "slurm" for t in graph["slurm_mig.node.prolog"])  # it sees


def test_the_shared_slurm_package_imports_neither_deployable_nor_the_simulator():
    graph = import_graph()
    assert _crossings(graph, "slurm", {"node", "daemon", "sim"}) == []


def test_the_daemon_imports_no_simulator_and_of_the_node_only_its_record_files():
    """The daemon learns what a node knows from its reports; only with reports off does
    `receiver.node_records` read the nodes' record files (one host or a shared run_dir)."""
    graph = import_graph()
    assert _crossings(graph, "daemon", {"sim", "demo"}) == []
    assert _crossings(graph, "daemon", {"node"}) == [
        "slurm_mig.daemon.receiver -> slurm_mig.node.nodestate"
    ]


# mig-run's Slurm mode requeues its job through the client and hands the memory need it
# learned to the Epilog through the need file: those two, and nothing else of the
# slurm and node packages (the hint grammar is ``slurm_mig.hints``, shared by both).
MIG_RUN_USES = {"slurm_mig.slurm.client", "slurm_mig.node.needarea"}


def test_memory_imports_no_more_of_slurm_than_mig_runs_slurm_mode():
    graph = import_graph()
    bad = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if _package_of(m) == "memory"
        for t in targets
        if _package_of(t) in {"slurm", "node", "daemon"} and t not in MIG_RUN_USES
    )
    assert bad == []
    assert "slurm_mig.hints" in graph["slurm_mig.memory.wrapper"]


def test_the_slurm_package_and_no_other_import_each_other():
    """No top-level module (``statusview``, ``explain``) or other package both imports
    ``slurm`` and is imported by it."""
    graph = import_graph()
    into = {_package_of(t) for m, ts in graph.items() if _package_of(m) == "slurm" for t in ts}
    bad = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if _package_of(m) in into - {"slurm"}
        for t in targets
        if _package_of(t) == "slurm"
    )
    assert bad == []


def test_the_cycle_package_is_imported_through_its_public_api():
    graph = import_graph()
    cycle = "slurm_mig.daemon.cycle"
    bad = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if not (m == cycle or m.startswith(cycle + "."))
        for t in targets
        if t.startswith(cycle + ".")
    )
    assert bad == []


def test_no_private_name_is_imported_from_another_package():
    assert private_imports() == []


def test_no_import_cycles():
    graph = import_graph()
    cycles = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t) :] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_the_walk_sees_imports():
    """The checker finds what it must: relative, absolute and lazy imports."""
    graph = import_graph()
    assert "slurm_mig.planner.registry" in graph["slurm_mig.planner.driver"]
    assert "slurm_mig.planner.driver" in graph["slurm_mig.sim.policies"]
    assert "slurm_mig.planner.registry" in graph["slurm_mig.config"]  # lazy, in a function
    assert "slurm_mig.daemon.statusview" in graph["slurm_mig.daemon.web"]
    assert "slurm_mig.power" in graph["slurm_mig.slurm.accounting"]
    # imported under TYPE_CHECKING and again inside a function: the lazy one counts
    assert "slurm_mig.devices.catalogue" in graph["slurm_mig.devices.nvml"]
    # ``from . import sub`` needs the module, not its package's __init__
    assert "slurm_mig.planner" not in graph["slurm_mig.planner.snapshot"]
    assert "slurm_mig.planner.cluster_snapshot" in graph["slurm_mig.planner.snapshot"]


def test_no_test_module_imports_another():
    """Shared builders live in support modules (tests/support.py, tests/hintcases.py,
    tests/hooksite.py, ...) and fixtures in conftest.py: a test module imports no
    other test module, so that each one's tests are its own."""
    tests = Path(__file__).resolve().parent
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.rpartition(".")[2].startswith("test_"):
                    found.append(f"{path.relative_to(tests)} imports {name}")
    assert found == [], "\n".join(found)
