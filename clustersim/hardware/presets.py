"""Cluster presets: ready-made ``cluster`` sections for common servers.

Each preset is a partial cluster dict in the exact shape of the scenario's ``cluster``
section (``nodes`` comes from the user). Bandwidths are nominal line rates per GPU per
direction; ``efficiency`` turns them into what the link delivers to NCCL payload, by
ONE rule per link technology, never fitted to the busbw a test compares against:

* NVLink: NCCL's own effective per-link NVLink bandwidth over the link's line rate —
  ``topo.h`` SM80_NVLINK_BW 20.0 GB/s and SM90_NVLINK_BW 20.6 GB/s of 25 GB/s per link
  per direction (``hardware_specs.csv`` column ``nccl_effective_GBps_per_link``):
  0.80 for A100, 0.824 for H100/H200; SM100_NVLINK_BW 40.1 GB/s of NVLink5's 50 GB/s
  per link per direction: 0.802 for Blackwell (B200, GB200, B300, GB300). The
  maintainer's note on nccl-tests #149 gives the same reason (128-byte payload units:
  25 → ~20 GB/s).
* InfiniBand: 0.94 for HDR, NDR and XDR — the midpoint of the 46–48 GB/s per 400 Gbit/s
  ConnectX-7 NVIDIA's engineers quote as achievable (nccl-tests #290 and #319 notes),
  i.e. the transport's payload fraction, applied unchanged to HDR and to ConnectX-8's
  800 Gbit/s (no 800G busbw row is in the measurement set).
* PCIe Gen4 x16: 0.80 (128b/130b coding, TLP headers on 256-byte payloads and flow
  control leave ~80 % — the usual rule of thumb; no busbw row was fitted).

The NVL72 racks (``gb200_nvl72``, ``gb300_nvl72``) are one NVLink domain of 72 GPUs: a
"node" of the cluster dict is the rack's NVLink domain (``gpus_per_node: 72``), so TP, EP
and CP groups that fit inside it — what folding, placement, the planner and hierarchical
collectives call "one node" — run on NVLink, and only groups larger than a rack touch the
scale-out NICs (:mod:`clustersim.topology.servers`: every GPU reaches the domain's switch
in one hop). The 18 compute trays and 9 switch trays are not separate switches here: each
GPU's 18 NVLink5 links go one to each of the 18 NVSwitch chips of the 9 switch trays, a
non-blocking fabric (NVIDIA: "full non-blocking P2P connectivity of all 72 GPUs", 130 TB/s =
72 × 1.8 TB/s), which one switch of 900 GB/s per GPU per direction prices the same. A job
on part of each rack — Megatron-Bridge's GB200 recipes run 64 GPUs (16 trays) per NVLink
domain — writes ``gpus_per_node: 64`` beside the preset: each rack's GPUs in the job.

``collective_alpha`` holds the per-step latency of collectives (NCCL ``tuning.cc``
hwLat, Ring/Simple). ``collective_protocols`` holds NCCL's three protocols as one system
runs them (latency once per collective, bandwidth fraction; :data:`NCCL_PROTOCOLS_A100`,
:data:`NCCL_PROTOCOLS_H100`, :data:`NCCL_PROTOCOLS_BLACKWELL`,
:mod:`clustersim.collectives.protocol`): the size dependence of a collective's cost. Presets leave ``comm_compute_slowdown`` unset: 1.0 (off) unless a
framework profile that overlaps fills the GPU's default (:mod:`.interference`). The measured busbw
rows each preset is checked against are listed in :data:`PRESET_SOURCES` and the
calibration table in ``docs/collectives.md``.
"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import ScenarioError

#: α per link technology, seconds (NCCL tuning.cc hwLat[.][RING][SIMPLE]); the collectives'
#: default ``cluster.collective_alpha`` (:func:`clustersim.collectives.group.resolve_alpha`)
DEFAULT_ALPHA: dict[str, float] = {"nvlink": 3.4e-6, "pcie": 5.7e-6, "net": 14.0e-6}

NVLINK_LINE_RATE = 25e9  # bytes/s per NVLink3/NVLink4 link per direction
#: bytes/s per NVLink5 link per direction: 18 links = 1.8 TB/s bidirectional per GPU (NVIDIA
#: DGX B200 user guide "fifth generation NVLink", DGX GB200 user guide "1.8 TB/s bidirectional
#: per GPU with NVLink 5.0"; gpu_datasheets.csv scale_up NVLink5 x18, 900 GB/s per direction)
NVLINK5_LINE_RATE = 50e9
NVLINK_EFF_A100 = 20.0e9 / NVLINK_LINE_RATE  # NCCL topo.h SM80_NVLINK_BW
NVLINK_EFF_H100 = 20.6e9 / NVLINK_LINE_RATE  # NCCL topo.h SM90_NVLINK_BW
NVLINK_EFF_B200 = 40.1e9 / NVLINK5_LINE_RATE  # NCCL topo.h SM100_NVLINK_BW
IB_EFFICIENCY = 0.94  # 47 of 50 GB/s per NDR NIC (nccl-tests #290, #319)
PCIE_EFFICIENCY = 0.80  # PCIe Gen4 protocol overhead rule of thumb

#: NCCL's protocols on DGX A100 (``cluster.collective_protocols``), calibrated ONCE on the
#: one A100 curve below the plateau in clustersim/data/nccl_collective_measurements.csv —
#: Azure ND A100 v4, all_reduce_perf over 8 GPUs, 1 KiB … 8 GiB (Azure/AI-benchmarking-guide
#: Azure_Results/ND_A100_v4_results.md, NCCL 2.18.5) — by least squares on log time of the
#: model's own single-node cost (see docs/collectives.md "Protocols"):
#: * LL: efficiency 0.5 fixed, not fitted — 4 data bytes per 8-byte line (NCCL
#:   src/device/prims_ll.h); latency 33 µs fitted: the flat ~42 µs nccl-tests floor up to
#:   256 KiB less the direct algorithm's 2·α (the launch and NCCL's baseLat in one number).
#: * LL128: latency 87 µs and efficiency 0.71 fitted (where it wins, 16–32 MiB); NCCL's tuner
#:   says 0.92 (120/128 of the wire), the measured ramp is lower — channels fill up.
#: * Simple: efficiency 1.0 (the link rule of this module holds the plateau); latency
#:   246 µs fitted: the pipeline fill of Simple's 512 KiB-slot FIFOs — with it, nccl-tests'
#:   half-plateau size (16–32 MiB) comes out. A fill is paid per ring step (``per_step``,
#:   NCCL tuning.cc nsteps: an all-gather or reduce-scatter pays baseLat and half the rest).
#: Residual on the curve: within 13 % per size (docs/validation.md).
NCCL_PROTOCOLS_A100: dict[str, dict[str, float]] = {
    "ll": {"latency": 33e-6, "efficiency": 0.5},
    "ll128": {"latency": 87e-6, "efficiency": 0.71},
    "simple": {"latency": 246e-6, "efficiency": 1.0, "per_step": True},
}
#: H100/H200/H800 (``dgx_h100``, ``hgx_h200``, ``hgx_h800``: H100 silicon), calibrated ONCE the same way on the one H100 curve
#: below the plateau in the measurement set — Azure ND H100 v5, all_reduce_perf over 8 GPUs,
#: NCCL 2.18.5 (Azure/AI-benchmarking-guide 'Azure Results/ND_H100_v5_results.md'), its rows
#: under 256 MiB — which ran NVLS (NVLink SHARP), NCCL's default all-reduce on one HGX H100
#: node. The fit priced that curve as a ring (its plateau, ~480 GB/s busbw, at the ring's
#: ~370), so these values carry NVLS's quicker ramp on a ring's bandwidth: right for
#: single-node all-reduces as NCCL runs them by default, optimistic for reduce-scatter,
#: all-gather and multi-node rings below the plateau (no H100 Ring curve was found). NVLS
#: itself runs where a scenario asks for it (``nvls``, or NCCL's choice ``nccl``:
#: clustersim.collectives.nvls), with these values as its Simple protocol but for the
#: latency, NVLS's own per NCCL release (data/nvls_latency.csv: 2.18.5 28.2 µs on this curve):
#: * LL: efficiency 0.5 fixed; latency 23 µs fitted (the ~26 µs floor up to 32 KiB);
#: * LL128: latency 26 µs and efficiency 0.85 fitted (1–8 MiB);
#: * Simple: efficiency 1.0; latency 33 µs fitted.
#: Residual on those rows: within 30 % per size (docs/validation.md, context rows).
NCCL_PROTOCOLS_H100: dict[str, dict[str, float]] = {
    "ll": {"latency": 23e-6, "efficiency": 0.5},
    "ll128": {"latency": 26e-6, "efficiency": 0.85},
    "simple": {"latency": 33e-6, "efficiency": 1.0},
}
#: Blackwell (``dgx_b200``, ``gb200_nvl72``, ``gb300_nvl72``: NVLink5, the NCCL 2.2x that
#: ships with it), calibrated ONCE the same way on the one Blackwell curve in the measurement
#: set — Azure ND GB200 v6, all_reduce_perf over one tray's 4 GPUs, NCCL 2.25.1, Ring
#: (Azure/AI-benchmarking-guide Azure_Results/ND_GB200_v6_results.md), its 18 rows under
#: 256 MiB, least squares on log busbw of the model's own cost on that tray (efficiency 0.802,
#: the rule above): B200 and GB300 run it as a transfer (same NVLink5 and NCCL generation):
#: * LL: efficiency 0.5 fixed; latency 7.6 µs fitted (the ~10 µs nccl-tests floor);
#: * LL128: latency 16 µs and efficiency 0.71 fitted (1–8 MiB);
#: * Simple: efficiency 1.0; latency 40 µs fitted.
#: Residual on those rows: within 25 % per size (+24.5 % at 4 MiB, the LL128→Simple hand-over;
#: the rest within 10 %); the plateau rows, not fitted, within 12 % (docs/validation.md,
#: context rows; tests/test_blackwell_systems.py).
NCCL_PROTOCOLS_BLACKWELL: dict[str, dict[str, float]] = {
    "ll": {"latency": 7.6e-6, "efficiency": 0.5},
    "ll128": {"latency": 16e-6, "efficiency": 0.71},
    "simple": {"latency": 40e-6, "efficiency": 1.0},
}

_ALPHA_NVLINK = {"intra_node": DEFAULT_ALPHA["nvlink"], "inter_node": DEFAULT_ALPHA["net"]}
_ALPHA_PCIE = {"intra_node": DEFAULT_ALPHA["pcie"], "inter_node": DEFAULT_ALPHA["net"]}


def _dgx(
    gpu: str,
    nvlink_links: int,
    nvlink_eff: float,
    nic_gbit: float,
    protocols: dict,
    gpus: int = 8,
    line_rate: float = NVLINK_LINE_RATE,
) -> dict[str, Any]:
    """An NVSwitch system of ``gpus`` GPUs per NVLink domain, each with ``nvlink_links``
    links of ``line_rate`` per direction and one ``nic_gbit`` NIC (its scale-out rail). The
    NCCL release is software, not the system's: a preset leaves ``cluster.nccl_version``
    unset (the newest mechanics modelled), and each calibration row is compared at the
    release its note names (tests/test_nccl_algorithms.py)."""
    return {
        "gpus_per_node": gpus,
        "gpu": gpu,
        "intra_node": {
            "kind": "nvswitch",
            "bandwidth": nvlink_links * line_rate,
            "latency": 1e-6,
            "efficiency": nvlink_eff,
        },
        "nic": {
            "bandwidth": nic_gbit * 1e9 / 8,
            "latency": 1e-6,
            # one NIC per GPU; an NVL72 leaves the count unset (one per GPU of gpus_per_node),
            # so a job on part of each rack (gpus_per_node: 64) keeps a rail per GPU
            "per_node": gpus if gpus == 8 else None,
            "efficiency": IB_EFFICIENCY,
        },
        "pcie": None,
        "topology": {"kind": "fat_tree"},
        "collective_alpha": dict(_ALPHA_NVLINK),
        "collective_protocols": copy.deepcopy(protocols),
    }


#: preset name → partial cluster dict (see module doc for every number's source)
CLUSTER_PRESETS: dict[str, dict[str, Any]] = {
    # DGX A100: 12 NVLink3 links = 300 GB/s per GPU per direction, 8x HDR 200 Gbit/s
    "dgx_a100": _dgx("A100-SXM4-80GB", 12, NVLINK_EFF_A100, 200, NCCL_PROTOCOLS_A100),
    # DGX H100: 18 NVLink4 links = 450 GB/s per GPU per direction, 8x NDR 400 Gbit/s
    "dgx_h100": _dgx("H100-SXM5-80GB", 18, NVLINK_EFF_H100, 400, NCCL_PROTOCOLS_H100),
    # HGX H200: same NVLink4/NVSwitch and 8x NDR 400 Gbit/s as HGX H100, 141 GB HBM3e
    "hgx_h200": _dgx("H200-SXM-141GB", 18, NVLINK_EFF_H100, 400, NCCL_PROTOCOLS_H100),
    # HGX H800: H100 silicon with 8 NVLink4 links = 200 GB/s per GPU per direction (400 GB/s
    # bidirectional; gpu_datasheets.csv), 8x CX7 400 Gbit/s IB as in DeepSeek-V3's cluster
    # (tech report §3.1: NVLink within nodes, IB across; effective 0.824 · 200 = 165 GB/s
    # NVLink and 47 GB/s IB against the report's quoted 160 and 50 GB/s, §3.2.2)
    "hgx_h800": _dgx("H800-SXM5-80GB", 8, NVLINK_EFF_H100, 400, NCCL_PROTOCOLS_H100),
    # DGX B200: 8x B200 (1,440 GB), 2 NVLink5 switch chips, 18 NVLink5 links = 900 GB/s per GPU
    # per direction (1.8 TB/s bidirectional; 14.4 TB/s aggregate), 8x single-port ConnectX-7
    # up to 400 Gbit/s InfiniBand (NVIDIA DGX B200 user guide, "Introduction to NVIDIA DGX B200
    # Systems", component table; DGX BasePOD RA "Core Components": 4 OSFP ports serving 8x CX7)
    "dgx_b200": _dgx(
        "B200-SXM-180GB",
        18,
        NVLINK_EFF_B200,
        400,
        NCCL_PROTOCOLS_BLACKWELL,
        line_rate=NVLINK5_LINE_RATE,
    ),
    # GB200 NVL72: 72 GB200 GPUs in one NVLink domain — 18 1RU compute trays of 2 Grace + 4
    # Blackwell GPUs, 9 1RU NVLink switch trays (NVIDIA DGX GB200 user guide, "Hardware": rack
    # configuration), 1.8 TB/s bidirectional NVLink5 per GPU (same guide, "Networking"); scale-out
    # over InfiniBand: 4 ConnectX-7 400 Gbit/s OSFP ports per compute tray, one per GPU (NVIDIA
    # Mission Control north-south network guide, GB200 compute tray port table: 4 OSFP + 2 BF3)
    "gb200_nvl72": _dgx(
        "GB200-186GB",
        18,
        NVLINK_EFF_B200,
        400,
        NCCL_PROTOCOLS_BLACKWELL,
        gpus=72,
        line_rate=NVLINK5_LINE_RATE,
    ),
    # GB300 NVL72: 72 Blackwell Ultra GPUs, 18 compute trays of 4 GPUs + 2 Grace, 9 NVSwitch
    # trays "for full non-blocking P2P connectivity of all 72 GPUs, 130 TB/s" (NVIDIA Enterprise
    # RA "NVL72 AI factory", System Hardware & Components), NVLink5 as GB200; "4 ConnectX-8 HCAs"
    # per compute tray (same page), 800 Gbit/s each (ConnectX-8 SuperNIC, Hot Chips 2025)
    "gb300_nvl72": _dgx(
        "GB300-288GB",
        18,
        NVLINK_EFF_B200,
        800,
        NCCL_PROTOCOLS_BLACKWELL,
        gpus=72,
        line_rate=NVLINK5_LINE_RATE,
    ),
    # a PCIe server: 8 GPUs behind a PCIe Gen4 x16 switch (32 GB/s per direction),
    # 2x 100 Gbit/s NICs
    "pcie_node": {
        "gpus_per_node": 8,
        "gpu": "A100-SXM4-40GB",
        "intra_node": {"kind": "pcie", "bandwidth": 32e9, "latency": 2e-6, "efficiency": PCIE_EFFICIENCY},
        "nic": {"bandwidth": 100e9 / 8, "latency": 2e-6, "per_node": 2, "efficiency": IB_EFFICIENCY},
        "pcie": None,
        "topology": {"kind": "fat_tree"},
        "collective_alpha": dict(_ALPHA_PCIE),
    },
}

#: preset name → the nccl_busbw.csv rows (by ``source``) it is validated against
PRESET_SOURCES: dict[str, list[str]] = {
    "dgx_a100": [
        "NVIDIA/nccl-tests issue #149 (8x A100 NVSwitch, ~230 GB/s)",
        "NVIDIA/nccl issue #812 (DGX A100 8x HDR multi-node, 192 GB/s)",
    ],
    "dgx_h100": [
        "NVIDIA/nccl-tests issue #212 (8x H100 ring, ~370 GB/s)",
        "NVIDIA/nccl-tests issue #319 (HGX H100 CX7 400G ring, up to ~396 GB/s)",
        "NVIDIA/nccl-tests issue #309 (4x HGX H100 8x400G, 365.84 GB/s)",
    ],
    "hgx_h200": ["NVIDIA/nccl-tests issue #283 (248 nodes x 8 H200, ~350 GB/s; directional)"],
    # the one H800 row (NVIDIA/nccl #1374, 215 GB/s) is an NVLS all-reduce, which is not modelled
    "hgx_h800": [],
    "dgx_b200": [],
    # no nccl_busbw.csv row; the NVLink5 plateau is checked on one tray's 4 GPUs against
    # nccl_collective_measurements.csv's Azure ND GB200 v6 curve (tests/test_presets.py)
    "gb200_nvl72": [],
    "gb300_nvl72": [],
    "pcie_node": [],
}


def expand_preset(name: str) -> dict[str, Any]:
    """A fresh copy of preset ``name``; ScenarioError on ``cluster.preset`` if unknown."""
    if not isinstance(name, str) or name not in CLUSTER_PRESETS:
        raise ScenarioError("cluster.preset", name, f"known presets: {', '.join(sorted(CLUSTER_PRESETS))}")
    return _fresh(CLUSTER_PRESETS[name])


def _fresh(value: Any) -> Any:
    """A copy of ``value`` sharing nothing mutable: :func:`copy.deepcopy`'s, built directly
    for the dicts, lists and plain scalars a preset holds (a scenario load expands one)."""
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    if value is None or type(value) in (str, int, float, bool):
        return value
    return copy.deepcopy(value)
