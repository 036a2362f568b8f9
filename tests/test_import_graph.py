"""The package's import graph: no cycles between its packages, and the layering rules that keep them apart.

The graph is read from the source with `ast`, counting every import (module level, inside functions, under
TYPE_CHECKING), so a lazy import cannot hide a dependency. A node is a first-level package of r2s2r (`r2s2r.cell`)
or a top-level module (`r2s2r.core`, `r2s2r.files`, `r2s2r.geometry`, ...).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "source" / "r2s2r" / "r2s2r"
ENGINES = ("mujoco", "mujoco_warp", "warp", "torch", "pxr", "r2s2r.physics", "r2s2r.render")

# (importers, what they never import, why, whether the rule also holds through every module they import)
NEVERS = [
    ("r2s2r.core", ("r2s2r",), "the base layer imports nothing of ours", True),
    ("r2s2r.cell.spec", ENGINES, "the cell spec is plain data: no engine", True),
    ("r2s2r.cell", ("r2s2r.physics", "r2s2r.render"), "engines build the cell, not the other way round", True),
    ("r2s2r.behavior", ("r2s2r.render",), "generators speak poses, not pixels", True),
    ("r2s2r.physics", ("r2s2r.tasks",), "physics knows no task", True),
    ("r2s2r.data", ("r2s2r.policy", "r2s2r.behavior", "r2s2r.tasks"),
     "the data layer knows no model, generator or task registry", True),
    ("r2s2r.calibration", ("r2s2r.real.twin", "r2s2r.real.truths"), "calibration never reads the truth", True),
]


class Import(NamedTuple):
    importer: str
    line: int
    target: str  # the r2s2r module imported, or an external dotted name
    # Under `if TYPE_CHECKING:`: a rule still sees it in its importer, but loads nothing at run time, so the
    # transitive walk does not go on through it (an annotation naming the task's environment does not render).
    typing_only: bool = False


def typing_only_lines(tree: ast.AST) -> set[int]:
    """The lines of the statements inside `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`) blocks."""
    lines = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            for body in n.body:
                lines.update(range(body.lineno, (body.end_lineno or body.lineno) + 1))
    return lines


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def node(module: str) -> str:
    """`r2s2r.cell.spec` -> `r2s2r.cell`; a top-level module is a node of its own."""
    return ".".join(module.split(".")[:2])


def read_imports(package: Path) -> list[Import]:
    """Every import statement of every module under `package` (a folder holding `__init__.py`)."""
    paths = sorted(package.rglob("*.py"))
    names = {}
    for path in paths:
        parts = path.relative_to(package.parent).with_suffix("").parts
        names[path] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    modules = set(names.values())
    out = []
    for path in paths:
        name = names[path]
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        tree = ast.parse(path.read_text(), str(path))
        typing_only = typing_only_lines(tree)
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                out += [Import(name, n.lineno, a.name, n.lineno in typing_only) for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                base = n.module
                if n.level:  # relative: from the package this module is in, n.level - 1 packages up
                    base = ".".join(here[: len(here) - n.level + 1] + ([n.module] if n.module else []))
                for a in n.names:  # `from pkg import mod` imports the submodule, `from mod import x` the module
                    target = f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    out.append(Import(name, n.lineno, target, n.lineno in typing_only))
    return sorted(set(out))  # one per module imported on a line, however many of its names


def package_edges(imports: list[Import]) -> dict[tuple[str, str], list[Import]]:
    """(importing node, imported node) -> the imports behind it, for imports between two nodes of the package."""
    edges = defaultdict(list)
    for imp in imports:
        a, b = node(imp.importer), node(imp.target)
        if within(imp.target, imp.importer.split(".")[0]) and a != b:
            edges[a, b].append(imp)
    return edges


def node_graph(edges: dict[tuple[str, str], list[Import]]) -> dict[str, set[str]]:
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    return graph


def cyclic_groups(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of nodes that all reach each other (the nodes on cycles); empty if the graph is acyclic."""

    def reachable(start: str) -> set[str]:  # by one edge or more, so `start` is in it only on a cycle
        seen, todo = set(), list(graph.get(start, ()))
        while todo:
            v = todo.pop()
            if v not in seen:
                seen.add(v)
                todo.extend(graph.get(v, ()))
        return seen

    reach = {v: reachable(v) for v in graph}
    groups = []
    for start in sorted(graph):
        if start in reach[start] and not any(start in g for g in groups):
            groups.append({v for v in reach[start] if start in reach.get(v, ())})
    return groups


