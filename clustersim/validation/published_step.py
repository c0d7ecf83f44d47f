"""Where the time of a published training step goes: its nsys report's per-step split, and the
model's price of the same kernels.

``data/published_step_split.csv`` holds the per-step totals of the Megatron-FSDP run of the
nsys report :mod:`.published_profiles` reads (Llama-3.1-70B, TP 1, CP 2, DP 32, micro-batch 1,
4 micro-batches, sequence 8192, full recompute, 64 × H100): the step's wall time, every
kernel's time, NCCL's, the GEMMs', attention's and RMSNorm's, and the communication time
beside no compute kernel ("truly exposed").

**Time outside kernels.** The compute kernels (every kernel less NCCL's) and the exposed
communication sum to more than the step (:func:`outside_kernels_ms` < 0): the time with no
kernel running is at most what compute kernels on side streams overlap one another, less that
excess — the step has no host gaps or launch bubbles to speak of. The model agrees: at these
sizes the host lane never binds (:func:`host_share`: the host's issue time of a layer's kernels
is under 1 % of their GPU time). What the model misses of this step is inside kernels.

**The kernels, priced per step** (:func:`model_split`): the GEMMs of 80 layers × 4
micro-batches (forward, the recomputed forward, dgrad and wgrad) and the output layer's,
alone and with every call beside NCCL's CTAs (:func:`.comm_interference.beside`; NCCL runs
beside most of this step: 17.2 s of NCCL kernels in an 18.8 s step) — the ``gemm`` row is a
check within :data:`.published_profiles.BAND`; RMSNorm, and every other non-communication
kernel (RoPE, SwiGLU, the residual adds, cross-entropy, the optimizer step on the shard; the
report does not split them: ``other`` is what remains of the compute kernels) are shown
with the model's price, not asserted.

**The FSDP calls** (:func:`per_call`): each all-gather moves one TransformerLayer's bf16
weights, each reduce-scatter its fp32 gradients (the kernel is ``ReduceScatter_Sum_f32``),
over the 64 GPUs. Priced alone (nccl-tests' setting) they run at the multi-node H100 rows'
bus bandwidth; in the step they take 2.4× and 3.1× that — shown, not taken into any price.

**The step** (:func:`predicted_step`, :data:`STEP`): the simulator's step, its compute
stream's busy and idle time and its calls' mean duration, shown beside the measured split.
"""

from __future__ import annotations

from ..collectives.bench import busbw_factor, measure, preset_cluster
from ..hardware.interference import nccl_ctas
from ..scenario.loader import apply_overrides
from ..simulate import simulate
from ..workload.comm_interference import beside
from ..workload.cost_model import CostModel
from ..workload.hf_config import load_hf_config
from ..workload.host import dispatch_s
from ..workload.ops import LayerOp
from ..workload.transformer_ops import layer_ops, output_ops
from .data import read_table
from .published_profiles import BAND
from .verdict import Verdict

