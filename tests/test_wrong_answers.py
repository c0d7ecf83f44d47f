"""Issue 39's wrong answers given without a warning, each now the right number."""

from __future__ import annotations

from pathlib import Path

import pytest

import clustersim as cs
from clustersim.collectives.group import resolve_alpha
from clustersim.resolve import resolve
from clustersim.topology.routing import Router

ROOT = Path(__file__).resolve().parents[1]


def _two_sites(bandwidth: str, latency: str) -> dict:
    """Data parallelism over 4 one-GPU hosts in two sites of two: its ring crosses the WAN
    between hosts 1 and 2 and back between hosts 3 and 0, at ``fast``."""
    site = {"nodes": 2, "topology": {"kind": "fat_tree"}}
    return {
        "name": "two-sites",
        "cluster": {
            "nodes": 4,
            "gpus_per_node": 1,
            "nic": {"bandwidth": "100 Gbit/s", "per_node": 1},
            "topology": {"kind": "wan", "bandwidth": bandwidth, "latency": latency, "sites": [site, site]},
        },
        "model": {"kind": "synthetic", "layers": 2, "forward": 1e-3, "backward": 2e-3, "params": "64 MiB"},
        "training": {"global_batch": 4},
        "parallel": {"dp": 4},
        "simulation": {"fidelity": "fast", "collectives": {"all_reduce": "ring"}},
    }


@pytest.mark.parametrize(
    ("bandwidth", "latency", "wan_bytes_per_s", "wan_s"),
    [
        ("1 Gbit/s", "30 ms", 125e6, 0.03),
        ("100 Gbit/s", "2 s", 12.5e9, 2.0),
        ("1 Mbit/s", "1 ms", 125e3, 1e-3),
    ],
)
def test_case1_a_cross_site_ring_at_fast_is_its_closed_form_on_the_wan_route(
    bandwidth, latency, wan_bytes_per_s, wan_s
):
    # the ring all-reduce of S bytes over n = 4 ranks, one per host: 2(n − 1) steps, each
    # α_net + the route's latency + S/n bytes at the slowest hop's bandwidth (the WAN link),
    # where the ring crosses between the sites (hosts 1 → 2 and 3 → 0)
    raw = _two_sites(bandwidth, latency)
    spans = cs.simulate(raw).spans
    ar = spans[spans["kind"] == "collective"].iloc[0]
    router = Router(resolve(cs.load_scenario(raw)).graph)
    route = max(router.cost("gpu1", "gpu2")[0], router.cost("gpu3", "gpu0")[0])
    assert wan_s < route < wan_s + 1e-4  # the WAN link and a few µs of site links
    alpha = resolve_alpha(None)["inter_node"]
    closed = 6 * (alpha + route + ar["bytes"] / (4 * wan_bytes_per_s))
    assert ar["end_s"] - ar["start_s"] == pytest.approx(closed, rel=1e-12)


def _folded():
    quick = ROOT / "scenarios" / "quickstart.yaml"
    res = cs.simulate(cs.load_scenario(quick, {"simulation.fidelity": "fast", "simulation.fold": "true"}))
    assert res.summary["folded"].startswith("yes")
    return res


def test_case3_a_folded_runs_stage_utilization_is_the_stages_busy_fraction():
    from clustersim.viz.binning import default_window
    from clustersim.viz.rows import device_info
    from clustersim.viz.utilization import _compute_lines

    res = _folded()
    info = device_info(res.spans, res.devices)
    names, frac = _compute_lines(res.spans, info, default_window(res.spans, None), 60, max_lines=8)
    busy = res.devices.groupby("stage")["busy_fraction"].mean()
    assert len(names) == len(busy) == 4 and "simulated of 4" in names[0]
    # equal bins over the whole run: their mean is the busy time over the makespan
    assert frac.mean(axis=1) == pytest.approx(busy.to_numpy(), rel=1e-9, abs=1e-12)


def test_case3_a_folded_runs_memory_picture_shows_the_simulated_gpus(monkeypatch):
    import clustersim.viz.memory as viz_memory

    res = _folded()
    seen = {}

    def record(memory, *args, **kwargs):
        seen["devices"] = set(memory["device"])

    monkeypatch.setattr(viz_memory, "plot_memory", record)
    res.plot_memory()
    assert seen["devices"] == set(res.spans[res.spans["lane"] == "compute"]["device"])
    assert len(seen["devices"]) < len(res.devices)


def timeline_peaks_hold(res) -> None:
    """Each GPU's memory timeline peaks at its ``peak_memory_bytes``, and the summary's peak
    is the highest (issue 39 case 4); tests/test_quoted_numbers.py checks it on every run of
    a shipped scenario it makes."""
    timeline = res.memory.groupby("device")["allocated_bytes"].max()
    peaks = res.devices.set_index("device")["peak_memory_bytes"]
    # the GPUs; a parameter server's host memory has a timeline but is not a GPU of the table
    assert all(d in peaks.index or d.startswith("server") for d in timeline.index)
    timeline = timeline[timeline.index.isin(peaks.index)]
    assert len(timeline) > 0 and (timeline == peaks.reindex(timeline.index)).all()
    assert res.summary["peak_memory_gib"] * 2**30 == pytest.approx(timeline.max(), rel=1e-12)


def test_case4_a_folded_runs_timeline_holds_the_simulated_gpus_at_their_peaks():
    res = _folded()
    assert set(res.memory["device"]) == set(res.spans[res.spans["lane"] == "compute"]["device"])
    timeline_peaks_hold(res)
