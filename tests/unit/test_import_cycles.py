"""No import cycle inside the checked packages (issue 12).

The graph is built with ``ast`` from the source files, so every import counts: module
top, ``TYPE_CHECKING`` blocks and imports inside functions alike (a function-level
import that dodges a cycle at run time is still a cycle in the design). An edge goes
from a module to every checked module it names; ``from pkg import name`` points at
``pkg.name`` when that is a module, else at ``pkg``. Importing a submodule does not
count as importing its package's ``__init__`` (Python runs it, but the ``__init__``
re-exporting its children is not a design cycle).

To check another package, add it to ``PACKAGES``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["core", "schemas", "consumers"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_of(packages: list[str]) -> dict[str, Path]:
    """Every module of ``packages``, by dotted name."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imported_names(module: str, path: Path) -> set[str]:
    """Dotted names ``module`` imports, anywhere in its file, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join([*base, node.module] if node.module else base)
            else:
                prefix = node.module or ""
            # `from pkg import name` names the module pkg.name, or else pkg (resolved by the caller).
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def import_graph(packages: list[str]) -> dict[str, set[str]]:
    """module -> the checked modules it imports."""
    modules = modules_of(packages)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(module, path):
            # `from pkg import name`: name is a module, or an attribute of pkg.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path ``a -> b -> ... -> a``, or None (iterative depth-first search)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        path = [start]
        colour[start] = GREY
        while stack:
            node, pending = stack[-1]
            if not pending:
                stack.pop()
                path.pop()
                colour[node] = BLACK
                continue
            nxt = pending.pop(0)
            if colour[nxt] == GREY:
                return [*path[path.index(nxt):], nxt]
            if colour[nxt] == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append((nxt, sorted(graph[nxt])))
    return None


def test_the_graph_sees_function_level_imports_and_finds_a_cycle(tmp_path: Path) -> None:
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": set()}
    assert find_cycle(graph) == ["a.x", "a.y", "a.z", "a.x"]
    assert find_cycle({"a.x": {"a.y"}, "a.y": set()}) is None
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from core.engine import session\n    import schemas.wire\n")
    assert imported_names("pkg.m", source) == {"core.engine.session", "schemas.wire"}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_within(package: str) -> None:
    graph = import_graph([package])
    assert len(graph) > 5
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_cycle_across_the_checked_packages() -> None:
    cycle = find_cycle(import_graph(PACKAGES))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
