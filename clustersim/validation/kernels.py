"""Kernel-level validation tables: every row of ``gpu_kernel_measurements.csv`` next to
what the calibrated cost model predicts for it, per GPU, with sources.

Per GPU: the calibration it runs on (constants and the plan's note), a summary per set
(GPU, kernel, implementation, dtype, role: rows, rms and largest error) and the full
row table folded in a ``<details>`` block, sources numbered below it.
"""

from __future__ import annotations

import math
from collections import defaultdict

from ..workload.calibration import TOLERANCE, Measurement, calibration, measurements, predicted
from ..workload.cost_model import Efficiency
from .verdict import Verdict

#: the order GPUs appear in the report (those with rows; H200 NVL's are TE's per-pass sums,
#: :mod:`.te_gemms`; GB300 has none)
ORDER = (
    "A100-SXM4-80GB",
    "A100-SXM4-40GB",
    "H100-SXM5-80GB",
    "H200-SXM-141GB",
    "H800-SXM5-80GB",
    "B200-SXM-180GB",
    "GB200-186GB",
    "B300-SXM-288GB",
    "MI300X-192GB",
)


def _constants(name: str, e: Efficiency) -> str:
    return (
        f"{name}: matmul_max {e.matmul_max:.3f}, dim_half {e.dim_half:.1f}, k_half {e.k_half:.1f}, "
        f"{e.sms} SMs, memory {e.memory:.3f}, launch {e.launch_s * 1e6:.2f} µs"
    )


def _header(gpu: str) -> list[str]:
    cal = calibration(gpu)
    lines = [f"Calibration: {cal.plan.note}.", "", f"- {_constants('16-bit', cal.dense16)}"]
    if cal.fp8 is not None:
        lines.append(f"- {_constants('FP8', cal.fp8)}")
    for a in cal.attention:
        lines.append(
            f"- attention {a.impl} ({a.source}): forward a_max {a.fwd_max:.3f}, s_half {a.fwd_s_half:.0f}; "
            f"backward a_max {a.bwd_max:.3f}, s_half {a.bwd_s_half:.0f}; at hd 64 ×{a.hd64:.2f} (backward ×{a.bwd_hd64:.2f}), at hd 256 ×{a.hd256:.2f}; "
            f"causal factor {a.causal_factor:.2f}"
        )
    return lines


def _asserted(r: Measurement, p: float | None) -> bool:
    """Whether a row is held to a tolerance: predicted, a calibrate or check role, and not
    a calibrating MAMF row (it sets ``matmul_max``; at its own shape the model sits lower by
    the shape factor)."""
    return p is not None and r.role in TOLERANCE and not (r.role == "calibrate" and "mamf" in r.impl)


def gpu_verdict(gpu: str, rows: list[tuple[Measurement, float | None]]) -> Verdict:
    """Every (kernel, dtype, role) set of ``gpu``'s rows against :data:`TOLERANCE`."""
    sets = defaultdict(list)
    for r, p in rows:
        if _asserted(r, p):
            sets[(r.kernel, r.dtype, r.role)].append(p / r.value - 1)
    failed = []
    for (kernel, dtype, role), errs in sets.items():
        rms_tol, row_tol = TOLERANCE[role]
        rms = math.sqrt(sum(e * e for e in errs) / len(errs))
        worst = max(abs(e) for e in errs)
        if rms > rms_tol or worst > row_tol:
            failed.append(f"{kernel} {dtype or ''} {role}: rms {rms:.1%}, largest {worst:.1%}")
    detail = f"{len(sets)} sets within their role's tolerance" if not failed else "; ".join(failed)
    return Verdict(f"kernels {gpu}", not failed, detail)


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
    lines += ["", gpu_verdict(gpu, rows).line()]
    return "\n".join(lines)


def kernel_verdicts() -> list[Verdict]:
    """The pass/fail of every GPU's kernel table (those with rows)."""
    out = []
    for gpu in ORDER:
        rows = [(r, predicted(r)) for r in measurements() if r.gpu == gpu]
        if rows:
            out.append(gpu_verdict(gpu, rows))
    return out


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
