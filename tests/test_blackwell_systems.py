"""Blackwell systems: ``dgx_b200`` and the 72-GPU NVLink domains ``gb200_nvl72`` and
``gb300_nvl72`` — datasheet numbers, the NVLink5 plateau against a measured curve, and a
72-GPU domain that placement, folding, the planner and collectives treat as one node."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.collectives.bench import measure, preset_cluster
from clustersim.collectives.group import Group
from clustersim.experiments.plans import placement
from clustersim.hardware.datasheets import datasheet
from clustersim.hardware.presets import CLUSTER_PRESETS, expand_preset
from clustersim.topology import build_topology
from clustersim.topology.servers import nics_per_node

MEASURED = Path(cs.__file__).parent / "data" / "nccl_collective_measurements.csv"
BLACKWELL = ("dgx_b200", "gb200_nvl72", "gb300_nvl72")


@pytest.mark.parametrize("name", BLACKWELL)
def test_nvlink5_per_gpu_is_the_datasheet_figure_at_nccls_blackwell_rate(name):
    preset = expand_preset(name)
    sheet = datasheet(preset["gpu"])
    # 18 NVLink5 links of 50 GB/s per direction: the catalog's 900 GB/s (1.8 TB/s bidirectional)
    assert preset["intra_node"]["bandwidth"] == pytest.approx(sheet.scale_up_bandwidth)
    assert sheet.scale_up == "NVLink5 x18"
    # NCCL src/graph/topo.h SM100_NVLINK_BW 40.1 GB/s of a link's 50
    assert preset["intra_node"]["efficiency"] == pytest.approx(40.1 / 50)
    gpn = preset["gpus_per_node"]
    assert nics_per_node(preset["nic"]["per_node"], gpn) == gpn  # one scale-out NIC per GPU


def test_nvl72_domains_hold_72_gpus_with_400g_or_800g_rails():
    assert expand_preset("gb200_nvl72")["gpus_per_node"] == 72
    assert expand_preset("gb300_nvl72")["gpus_per_node"] == 72
    assert expand_preset("dgx_b200")["gpus_per_node"] == 8
    assert expand_preset("gb200_nvl72")["nic"]["bandwidth"] == 400e9 / 8  # ConnectX-7
    assert expand_preset("gb300_nvl72")["nic"]["bandwidth"] == 800e9 / 8  # ConnectX-8
    assert expand_preset("gb300_nvl72")["gpu"] == "GB300-288GB"


def _azure_gb200_plateau() -> tuple[int, float]:
    with open(MEASURED, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["system"].startswith("Azure ND GB200 v6")]
    largest = max(rows, key=lambda r: int(r["bytes"]))
    assert largest["collective"] == "all_reduce" and largest["ranks"] == "4"
    return int(largest["bytes"]), float(largest["busbw_GBps"]) * 1e9


def test_one_trays_ring_all_reduce_matches_the_measured_gb200_plateau():
    # Azure ND GB200 v6 (one compute tray's 4 GPUs over NVLink5, NCCL 2.25.1 Ring,
    # all_reduce_perf at 8 GiB: 679.6 GB/s busbw); the preset's NVLink rule gives 721.8 GB/s
    # per direction, of which the ring's plateau is what nccl-tests reports — 10 % as the
    # dgx presets' calibration rows
    size, measured = _azure_gb200_plateau()
    cluster = preset_cluster("gb200_nvl72", 1)
    cluster["gpus_per_node"] = cluster["nic"]["per_node"] = 4
    assert measure(cluster, "all_reduce", size).busbw == pytest.approx(measured, rel=0.10)


def _moe(preset: str, nodes: int, gpus: int, **parallel) -> dict:
    return {
        "name": f"ep{parallel.get('ep', 1)} on {preset}",
        "cluster": {"preset": preset, "nodes": nodes},
        "model": {
            **{"layers": 1, "hidden": 1024, "heads": 8, "vocab": 32000, "seq_len": 512},
            **{"experts": 64, "experts_per_token": 4, "gated_mlp": True, "bias": False},
            **{"norm": "rmsnorm", "position": "rope", "dropout": False, "attention": "flash"},
        },
        "training": {"global_batch": gpus, "micro_batch": 1, "precision": "bf16"},
        "parallel": {"pp": 1, "gpus": gpus, **parallel},
        # per-link bytes need the packet network and collectives run as steps on it
        "simulation": {"fidelity": "fast", "network": "packet", "collective_model": "fabric"},
    }


def _link_bytes(res) -> tuple[float, float]:
    """(bytes on NVLink, bytes on every other link: NICs and the scale-out switches)."""
    links = res.spans[res.spans["kind"] == "link"]
    nvlink = links["device"].str.contains("nvswitch")
    return float(links.loc[nvlink, "bytes"].sum()), float(links.loc[~nvlink, "bytes"].sum())


def test_ep64_all_to_all_inside_an_nvl72_rack_never_touches_a_scale_out_link():
    # two racks, the job on 64 GPUs of the first (Megatron-Bridge's EP 64 layouts on GB200
    # run 64 GPUs: 16 of a rack's 18 trays): every EP all-to-all and the DP all-reduce stay
    # on NVLink; the same job over eight DGX B200 crosses the NICs
    res = cs.simulate(_moe("gb200_nvl72", 2, 64, ep=64), progress=False)
    names = set(res.spans.loc[res.spans["kind"] == "collective", "name"])
    assert "ep all_to_all" in names
    nvlink, scale_out = _link_bytes(res)
    assert nvlink > 0 and scale_out == 0
    res = cs.simulate(_moe("dgx_b200", 8, 64, ep=64), progress=False)
    assert _link_bytes(res)[1] > 0


def test_a_tp_group_inside_the_rack_is_one_host_and_one_nvlink_hop():
    cluster = {**expand_preset("gb300_nvl72"), "nodes": 2}
    graph = build_topology(cluster)
    members = [f"gpu{i}" for i in range(64)]
    group = Group(None, type("F", (), {"graph": graph})(), members)
    assert list(group.hosts) == [0]  # hierarchical collectives see one host: no NIC phase
    across = Group(None, type("F", (), {"graph": graph})(), [f"gpu{i}" for i in range(40, 104)])
    assert sorted(len(m) for m in across.hosts.values()) == [32, 32]


def test_placement_puts_tp_and_dp_groups_inside_one_rack():
    # Megatron order on two NVL72 racks: TP 8 × PP 2 × DP 9 — a TP group and a DP group each
    # inside one rack (a 72-GPU node), the one stage-to-stage hop across racks; on DGX B200
    # servers the DP group of 9 would span 9 servers
    assert placement(8, 2, 9, 72) == {"tp_nodes": 1, "dp_nodes": 1, "pp_node_hops": 1}
    assert placement(8, 2, 9, 8)["dp_nodes"] == 9


def test_fold_runs_a_tp_group_of_the_nvl72_domain_as_on_nvlink():
    # TP 4 (one tray's worth) × PP 2 × DP 36 over two racks folds: each TP group inside a rack
    raw = _moe("gb200_nvl72", 2, 144)
    raw["model"]["layers"] = 2
    raw["parallel"] = {"tp": 4, "pp": 2}
    raw["simulation"] = {"fidelity": "fast", "fold": True}
    res = cs.simulate(raw, progress=False)
    assert res.summary["folded"].startswith("yes")


def test_every_preset_is_listed():
    from clustersim.cli import main

    assert set(BLACKWELL) <= set(CLUSTER_PRESETS)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["list"])
    for name in BLACKWELL:
        assert f"  {name}" in out.getvalue()


def test_a_cp16_ring_inside_an_nvl72_rack_stays_on_nvlink():
    # ring attention over 16 GPUs (two DGX B200 servers' worth): inside one NVL72 rack every
    # K/V hop is an NVLink one; over two DGX B200 the ring crosses the NICs
    def dense_cp(preset: str, nodes: int) -> dict:
        raw = _moe(preset, nodes, 16, cp=16)
        raw["model"].update(experts=1, experts_per_token=1, seq_len=4096)
        raw["training"]["global_batch"] = 1
        raw["simulation"]["granularity"] = "layer"  # context parallelism runs per layer
        return raw

    nvlink, scale_out = _link_bytes(cs.simulate(dense_cp("gb200_nvl72", 2), progress=False))
    assert nvlink > 0 and scale_out == 0
    assert _link_bytes(cs.simulate(dense_cp("dgx_b200", 2), progress=False))[1] > 0


def test_blackwell_protocols_follow_the_gb200_ramp_they_were_fitted_on():
    # NCCL_PROTOCOLS_BLACKWELL, least squares on the Azure ND GB200 v6 rows below 256 MiB:
    # every one within 25 % (the LL128 → Simple hand-over at 4 MiB is the largest), errors of
    # both signs along the curve, and the plateau rows (not fitted) within 12 %
    from clustersim.validation.collectives import error, rows

    curve = sorted((r for r in rows() if r.system.startswith("Azure ND GB200")), key=lambda r: r.nbytes)
    assert len(curve) == 24 and {r.cluster for r in curve} == {"gb200_nvl72 gpus_per_node=4"}
    below = [error(r) for r in curve if r.nbytes < 256 * 2**20]
    assert max(abs(e) for e in below) <= 0.25 and min(below) < 0 < max(below)
    assert all(abs(error(r)) <= 0.12 for r in curve if r.nbytes >= 256 * 2**20)
