"""The topology registry and its entry point :func:`build_topology`.

``TOPOLOGIES`` maps the word a scenario uses (``cluster.topology.kind``) to a
:class:`~.plugin.Topology`: its builder ``(site: Site) -> nx.DiGraph``, its typed options
and its placement levels. :func:`build_site` validates ``cluster.topology`` into the kind's
options model once (:func:`typed_options`) and hands the builder that object. Every module of this package that registers one
is imported here, so a new topology is one new file. ``auto`` (the scenario default)
means ``single_node`` for one node and ``fat_tree`` otherwise. Every built graph is
checked the same way: GPU count matches ``nodes × gpus_per_node``, every GPU reaches
every other GPU (searched for, except on an intact hierarchical build, whose routes
:mod:`.hierarchy` names for every pair).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Union, get_args

import networkx as nx
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from ..errors import ScenarioError
from .graph import check_connected
from .plugin import TOPOLOGIES, Site, TopologyOptions

# every module of the package registers its topologies when imported (plugin.py)
for _module in pkgutil.iter_modules([str(Path(__file__).parent)]):
    importlib.import_module(f"{__package__}.{_module.name}")


def resolved_kind(cluster: dict) -> str:
    """``cluster.topology.kind`` with ``auto`` resolved (unchecked)."""
    kind = (cluster.get("topology") or {}).get("kind", "auto")
    if kind == "auto":
        return "single_node" if cluster.get("nodes", 1) == 1 else "fat_tree"
    return kind


def _kind(cluster: dict, field: str) -> str:
    topo = cluster.get("topology")
    if topo is None:
        topo = {}
    if not isinstance(topo, dict):
        raise ScenarioError(f"{field}.topology", topo, "a mapping such as {kind: fat_tree}")
    kind = resolved_kind(cluster)
    if not isinstance(kind, str) or kind not in TOPOLOGIES:
        raise ScenarioError(f"{field}.topology.kind", kind, f"known: auto, {', '.join(TOPOLOGIES)}")
    return kind


def typed_options(cluster: dict, field: str = "cluster") -> TopologyOptions:
    """``cluster.topology`` validated against the discriminated union of every registered
    topology's options (on ``kind``, ``auto`` resolved): its kind's options model, or a
    ScenarioError naming the bad option, its value and the options that topology accepts."""
    kind = _kind(cluster, field)
    topo = {**(cluster.get("topology") or {}), "kind": kind}
    try:
        return _options_union().validate_python(topo)
    except ValidationError as exc:
        raise _refusal(exc.errors()[0], kind, field) from None


def _refusal(err: dict, kind: str, field: str) -> ScenarioError:
    """The ScenarioError of pydantic's first complaint ``err`` about ``cluster.topology``: the
    option's path (``links[2].bandwidth``), its value, why, and the options accepted there."""
    loc = err["loc"][1:]  # (the first is the union's tag)
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    model, where = TOPOLOGIES[kind].options, kind
    for part in loc[:-1]:  # down into a list of typed items (a custom topology's links)
        if isinstance(part, str):
            inner = [a for a in _nested(model.model_fields[part].annotation) if _is_model(a)]
            if inner:
                model, where = inner[0], f"an item of {kind} {part}"
    why = {"extra_forbidden": "unknown option", "missing": "required"}.get(
        err["type"], err["msg"].removeprefix("Value error, ")
    )
    value = None if err["type"] == "missing" else err.get("input")
    return ScenarioError(
        f"{field}.topology{key}", value, f"{why}; {where} accepts: {', '.join(model.model_fields)}"
    )


def _nested(annotation) -> list:
    """``annotation`` and every type inside it (``list[Link] | None``: …, ``Link``, ``None``)."""
    return [annotation, *(a for arg in get_args(annotation) for a in _nested(arg))]


def _is_model(t) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _options_union() -> TypeAdapter:
    return _union_of(tuple(dict.fromkeys(t.options for t in TOPOLOGIES.values())))


@lru_cache(maxsize=8)
def _union_of(models: tuple) -> TypeAdapter:
    """The adapter of the registered topologies' options (built once per set of them: a
    TypeAdapter costs milliseconds, and a plan search loads thousands of scenarios)."""
    union = models[0] if len(models) == 1 else Union[models]  # noqa: UP007  (built at run time)
    return TypeAdapter(Annotated[union, Field(discriminator="kind")])


def build_site(cluster: dict, field: str = "cluster") -> nx.DiGraph:
    """Build the graph of ``cluster`` with the builder its ``topology.kind`` names (unchecked)."""
    options = typed_options(cluster, field)
    g = TOPOLOGIES[options.kind].factory(Site(cluster, field, options))
    g.graph["kind"] = options.kind
    g.graph["topology"] = cluster.get("topology") or {}
    return g


def build_topology(cluster: dict) -> nx.DiGraph:
    """Build and check the topology graph of a resolved ``cluster`` dict.

    Returns a DiGraph whose nodes carry ``kind`` (and ``host`` for GPUs) and whose edges
    carry ``bandwidth`` (bytes/s), ``latency`` (s) and ``kind``. Raises
    :class:`~clustersim.errors.ScenarioError` naming the offending field for an unknown
    kind, a bad quantity, a link to a missing node, or a GPU cut off from the others.
    """
    g = build_site(cluster, "cluster")
    # the GPU model, for what depends on its generation (NVLink SHARP, NCCL's tuner constants)
    g.graph["gpu"] = cluster.get("gpu")
    # the NCCL release, for what depends on it (clustersim.collectives.nccl_version)
    g.graph["nccl_version"] = cluster.get("nccl_version")
    remove_failed_links(g, cluster.get("failed_links") or [])
    hierarchy = g.graph.get("hierarchy")  # (counting the nodes would write a lazy graph, lazy.py)
    gpus = g.graph["num_gpus"] = (
        hierarchy.gpus
        if hierarchy is not None
        else sum(1 for _, kind in g.nodes(data="kind") if kind == "gpu")
    )
    if g.graph["kind"] == "wan":
        expected = cluster.get("nodes", 1) * cluster.get("gpus_per_node", 8)
        if expected != gpus:
            raise ScenarioError(
                "cluster.nodes",
                cluster.get("nodes", 1),
                f"nodes × gpus_per_node must equal the {gpus} GPUs the wan sites hold",
            )
    if "hierarchy" not in g.graph:  # an intact hierarchy joins every pair (hierarchy.py)
        field = "cluster.topology.links" if g.graph["kind"] == "custom" else "cluster.topology"
        check_connected(g, "cluster.failed_links" if cluster.get("failed_links") else field)
    return g


def no_link_reason(g: nx.DiGraph) -> str:
    """Why a pair of nodes named as a link was refused, with a link of ``g`` to copy (a graph
    whose links have all failed has none to offer)."""
    example = next(iter(g.edges), None)
    if example is None:
        return "no link joins these topology nodes; the topology has no links left"
    return f"no link joins these topology nodes; give two linked nodes, e.g. {list(example)}"


def remove_failed_links(g: nx.DiGraph, links) -> None:
    """Remove both directions of every failed cable ``[a, b]`` (``cluster.failed_links``);
    routes then depend on which failed, so the builder's ``hierarchy`` no longer names them."""
    if links:
        g.graph.pop("hierarchy", None)
    for k, (a, b) in enumerate(links):
        if not (g.has_edge(a, b) or g.has_edge(b, a)):
            raise ScenarioError(f"cluster.failed_links[{k}]", [a, b], no_link_reason(g))
        for u, v in ((a, b), (b, a)):
            if g.has_edge(u, v):
                g.remove_edge(u, v)
