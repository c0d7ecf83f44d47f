"""Topology graphs whose networkx adjacency is written on first use.

A 16,384-GPU fat tree is 35k nodes and 106k links, about 0.15 s of CPU to write, while a
folded analytical run on it reads only some of their attributes: the fold check and the
routes come from the builder's :mod:`.hierarchy`, and the α–β costs and collective groups
ask for the links along those routes and the server of each member. So the ``fat_tree``/``leaf_spine`` and ``rail`` builders (the large
ones; ``single_node`` and ``star`` write at once) return a :class:`LazyDiGraph`: a :class:`networkx.DiGraph` holding its :class:`Layout` (what the
builder decided) and its graph attributes (``g.graph``), whose nodes and links the layout
writes the first time anything reads networkx's own dicts (``_node``, ``_adj``, ``_succ``,
``_pred``: every networkx method and view goes through them; like :mod:`.graph`, this
relies on networkx's own attribute names, and tests/test_topology.py and
tests/test_lazy_topology.py fail if they change). From then on it *is* a plain DiGraph —
its class too — exactly the graph the builder used to write at once.

Until then :func:`node_data`, :func:`link_data`, :func:`has_node` and :func:`successors`
answer from the layout; on any other graph they read networkx's. The routers, fabrics and
collectives that only read attributes go through them, so laziness is invisible except
in speed. tests/test_lazy_topology.py checks the layouts' answers against the written
graph on every node and pair of nodes of random builds.
"""

from __future__ import annotations

import threading
from typing import Protocol

import networkx as nx

#: held while a graph is written: a cached graph may be shared by a sweep's threads (a Dask
#: worker runs several), and none may read it half-written
_WRITING = threading.Lock()


class Layout(Protocol):
    """What a hierarchical builder decided, able to write its graph and to answer for it."""

    def write(self, g: nx.DiGraph) -> None:
        """Add every node and link of the build to the empty graph ``g``."""

    def node(self, name: str) -> dict | None:
        """The attributes node ``name`` gets, None when the build has no such node."""

    def link(self, u: str, v: str) -> dict | None:
        """The attributes of the directed link ``u → v``, None when there is none."""

    def successors(self, name: str) -> list[str] | None:
        """The nodes ``name`` links to, in the written graph's order — or None where the
        layout leaves the answer to the graph (it need not know every node's)."""


class _Written:
    """A networkx dict of a :class:`LazyDiGraph` (``_node``, ``_adj``, …): reading or
    replacing it writes the graph first, which turns it into a plain DiGraph."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, g, owner=None):
        if g is None:
            return self
        g._write_now()
        return getattr(g, self.name)

    def __set__(self, g, value) -> None:
        g._write_now()
        setattr(g, self.name, value)


class LazyDiGraph(nx.DiGraph):
    """A DiGraph that ``layout`` writes on first use (module docstring). ``LazyDiGraph()``
    with networkx's own arguments (what ``copy`` and friends call) is a plain DiGraph."""

    _node, _adj, _succ, _pred = _Written(), _Written(), _Written(), _Written()

    @classmethod
    def of(cls, layout: Layout, **attr) -> LazyDiGraph:
        """The graph ``layout`` writes, with graph attributes ``attr``, not written yet."""
        g = cls.__new__(cls)
        g.__dict__.update(graph=attr, __networkx_cache__={}, _layout=layout)
        return g

    def _write_now(self) -> None:
        """Become the plain DiGraph the layout writes (an empty one without a layout): the
        graph is written aside and its dicts taken over, the class changed last, so a
        thread reads either through these descriptors (and waits here) or the whole graph."""
        with _WRITING:
            if type(self) is not LazyDiGraph:  # another thread wrote it meanwhile
                return
            written = nx.DiGraph()
            layout = self.__dict__.pop("_layout", None)
            if layout is not None:
                layout.write(written)
            for name in ("_node", "_adj", "_succ", "_pred"):
                self.__dict__[name] = written.__dict__[name]
            self.__class__ = nx.DiGraph


def _layout(g: nx.DiGraph) -> Layout | None:
    """The layout of a graph not written yet, else None."""
    return g.__dict__["_layout"] if type(g) is LazyDiGraph else None


def node_data(g: nx.DiGraph, name: str) -> dict:
    """``g.nodes[name]``, to read only (KeyError for a node ``g`` does not have)."""
    if type(g) is not LazyDiGraph:  # (inline :func:`_layout`: collective groups ask per member)
        return g.nodes[name]
    data = g.__dict__["_layout"].node(name)
    if data is None:
        raise KeyError(name)
    return data


def link_data(g: nx.DiGraph, u: str, v: str) -> dict:
    """``g.edges[u, v]``, to read only (KeyError for a link ``g`` does not have)."""
    layout = _layout(g)
    if layout is None:
        return g.edges[u, v]
    data = layout.link(u, v)
    if data is None:
        raise KeyError((u, v))
    return data


def has_node(g: nx.DiGraph, name: str) -> bool:
    """``name in g``."""
    layout = _layout(g)
    return name in g if layout is None else layout.node(name) is not None


def successors(g: nx.DiGraph, name: str) -> list[str]:
    """``list(g.succ[name])``: the nodes ``name`` links to, in the graph's order."""
    layout = _layout(g)
    out = None if layout is None else layout.successors(name)
    return list(g.succ[name]) if out is None else out
