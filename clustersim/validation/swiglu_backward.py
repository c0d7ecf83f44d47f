"""The SwiGLU backward of Megatron's fused gate-up layout against Liger-Kernel's H100 rows.

``data/swiglu_backward_measurements.csv`` holds Liger-Kernel's ``megatron_swiglu`` benchmark
(benchmark/scripts/benchmark_megatron_swiglu.py): the ``[s, b, 2·ffn_local]`` tensor Megatron's
``linear_fc1`` hands to the activation, through Liger's fused gate-up Triton kernel, Megatron-
Core's ``bias_swiglu_impl`` and eager PyTorch. Its ``backward`` mode times the forward, then
``out.sum().backward()``; the script says to subtract the ``forward`` row for the backward, which
leaves the harness's own kernels beside the activation's backward ones:

* ``out.sum()`` — a row reduction reading the output (``ffn_local`` elements a token);
* the gradient it hands back is the scalar expanded (stride 0): Liger's ``@ensure_contiguous``
  backward materialises it (a copy writing ``ffn_local`` elements a token, its stride-0 reads
  cached) before its kernel reads it; Megatron's and eager PyTorch's backward read it as it is.

Priced here: those harness kernels, then the implementation's backward kernels of
:data:`.kernel_impls.IMPLS` ``gated_act`` over the ``2·ffn_local`` input elements a token, each
launched and at the curve of its kind (:mod:`.memory_bandwidth`, fitted to forward rows only).

``check`` rows (Liger, its fused kernel: 2.5 bytes an input element backward, the bytes the
``fused`` and ``jit`` implementations share) are asserted within :data:`BOUND` from
:data:`MIN_FFN` up — the smallest shape's hundred microseconds of five kernels and autograd
is host-bound. ``context`` rows are shown, not asserted: Megatron-Core's ``bias_swiglu_impl``
measures 2.5× the one-kernel price at every shape from the second on, where its forward also
runs 1.6× slower than Liger's after matching it at the first (static) shape — the script sweeps
six shapes in one process, so ``torch.compile`` runs its dynamic-shape recompile from the
second shape on, which a training run of fixed shapes does not; the rows do not say what the
static kernel costs, and nothing is fitted to them.
"""

from __future__ import annotations

from ..hardware.gpus import get_gpu
from ..workload.calibration import calibration
from ..workload.kernel_impls import GENERIC, IMPLS
from ..workload.memory_bandwidth import memory_curves
from ..workload.memory_model import DTYPE_BYTES
from .data import read_table
from .verdict import Verdict

#: |model / measured − 1| of a check row: the tuned curve's own forward scatter (≤ 10 %)
BOUND = 0.10
#: check rows from this ``ffn_local`` up (module doc: the smallest shape is host-bound)
MIN_FFN = 2048


def swiglu_rows() -> list[dict[str, str]]:
    """The rows of ``swiglu_backward_measurements.csv``."""
    return read_table("swiglu_backward_measurements")


def measured_backward_us(row: dict[str, str]) -> float:
    """The row's backward (µs): its ``backward`` time less its ``forward`` time (the script's
    own instruction), harness kernels included."""
    return float(row["fwd_bwd_us"]) - float(row["fwd_us"])


def harness_bytes(row: dict[str, str]) -> list[float]:
    """HBM bytes of the harness's kernels in the row's backward (module doc): the sum over
    the output and, for Liger, the copy of the expanded gradient."""
    out = int(row["tokens"]) * int(row["ffn_local"]) * DTYPE_BYTES[row["dtype"]]
    return [out, out] if row["provider"].startswith("liger") else [out]


def priced_us(row: dict[str, str], harness: bool = True) -> float:
    """The model's backward of ``row`` (µs): the harness's kernels (generic, each launched;
    ``harness`` False leaves them out) and the implementation's backward kernels."""
    gpu = row["gpu"]
    curves, hbm, launch = memory_curves(gpu), get_gpu(gpu).hbm_bandwidth, calibration(gpu).dense16.launch_s
    inputs = int(row["tokens"]) * 2 * int(row["ffn_local"])
    _, bwd = IMPLS["gated_act"][row["impl"]].bytes(DTYPE_BYTES[row["dtype"]])
    kernels = [(b * inputs, kind) for b, kind in bwd]
    if harness:
        kernels += [(b, GENERIC) for b in harness_bytes(row)]
    return 1e6 * sum(launch + curves.of(kind).seconds(b, hbm) for b, kind in kernels)


def checked(row: dict[str, str]) -> bool:
    """Whether ``row`` is asserted (a ``check`` row at :data:`MIN_FFN` or above)."""
    return row["role"] == "check" and int(row["ffn_local"]) >= MIN_FFN


def swiglu_table() -> tuple[str, Verdict]:
    """Every row: measured backward, the model's, their ratio; the verdict over the checked rows."""
    lines = [
        "| provider | impl | role | ffn_local | measured µs | model µs | model / measured |",
        "|---|---|---|---|---|---|---|",
    ]
    errors = []
    for row in swiglu_rows():
        meas, model = measured_backward_us(row), priced_us(row)
        lines.append(
            f"| {row['provider']} | {row['impl']} | {row['role']} | {row['ffn_local']} | {meas:.1f} "
            f"| {model:.1f} | {model / meas:.2f} |"
        )
        if checked(row):
            errors.append(model / meas - 1)
    worst = max(errors, key=abs)
    detail = f"{len(errors)} check rows within {BOUND:.0%} (largest {worst:+.1%})"
    return "\n".join(lines), Verdict("SwiGLU backward (Megatron layout)", abs(worst) <= BOUND, detail)
