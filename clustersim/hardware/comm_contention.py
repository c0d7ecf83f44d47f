"""A collective slowed by the compute beside it: the rate an SM-driven collective keeps
while a GEMM runs on the rest of its GPU (``data/comm_beside_gemm.csv``).

A collective that copies with SM load/stores (NCCL's channels, MSCCL++'s SM channels) and a
GEMM beside it share the GPU's SMs, L2 and HBM; both slow down. The kernel-level rows are
NanoFlow's profile of its network kernels co-run with GEMMs on 8 × A100-SXM4-80GB
(efeslab/Nanoflow ``autosearch/trace/net_interference.csv``): given a share ``R`` of the
GPU (the GEMM keeping ``1 − R`` of its rate), the network kernel runs at ``P(R)`` of its
rate alone — 0.4 at R = 0.1, 0.9 at R = 0.5. One curve fits them within a few per cent:

    P(R) = min(1, (R / R_full)^a),

``a`` and ``R_full`` (the share at which the collective keeps its whole rate) fitted in
closed form (``ln P`` is linear in ``ln R``; least squares, :func:`fit`): a ≈ 0.49,
R_full ≈ 0.61 — the collective's rate goes roughly as the square root of its share.

What ``R`` is for a collective of this project: the share of the SMs its CTAs hold (NCCL's
ring channels on an NVSwitch node, the ``nccl_ring`` rows of
``data/interference_measurements.csv``), which is the GEMM's loss by the SM rule
(:mod:`.interference`): 24 of A100's 108 SMs, R = 0.22, P = 0.61 — the collective runs
1.6× slower while a GEMM runs beside it, at its full rate once the GEMM ends
(:func:`pair_seconds`). Rows exist for A100 only; every other GPU takes A100's curve at its
own CTA share, a stated transfer (:func:`curve_for`). Applied where the kernels beside a
NCCL collective are priced with its CTAs (the profile's default interference on an NVSwitch
node, :func:`~.interference.nccl_ctas_for`); off with ``cluster.comm_compute_slowdown: 1``.

Across NVLink domains (a collective whose ring crosses NICs) the same mechanism applies
through the collective's SMs rather than its link: its n CTAs copy at most
:func:`copy_rate_beside` = P(n/SMs)·r·n bus bytes/s while a GEMM runs beside them (r NCCL's
per-CTA bus bandwidth alone, ``data/comm_sm_bandwidth.csv``), and a NIC-bound ring moving B
bus bytes/s alone keeps min(1, P·r·n/B) of its rate (:func:`copy_rate_across`; n = the 16
channels NCCL builds across Hopper nodes, the ``nccl_ring_internode`` rows; the model has no
per-collective channel count). On Hopper 16 CTAs copy ~263 GB/s beside a GEMM against the
~360 GB/s a reduce-scatter across H100 nodes moves alone (NVIDIA/nccl#1229): ≤ 0.73 of its
rate. On A100 (its own per-CTA rows, 16.5 GB/s a CTA; 16 channels on an 8-NIC DGX, NCCL's
maintainer in NVIDIA/nccl#689) 16 CTAs copy ~131 GB/s beside a GEMM against the 192 GB/s a
DGX A100 all-reduce moves alone (NVIDIA/nccl#812): ≤ 0.68. Only where r is sourced (A100's
and H200's rows; H100 and H800 take H200's, B200 H200's × NCCL's own per-channel ratio
Blackwell/Hopper, stated transfers, :data:`~.comm_sms.TRANSFERS`) and a channel count
across nodes is (H800's and B200's 16: two per NIC on 8-NIC nodes, transfers); other GPUs'
collectives across nodes are not slowed.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .comm_sms import sm_rate
from .datasheets import datasheets
from .interference import nccl_ctas, nccl_ctas_for

CSV = Path(__file__).resolve().parent.parent / "data" / "comm_beside_gemm.csv"

#: every row against its curve (tests/test_comm_contention.py, ``clustersim validate``)
TOLERANCE = 0.05

#: the GPU family whose rows a GPU without rows takes (the module doc's stated transfer)
DONOR = "A100"


@dataclass(frozen=True)
class ContentionCurve:
    """A collective's rate beside a GEMM by the share of the GPU it holds (module doc)."""

    exponent: float
    full_share: float
    rows: tuple[tuple[float, float], ...]

    def rate(self, share: float) -> float:
        """The collective's rate beside a GEMM, relative to its rate alone, holding
        ``share`` (0–1] of the GPU."""
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {share}")
        return min(1.0, (share / self.full_share) ** self.exponent)


