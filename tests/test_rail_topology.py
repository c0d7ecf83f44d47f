"""The built-in rail-optimized topology: how it routes, and that it folds through its
declared placement alone (clustersim/topology/rail.py states the assumptions)."""

import pytest

import clustersim as cs
from clustersim.resolve import resolve
from clustersim.resolve.fold import route_obstacle
from clustersim.topology import Router, build_topology


def _cluster(nodes: int = 2, gpn: int = 4, spines: int = 0) -> dict:
    topology = {"kind": "rail"} if spines == 0 else {"kind": "rail", "spines": spines}
    return {"nodes": nodes, "gpus_per_node": gpn, "nic": {"per_node": gpn}, "topology": topology}


def _switches(graph, path, prefix):
    return [n for n in path if n.startswith(prefix)]


def test_same_rail_pairs_cross_exactly_their_rail_switch():
    g = build_topology(_cluster())
    router = Router(g)
    for j in range(4):  # GPU j of server 0 and GPU j of server 1 share rail j
        assert router.path(f"gpu{j}", f"gpu{4 + j}") == (
            f"gpu{j}",
            f"node0.nic{j}",
            f"rail{j}",
            f"node1.nic{j}",
            f"gpu{4 + j}",
        )


@pytest.mark.parametrize("spines", [0, 2])
def test_cross_rail_pairs_go_through_one_rail_and_nvlink_forwarding_or_the_spine(spines):
    g = build_topology(_cluster(spines=spines))
    router = Router(g)
    forms = set()
    for i in range(4):
        for j in range(4):
            if i == j:
                continue
            path = router.path(f"gpu{i}", f"gpu{4 + j}")
            rails, nvswitch, spine = (_switches(g, path, p) for p in ("rail", "nvswitch", "spine"))
            assert len(path) == 7  # six hops, whichever way
            if spine:
                assert (rails, nvswitch, len(spine)) == ([f"rail{i}", f"rail{j}"], [], 1)
                forms.add("spine")
            else:  # NVLink forwarding on one server onto the other GPU's rail (PXN)
                assert len(rails) == 1 and len(nvswitch) == 1 and rails[0] in (f"rail{i}", f"rail{j}")
                forms.add("nvlink")
    assert forms == ({"nvlink"} if spines == 0 else {"nvlink", "spine"})


def _job(fold: bool, spines: int = 0, pp: int = 4) -> dict:
    nodes, gpn = 4, 8
    return {
        "cluster": {"preset": "dgx_a100", "nodes": nodes, **_cluster(nodes, gpn, spines)},
        "model": {
            "kind": "synthetic",
            "layers": 8,
            "forward": "2 ms",
            "backward": "4 ms",
            "activation": "64 MiB",
            "params": "512 MiB",
        },
        "training": {"global_batch": 64},
        "parallel": {"pp": pp},  # pp = 4: a stage per server, every send stays on one rail
        "simulation": {"network": "packet", "fold": fold, "max_chunks": 16},
    }


@pytest.mark.parametrize("spines", [0, 2])
def test_rail_folds_exactly_through_its_declared_placement(spines):
    """With spines too: no send and no DP ring hop crosses rails, so none takes a spine."""
    assert route_obstacle(resolve(cs.load_scenario(_job(True, spines)))) is None
    full = cs.simulate(_job(False, spines), progress=False)
    folded = cs.simulate(_job(True, spines), progress=False)
    assert folded.summary["folded"].startswith("yes")
    for key in ("iteration_time_s", "bubble_fraction", "num_gpus"):
        assert folded.summary[key] == full.summary[key]


def test_rail_with_spines_refuses_folding_with_its_reason():
    """One stage over 4 servers: the DP ring's hop from GPU 7 to the next server's GPU 0
    crosses rails (spine or NVLink forwarding by ECMP)."""
    assert route_obstacle(resolve(cs.load_scenario(_job(True, spines=2, pp=1)))).startswith(
        "cross-rail routes on a rail"
    )
