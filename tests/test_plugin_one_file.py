"""Adding a topology or a collective algorithm is one new file (docs/architecture.md, "How to
add …"): each test writes one module — the whole plugin, nothing else edited — imports it,
and runs a scenario that names it, against the closed form of what the plugin declares.

The modules import ``clustersim`` absolutely (they live in a temporary folder, not in the
package); a module of ``clustersim/topology/`` or ``clustersim/collectives/`` is the same
text with relative imports, and the package imports it by itself (``pkgutil``).
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest

import clustersim as cs
from clustersim.collectives import ALGORITHMS
from clustersim.errors import ScenarioError
from clustersim.resolve import resolve
from clustersim.topology import TOPOLOGIES
from tests.conftest import synthetic

CABLE = '''
"""``test_cable``: GPUs in a line, one cable between neighbours (its bandwidth and latency
are the topology's options)."""

from typing import Literal

import networkx as nx

from clustersim.topology.graph import Bandwidth, Latency, add_link
from clustersim.topology.plugin import TOPOLOGIES, Site, Topology, TopologyOptions


class CableOptions(TopologyOptions):
    kind: Literal["test_cable"]
    bandwidth: Bandwidth
    latency: Latency = 0.0


def build(site: Site) -> nx.DiGraph:
    spec, opts = site.servers, site.options
    g = nx.DiGraph()
    for i in range(spec.num_gpus):
        g.add_node(f"gpu{i}", kind="gpu", host=i // spec.gpus_per_node)
    for i in range(spec.num_gpus - 1):
        add_link(g, f"gpu{i}", f"gpu{i + 1}", opts.bandwidth, opts.latency, "direct")
    return g


TOPOLOGIES.add(
    Topology("test_cable", "GPUs in a line, one cable between neighbours", factory=build, options=CableOptions)
)
'''

STAR = '''
"""``test_star``: an all-reduce that every rank sends to the first member, which sends the
sum back to each — two dependent steps of S bytes: ``2·(α + S/B)`` on two ranks."""

from clustersim.collectives.algorithm import ALGORITHMS, Algorithm
from clustersim.collectives.schedule import Msg, all_of


def build(group, kind, nbytes, options):
    env, order = group.env, group.members
    root, others = order[0], order[1:]
    ups = [Msg(env, m, root, nbytes, ()) for m in others]
    summed = all_of(msg.done for msg in ups)
    downs = [Msg(env, root, m, nbytes, summed) for m in others]
    return [[msg] for msg in ups] + [downs], {root: summed, **{m.dst: (m.done,) for m in downs}}


def cost(sh, kind, s, servers):
    return 2 * (sh.alpha + (sh.n - 1) * s / sh.bw)


ALGORITHMS.add(
    Algorithm(
        "test_star",
        "every rank to the first, the sum back to each",
        kinds=frozenset({"all_reduce"}),
        factory=build,
        cost=cost,
        in_auto=lambda n, per_host: False,
    )
)
'''


def _plugin(tmp_path, monkeypatch, name: str, text: str) -> None:
    """Write ``text`` as module ``name`` in ``tmp_path`` and import it (it registers itself)."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)


@pytest.fixture
def cable(tmp_path, monkeypatch):
    _plugin(tmp_path, monkeypatch, "test_cable_topology", CABLE)
    yield
    del TOPOLOGIES["test_cable"]


@pytest.fixture
def star(tmp_path, monkeypatch):
    _plugin(tmp_path, monkeypatch, "test_star_algorithm", STAR)
    yield
    del ALGORITHMS["test_star"]


def _on_cable(**topology) -> dict:
    """Two one-GPU nodes joined by the new topology's cable: a 2-stage pipeline, m = 1."""
    raw = synthetic(2, 1, 3e-3, 5e-3, activation=16 * 2**20, network="analytical", gpus_per_node=1)
    raw["cluster"].update(nodes=2, topology={"kind": "test_cable", **topology})
    return raw


def test_a_new_topology_is_one_module(cable):
    res = cs.simulate(_on_cable(bandwidth="8 Gbit/s", latency="5 us"))
    # forward wave, the activation across the cable, backward wave, the gradient back
    t_x = 5e-6 + 16 * 2**20 / 1e9
    assert res.summary["iteration_time_s"] == pytest.approx(2 * 3e-3 + 2 * 5e-3 + 2 * t_x, rel=1e-12)


def test_a_new_topology_s_options_are_typed_at_load(cable):
    with pytest.raises(ScenarioError) as err:
        cs.load_scenario(_on_cable(bandwidth="fast"))
    assert err.value.field == "cluster.topology.bandwidth" and err.value.value == "fast"
    assert "200 Gbit/s" in err.value.expected  # what a bandwidth is written as
    with pytest.raises(ScenarioError) as err:
        cs.load_scenario(_on_cable(bandwidth="8 Gbit/s", colour="red"))
    assert err.value.field == "cluster.topology.colour" and "bandwidth, latency" in err.value.expected


def _data_parallel(algorithm: str) -> dict:
    """One stage on two GPUs of one node, α = 0: the iteration is F, B, then the all-reduce."""
    raw = synthetic(1, 1, 3e-3, 5e-3, params=2**26, dp=2, latency=0.0)
    raw["cluster"]["collective_alpha"] = {"intra_node": 0.0, "inter_node": 0.0}
    raw["simulation"]["collectives"] = {"all_reduce": algorithm}
    return raw


def test_a_new_collective_algorithm_is_one_module(star):
    sc = cs.load_scenario(_data_parallel("test_star"))
    s = resolve(sc).chunk_costs[0].gradient_bytes  # (the bytes the all-reduce carries)
    assert s > 0
    res = cs.simulate(sc)
    # two dependent sends of S at the intra-node 1e11 B/s; the ring takes one S in all
    assert res.summary["iteration_time_s"] == pytest.approx(3e-3 + 5e-3 + 2 * s / 1e11, rel=1e-12)
    ring = cs.simulate(_data_parallel("ring"))
    assert ring.summary["iteration_time_s"] == pytest.approx(3e-3 + 5e-3 + s / 1e11, rel=1e-12)
    analytical = cs.simulate(sc.with_overrides({"simulation.collective_model": "analytical"}))
    assert analytical.summary["iteration_time_s"] == pytest.approx(res.summary["iteration_time_s"], rel=1e-12)
