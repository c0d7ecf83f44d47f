"""Default ``cluster.comm_compute_slowdown`` per GPU type: compute slowed while communication
kernels share the SMs; and the table of what each overlap kind's communication holds
(``data/interference_measurements.csv``: SMs, whether the GEMM is told, measured slowdowns,
each row with its source — :func:`sm_budget`, :func:`interference_rows`).

NCCL runs a collective as one thread block per channel, each holding an SM for the
collective's whole duration, and Transformer Engine's userbuffers reserve ``num_sm`` SMs
for their communication kernels (default 16 for the ``pipeline`` and ``bulk`` methods,
``transformer_engine/pytorch/module/base.py``, ``initialize_ub``). A compute-bound GEMM
sharing the GPU then runs on the remaining SMs, so the one rule used for every GPU is

    slowdown = SMs / (SMs − 16)

with the SM (CU) counts of ``gpu_datasheets.csv`` (its ``sms`` column, each with its
source: the vendors' architecture documents). It is a floor:
HBM and L2 traffic of the collective and wave-quantisation tails add to it. Measured for
comparison: overlapped training kernels on A100, H100, MI250 and MI210 ran 18.9 % slower
on average, 40 % at most (Lee et al. 2025, "Characterizing Compute-Communication Overlap in
GPU-Accelerated Distributed Deep Learning", arXiv:2507.03114); the rule gives 17.4 % for
A100 and 13.8 % for H100. A profile applies the default only where it overlaps something
(:mod:`clustersim.scenario.frameworks`); a stated value always wins. The engine applies it
while a NCCL collective runs; TP overlap applies it to the GEMMs TE launches with an SM
margin (``pipeline``, ``bulk``; not ``ring_exchange``, whose copy-engine transfers hold no
SMs) as their own ``interference`` ops (:mod:`clustersim.workload.tp_overlap`), priced
there per GEMM shape by the wave model over SMs − ``num_sm``
(:mod:`clustersim.workload.gemm_interference`, ``data/interference_measurements.csv``);
this rule is the fallback where a GPU has no SM count, and the engine's rate while a NCCL
collective runs where kernels are not priced one by one (docs/overlap.md).

Where they are (:mod:`clustersim.workload.comm_interference`: a profile's default on, an
NVSwitch node, a GPU with a ``nccl_ring`` CTA row, :func:`nccl_ctas_for`), a compute op
carries its kernels' seconds beside NCCL's CTAs and the engine times it with
:func:`beside_factor` at the HBM bytes/s of the collectives running on its GPU
(:func:`hbm_rate`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .datasheets import datasheets

MEASUREMENTS_CSV = Path(__file__).resolve().parent.parent / "data" / "interference_measurements.csv"

#: SMs a communication kernel set holds: TE userbuffers' default ``num_sm`` (16); NCCL's
#: ring kernels take one SM per channel and use a comparable count on NVSwitch systems
COMM_SMS = 16


def slowdown_of(sms: int) -> float | None:
    """The rule's slowdown on a GPU of ``sms`` SMs (module doc); None with no more SMs than
    a communication kernel set holds."""
    return sms / (sms - COMM_SMS) if sms > COMM_SMS else None


def default_slowdown(gpu: str) -> float | None:
    """The rule's slowdown for catalog GPU ``gpu`` from its datasheet row's SM count, or
    None for a GPU not in the catalog."""
    sheet = datasheets().get(gpu)
    return None if sheet is None else slowdown_of(sheet.sms)


def custom_slowdown(gpu: object) -> float | None:
    """The rule's slowdown for a custom GPU mapping (``cluster.gpu: {…, sms: N}``), or None
    without a valid SM count (validation reports a bad one)."""
    sms = gpu.get("sms") if isinstance(gpu, dict) else None
    valid = isinstance(sms, int) and not isinstance(sms, bool)
    return slowdown_of(sms) if valid else None


@dataclass(frozen=True)
class InterferenceRow:
    """One row of the table: the GPU (``any``: every GPU), the overlap kind, the SMs its
    communication holds and whether the GEMM is launched on the rest (``sm_margin``), a
    measured compute slowdown and the GEMM's grid where the source gives them, the source."""

    gpu: str
    overlap: str
    comm_sms: int | None
    sm_margin: bool | None
    compute_slowdown: float | None
    gemm_ctas: int | None
    source: str


