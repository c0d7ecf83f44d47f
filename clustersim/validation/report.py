"""``clustersim validate``: run the validation sets and format them as Markdown tables.

The report is what ``docs/validation.md`` holds: Megatron Table 1 (TFLOP/s per GPU,
error per row, MAE and max), Korthikanti Table 4 (one layer's forward/backward), the
memory check against Korthikanti Figures 1/7, the kernel-level tables per GPU (GEMM,
attention), Transformer Engine's GEMM and FP8-quantize benchmark (:mod:`.te_gemms`), the
memory-bound, MoE, host and interference tables (:mod:`.kernel_families`) and the
collective-level (nccl-tests bus bandwidth) tables per cluster preset. Each table ends with
a pass/fail line against its stated tolerance (:class:`.verdict.Verdict`).
"""

from __future__ import annotations

from .collectives import collective_tables, collective_verdicts
from .data import read_table
from .kernel_families import family_tables
from .kernels import kernel_tables, kernel_verdicts
from .korthikanti import layer_times, memory_check
from .megatron import MICRO_BATCH_RULE, megatron_rows, run_rows
from .te_gemms import te_gemm_tables, te_gemm_verdicts
from .verdict import Verdict, within

#: Table 1's must-hold: mean and largest |error| of predicted TFLOP/s per GPU
TABLE1_MEAN, TABLE1_MAX = 0.05, 0.10
#: Table 4's must-hold: every forward and backward time within this
TABLE4_BOUND = 0.05
#: memory per GPU against Korthikanti Figures 1 / 7 (tests/test_memory_model.py)
MEMORY_BOUND = 0.10

_TABLE4_MODES = {
    "baseline no recompute": ("none", False),
    "sequence parallelism": ("none", True),
    "baseline full recompute": ("full", False),
    "selective recompute": ("selective", False),
    "selective + sequence": ("selective", True),
}


def megatron_table(results: list[dict]) -> str:
    """Markdown table of Table 1 results with MAE and max absolute error."""
    lines = [
        "| model | GPUs | TP | PP | DP | B | b | published TFLOP/s | predicted | error | peak GiB | sim wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['model']} | {r['gpus']} | {r['tp']} | {r['pp']} | {r['dp']} | {r['batch']} | "
            f"{r['micro_batch']} | {r['published']:.0f} | {r['predicted']:.1f} | {r['error']:+.1%} | "
            f"{r['peak_memory_gib']:.1f}{' OOM' if r['oom'] else ''} | {r['wall_s']:.0f} |"
        )
    errs = [abs(r["error"]) for r in results]
    if errs:
        lines.append(
            f"\nMean absolute error {sum(errs) / len(errs):.1%}, max {max(errs):.1%} over "
            f"{len(errs)} rows. Micro-batch rule: {MICRO_BATCH_RULE}."
        )
        lines.append(f"\n{megatron_verdict(results).line()}")
    return "\n".join(lines)


def megatron_verdict(results: list[dict]) -> Verdict:
    """Table 1 against its must-hold: mean |error| ≤ 5 %, every row ≤ 10 %."""
    errs = [abs(r["error"]) for r in results]
    mean, worst = sum(errs) / len(errs), max(errs)
    return Verdict(
        "Megatron Table 1",
        mean <= TABLE1_MEAN and worst <= TABLE1_MAX,
        f"mean |error| {mean:.1%} (≤ {TABLE1_MEAN:.0%}), largest {worst:.1%} (≤ {TABLE1_MAX:.0%})",
    )


def layer_table() -> tuple[str, Verdict]:
    """Markdown table: Korthikanti Table 4 vs the simulated 22B layer (ms), and its verdict."""
    lines = ["| experiment | published F / B ms | predicted F / B ms | error F / B |", "|---|---|---|---|"]
    errors = []
    for row in read_table("korthikanti_table4_layer_times"):
        recompute, sp = _TABLE4_MODES[row["experiment"]]
        f, b = (x * 1e3 for x in layer_times(recompute, sp))
        pf, pb = float(row["forward_ms"]), float(row["backward_ms"])
        errors += [f / pf - 1, b / pb - 1]
        lines.append(
            f"| {row['experiment']} | {pf} / {pb} | {f:.2f} / {b:.2f} | {f / pf - 1:+.1%} / {b / pb - 1:+.1%} |"
        )
    verdict = within("Korthikanti Table 4", errors, TABLE4_BOUND, "every forward and backward time")
    return "\n".join([*lines, "", verdict.line()]), verdict


def memory_table() -> tuple[str, Verdict]:
    """Markdown table: per-GPU memory vs Korthikanti Figures 1/7 (GiB), and its verdict."""
    lines = ["| model | quantity | published GiB | predicted GiB | error |", "|---|---|---|---|---|"]
    rows = memory_check()
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['quantity']} | {r['published_gib']:.2f} | {r['predicted_gib']:.2f} | "
            f"{r['error']:+.1%} |"
        )
    verdict = within("Korthikanti Figures 1 / 7", [r["error"] for r in rows], MEMORY_BOUND)
    return "\n".join([*lines, "", verdict.line()]), verdict


def run_validation(rows: list[int] | None = None, progress=None) -> tuple[str, list[dict], list[Verdict]]:
    """Run everything; return (Markdown report, Table 1 results, every table's verdict).
    ``rows``: Table 1 indices to run (the Table 1 verdict is then over those rows)."""
    table = megatron_rows()
    chosen = [table[i] for i in rows] if rows else table
    results = run_rows(chosen, progress=progress)
    (layers, layer_verdict), (memory, memory_verdict) = layer_table(), memory_table()
    families, family_verdicts = family_tables()
    md = "\n\n".join(
        [
            "## Megatron-LM 2021, Table 1 (TFLOP/s per GPU, Megatron's 96·B·s·l·h² count)",
            megatron_table(results),
            "## Korthikanti et al. 2022, Table 4 (one 22B layer, A100, TP = 8, b = 4)",
            layers,
            "## Korthikanti et al. 2022, Figures 1 / 7 (memory per GPU)",
            memory,
            "## Kernel-level measurements per GPU (calibration and checks)",
            kernel_tables(),
            "## Transformer Engine's GEMM benchmark (5B layer, B300 and H200 NVL): GEMMs and FP8 quantize",
            te_gemm_tables(),
            "## Kernel tables: memory-bound, MoE, host, interference",
            families,
            "## Collective-level measurements per cluster preset (nccl-tests bus bandwidth)",
            collective_tables(),
        ]
    )
    verdicts = [megatron_verdict(results)] if results else []
    verdicts += [
        layer_verdict,
        memory_verdict,
        *kernel_verdicts(),
        *te_gemm_verdicts(),
        *family_verdicts,
        *collective_verdicts(),
    ]
    return md, results, verdicts