def fit(rows: list[tuple[float, float]]) -> ContentionCurve:
    """The curve through ``rows`` ((share, rate) pairs, at least two shares): ``ln P = a·ln R
    − a·ln R_full`` by least squares."""
    xs = [math.log(r) for r, _ in rows]
    ys = [math.log(p) for _, p in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return ContentionCurve(a, math.exp(mx - my / a), tuple(rows))


@lru_cache(maxsize=1)
def curves() -> dict[tuple[str, str], ContentionCurve]:
    """{(GPU family, implementation): its fitted curve} over every row of the table."""
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with CSV.open(newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            key = (r["gpu"], r["implementation"])
            groups.setdefault(key, []).append((float(r["gemm_share_lost"]), float(r["comm_rate"])))
    return {k: fit(rows) for k, rows in groups.items()}


def curve_for(gpu: str) -> tuple[ContentionCurve, bool]:
    """(the curve for catalog GPU ``gpu``, whether it is a transfer from :data:`DONOR`)."""
    own = [c for (family, _), c in curves().items() if gpu.startswith(family)]
    if own:
        return own[0], False
    return next(c for (family, _), c in curves().items() if family == DONOR), True


def beside_rate(gpu: str, ctas: int, sms: int) -> float:
    """A collective's rate beside a GEMM, relative to alone, on ``gpu`` whose ``sms`` SMs
    include the ``ctas`` its channels hold."""
    return curve_for(gpu)[0].rate(ctas / sms)


def copy_rate_beside(gpu: str, ctas: int) -> float:
    """Bus bytes/s the ``ctas`` CTAs of a NCCL collective on catalog GPU ``gpu`` copy while a
    GEMM runs beside them: NCCL's per-CTA bus bandwidth alone (:func:`~.comm_sms.sm_rate`) ×
    ``ctas`` × :func:`beside_rate`; 0.0 for a GPU without a per-CTA rate. A collective whose
    link moves less than this alone keeps its time alone beside compute as far as its SMs
    go; one that moves more is bound by it (module doc)."""
    per_cta = sm_rate(gpu, "nccl", "all_reduce")
    return beside_rate(gpu, ctas, datasheets()[gpu].sms) * per_cta * ctas if per_cta else 0.0


def pair_seconds(gemm_alone: float, gemm_beside: float, comm_alone: float, rate: float) -> float:
    """Seconds until a GEMM and a collective started together have both ended: the GEMM
    takes ``gemm_alone`` s alone and ``gemm_beside`` s beside the collective, the collective
    ``comm_alone`` s alone and moves at ``rate`` of that beside the GEMM; whichever ends
    first leaves the other its rate alone."""
    comm_beside = comm_alone / rate
    if comm_beside <= gemm_beside:  # the GEMM finishes alone what is left of it
        return comm_beside + gemm_alone * (1.0 - comm_beside / gemm_beside) if gemm_beside else 0.0
    return gemm_beside + comm_alone - rate * gemm_beside


def contention_rate(cluster) -> float:
    """The rate a NCCL collective keeps while compute runs beside it on ``cluster`` (a
    :class:`~clustersim.scenario.cluster_spec.ClusterSpec`): its CTAs' share of the GPU's SMs
    on the curve where the kernels beside it are priced with those CTAs
    (:func:`~.interference.nccl_ctas_for`), else 1 (off: interference off or stated, a custom
    GPU, not an NVSwitch node, no CTA row)."""
    ctas = _priced_ctas(cluster)
    return beside_rate(cluster.gpu, ctas, datasheets()[cluster.gpu].sms) if ctas else 1.0


def copy_rate_across(cluster) -> float:
    """Bus bytes/s a NCCL collective across NVLink domains copies at most while compute runs
    beside it on ``cluster``: :func:`copy_rate_beside` at the CTAs of a ring across nodes
    (the ``nccl_ring_internode`` rows), where :func:`contention_rate` is on; 0.0 (not
    slowed) where it is off or the GPU has no such row or no per-CTA NCCL rate (GB200,
    B300, GH200)."""
    across = nccl_ctas(cluster.gpu, "nccl_ring_internode") if _priced_ctas(cluster) else None
    return copy_rate_beside(cluster.gpu, across) if across else 0.0


def _priced_ctas(cluster) -> int:
    """:func:`~.interference.nccl_ctas_for` of ``cluster``'s GPU, 0 for a custom GPU."""
    custom = cluster.custom_gpu is not None and cluster.custom_gpu.name == cluster.gpu
    return 0 if custom else nccl_ctas_for(cluster, cluster.gpu)
