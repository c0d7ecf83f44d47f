"""A GEMM and a NCCL collective run together on two streams, against the published totals of
such pairs (``data/comm_pair_measurements.csv``): a check of the interference rules at the
pair level — the GEMM slowed by NCCL's CTAs (:mod:`clustersim.workload.gemm_interference`),
the collective by the GEMM (:mod:`clustersim.hardware.comm_contention`), each at its rate
alone once the other has ended (:func:`~clustersim.hardware.comm_contention.pair_seconds`).

Each row is priced by the project's own models: the GEMM by the GPU's cost model, the
collective on its preset's one-node fabric (:func:`clustersim.collectives.bench.measure`; an
all-gather's bytes are what it gathers, ``ranks`` × each rank's). Nothing is fitted to the
rows; the table shows the overlapped pair with the collective slowed and at its rate alone.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

from ..collectives.bench import measure, preset_cluster
from ..hardware.comm_contention import beside_rate, pair_seconds
from ..hardware.datasheets import datasheets
from ..hardware.interference import nccl_ctas
from ..workload.cost_model import CostModel, gemm_batch
from ..workload.gemm_interference import untold_slowdown
from ..workload.ops import gemm
from .data import DATA
from .verdict import Verdict, within

CSV = DATA / "comm_pair_measurements.csv"

#: the overlapped pair's priced total against the measured one
TOLERANCE = 0.10


@dataclass(frozen=True)
class PairCheck:
    """One measured pair and its prices (seconds): both back to back, overlapped with the
    collective slowed by the GEMM, overlapped with the collective at its rate alone."""

    row: dict
    sequential: float
    overlapped: float
    unslowed: float


def pair_checks() -> list[PairCheck]:
    """Every row of the table, priced (module doc)."""
    out = []
    with CSV.open(newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            gpu, ranks = r["gpu"], int(r["ranks"])
            cm = CostModel.for_gpu(gpu)
            work = gemm("mm", int(r["gemm_m"]), int(r["gemm_n"]), int(r["gemm_k"]), 2).fwd
            alone = cm.time(work)
            ctas = nccl_ctas(gpu)
            beside = alone * untold_slowdown(cm.eff, work.gemm, gemm_batch(work), ctas)
            nbytes = int(r["nbytes_per_rank"]) * (ranks if r["collective"] == "all_gather" else 1)
            comm = measure(preset_cluster(r["preset"], 1), r["collective"], nbytes).time_s
            rate = beside_rate(gpu, ctas, datasheets()[gpu].sms)
            out.append(
                PairCheck(
                    r,
                    alone + comm,
                    pair_seconds(alone, beside, comm, rate),
                    pair_seconds(alone, beside, comm, 1.0),
                )
            )
    return out


def pair_table() -> tuple[str, Verdict]:
    """Markdown of every pair (ms) and its verdict: the overlapped total within :data:`TOLERANCE`."""
    lines = [
        "| GPU | pair | sequential measured / priced | overlapped measured | priced (collective slowed) | "
        "priced (collective alone) |",
        "|---|---|---|---|---|---|",
    ]
    errors = []
    for c in pair_checks():
        r = c.row
        seq, ovl = float(r["sequential_ms"]), float(r["overlapped_ms"])
        err = c.overlapped * 1e3 / ovl - 1
        errors.append(err)
        lines.append(
            f"| {r['gpu']} | {r['gemm_m']}×{r['gemm_n']}×{r['gemm_k']} {r['dtype']} GEMM + {r['collective']} "
            f"{int(r['nbytes_per_rank']) / 2**20:.0f} MiB/rank × {r['ranks']} | {seq} / {c.sequential * 1e3:.2f} "
            f"| {ovl} | {c.overlapped * 1e3:.2f} ({err:+.1%}) | {c.unslowed * 1e3:.2f} ({c.unslowed * 1e3 / ovl - 1:+.1%}) |"
        )
    return "\n".join(lines), within("GEMM beside a collective, pair totals", errors, TOLERANCE, "every pair")
