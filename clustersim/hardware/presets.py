"""Cluster presets: ready-made ``cluster`` sections for common servers.

Each preset is a partial cluster dict in the exact shape of the scenario's ``cluster``
section (``nodes`` comes from the user). Bandwidths are nominal line rates per GPU per
direction; ``efficiency`` turns them into what the link delivers to NCCL payload, by
ONE rule per link technology, never fitted to the busbw a test compares against:

* NVLink: NCCL's own effective per-link NVLink bandwidth over the link's line rate —
  ``topo.h`` SM80_NVLINK_BW 20.0 GB/s and SM90_NVLINK_BW 20.6 GB/s of 25 GB/s per link
  per direction (``hardware_specs.csv`` column ``nccl_effective_GBps_per_link``):
  0.80 for A100, 0.824 for H100/H200. The maintainer's note on nccl-tests #149 gives the
  same reason (128-byte payload units: 25 → ~20 GB/s).
* InfiniBand: 0.94 for both HDR and NDR — the midpoint of the 46–48 GB/s per 400 Gbit/s
  ConnectX-7 NVIDIA's engineers quote as achievable (nccl-tests #290 and #319 notes),
  i.e. the transport's payload fraction, applied unchanged to HDR.
* PCIe Gen4 x16: 0.80 (128b/130b coding, TLP headers on 256-byte payloads and flow
  control leave ~80 % — the usual rule of thumb; no busbw row was fitted).

``collective_alpha`` holds the per-step latency of collectives (NCCL ``tuning.cc``
hwLat, Ring/Simple). ``collective_protocols`` holds NCCL's three protocols as one system
runs them (latency once per collective, bandwidth fraction; :data:`NCCL_PROTOCOLS_A100`, :data:`NCCL_PROTOCOLS_H100`,
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
NVLINK_EFF_A100 = 20.0e9 / NVLINK_LINE_RATE  # NCCL topo.h SM80_NVLINK_BW
NVLINK_EFF_H100 = 20.6e9 / NVLINK_LINE_RATE  # NCCL topo.h SM90_NVLINK_BW
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
#: node. clustersim does not model NVLS (its plateau, ~480 GB/s busbw, stays at the ring's
#: ~370), so these values carry NVLS's quicker ramp on a ring's bandwidth: right for
#: single-node all-reduces as NCCL runs them by default, optimistic for reduce-scatter,
#: all-gather and multi-node rings below the plateau (no H100 Ring curve was found):
#: * LL: efficiency 0.5 fixed; latency 23 µs fitted (the ~26 µs floor up to 32 KiB);
#: * LL128: latency 26 µs and efficiency 0.85 fitted (1–8 MiB);
#: * Simple: efficiency 1.0; latency 33 µs fitted.
#: Residual on those rows: within 30 % per size (docs/validation.md, context rows).
NCCL_PROTOCOLS_H100: dict[str, dict[str, float]] = {
    "ll": {"latency": 23e-6, "efficiency": 0.5},
    "ll128": {"latency": 26e-6, "efficiency": 0.85},
    "simple": {"latency": 33e-6, "efficiency": 1.0},
}

_ALPHA_NVLINK = {"intra_node": DEFAULT_ALPHA["nvlink"], "inter_node": DEFAULT_ALPHA["net"]}
_ALPHA_PCIE = {"intra_node": DEFAULT_ALPHA["pcie"], "inter_node": DEFAULT_ALPHA["net"]}


def _dgx(gpu: str, nvlink_links: int, nvlink_eff: float, nic_gbit: float, protocols: dict) -> dict[str, Any]:
    return {
        "gpus_per_node": 8,
        "gpu": gpu,
        "intra_node": {
            "kind": "nvswitch",
            "bandwidth": nvlink_links * NVLINK_LINE_RATE,
            "latency": 1e-6,
            "efficiency": nvlink_eff,
        },
        "nic": {"bandwidth": nic_gbit * 1e9 / 8, "latency": 1e-6, "per_node": 8, "efficiency": IB_EFFICIENCY},
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
    "pcie_node": [],
}


def expand_preset(name: str) -> dict[str, Any]:
    """A fresh copy of preset ``name``; ScenarioError on ``cluster.preset`` if unknown."""
    if not isinstance(name, str) or name not in CLUSTER_PRESETS:
        raise ScenarioError("cluster.preset", name, f"known presets: {', '.join(sorted(CLUSTER_PRESETS))}")
    return copy.deepcopy(CLUSTER_PRESETS[name])
