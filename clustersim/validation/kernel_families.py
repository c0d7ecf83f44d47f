"""The kernel tables beyond GEMM and attention, each against its source's rows with the
tolerance its tests state, as ``clustersim validate`` prints them (a table, then its
pass/fail line):

* **memory-bound kernels** (``data/memory_kernel_measurements.csv`` and the backward rows of
  ``data/memory_kernel_backward_measurements.csv``, Liger-Kernel's benchmark): per GPU, curve kind and role, rms and largest error against
  :data:`.memory_bandwidth.TOLERANCE`;
* **MoE grouped GEMMs** (``data/moe_grouped_gemm_measurements.csv``, DeepGEMM on H800): the
  experts priced one FP8 GEMM each, contiguous layout within :data:`GROUPED_CONTIGUOUS`,
  masked layout (256–1024 tokens an expert, where one grouped kernel beats separate GEMMs)
  within :data:`GROUPED_MASKED`;
* **EP all-to-all** (``data/ep_alltoall_measurements.csv``, NCCL and DeepEP): the preset's
  links against the achieved rate, within :data:`ALLTOALL_TOLERANCE`;
* **host dispatch** (``data/host_dispatch.csv``): each profile's dispatch is its stack's row;
* **interference** (``data/interference_measurements.csv``): the forum's H100 GEMM beside an
  all-gather within :data:`FORUM_BOUND` of its two-wave bound, and the SM rule inside Lee et
  al.'s measured range;
* **communication by the SMs it holds** (``data/comm_sm_bandwidth.csv``): NCCL's all-reduce by
  CTAs on H200, DeepEP's dispatch and combine by SMs on B200 and GB200, each curve's rows within
  :data:`clustersim.hardware.comm_sms.TOLERANCE`;
* **communication beside a GEMM** (``data/comm_beside_gemm.csv``, NanoFlow's A100 rows): a
  collective's rate by the share of the GPU it holds beside a GEMM, each row within
  :data:`clustersim.hardware.comm_contention.TOLERANCE` of its curve;
* **a GEMM and a collective overlapped** (``data/comm_pair_measurements.csv``): the pair's
  priced total within :data:`clustersim.validation.comm_pairs.TOLERANCE` of the measured one.
"""

from __future__ import annotations

import csv
import math
import warnings
from collections import defaultdict

from ..collectives.bench import measure, preset_cluster
from ..hardware.comm_contention import TOLERANCE as CONTENTION_TOLERANCE
from ..hardware.comm_contention import curves as contention_curves
from ..hardware.comm_sms import TOLERANCE as COMM_SM_TOLERANCE
from ..hardware.comm_sms import curves
from ..hardware.interference import interference_rows, slowdown_of
from ..workload.cost_model import efficiency_for
from ..workload.fp8 import fp8_gemm_time
from ..workload.host import HOST_CSV, STACKS, dispatch_s
from ..workload.memory_bandwidth import (
    TOLERANCE,
    backward_rows,
    memory_curves,
    memory_rows,
    predicted_us,
)
from .comm_pairs import pair_table
from .data import DATA
from .published_profiles import profile_table
from .published_step import step_table
from .swiglu_backward import swiglu_table
from .verdict import Verdict

#: DeepGEMM's contiguous (training) rows: |model / measured − 1| within this
GROUPED_CONTIGUOUS = 0.20
#: DeepGEMM's masked rows: model / measured in this range (one grouped kernel runs up to
#: 1.5× faster than the per-expert GEMMs priced)
GROUPED_MASKED = (0.65, 1.0)
#: measured / model rate of an EP all-to-all per implementation and transport: NCCL 3 %,
#: DeepEP over NVLink 5 % (96–97 % of NCCL's rate), over RDMA 25 % (its rate counts the
#: deduplicated traffic it forwards over NVLink)
ALLTOALL_TOLERANCE = {("nccl", "nvlink"): 0.03, ("nccl", "rdma"): 0.03}
ALLTOALL_TOLERANCE |= {("deepep_normal", "nvlink"): 0.05, ("deepep_normal", "rdma"): 0.25}
#: the forum's measured GEMM slowdown against its two-wave bound ("nearly doubles")
FORUM_BOUND = 0.18


