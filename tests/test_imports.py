"""The package's import graph: ``planner`` imports nothing from ``sim``, ``slurm``,
``devices``, ``memory`` or ``demo``; the product never imports the demo tooling; and no
two modules import each other, directly or through others (imports inside functions
count: a lazy import is still a dependency)."""

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


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its code)."""
    files = {_module_name(p): p for p in ROOT.rglob("*.py") if "inject" not in p.parts}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if isinstance(getattr(node, "parent", None), ast.If):
                    pass
                base = _resolve(module, is_package, node)
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                if t in files and t != module:
                    graph[module].add(t)
    # ``if TYPE_CHECKING:`` imports are for type checkers only
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.ImportFrom):
                        base = _resolve(module, is_package, sub)
                        for t in [base] + [f"{base}.{a.name}" for a in sub.names]:
                            graph[module].discard(t)
    return graph


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_planner_imports_no_executor():
    graph = import_graph()
    forbidden = {"sim", "slurm", "devices", "memory", "demo", "cli"}
    bad = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if _package_of(m) == "planner"
        for t in targets
        if _package_of(t) in forbidden
    )
    assert bad == []


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
