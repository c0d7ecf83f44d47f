"""Kernel-level validation tables: every row of ``gpu_kernel_measurements.csv`` next to
what the calibrated cost model predicts for it, per GPU, with sources.

Per GPU: the calibration it runs on (constants and the plan's note), a summary per set
(GPU, kernel, implementation, dtype, role: rows, rms and largest error) and the full
row table folded in a ``<details>`` block, sources numbered below it.
"""

from __future__ import annotations

import math
from collections import defaultdict

from ..workload.calibration import CALIBRATIONS, TOLERANCE, Measurement, calibration, measurements, predicted
from ..workload.cost_model import A100_EFFICIENCY, Efficiency

#: the order GPUs appear in the report
ORDER = (
    "A100-SXM4-80GB",
    "A100-SXM4-40GB",
    "H100-SXM5-80GB",
    "H200-SXM-141GB",
    "H800-SXM5-80GB",
    "B200-SXM-180GB",
    "GB200-186GB",
    "MI300X-192GB",
)


def _constants(name: str, e: Efficiency) -> str:
    return (
        f"{name}: matmul_max {e.matmul_max:.3f}, dim_half {e.dim_half:.1f}, "
        f"memory {e.memory:.3f}, launch {e.launch_s * 1e6:.2f} µs"
    )


def _header(gpu: str) -> list[str]:
    if gpu not in CALIBRATIONS:
        return [
            f"Model: the validated A100 point ({_constants('16-bit', A100_EFFICIENCY)}); every row is a check."
        ]
    cal = calibration(gpu)
    lines = [
        f"Calibration: {cal.plan.note}.",
        "",
        f"- {_constants('16-bit', cal.dense16)}",
        f"- {_constants('FP8', cal.fp8)}",
    ]
    if cal.attention is not None:
        a = cal.attention
        lines.append(
            f"- attention ({a.source}): forward a_max {a.fwd_max:.3f}, s_half {a.fwd_s_half:.0f}; "
            f"backward a_max {a.bwd_max:.3f}, s_half {a.bwd_s_half:.0f}; hd_half {a.hd_half:.1f}"
        )
    return lines


def _summary(rows: list[tuple[Measurement, float | None]]) -> list[str]:
    sets = defaultdict(list)
    for r, p in rows:
        sets[(r.kernel, r.impl, r.dtype, r.role)].append(None if p is None else p / r.value - 1)
    lines = [
        "| kernel | implementation | dtype | role | rows | rms error | largest error |",
        "|---|---|---|---|---|---|---|",
    ]
    for (kernel, impl, dtype, role), errs in sets.items():
        known = [e for e in errs if e is not None]
        if known:
            rms = math.sqrt(sum(e * e for e in known) / len(known))
            worst = max(known, key=abs)
            stats = f"{rms:.1%} | {worst:+.1%}"
        else:
            stats = "no model | —"
        lines.append(f"| {kernel} | {impl} | {dtype or '—'} | {role} | {len(errs)} | {stats} |")
    return lines


def _rows_table(rows: list[tuple[Measurement, float | None]], sources: list[str]) -> list[str]:
    lines = [
        "| kernel | impl | dtype | shape | measured | model | error | role | tag | src |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, p in rows:
        if r.source not in sources:
            sources.append(r.source)
        model = "—" if p is None else f"{p:.4g}"
        err = "—" if p is None else f"{p / r.value - 1:+.1%}"
        lines.append(
            f"| {r.kernel} | {r.impl} | {r.dtype or '—'} | {r.shape} | {r.value:g} {r.unit} | {model} | {err} | "
            f"{r.role} | {r.verification} | {sources.index(r.source) + 1} |"
        )
    return lines


def gpu_table(gpu: str) -> str:
    """The Markdown section of one GPU: calibration, per-set summary, rows, sources."""
    rows = [(r, predicted(r)) for r in measurements() if r.gpu == gpu]
    sources: list[str] = []
    lines = [f"### {gpu}", "", *_header(gpu), ""]
    if not rows:
        return "\n".join([*lines, "No published kernel-level row found; nothing to check."])
    detail = _rows_table(rows, sources)
    lines += [*_summary(rows), "", "<details><summary>all rows</summary>", "", *detail, "", "</details>", ""]
    lines += [f"{i}. {s}" for i, s in enumerate(sources, 1)]
    return "\n".join(lines)


def kernel_tables() -> str:
    """All GPUs' sections, after a note on roles and tolerances."""
    cal, chk = TOLERANCE["calibrate"], TOLERANCE["check"]
    intro = (
        "Roles: `calibrate` rows set the model, `check` rows test it, `context` rows are kept "
        "for the record and not asserted on. Tolerances (tests/test_calibration.py): calibrate "
        f"sets rms ≤ {cal[0]:.0%}, any row ≤ {cal[1]:.0%}; check sets rms ≤ {chk[0]:.0%}, any row ≤ "
        f"{chk[1]:.0%}. A calibrating MAMF row fixes matmul_max (its value over the peak); at its own "
        "shape the model sits lower by the shape factor."
    )
    return "\n\n".join([intro, *(gpu_table(g) for g in ORDER)])