def _csv(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="") as fh:
        return list(csv.DictReader(fh))


def memory_sets() -> dict[tuple[str, str, str], list[float]]:
    """Relative error of every memory-bound row, by (GPU, curve kind, role)."""
    out: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in memory_rows() + backward_rows():
        if r.role in ("calibrate", "check"):
            out[(r.gpu, r.kind, r.role)].append(predicted_us(r, memory_curves(r.gpu)) / r.time_us - 1)
    return dict(out)


def memory_bound(kind: str, role: str) -> tuple[float, float]:
    """(rms, largest) bound of a set: the kind's for calibrate rows, the check role's else."""
    return TOLERANCE[kind if role == "calibrate" else "check"]


def grouped_gemm_ratio(row: dict[str, str]) -> float:
    """Model over measured TFLOP/s of one DeepGEMM grouped row: ``groups`` FP8 GEMMs of
    ``m_per_group`` × n × k, each priced alone (Megatron-Core's SequentialMLP)."""
    g, m, n, k = (int(row[c]) for c in ("groups", "m_per_group", "n", "k"))
    with warnings.catch_warnings():  # H800: FP8 priced as H100 (a transfer, warned once elsewhere)
        warnings.simplefilter("ignore")
        t = g * fp8_gemm_time(row["gpu"], m, n, k, []).total_s
    return 2 * g * m * n * k / t / 1e12 / float(row["tflops"])


def grouped_gemm_ok(row: dict[str, str], ratio: float) -> bool:
    """Whether a row's ratio is within its layout's bound."""
    if row["layout"] == "contiguous":
        return abs(ratio - 1) <= GROUPED_CONTIGUOUS
    return GROUPED_MASKED[0] <= ratio <= GROUPED_MASKED[1]


def alltoall_ratio(row: dict[str, str]) -> float:
    """Measured over model rate of one EP all-to-all row: the direct all-to-all on the
    preset's links (analytical network), counting what crosses the row's transport."""
    ep, nodes, nbytes = int(row["ep"]), int(row["nodes"]), int(row["bytes_per_rank"])
    preset = "hgx_h800" if "H800" in row["system"] else "dgx_h100"
    got = measure(
        preset_cluster(preset, nodes), "all_to_all", nbytes, algorithm="direct", network="analytical"
    )
    per_node = ep // nodes
    moved = (per_node - 1 if row["transport"] == "nvlink" else ep - per_node) / ep * nbytes
    return float(row["GBps"]) * 1e9 / (moved / got.time_s)


def _verdict(name: str, failed: list[str], n: int, what: str) -> Verdict:
    return Verdict(name, not failed, f"{n} {what} within their bounds" if not failed else "; ".join(failed))


def memory_table() -> tuple[str, Verdict]:
    """Memory-bound kernels per (GPU, kind, role)."""
    lines = [
        "| GPU | kind | role | rows | rms | largest | bound (rms / any) |",
        "|---|---|---|---|---|---|---|",
    ]
    failed = []
    sets = memory_sets()
    for (gpu, kind, role), errs in sorted(sets.items()):
        rms, worst = math.sqrt(sum(e * e for e in errs) / len(errs)), max(errs, key=abs)
        b_rms, b_row = memory_bound(kind, role)
        lines.append(
            f"| {gpu} | {kind} | {role} | {len(errs)} | {rms:.1%} | {worst:+.1%} | {b_rms:.0%} / {b_row:.0%} |"
        )
        if rms > b_rms or abs(worst) > b_row:
            failed.append(f"{gpu} {kind} {role}: rms {rms:.1%}, largest {worst:+.1%}")
    return "\n".join(lines), _verdict("memory-bound kernels", failed, len(sets), "sets")