def _number(text: str, kind):
    return kind(float(text)) if text.strip() else None


@lru_cache(maxsize=1)
def interference_rows() -> tuple[InterferenceRow, ...]:
    """Every row of ``data/interference_measurements.csv``."""
    with MEASUREMENTS_CSV.open(newline="", encoding="utf-8") as f:
        return tuple(
            InterferenceRow(
                r["gpu"],
                r["overlap"],
                _number(r["comm_sms"], int),
                None if not r["sm_margin"].strip() else r["sm_margin"].strip() == "1",
                _number(r["compute_slowdown"], float),
                _number(r["gemm_ctas"], int),
                r["source"],
            )
            for r in csv.DictReader(f)
        )


@lru_cache(maxsize=1)
def _budgets() -> dict[str, InterferenceRow]:
    return {r.overlap: r for r in interference_rows() if r.gpu == "any" and r.comm_sms is not None}


def sm_budget(overlap: str) -> InterferenceRow:
    """The row saying how many SMs ``overlap``'s communication holds on every GPU, and
    whether the GEMM beside it is launched on the rest; KeyError for a kind the table lacks."""
    return _budgets()[overlap]


def nccl_ctas(gpu: str, kind: str = "nccl_ring") -> int | None:
    """CTAs (SMs held) of a NCCL ring collective on an 8-GPU NVSwitch node of ``gpu`` (the
    ``nccl_ring`` row whose GPU names its family: ``A100`` for ``A100-SXM4-80GB``), or None
    for a GPU without a row; ``kind`` ``nccl_ring_internode``: of a ring across nodes."""
    rows = [r for r in interference_rows() if r.overlap == kind and gpu.startswith(r.gpu)]
    return rows[0].comm_sms if rows else None


def interference_model(
    sms: int,
    slowdown: float,
    tp_overlap: bool,
    ctas: int = 0,
    deepep: int = 0,
    contention: float = 1.0,
    across: float = 0.0,
) -> str:
    """What priced each kind's interference in a run (the summary's ``interference_model``):
    on a GPU of ``sms`` SMs (0: unknown), ``slowdown`` = ``cluster.comm_compute_slowdown``
    (the SM rule's value, or a stated one), ``tp_overlap`` whether TP userbuffers ran,
    ``ctas`` the NCCL CTAs the kernels beside a collective were priced with (0: the scalar
    priced them; :mod:`clustersim.workload.comm_interference`), ``deepep`` the SMs DeepEP's
    dispatch and combine held where the kernels beside them were priced so (0: none ran),
    ``contention`` the rate a NCCL collective within a node keeps beside compute
    (:mod:`.comm_contention`; 1: not slowed), ``across`` the bus bytes/s a NCCL collective
    across nodes copies at most beside compute (0: not slowed)."""
    source = f"SM rule SMs/(SMs − {COMM_SMS})" if sms and slowdown == slowdown_of(sms) else "stated"
    if ctas:
        nccl = (
            f"nccl: per kernel beside {ctas} NCCL CTAs (GEMM waves on {sms - ctas} of {sms} SMs, HBM share)"
        )
        if contention != 1.0:
            nccl += f", collectives within a node at {contention:.2f} of their rate beside compute (NanoFlow rows)"
        if across:
            nccl += (
                f", collectives across nodes at most {across / 1e9:.0f} GB/s of bus bandwidth beside"
                " compute (their CTAs × NCCL's per-CTA rate × that rate)"
            )
        elif contention != 1.0:
            nccl += ", collectives across nodes not slowed (no per-CTA NCCL rate for the GPU)"
    else:
        nccl = f"nccl: compute ×{slowdown:.4g} while a collective runs ({source})"
    parts = [nccl]
    if deepep:
        parts.append(
            f"deepep: per kernel beside {deepep} DeepEP SMs (GEMM waves on {sms - deepep} of {sms} SMs;"
            f" dispatch/combine at most {deepep} SMs' copy rate)"
        )
    if tp_overlap:
        row = sm_budget("tp_pipeline")
        if sms > row.comm_sms:
            parts.append(
                f"tp userbuffers: wave model on {sms - row.comm_sms} of {sms} SMs (TE num_sm {row.comm_sms})"
            )
        else:
            parts.append(f"tp userbuffers: ×{slowdown:.4g} (no SM count: the scalar fallback)")
    return "; ".join(parts)


