"""The package layers of clustersim hold: no import cycle between subpackages, no upward import.

The import graph is read from the source with ``ast`` — top-level imports and the ones inside
functions alike (a function-level import that dodges a cycle is still an edge). A *unit* is a
subpackage ``clustersim/<name>/`` or a top-level module ``clustersim/<name>.py``; the package
root ``clustersim/__init__.py`` (the public API) ranks above everything. :data:`RANKS` lists
the units bottom first, mirrored in docs/architecture.md ("Package layers"): a unit may import
only units of a lower rank, never a peer of its own rank.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "clustersim"

#: bottom first; a unit may import only from a lower rank (docs/architecture.md)
RANKS: list[set[str]] = [
    {"errors"},
    {"units", "progress", "plugins", "output", "memory_kinds", "reader", "simpy_fast", "accel"},
    {"program", "record"},
    {"hardware", "topology", "coarsen"},
    {"network"},
    {"collectives"},
    {"workload"},
    {"parallel", "interop"},
    {"schedules"},
    {"planner"},
    {"scenario"},
    {"resolve"},
    {"engine"},
    {"metrics"},
    {"energy"},
    {"viz"},
    {"trace"},
    {"compilers"},
    {"faults", "multijob", "generation"},
    {"rlhf"},
    {"simulate"},
    {"validation", "experiments", "scheduler"},
    {"cli"},
    {"__init__"},
]
RANK = {unit: r for r, units in enumerate(RANKS) for unit in units}


def _unit(dotted: str) -> str | None:
    parts = dotted.split(".")
    if parts[0] != "clustersim":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _targets(node: ast.AST, module: list[str], is_pkg: bool) -> list[str]:
    """Dotted names an import statement reaches (``from . import x`` reaches ``pkg.x``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if not node.level:
        return [node.module]
    base = module if is_pkg else module[:-1]
    base = base[: len(base) - (node.level - 1)]
    if node.module:
        return [".".join([*base, node.module])]
    return [".".join([*base, a.name]) for a in node.names]


def import_edges(package: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """``(importer unit, imported unit)`` → the ``file:line`` of every import that makes the edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        is_pkg = rel.name == "__init__"
        module = list(rel.parts[:-1] if is_pkg else rel.parts)
        src = _unit(".".join(module))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(node, module, is_pkg):
                dst = _unit(target)
                if dst is not None and dst != src:
                    edges.setdefault((src, dst), []).append(f"{rel}.py:{node.lineno}")
    return edges


EDGES = import_edges()


def test_every_unit_has_a_rank():
    on_disk = {p.stem for p in PACKAGE.glob("*.py")} | {p.parent.name for p in PACKAGE.glob("*/*.py")}
    missing = sorted(on_disk - set(RANK))
    assert not missing, f"give these units a rank in RANKS (and docs/architecture.md): {missing}"


@pytest.mark.parametrize("edge", sorted(EDGES), ids="{0[0]}->{0[1]}".format)
def test_imports_point_down(edge):
    src, dst = edge
    assert RANK[dst] < RANK[src], (
        f"{src} (rank {RANK[src]}) imports {dst} (rank {RANK[dst]}) at {', '.join(EDGES[edge])}: "
        "move the shared piece down to the lower unit (docs/architecture.md)"
    )


def test_no_cycles():
    # implied by ranked edges, but say it directly: a cycle is what the ranks exist to prevent
    graph: dict[str, set[str]] = {}
    for src, dst in EDGES:
        graph.setdefault(src, set()).add(dst)
    state: dict[str, int] = {}

    def visit(u: str, path: list[str]) -> None:
        state[u] = 1
        for v in sorted(graph.get(u, ())):
            assert state.get(v) != 1, f"import cycle: {' -> '.join([*path[path.index(v) :], v])}"
            if v not in state:
                visit(v, [*path, v])
        state[u] = 2

    for u in sorted(graph):
        if u not in state:
            visit(u, [u])


def test_reader_sees_function_level_imports(tmp_path):
    # the reader itself: an import inside a function and a relative ``from .. import`` both count
    pkg = tmp_path / "clustersim"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("def f():\n    from ..high import x\n")
    (pkg / "high.py").write_text("from . import low\n")
    assert import_edges(pkg) == {
        ("low", "high"): ["clustersim/low/__init__.py:2"],
        ("high", "low"): ["clustersim/high.py:1"],
    }


#: what a unit must never import, whatever the ranks allow: the engine runs any Program and
#: the trace reads any run, so neither may know how a Program was compiled (parallel plans,
#: schedules, workloads, compilers) — a compiler's report or simulate passes in what they need
NEVER: dict[str, set[str]] = {
    "engine": {"parallel", "schedules", "workload", "compilers"},
    "trace": {"parallel", "schedules", "workload", "compilers"},
}


@pytest.mark.parametrize("unit", sorted(NEVER))
def test_nevers(unit):
    bad = {dst: where for (src, dst), where in EDGES.items() if src == unit and dst in NEVER[unit]}
    assert not bad, f"{unit} must never import {sorted(bad)}: {bad} (docs/architecture.md, 'The nevers')"