def grouped_table() -> tuple[str, Verdict]:
    """DeepGEMM's grouped rows against the per-expert FP8 GEMMs."""
    lines = ["| layout | groups × M | N × K | measured TFLOP/s | model / measured |", "|---|---|---|---|---|"]
    failed = []
    rows = _csv("moe_grouped_gemm_measurements.csv")
    for r in rows:
        ratio = grouped_gemm_ratio(r)
        lines.append(
            f"| {r['layout']} | {r['groups']} × {r['m_per_group']} | {r['n']} × {r['k']} | {r['tflops']} | {ratio:.2f} |"
        )
        if not grouped_gemm_ok(r, ratio):
            failed.append(f"{r['layout']} {r['groups']}×{r['m_per_group']} {r['n']}×{r['k']}: {ratio:.2f}")
    bounds = f"contiguous ±{GROUPED_CONTIGUOUS:.0%}, masked {GROUPED_MASKED[0]}–{GROUPED_MASKED[1]}"
    return "\n".join(lines), _verdict(f"MoE grouped GEMMs ({bounds})", failed, len(rows), "rows")


def alltoall_table() -> tuple[str, Verdict]:
    """NCCL and DeepEP all-to-all rows against the preset links."""
    lines = [
        "| implementation | transport | EP | measured GB/s | measured / model | bound |",
        "|---|---|---|---|---|---|",
    ]
    failed = []
    rows = _csv("ep_alltoall_measurements.csv")
    for r in rows:
        ratio, bound = alltoall_ratio(r), ALLTOALL_TOLERANCE[r["implementation"], r["transport"]]
        lines.append(
            f"| {r['implementation']} | {r['transport']} | {r['ep']} | {r['GBps']} | {ratio:.3f} | ±{bound:.0%} |"
        )
        if abs(ratio - 1) > bound:
            failed.append(f"{r['implementation']} {r['transport']} ep {r['ep']}: {ratio:.3f}")
    return "\n".join(lines), _verdict("EP all-to-all", failed, len(rows), "rows")


def host_table() -> tuple[str, Verdict]:
    """Each profile's per-kernel dispatch against its stack's row."""
    with HOST_CSV.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["quantity"] == "dispatch" and r["role"] == "calibrate"]
    lines = ["| framework | stack | measured µs | model µs |", "|---|---|---|---|"]
    failed = []
    for framework, stack in STACKS.items():
        (row,) = [r for r in rows if r["stack"] == stack]
        got = dispatch_s(framework) * 1e6
        lines.append(f"| {framework} | {stack} | {row['value_us']} | {got:g} |")
        if not math.isclose(got, float(row["value_us"]), rel_tol=1e-12):
            failed.append(f"{framework}: {got:g} µs")
    return "\n".join(lines), _verdict(
        "host dispatch (each profile = its stack's row)", failed, len(STACKS), "profiles"
    )


def interference_table() -> tuple[str, Verdict]:
    """The measured interference rows against the SM rule's bounds."""
    forum = next(r for r in interference_rows() if r.overlap == "nccl_all_gather")
    bound = math.ceil(forum.gemm_ctas / (132 - forum.comm_sms))  # the fixed grid's waves on H100
    mean, top = (
        next(r for r in interference_rows() if r.overlap == k).compute_slowdown for k in ("nccl", "nccl_max")
    )
    rule = {gpu: slowdown_of(efficiency_for(gpu).sms) for gpu in ("A100-SXM4-80GB", "H100-SXM5-80GB")}
    lines = [
        "| row | measured | model | bound |",
        "|---|---|---|---|",
        f"| H100 GEMM ({forum.gemm_ctas} CTAs) beside a {forum.comm_sms}-SM all-gather | {forum.compute_slowdown:.2f}× "
        f"| {bound}× (waves) | ±{FORUM_BOUND:.0%} |",
        *(
            f"| Lee et al. overlapped kernels, {gpu} | {mean:.3f}× mean, {top:.2f}× max | {s:.3f}× (SM rule) | ≤ max |"
            for gpu, s in rule.items()
        ),
    ]
    failed = [] if abs(forum.compute_slowdown / bound - 1) <= FORUM_BOUND else ["forum row"]
    failed += [gpu for gpu, s in rule.items() if not 1 < s <= top]
    return "\n".join(lines), _verdict("interference", failed, 1 + len(rule), "checks")