def shortest_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """`[a, b, ..., a]` from the group's first node, breadth first inside the group until an edge leads back."""
    start = min(group)
    paths, frontier = {start: [start]}, [start]
    while True:
        v = frontier.pop(0)
        for w in sorted(graph[v] & group):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                frontier.append(w)


def violations(imports: list[Import], importers: str, forbidden: tuple[str, ...], transitive: bool) -> list[str]:
    """Each way a module within `importers` reaches a `forbidden` one: directly, or also through the modules it
    imports when `transitive`."""
    by_module = defaultdict(list)
    for imp in imports:
        by_module[imp.importer].append(imp)
    out = []
    for start in sorted(m for m in by_module if within(m, importers)):
        chains, todo = {start: []}, [start]
        while todo:
            module = todo.pop(0)
            for imp in by_module[module]:
                chain = chains[module] + [imp]
                if any(within(imp.target, f) for f in forbidden):
                    out.append(" -> ".join(f"{i.importer}:{i.line} imports {i.target}" for i in chain))
                elif transitive and not imp.typing_only and imp.target in by_module and imp.target not in chains:
                    chains[imp.target] = chain
                    todo.append(imp.target)
    return out


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    found = read_imports(PACKAGE)
    # A wrong path or parser would pass every rule vacuously.
    assert any(i.importer == "r2s2r.cell.spec" and i.target == "r2s2r.core" for i in found)
    return found


def test_no_cycles_between_packages(imports):
    edges = package_edges(imports)
    graph = node_graph(edges)
    report = []
    for group in cyclic_groups(graph):
        report.append(" -> ".join(shortest_cycle(graph, group)) + "; every import inside the group:")
        report += [f"    {i.importer}:{i.line} imports {i.target}"
                   for (a, b), found in sorted(edges.items()) if a in group and b in group for i in found]
    assert not report, "package cycles:\n" + "\n".join(report)


@pytest.mark.parametrize("importers, forbidden, why, transitive", NEVERS, ids=[n[0] for n in NEVERS])
def test_never(imports, importers, forbidden, why, transitive):
    found = violations(imports, importers, forbidden, transitive)
    assert not found, f"{why}:\n" + "\n".join(found)


def test_the_cycle_finder_finds_cycles_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert cyclic_groups(graph) == [{"a", "b", "c"}, {"d", "e"}]
    assert shortest_cycle(graph, {"a", "b", "c"}) == ["a", "b", "c", "a"]
    assert cyclic_groups({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []


def test_lazy_and_relative_imports_count(tmp_path):
    root = tmp_path / "pkg"
    for folder in (root, root / "x", root / "y"):
        folder.mkdir()
        (folder / "__init__.py").write_text("")
    (root / "x" / "m.py").write_text("def f():\n    from pkg.y import n\n")
    (root / "y" / "n.py").write_text("from ..x import m\n")
    imports = read_imports(root)
    assert Import("pkg.x.m", 2, "pkg.y.n") in imports and Import("pkg.y.n", 1, "pkg.x.m") in imports
    assert cyclic_groups(node_graph(package_edges(imports))) == [{"pkg.x", "pkg.y"}]
    assert violations(imports, "pkg.x", ("pkg.y",), False) == ["pkg.x.m:2 imports pkg.y.n"]


def test_the_transitive_walk_follows_lazy_imports_and_stops_at_typing_only_ones(tmp_path):
    root = tmp_path / "pkg"
    for folder in (root, root / "a", root / "b", root / "c"):
        folder.mkdir()
        (folder / "__init__.py").write_text("")
    (root / "a" / "lazy.py").write_text("def f():\n    from pkg.b import mid\n")
    (root / "a" / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import mid\n")
    (root / "b" / "mid.py").write_text("def g():\n    import pkg.c.bottom\n")
    (root / "c" / "bottom.py").write_text("")
    imports = read_imports(root)
    assert Import("pkg.a.typed", 3, "pkg.b.mid", True) in imports
    found = violations(imports, "pkg.a", ("pkg.c",), True)
    assert found == ["pkg.a.lazy:2 imports pkg.b.mid -> pkg.b.mid:2 imports pkg.c.bottom"]
    # A typing-only import of a forbidden module itself is still an arrow.
    assert violations(imports, "pkg.a", ("pkg.b",), True) == ["pkg.a.lazy:2 imports pkg.b.mid",
                                                              "pkg.a.typed:3 imports pkg.b.mid"]