GPU = "H100-SXM5-80GB"
#: the run (module doc): layers, micro-batches a step, tokens a GPU (8192 over CP 2), GPUs
LAYERS, MICRO_BATCHES, TOKENS, GPUS = 80, 4, 4096, 64
#: norms are the ops of these names (the rest of the memory-bound kernels are ``other``)
NORMS = ("norm1", "norm2", "final_norm")
#: the report's per-call FSDP kernels: (quantity, collective, bytes an element moved) — bf16
#: weights gathered, fp32 gradients reduced (the kernel is ``ReduceScatter_Sum_f32``); the
#: ``fsdp2_`` ones are the report's FSDP2 run of the same model and plan
CALLS = (
    ("all_gather_call", "all_gather", 2),
    ("reduce_scatter_call", "reduce_scatter", 4),
    ("fsdp2_all_gather_call", "all_gather", 2),
    ("fsdp2_reduce_scatter_call", "reduce_scatter", 4),
)
#: the step as a scenario (module doc): the megatron_core profile's Megatron-FSDP, gradients
#: reduced in fp32 as the run's kernels were
STEP = {
    "name": "mfsdp-llama31-70b-64xh100",
    "cluster": {"preset": "dgx_h100", "nodes": GPUS // 8},
    "model": {"hf_config": "llama-3-70b", "seq_len": 2 * TOKENS, "attention": "flash"},
    "training": {
        "framework": "megatron_core",
        "global_batch": 32 * MICRO_BATCHES,
        "micro_batch": 1,
        "precision": "bf16",
        "recompute": "full",
        "optimizer": "adam",
    },
    "parallel": {
        "tp": 1,
        "cp": 2,
        "cp_comm_type": "p2p",
        "pp": 1,
        "zero": 3,
        "data_parallel": {"grad_reduce_dtype": "fp32"},
    },
    "simulation": {"iterations": 1, "network": "analytical", "collective_model": "analytical"},
}


def measured() -> dict[str, float]:
    """Measured ms a step, by quantity of ``published_step_split.csv``, with the derived
    ``compute`` (every kernel less NCCL's) and ``other`` (compute less GEMM, attention, RMSNorm)."""
    m = {r["quantity"]: float(r["value_ms"]) for r in read_table("published_step_split")}
    m["compute"] = m["kernels"] - m["comm"]
    m["other"] = m["compute"] - m["gemm"] - m["attention"] - m["rmsnorm"]
    return m


def outside_kernels_ms() -> float:
    """Wall time less compute kernels less exposed communication (ms a step): an upper
    bound, beyond the overlap of compute kernels with one another, on time with no kernel."""
    m = measured()
    return m["wall"] - m["compute"] - m["exposed_comm"]


def _ops(kernels: str = "megatron_core") -> tuple[list[LayerOp], list[LayerOp]]:
    cfg = load_hf_config("llama-3-70b", seq_len=TOKENS)
    layer = layer_ops(cfg, 1, 1, False, 2, cp=2, cp_comm="p2p", kernels=kernels)
    head = output_ops(cfg, 1, 1, False, 2, kernels=kernels)
    return [o for o in layer if isinstance(o, LayerOp)], [o for o in head if isinstance(o, LayerOp)]


def model_split() -> dict[str, float]:
    """The model's ms a step of the measured classes: ``gemm`` alone and ``gemm_beside``
    (every call beside NCCL's CTAs), ``rmsnorm``, ``other`` (the rest of the memory-bound
    kernels and the optimizer step of the GPU's shard)."""
    cm = CostModel.for_gpu(GPU)
    ctas = nccl_ctas(GPU) or 0
    layer, head = _ops()
    split = dict.fromkeys(("gemm", "gemm_beside", "rmsnorm", "other"), 0.0)
    for ops, forwards in ((layer, 2), (head, 1)):  # full recompute runs each layer forward twice
        count = LAYERS * MICRO_BATCHES if ops is layer else MICRO_BATCHES
        for op in ops:
            works = [op.fwd] * forwards + [op.bwd_input, op.bwd_weight]
            alone = [cm.time(w) for w in works]
            if op.fwd.gemm is not None:
                split["gemm"] += count * sum(alone)
                split["gemm_beside"] += count * sum(beside(cm, w, t, ctas)[0] for w, t in zip(works, alone))
            elif op.fwd.attention is None:
                split["rmsnorm" if op.name.split(".")[0] in NORMS else "other"] += count * sum(alone)
    params = load_hf_config("llama-3-70b", seq_len=TOKENS).params()
    split["other"] += cm.optimizer_time(params / GPUS)
    return {k: 1e3 * v for k, v in split.items()}


def host_share() -> float:
    """The host's issue time of one layer's kernels (forward, recomputed forward, backward)
    over their GPU time alone, at the calibrated per-kernel dispatch (:mod:`..workload.host`)."""
    cm = CostModel.for_gpu(GPU)
    layer, _ = _ops()
    works = [w for op in layer for w in (op.fwd, op.fwd, op.bwd_input, op.bwd_weight) if cm.time(w) > 0]
    return dispatch_s("megatron_core") * len(works) / sum(cm.time(w) for w in works)


def step_table() -> tuple[str, Verdict]:
    """Measured and priced ms a step per class, then per FSDP call (:func:`call_table`, shown);
    the verdict on the GEMMs (:data:`BAND`)."""
    m, p = measured(), model_split()
    lines = [
        "| class | measured ms | model ms (alone) | model ms (beside NCCL) |",
        "|---|---|---|---|",
        f"| GEMM | {m['gemm']:.0f} | {p['gemm']:.0f} | {p['gemm_beside']:.0f} |",
        f"| RMSNorm | {m['rmsnorm']:.0f} | {p['rmsnorm']:.0f} | |",
        f"| other compute kernels | {m['other']:.0f} | {p['other']:.0f} | |",
        f"| time outside kernels (bound) | {outside_kernels_ms():.0f} | | |",
    ]
    lines += ["", "Per FSDP call (each a TransformerLayer's parameters, over the 64 GPUs):", "", call_table()]
    ok = BAND[0] * p["gemm"] <= m["gemm"] <= BAND[1] * p["gemm_beside"]
    detail = f"GEMMs a step {m['gemm']:.0f} ms within {BAND[0]} × alone … {BAND[1]} × beside NCCL"
    return "\n".join(lines), Verdict("published step split", ok, detail)


def call_bytes(element_bytes: int) -> int:
    """Bytes of one FSDP call: a TransformerLayer's parameters (Megatron-LM's FSDP unit, one
    bucket) at ``element_bytes`` each."""
    return load_hf_config("llama-3-70b").layer_params() * element_bytes


def per_call() -> list[tuple[str, str, int, float, float]]:
    """Per FSDP call of the step (Megatron-FSDP's, then FSDP2's): (label, collective, bytes,
    measured ms, the model's ms alone) — alone:
    the collective on an idle 8-node DGX H100 cluster, as nccl-tests would time it, with the
    ring's α's paid as the megatron_core profile pays them (``collective_latency: nccl``)."""
    cluster = preset_cluster("dgx_h100", GPUS // 8)
    cluster["collective_latency"] = "nccl"
    m = measured()
    rows = []
    for quantity, kind, size in CALLS:
        nbytes = call_bytes(size)
        alone = measure(cluster, kind, nbytes, network="analytical").time_s
        label = f"{kind} (FSDP2)" if quantity.startswith("fsdp2_") else kind
        rows.append((label, kind, nbytes, m[quantity], 1e3 * alone))
    return rows


def busbw_gbps(kind: str, nbytes: int, ms: float) -> float:
    """nccl-tests' bus bandwidth (GB/s) of ``kind`` moving ``nbytes`` over the step's GPUs in ``ms``."""
    return nbytes * busbw_factor(kind, GPUS) / ms * 1e-6


def call_table() -> str:
    """The per-call table: measured and priced alone, each with its bus bandwidth."""
    lines = [
        "| call | bytes | measured ms | measured busbw GB/s | model alone ms | model busbw GB/s | measured / model |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, kind, nbytes, ms, alone in per_call():
        lines.append(
            f"| {label} | {nbytes / 1e9:.2f} GB | {ms:.2f} | {busbw_gbps(kind, nbytes, ms):.0f} | "
            f"{alone:.2f} | {busbw_gbps(kind, nbytes, alone):.0f} | {ms / alone:.2f} |"
        )
    return "\n".join(lines)


def predicted_step(overrides: dict | None = None) -> dict[str, float]:
    """The model's step of :data:`STEP` (``overrides``: dotted fields as ``--set`` takes them,
    e.g. ``{"parallel.data_parallel.megatron_fsdp.communication_unit_size": 4_000_000_000}``):
    its time, one GPU's compute busy and idle seconds and its calls' mean ms
    (:func:`gpu0_split`) — shown beside the measured step, not asserted (two errors cancel
    in it; docs/validation.md)."""
    result = simulate(apply_overrides(STEP, overrides or {}), progress=False)
    return {"step": result.summary["iteration_time_s"], **gpu0_split(result.spans)}


def gpu0_split(spans) -> dict[str, float]:
    """One GPU's seconds of the step: its compute stream busy (``compute``) and idle
    (``exposed``), and the mean ms of its FSDP all-gathers and reduce-scatters."""
    own = spans[spans["device"] == spans["device"].iloc[0]]
    busy = own[own["lane"] == "compute"].sort_values("start_s")
    covered, end = 0.0, 0.0
    for start, stop in zip(busy["start_s"], busy["end_s"]):
        covered += max(0.0, stop - max(start, end))
        end = max(end, stop)
    calls = {
        kind: float(1e3 * (rows["end_s"] - rows["start_s"]).mean())
        for kind, rows in (
            (k, own[own["name"].str.startswith(f"fsdp {k}")]) for k in ("all-gather", "reduce-scatter")
        )
    }
    return {"compute": covered, "exposed": end - covered, **calls}
