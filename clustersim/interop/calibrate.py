"""Measured kernels (a PyTorch profiler trace, :mod:`.kineto`) against the cost model.

:func:`compare` prices every measured matrix product at its own shape with the cost
model's roofline (:class:`clustersim.workload.cost_model.CostModel`, the GPU's calibrated
efficiencies) and reports measured, predicted and their ratio. :func:`scenario_profile`
goes through a transformer scenario's layer ops (the ones its cost model prices) and, for
each GEMM whose (M, N, K) and batch the trace measured, gives a ``model.profile`` row
(``op,phase,m,n,k,time_us``, docs/models.md) and the same comparison under the op's name.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from ..errors import ScenarioError
from ..hardware.gpus import GPUS
from ..output import open_atomic
from ..workload.cost_model import CostModel
from ..workload.ops import LayerOp, Work
from ..workload.resolve import resolve_transformer
from ..workload.stage_builder import TrainSetup
from ..workload.transformer_ops import layer_ops
from .kineto import KinetoTrace, Measured

PROFILE_COLUMNS = ("op", "phase", "m", "n", "k", "time_us")


def gpu_of(device: str) -> str | None:
    """The GPU catalog name of a device the trace names (``NVIDIA A100-SXM4-80GB``): the
    catalog entry all of whose parts (``A100``, ``SXM4``, ``80GB``) it contains, else the
    one whose model (``H100``) it contains; None when neither matches."""
    full = [g for g in GPUS if all(part in device for part in g.split("-"))]
    model = [g for g in GPUS if g.split("-")[0] in device.split()]
    return (full or model or [None])[0]


def gemm_work(gemm: tuple[int, int, int], batch: int, element_bytes: int) -> Work:
    """The cost model's Work of ``batch`` GEMMs (M, N, K): 2·M·N·K FLOPs each, the three
    matrices read or written once (as :func:`clustersim.workload.ops.gemm` counts them)."""
    m, n, k = gemm
    e = element_bytes or 2
    return Work(2.0 * m * n * k * batch, float(e) * (m * k + k * n + m * n) * batch, gemm)


def _row(label: str, calls: int, measured_s: float, predicted_s: float | None) -> dict:
    return {
        "op": label,
        "calls": calls,
        "measured_us": measured_s * 1e6,
        "predicted_us": None if predicted_s is None else predicted_s * 1e6,
        "ratio": measured_s / predicted_s if predicted_s else None,
    }


def compare(trace: KinetoTrace, gpu: str) -> list[dict]:
    """Per measured op: calls, measured and predicted µs per call, measured / predicted
    (predicted only for matrix products; None for the rest)."""
    cm = CostModel.for_gpu(gpu)
    return [
        _row(
            m.label,
            m.calls,
            m.time_s,
            cm.time(gemm_work(m.gemm, m.batch, m.element_bytes)) if m.gemm else None,
        )
        for m in trace.ops
    ]


def scenario_profile(trace: KinetoTrace, sc) -> tuple[list[dict], list[dict]]:
    """(``model.profile`` rows, comparison rows) for transformer scenario ``sc``: each GEMM
    of its layer (per phase F, B, W) that the trace measured at the same shape and batch."""
    if sc.model.kind != "transformer":
        raise ScenarioError(
            "model.kind", sc.model.kind, "calibrate maps GEMMs onto a transformer's layer ops"
        )
    cfg, st = resolve_transformer(sc.model), TrainSetup.of(sc)
    cm = CostModel.for_gpu(st.gpu, None, sc.cluster.custom_gpu)
    found = _by_shape(trace, st.e)
    profile, rows = [], []
    for op in layer_ops(
        cfg, st.micro_batch, st.tp, st.sp, st.e, None, st.cp, st.cp_comm, st.split, st.kernels
    ):
        if not isinstance(op, LayerOp):
            continue  # a TP collective point, an expert group
        for phase, work in (("F", op.fwd), ("B", op.bwd_input), ("W", op.bwd_weight)):
            if work.gemm is None:
                continue
            batch = round(work.flops / (2.0 * math.prod(work.gemm)))
            if (work.gemm, batch) not in found:
                continue
            calls, time_s = found[work.gemm, batch]
            profile.append(dict(zip(PROFILE_COLUMNS, (op.name, phase, *work.gemm, time_s * 1e6))))
            rows.append(
                _row(f"{op.name} {phase} [{'×'.join(map(str, work.gemm))}]", calls, time_s, cm.time(work))
            )
    return profile, rows


def _by_shape(trace: KinetoTrace, element_bytes: int) -> dict[tuple, tuple[int, float]]:
    """(calls, mean seconds) per ((M, N, K), batch) over the trace's matrix products of the
    scenario's element size (or an unstated one): ``aten::addmm`` and ``aten::mm`` of one
    shape are one GEMM to the cost model, so their calls are pooled."""
    pooled: dict[tuple, list[Measured]] = {}
    for m in trace.ops:
        if m.gemm is not None and m.element_bytes in (0, element_bytes):
            pooled.setdefault((m.gemm, m.batch), []).append(m)
    return {
        key: (sum(m.calls for m in ms), math.fsum(m.time_s * m.calls for m in ms) / sum(m.calls for m in ms))
        for key, ms in pooled.items()
    }


def write_profile(rows: list[dict], path: str | Path) -> Path:
    """Write ``model.profile`` rows as CSV (times at full precision)."""
    with open_atomic(path, newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=PROFILE_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({c: repr(v) if isinstance(v, float) else v for c, v in r.items()})
    return Path(path)


def table(rows: list[dict]) -> str:
    """The comparison as aligned text: op, calls, measured, predicted, ratio."""
    width = max([len(r["op"]) for r in rows] + [2])
    lines = [f"{'op':<{width}}  {'calls':>5}  {'measured µs':>11}  {'predicted µs':>12}  {'ratio':>6}"]
    for r in rows:
        pred = "—" if r["predicted_us"] is None else f"{r['predicted_us']:.2f}"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.3f}"
        lines.append(
            f"{r['op']:<{width}}  {r['calls']:>5}  {r['measured_us']:>11.2f}  {pred:>12}  {ratio:>6}"
        )
    return "\n".join(lines)