def comm_sm_table() -> tuple[str, Verdict]:
    """Communication bandwidth by the SMs it holds: each (GPU, implementation, kernel)'s rows
    against its fitted curve (:mod:`clustersim.hardware.comm_sms`)."""
    lines = ["| GPU | implementation | kernel | rows | GB/s per SM | plateau GB/s | largest | bound |"]
    lines.append("|---|---|---|---|---|---|---|---|")
    failed = []
    for (gpu, impl, kernel), c in sorted(curves().items()):
        worst = max((c.bandwidth(n) / b - 1 for n, b in c.rows), key=abs)
        lines.append(
            f"| {gpu} | {impl} | {kernel} | {len(c.rows)} | {c.rate / 1e9:.1f} | {c.plateau / 1e9:.0f} "
            f"| {worst:+.1%} | ±{COMM_SM_TOLERANCE[impl]:.0%} |"
        )
        if abs(worst) > COMM_SM_TOLERANCE[impl]:
            failed.append(f"{gpu} {impl} {kernel}: {worst:+.1%}")
    return "\n".join(lines), _verdict("communication by SMs", failed, len(curves()), "curves")


def contention_table() -> tuple[str, Verdict]:
    """A collective's rate beside a GEMM by the GPU share it holds: each row against its
    (GPU, implementation)'s fitted curve (:mod:`clustersim.hardware.comm_contention`)."""
    lines = ["| GPU | implementation | share R | measured rate | curve | error | bound |"]
    lines.append("|---|---|---|---|---|---|---|")
    failed, rows = [], 0
    for (gpu, impl), c in sorted(contention_curves().items()):
        for share, rate in c.rows:
            err = c.rate(share) / rate - 1
            rows += 1
            lines.append(
                f"| {gpu} | {impl} | {share:.2f} | {rate:.2f} | {c.rate(share):.3f} | {err:+.1%} "
                f"| ±{CONTENTION_TOLERANCE:.0%} |"
            )
            if abs(err) > CONTENTION_TOLERANCE:
                failed.append(f"{gpu} {impl} R={share}: {err:+.1%}")
    return "\n".join(lines), _verdict("communication beside a GEMM", failed, rows, "rows")


TABLES = (
    ("Memory-bound kernels (Liger-Kernel rows)", memory_table),
    ("MoE grouped GEMMs (DeepGEMM, H800)", grouped_table),
    ("EP all-to-all (NCCL, DeepEP)", alltoall_table),
    ("Host dispatch per kernel", host_table),
    ("Interference (GEMM beside communication)", interference_table),
    ("Communication by the SMs it holds (NCCL, DeepEP)", comm_sm_table),
    ("Communication beside a GEMM (NanoFlow, A100)", contention_table),
    ("A GEMM and a collective overlapped: pair totals", pair_table),
    ("Kernels of a published H100 step profile (Llama-3.1-70B, CP 2)", profile_table),
    ("Time split of the published H100 step (per step)", step_table),
    ("SwiGLU backward in Megatron's gate-up layout (Liger-Kernel rows, H100)", swiglu_table),
)


def family_tables() -> tuple[str, list[Verdict]]:
    """Markdown of every table (each ending with its verdict line) and the verdicts."""
    parts, verdicts = [], []
    for title, make in TABLES:
        md, verdict = make()
        parts.append(f"### {title}\n\n{md}\n\n{verdict.line()}")
        verdicts.append(verdict)
    return "\n\n".join(parts), verdicts
