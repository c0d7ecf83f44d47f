"""Communication slowed by the SMs it is left: a communication kernel moves at most what its
SMs can copy (``data/comm_sm_bandwidth.csv``).

A communication kernel that moves data with SM load/store instructions (NCCL's channels,
DeepEP's normal kernels) copies at a rate per SM it holds; the link caps the rest. The
kernel-level rows measure a collective's bandwidth by the SMs it was given — NCCL's
all-reduce on 8 H200 with ``maxCTAs`` 1–8 and on 4 A100 with ``NCCL_MIN_CTAS`` =
``NCCL_MAX_CTAS`` 1–8 (SM clock at its 1410 MHz boost), DeepEP's intranode dispatch and
combine on B200 and GB200 at 16–48 SMs (NVIDIA's Hybrid-EP README) — and every row is
within a few per cent of one curve per (GPU, implementation, kernel):

    B(n) = ((r·n)^−p + B_max^−p)^(−1/p),  p = 4,

``r`` the bytes/s one SM moves, ``B_max`` the plateau (the link or the kernel's own limit).
``p`` is one number for all rows (a smooth minimum: p → ∞ is min(r·n, B_max)); r and B_max
are fitted per group in closed form (``B^−p`` is linear in ``n^−p``; least squares on the
relative error, :func:`fit`). The engine applies the SM side alone — the fabric already
gives the link's time — as :func:`stretched`: a collective the fabric would finish in
``t_link`` takes ``(t_link^p + t_sm^p)^(1/p)`` with ``t_sm`` = bytes / (r·SMs held).

Where it applies (:func:`sm_rate`): DeepEP's dispatch and combine, which hold
``Buffer.num_sms`` (20: the ``deepep`` row of ``data/interference_measurements.csv``) for
the compute beside them to keep the rest. On B200 20 SMs copy ~300–450 GB/s where the
NVLink domain carries ~700: the dispatch is SM-bound, and pricing it at the link's rate
(as before) made it ~2× too fast. NCCL is not stretched: at its 24 channels (H100/H200)
r·24 ≈ 880 GB/s of bus bandwidth, over twice what NVLink4 carries (A100: 16.5 GB/s a CTA,
r·24 ≈ 400 GB/s against NVLink3's ~230) — its CTAs are its own
for the whole call, so a collective's time alone is its time beside compute as far as SMs
go (tests/test_comm_sms.py checks the margin). A NCCL collective slowed by the compute
beside it (SMs, L2, HBM) is :mod:`.comm_contention`'s.

GPUs without rows take a donor's per-SM rate, stated as a transfer (:data:`TRANSFERS`):
Hopper's SMs copy at Blackwell's per-SM rate is an assumption (no Hopper row of DeepEP by
SM count was found); on H800 (160 GB/s NVLink) 20 SMs are far above the link and the
stretch is ~1.5 %. H100 and H800 take H200's NCCL rows (the same die and 132 SMs at the
same clocks, a stated transfer), before Blackwell's for DeepEP's kernels. B200 has no NCCL
row by CTA count: it takes H200's per-CTA rate × the ratio of NCCL's own per-channel ring
bandwidths for the two architectures (:data:`NCCL_PER_CHANNEL_GBPS`: Blackwell 40.0,
Hopper 36.7 GB/s), a stated transfer. NCCL's Hopper constant is H200's measured rate; its
Ampere one (20.0) is 1.2× A100's rows (16.5), and by clock alone A100's rate would give
Hopper 23 GB/s against the measured 36.7 — why the transfer goes by NCCL's constants, not
by clock.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CSV = Path(__file__).resolve().parent.parent / "data" / "comm_sm_bandwidth.csv"

#: the smooth minimum's exponent (module doc); one for every row
P = 4.0

#: each implementation's rows against their curve (tests/test_comm_sms.py, ``clustersim
#: validate``): DeepEP's span the bend (16–48 SMs), NCCL's stop at 8 CTAs, far below the
#: plateau the fit extrapolates
TOLERANCE = {"deepep": 0.05, "nccl": 0.08}

#: GPU family → the families whose rows it takes, first one with rows of the kernel, each a
#: stated transfer (module doc)
TRANSFERS = {
    "H100": ("H200", "B200"),
    "H800": ("H200", "B200"),
    "H200": ("B200",),
    "GH200": ("B200",),
    "B200": ("H200",),
    "B300": ("B200",),
    "GB300": ("GB200",),
}

#: NCCL's own per-channel ring bandwidth (GB/s) by GPU family: its tuning model's
#: ``perChMaxRingLL128Bws`` for Ampere, Hopper and Blackwell (NVIDIA/nccl
#: src/graph/tuning.cc, v2.30.7). A family takes another's NCCL rows only where both have
#: one, scaled by their ratio (module doc)
NCCL_PER_CHANNEL_GBPS = {"A100": 20.0, "H100": 36.7, "H200": 36.7, "H800": 36.7, "B200": 40.0}


@dataclass(frozen=True)
class SMCurve:
    """One (GPU, implementation, kernel)'s fitted curve: ``rate`` bytes/s per SM, ``plateau``
    bytes/s (inf where the rows never bend), the rows' ``(sms, bytes/s)``."""

    rate: float
    plateau: float
    rows: tuple[tuple[int, float], ...]

    def bandwidth(self, sms: int) -> float:
        """Bytes/s the kernel moves on ``sms`` SMs (module doc's B(n))."""
        cap = 0.0 if self.plateau == float("inf") else self.plateau**-P
        return ((self.rate * sms) ** -P + cap) ** (-1.0 / P)