#: bus bytes per rank of a collective of ``S`` bytes over ``n`` ranks, as a multiple of
#: (n − 1)/n · S (nccl-tests' busbw factors); kinds not named move ``S``
BUS_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}

#: a kernel keeps at least this share of HBM: the bound on the summed rate of the
#: collectives beside it (each reads and writes at most twice its link bandwidth)
MIN_HBM_SHARE = 0.5


def nccl_ctas_for(cluster, gpu: str) -> int:
    """NCCL CTAs the kernels of catalog GPU ``gpu`` beside a collective are priced with on
    ``cluster`` (a :class:`~clustersim.scenario.cluster_spec.ClusterSpec`), or 0 where the
    scalar SM rule stays: interference off or stated (not the GPU's default), not an NVSwitch
    node, or no CTA row for the GPU."""
    slowdown = cluster.comm_compute_slowdown
    if slowdown == 1.0 or slowdown != default_slowdown(gpu) or cluster.intra_node.kind != "nvswitch":
        return 0
    return nccl_ctas(gpu) or 0


def hbm_rate(kind: str, ranks: int, nbytes: float, seconds: float) -> float:
    """HBM bytes per second a collective moves on each rank: it reads what it sends and
    writes what it receives, 2 × its bus bytes over ``seconds`` (0 for no time)."""
    if seconds <= 0 or ranks <= 1:
        return 0.0
    return 2.0 * bus_share(kind, ranks) * nbytes / seconds


def bus_share(kind: str, ranks: int) -> float:
    """A collective's bus bytes per rank over its ``nbytes`` (nccl-tests' convention,
    :data:`BUS_FACTOR`): 2(n − 1)/n for an all-reduce, 1 for a kind not named."""
    return BUS_FACTOR[kind] * (ranks - 1) / ranks if kind in BUS_FACTOR else 1.0


#: the key of NCCL's CTAs in a compute op's ``beside`` and on a collective op: NCCL's
#: channel count on the GPU (:func:`nccl_ctas`); any other key is the SMs an
#: implementation's kernels hold (DeepEP's ``Buffer.num_sms``, :func:`held_sms`)
NCCL = 0


def deepep_sms_for(cluster, gpu: str) -> int:
    """SMs a DeepEP dispatch or combine holds (the table's ``deepep`` row, every GPU) where
    the kernels of catalog GPU ``gpu`` beside it are priced kernel by kernel on ``cluster``,
    or 0 where the scalar SM rule stays (interference off, or stated: not the GPU's default)."""
    slowdown = cluster.comm_compute_slowdown
    if slowdown == 1.0 or slowdown != default_slowdown(gpu):
        return 0
    return sm_budget("deepep").comm_sms


def beside_factor(
    carried: tuple, duration: float, rate: float, held: dict[int, int] | None = None, scalar: float = 1.0
) -> float:
    """How many times longer a compute op of ``duration`` s takes beside collectives moving
    ``rate`` HBM bytes/s on its GPU; ``carried`` = (memory-bound s, HBM B/s, (key, SM-limited
    s) per collective kind it was priced beside: :data:`NCCL` or the SMs an implementation
    holds). ``held``: the running collectives by key (None: NCCL's only); beside several
    kinds the op runs at the slowest kind's factor (the SMs they hold are not summed, as two
    NCCL collectives are not), a kind it was not priced beside at the ``scalar`` slowdown."""
    mem_s, hbm = carried[0], carried[1]
    priced = dict(carried[2:])
    share = max(1.0 - rate / hbm, MIN_HBM_SHARE)
    worst = None
    for key, running in (held or {NCCL: 1}).items():
        if running:
            sm_s = priced.get(key)
            f = scalar if sm_s is None else (sm_s + mem_s * (1.0 / share - 1.0)) / duration
            worst = f if worst is None else max(worst, f)
    return scalar if worst is None else worst
