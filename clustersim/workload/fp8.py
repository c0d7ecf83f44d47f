"""FP8 GEMMs as Transformer Engine runs them: the FP8 peak, its calibrated efficiency,
and the casting / amax kernels around each GEMM.

A TE FP8 linear layer multiplies FP8 (or, under ``nvfp4``, FP4) operands into a BF16
output. Each BF16 operand that is not quantized yet is first quantized by the kernels of
the recipe (``training.fp8_recipe``, :mod:`.fp8_recipes`): for TE's delayed scaling one
fused kernel reading 2 bytes and writing 1, plus 1 more for the transposed copy the
backward's GEMMs consume on Hopper (``cast_transpose``); current scaling first reads the
tensor once more for its amax; block, MXFP8 and NVFP4 write two copies with their block
scales::

    t = launch + f_recipe · (t_gemm(FP8 peak, FP8 efficiency) − launch)
        + Σ_tensors [kernels · launch + t_mem(elements · bytes/element)]

where ``t_mem`` is the achieved bandwidth of a tuned memory-bound kernel
(:mod:`.memory_bandwidth`; the STREAM-triad fraction where the GPU has no curve), its
ramp counted once per quantized tensor.

Which tensors are cast per phase (:func:`te_linear_casts`): forward X (and W on the first
micro-batch of a step; the quantized weight is cached for the rest), backward-input dY, and
nothing for the weight gradient (it reuses the columnwise copies).

The FP8 peak comes from ``gpu_datasheets.csv``, the FP8 efficiency from the FP8 rows of
:mod:`.calibration`, ``f_recipe`` from :func:`.fp8_recipes.gemm_factor`.

``training.precision: fp8`` (:func:`te_fp8_layer`) runs the four linear layers of each
transformer layer (QKV, attention output, MLP up, MLP down) this way, as TE's
``LayerNormLinear``/``Linear``/``LayerNormMLP`` do under ``fp8_autocast`` — and MLA's
projections and each MoE expert's up/down GEMMs (TE's ``GroupedLinear``); the router, attention
core, norms, embedding and the output logits stay BF16 (Megatron-Core's output layer is
not a TE module). What TE keeps (``transformer_engine/pytorch/module/linear.py``,
``_Linear.forward``): the weights stay BF16 parameters with fp32 main gradients and fp32
master weights + Adam moments in the optimizer — the same 18 bytes/param as BF16 — plus
a cached FP8 copy of each weight and its FP8 transpose (``weight_fp8``, ``weight_t_fp8``,
recast on a step's first micro-batch): under per-tensor scaling on Hopper 2 bytes per
linear parameter (1 on Blackwell, whose FP8 GEMMs need no transpose; MXFP8's two copies
carry a scale per 32), counted as buffers (:func:`fp8_cache_bytes`). For the backward it
saves each linear's *input* quantized, only the columnwise copy the weight gradient reads:
1 byte per element instead of 2 (+ block scales; NVFP4 ½); every other saved tensor (norm inputs, the MLP
pre-activation, attention's Q/K/V and scores, dropout masks) stays BF16. The casts of the
steady micro-batches are priced with their GEMMs; the once-per-step weight recast
(:func:`weight_cast_seconds`) with the optimizer's step.

With FP8 parameters (``parallel.data_parallel.param_gather_dtype: fp8``: Megatron-Core's
``--fp8-param-gather``, which NeMo's ``bf16_with_fp8_mixed`` sets and the
``megatron_core`` profile fills under ``precision: fp8``) the linears' weights are FP8
tensors: 1 byte per parameter instead of the BF16 weight's 2, the cache keeping only the
FP8 transpose, and the parameter all-gather moving them in FP8 (the fp32 master weights
stay in the optimizer) — 2 bytes per linear parameter where BF16 parameters take 4.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import ScenarioError
from ..hardware.datasheets import datasheet, datasheets
from ..hardware.gpus import get_gpu
from .calibration import calibrated_as, calibration, gemm_seconds
from .fp8_recipes import (
    RECIPES,
    SOURCE_BYTES,
    Recipe,
    cast_bytes_per_element,
    copies,
    effective,
    gemm_factor,
    saved_input_fraction,
    weight_copy_bytes,
)
from .kernel_impls import TUNED
from .memory_bandwidth import memory_curves_for
from .ops import ExpertRanks, LayerOp, TPComm, Work

#: the linear layers of a transformer layer that Transformer Engine runs in FP8
TE_LINEARS = ("qkv", "attn_out", "mlp_up", "mlp_down")
#: the linears TE fuses with the norm before them (``LayerNormLinear``, ``LayerNormMLP``)
NORM_LINEARS = ("qkv", "mlp_up")
#: the row-parallel linears, whose output gradient a sequence-parallel backward all-gathers
ROW_LINEARS = ("attn_out", "mlp_down")
#: one FP32 amax, all-reduced over the TP group before a sequence-parallel gather
AMAX_BYTES = 4
#: the linears of MLA (:mod:`.mla`) and of MoE experts (:mod:`.moe`; TE's grouped linear),
#: also FP8; the router GEMM stays BF16, as DeepSeek-V3 and Megatron-Core keep it
TE_MLA_MOE_LINEARS = (
    *("q_down", "q_up", "q_proj", "kv_down", "kv_up"),
    *("expert_up", "expert_down", "shared_expert_up", "shared_expert_down"),
)


@dataclass(frozen=True)
class FP8Time:
    """Seconds of one FP8 GEMM and of the casts that feed it."""

    gemm_s: float
    cast_s: float

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.cast_s


def te_linear_casts(m: int, n: int, k: int, phase: str, first_microbatch: bool = False) -> list[float]:
    """Elements cast to FP8 before one phase of Y[m×n] = X[m×k]·W[k×n]: ``F`` casts X
    (and W on a step's first micro-batch), ``B`` casts dY, ``W`` casts nothing."""
    if phase == "F":
        return [float(m * k)] + ([float(k * n)] if first_microbatch else [])
    if phase == "B":
        return [float(m * n)]
    if phase == "W":
        return []
    raise ValueError(f"phase {phase!r}: expected F, B or W")


def _mover(gpu: str) -> Callable[[float], float]:
    """Seconds of a TE memory-bound kernel moving n bytes on ``gpu``: hand-tuned, the tuned
    curve with its ramp (the STREAM fraction where the GPU has no curve)."""
    eff = calibration(calibrated_as(gpu)).fp8
    hbm, curves = get_gpu(gpu).hbm_bandwidth, memory_curves_for(gpu)
    if not curves:
        return lambda n: n / (hbm * eff.memory)
    tuned = curves.of(TUNED)
    return lambda n: tuned.seconds(n, hbm)


def cast_seconds(gpu: str, casts: list[float], recipe: str, both_usages: bool = True) -> float:
    """Seconds of quantizing tensors of ``casts`` elements under ``recipe`` on ``gpu``: per
    tensor the recipe's kernels' launches and its bytes (:func:`.fp8_recipes.cast_bytes_per_element`)
    at a tuned memory-bound kernel's bandwidth (its ramp once per tensor)."""
    rec = effective(recipe, gpu)
    launch = calibration(calibrated_as(gpu)).fp8.launch_s
    move = _mover(gpu)
    per_element = cast_bytes_per_element(rec, gpu, both_usages)
    return sum(rec.kernels * launch + move(e * per_element) for e in casts)


def norm_cast_seconds(gpu: str, casts: list[float], recipe: str) -> float:
    """Seconds of quantizing the output of TE's norm for a ``LayerNormLinear`` /
    ``LayerNormMLP`` GEMM (``layernorm_linear.py`` @d0067d0 l. 244–263: ``with_quantized_norm``
    hands the input quantizer to ``apply_normalization``), per the recipe's
    :attr:`~.fp8_recipes.Recipe.norm_fusion`, each tensor of ``casts`` elements:

    * ``cast`` (delayed): no quantize kernel, the norm writes the FP8 data; where the GEMMs
      need a transpose (Hopper) ``nvte_transpose`` follows (``ln_api.cpp`` l. 115–121): one
      kernel reading and writing the FP8 data. The norm's own write, 1 byte an element
      where it wrote 2, keeps its BF16 price (an upper bound by one byte an element of
      the norm's tokens);
    * ``amax`` (current): the norm takes the amax as it writes, so the separate amax kernel
      and its read of the BF16 tensor go — one kernel and 2 bytes an element fewer;
    * otherwise the recipe's own quantize (:func:`cast_seconds`)."""
    rec = effective(recipe, gpu)
    if rec.norm_fusion == "amax":
        launch = calibration(calibrated_as(gpu)).fp8.launch_s
        move = _mover(gpu)
        per_element = cast_bytes_per_element(rec, gpu) - SOURCE_BYTES
        return sum((rec.kernels - 1) * launch + move(e * per_element) for e in casts)
    if rec.norm_fusion == "cast":
        launch = calibration(calibrated_as(gpu)).fp8.launch_s
        move = _mover(gpu)
        transposes = copies(rec, gpu) - 1
        return sum(transposes * (launch + move(2 * e * rec.element_bytes)) for e in casts)
    return cast_seconds(gpu, casts, recipe)


def weight_cast_seconds(ops: list, gpu: str, recipe: str) -> float:
    """Seconds of Transformer Engine's once-per-step quantization of a layer's FP8 linear
    weights (one rank's experts): each k×n weight quantized for both usages (fprop rowwise,
    dgrad columnwise). TE recasts a weight only where ``is_first_microbatch`` is None or True
    (``layernorm_linear.py`` / ``linear.py`` @d0067d0: ``update_ws = is_first_microbatch is
    None or is_first_microbatch`` → ``quantize_weight(…, update_workspace=update_ws)``);
    Megatron-Core passes it (``extensions/transformer_engine.py`` @d98e8a6 l. 1338–1345:
    ``super().forward(x, is_first_microbatch=…)``, then False; ``pipeline_parallel/schedules.py``
    l. 496 ``set_is_first_microbatch()`` on a step's first micro-batch), so the steady
    micro-batches reuse the cached copy and the cast runs once per step (priced with the
    optimizer's step, which that first micro-batch follows)."""
    dense, experts = _linear_weights(ops)
    return cast_seconds(gpu, dense + experts, recipe)


def fp8_gemm_time(
    gpu: str,
    m: int,
    n: int,
    k: int,
    casts: list[float],
    *,
    recipe: str = "delayed",
    both_usages: bool = True,
    norm_casts: list[float] | None = None,
) -> FP8Time:
    """One M×N×K GEMM on ``gpu`` under TE's ``recipe`` and the quantization of ``casts``
    (element counts), each used rowwise and columnwise (``both_usages``) or rowwise only,
    and of ``norm_casts``, quantized by the TE norm before it (:func:`norm_cast_seconds`)."""
    if datasheet(gpu).fp8_flops <= 0:
        raise ValueError(f"{gpu} has no FP8 tensor cores (gpu_datasheets.csv)")
    rec = effective(recipe, gpu)
    eff = calibration(calibrated_as(gpu)).fp8  # a GPU without FP8 rows: its donor's set
    cast_s = cast_seconds(gpu, casts, recipe, both_usages)
    if norm_casts:
        cast_s += norm_cast_seconds(gpu, norm_casts, recipe)
    gemm_s, factor = gemm_seconds(gpu, eff, m, n, k, "fp8"), gemm_factor(rec.name)
    if factor != 1.0:  # per-tensor recipes run the calibrated FP8 GEMM itself
        gemm_s = eff.launch_s + factor * (gemm_s - eff.launch_s)
    return FP8Time(gemm_s, cast_s)


def check_fp8(gpu: str) -> None:
    """A ScenarioError unless ``gpu`` has FP8 tensor cores (``gpu_datasheets.csv``) and an
    FP8 calibration, its own or its donor's (:func:`.calibration.calibrated_as`)."""
    if datasheet(gpu).fp8_flops <= 0:
        fp8 = sorted(name for name, sheet in datasheets().items() if sheet.fp8_flops > 0)
        raise ScenarioError(
            "training.precision",
            "fp8",
            f"{gpu} has no FP8 tensor cores; use bf16, fp16 or fp32, or a GPU with FP8: {', '.join(fp8)}",
        )
    # the donor may be a GPU without FP8 rows (an FP8 part nearest to an A100 in peaks)
    if calibration(calibrated_as(gpu)).fp8 is None:
        raise ScenarioError(
            "training.precision",
            "fp8",
            f"{gpu} is priced as {calibrated_as(gpu)}, which has no FP8 calibration; use bf16 or fp16",
        )


def _fp8_work(w: Work, phase: str, recipe: str, after_norm: bool = False) -> Work:
    """An FP8 GEMM's work; ``after_norm``: its forward input comes from TE's norm kernel
    (``LayerNormLinear`` / ``LayerNormMLP``), which quantizes it (:func:`norm_cast_seconds`)."""
    m, n, k = w.gemm
    fp8_bytes = m * k + k * n + 2 * m * n  # FP8 operands, BF16 output
    casts = tuple(te_linear_casts(*_linear_mnk(w, phase), phase))
    if after_norm and phase == "F":
        return Work(w.flops, float(fp8_bytes), w.gemm, fp8_casts=(), fp8_recipe=recipe, fp8_norm_casts=casts)
    return Work(w.flops, float(fp8_bytes), w.gemm, fp8_casts=casts, fp8_recipe=recipe)


def _linear_mnk(w: Work, phase: str) -> tuple[int, int, int]:
    """(m, n, k) of the forward Y[m×n] = X[m×k]·W[k×n] from a phase's GEMM shape
    (:func:`~.ops.gemm`: B runs (m, k, n), W runs (k, n, m))."""
    a, b, c = w.gemm
    return {"F": (a, b, c), "B": (a, c, b), "W": (c, b, a)}[phase]


def te_fp8_layer(ops: list, recipe: str = "delayed") -> list:
    """A transformer layer's ops (:func:`~.transformer_ops.layer_ops`) with its
    :data:`TE_LINEARS` as GEMMs of TE's ``recipe`` and their saved inputs quantized (see
    module doc)."""
    saved = saved_input_fraction(RECIPES[recipe])
    out = []
    for i, op in enumerate(ops):
        if isinstance(op, ExpertRanks):
            op = op.map(lambda layer: te_fp8_layer(layer, recipe))
        if isinstance(op, TPComm):
            out += _quantized_gathers(ops, i, op, RECIPES[recipe])
            continue
        if isinstance(op, LayerOp) and op.name in TE_LINEARS + TE_MLA_MOE_LINEARS:
            # the recipes whose quantize TE fuses into the norm (Recipe.norm_fusion)
            fused = bool(RECIPES[recipe].norm_fusion) and op.name in NORM_LINEARS
            after_norm = fused and _neighbour(ops, i, -1).startswith("norm")
            op = replace(
                op,
                fwd=_fp8_work(op.fwd, "F", recipe, after_norm),
                bwd_input=_fp8_work(op.bwd_input, "B", recipe),
                bwd_weight=_fp8_work(op.bwd_weight, "W", recipe),
                activation=op.activation * saved,
            )
        out.append(op)
    return out


def _neighbour(ops: list, i: int, step: int) -> str:
    """Name of the compute op next to ``ops[i]`` in direction ``step`` ("" if none)."""
    seq = ops[i + 1 :] if step > 0 else ops[:i][::-1]
    nxt = next((op for op in seq if isinstance(op, (LayerOp, ExpertRanks))), None)
    return nxt.name if isinstance(nxt, LayerOp) else ""


def _quantized_gathers(ops: list, i: int, op: TPComm, rec: Recipe) -> list[TPComm]:
    """A sequence-parallel TP collective ``ops[i]`` with the bytes TE moves under FP8: it
    all-gathers the quantized tensor, not BF16 (``distributed.py`` @d0067d0
    ``gather_along_first_dim(…, quantizer=…)`` → ``_all_gather_fp8`` / ``_all_gather_mxfp8``
    …), so per element one quantized copy (:func:`.fp8_recipes.saved_input_fraction` of
    the BF16 bytes) where TE gathers rowwise data, two where it gathers both usages:

    * forward, the input of ``LayerNormLinear`` / ``LayerNormMLP`` (QKV, MLP up):
      ``layernorm_linear.py`` l. 296–312 quantizes ``ln_out`` and sets
      ``set_usage(rowwise=True, columnwise=False)`` before the gather: one copy;
    * backward, the output gradient of a row-parallel linear (attention out, MLP down):
      ``module/base.py`` l. 1746 ``grad_output_preprocess`` gathers it with the grad-output
      quantizer (both usages): per-tensor FP8 gathers the rowwise data and transposes after
      (``_all_gather_fp8``: "We cannot directly all-gather the transposed FP8 tensor"), the
      block-scaled recipes gather both copies with their scales.

    The reduce-scatters (outputs and input gradients) stay BF16. A gather feeding a MoE router
    or MLA's projections is left BF16 (not a TE norm-linear).

    A recipe that scales by the tensor's amax now (current, NVFP4: ``amax_pass``) all-reduces
    that amax over the TP group before it quantizes a gathered tensor, so that every rank's
    shard gets the same scale (``_all_gather_fp8``: "Assume scaling factors are identical
    across ranks"): ``layernorm_linear.py`` l. 233–236 and ``linear.py`` l. 352 set
    ``amax_reduction_group = tp_group`` for a column-parallel input under SP, ``linear.py``
    l. 818–824 for a row-parallel output gradient; ``quantizer.cpp`` l. 1015–1020 runs
    ``amax_reduction_group->allreduce(…)->wait()`` between the amax and the cast. One
    :data:`AMAX_BYTES` all-reduce (MAX) before each such gather — in the backward before the
    output gradient's, so placed after the collective in forward order. TE does not coalesce
    them (TE @d0067d0): ``Float8CurrentScalingQuantizer::quantize_impl`` all-reduces the one
    amax of the tensor it is quantizing, ``allreduce({amax_buf}, MAX)``, one NCCL call per
    quantize; only NVFP4's multi-tensor split quantize gathers several amaxes into one
    ``allreduce_coalesced`` (``cast.cpp`` l. 47, ``quantizer.cpp`` l. 2537), which a
    sequence-parallel gather of one tensor never runs. The backward's re-gather of the saved
    input (:mod:`.sp_regather`) moves the already quantized tensor: no amax again."""
    one = saved_input_fraction(rec)
    before: list[TPComm] = []
    after: list[TPComm] = []
    if op.fwd == "all_gather" and _neighbour(ops, i, 1) in NORM_LINEARS:
        op = replace(op, fwd_nbytes=int(op.nbytes * one))
        before += [TPComm("tp amax all-reduce", "all_reduce", "", AMAX_BYTES, op.group)] * rec.amax_pass
    if op.bwd == "all_gather" and _neighbour(ops, i, -1) in ROW_LINEARS:
        op = replace(op, bwd_nbytes=int(op.nbytes * one * (2 if rec.own_columnwise else 1)))
        after += [TPComm("tp grad amax all-reduce", "", "all_reduce", AMAX_BYTES, op.group)] * rec.amax_pass
    return [*before, op, *after]


def _linear_weights(ops: list) -> tuple[list[float], list[float]]:
    """Sizes (k×n) of a layer's FP8 linear weights on one GPU: (dense, one rank's experts)."""

    def weights(items) -> list[float]:
        return [
            float(op.fwd.gemm[1] * op.fwd.gemm[2])
            for op in items
            if isinstance(op, LayerOp) and op.name in TE_LINEARS + TE_MLA_MOE_LINEARS
        ]

    experts = [x for op in ops if isinstance(op, ExpertRanks) for x in op.ranks[0]]
    return weights([op for op in ops if not isinstance(op, ExpertRanks)]), weights(experts)


def fp8_linear_params(ops: list) -> tuple[float, float]:
    """(dense, expert-parallel experts') parameters of a layer's FP8 linears on one GPU (one
    rank's experts): the k×n weight of each (biases are not cast)."""
    dense, experts = _linear_weights(ops)
    return sum(dense), sum(experts)


def fp8_cache_bytes(ops: list, gpu: str, recipe: str = "delayed", fp8_params: bool = False) -> float:
    """Bytes of TE's cached quantized weights of a layer's FP8 linears on ``gpu``: the copies
    the recipe writes (:func:`.fp8_recipes.copies`: the FP8 weight and, on Hopper or under
    block scaling, its columnwise copy), each with its scales; with ``fp8_params`` (the
    parameters themselves FP8, Megatron's ``--fp8-param-gather``) one copy fewer: the FP8
    weight is the parameter (:func:`.memory_model.static_bytes`)."""
    rec = effective(recipe, gpu)
    per_param = (copies(rec, gpu) - (1 if fp8_params else 0)) * weight_copy_bytes(rec)
    return per_param * sum(fp8_linear_params(ops))