def fit(rows: list[tuple[int, float]]) -> SMCurve:
    """The curve through ``rows`` of (SMs, bytes/s): with x = n^−p, y = B^−p the model is
    y = a·x + c (a = r^−p, c = B_max^−p); minimise Σ((a·x + c)/y − 1)² (relative error),
    two normal equations."""
    u = [n**-P / b**-P for n, b in rows]
    w = [1.0 / b**-P for _, b in rows]
    suu, suw, sww = sum(x * x for x in u), sum(x * y for x, y in zip(u, w)), sum(y * y for y in w)
    su, sw = sum(u), sum(w)
    det = suu * sww - suw * suw
    a = (su * sww - sw * suw) / det
    c = (suu * sw - suw * su) / det
    return SMCurve(a ** (-1.0 / P), c ** (-1.0 / P) if c > 0 else float("inf"), tuple(rows))


@lru_cache(maxsize=1)
def curves() -> dict[tuple[str, str, str], SMCurve]:
    """Every (GPU, implementation, kernel)'s curve from ``data/comm_sm_bandwidth.csv``."""
    groups: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    with CSV.open(newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            key = (r["gpu"], r["implementation"], r["kernel"])
            groups.setdefault(key, []).append((int(r["sms"]), float(r["GBps"]) * 1e9))
    return {key: fit(rows) for key, rows in groups.items()}


def family(gpu: str) -> str:
    """The rows' GPU family of catalog name ``gpu`` (``B200`` for ``B200-SXM-180GB``; the
    longest family name that starts it, so ``GB200`` is not ``B200``)."""
    names = {k[0] for k in curves()} | set(TRANSFERS)
    found = [n for n in names if gpu.startswith(n)]
    return max(found, key=len) if found else ""


def sm_rate(gpu: str, implementation: str, kernel: str) -> float:
    """Bytes/s one SM of ``gpu`` moves in ``implementation``'s ``kernel`` (a transfer where
    the GPU has no rows, :data:`TRANSFERS`), 0.0 where nothing is known."""
    fam = family(gpu)
    for donor in (fam, *TRANSFERS.get(fam, ())):
        curve = curves().get((donor, implementation, kernel))
        if curve:
            return curve.rate * _scale(fam, donor, implementation)
    return 0.0


def _scale(fam: str, donor: str, implementation: str) -> float:
    """What ``fam`` takes of ``donor``'s per-SM rate: all of it, but for NCCL the ratio of
    their :data:`NCCL_PER_CHANNEL_GBPS` (0.0 where either lacks one: no transfer)."""
    if implementation != "nccl" or donor == fam:
        return 1.0
    per_channel = NCCL_PER_CHANNEL_GBPS
    return per_channel[fam] / per_channel[donor] if fam in per_channel and donor in per_channel else 0.0


def stretched(link_s: float, sm_s: float) -> float:
    """Seconds of a collective the link alone would finish in ``link_s`` whose SMs alone
    would take ``sm_s`` (the smooth minimum of their rates, module doc)."""
    if sm_s <= 0.0:
        return link_s
    if link_s <= 0.0:
        return sm_s
    return (link_s**P + sm_s**P) ** (1.0 / P)
