"""Real models → per-chunk :class:`StageCost` s: the parallel plan compiled into segments.

For each model chunk (a pipeline stage, or a virtual stage) on each of its GPUs:

* **TP** — the ops of :mod:`.transformer_ops` are per-GPU shards; their TP collectives
  (2 all-reduces forward and 2 backward per layer, or all-gather/reduce-scatter with
  sequence parallelism) become collective segments between compute segments;
* **PP** — layers split evenly (Megatron) unless a partition is given; the embedding
  runs on the first chunk, the output layer and loss on the last; each chunk sends
  ``b·s·h/t`` elements per TP rank downstream (Megatron's scatter/gather optimisation);
* **TP overlap** — ``parallel.tp_comm_overlap`` merges each layer's sequence-parallel
  collectives with the GEMMs Transformer Engine pipelines them with (:mod:`.tp_overlap`);
* **FP8** — ``training.precision: fp8`` runs each layer's four linears as Transformer
  Engine does (:func:`.fp8.te_fp8_layer`) and adds its cached FP8 weights to the buffers;
  refused on GPUs without FP8;
* **recompute** — ``full`` re-runs each layer's forward (with its collectives) before
  its backward and keeps only the layer input; ``selective`` re-runs the attention core;
* **DP / ZeRO** — ``grad_bytes`` is the per-GPU data-parallel volume as one all-reduce:
  the fp32 gradients (Megatron reduces its fp32 ``main_grad``) for ZeRO 0–2 (reduce-scatter + all-gather move what an
  all-reduce moves), 1.5× that for ZeRO-3 (Rajbhandari et al. 2020 §7.2.2);
* **per layer** — with ``parallel.data_parallel`` each chunk also carries its passes and
  its gradient / parameter bytes per layer (the embedding with the first layer, the output
  layer with the last; bytes in ``grad_reduce_dtype`` / ``param_gather_dtype``), which the
  bucketed, sharded and FSDP data-parallel traffic uses (:mod:`clustersim.compilers.pipeline.data_parallel`);
* **memory** — static bytes by kind from :mod:`.memory_model`; ``activation_memory`` per
  micro-batch, which the compiler allocates per forward and frees per backward;
* **fixed costs** (``training.fixed_costs``, docs/models.md) — kernels are priced without
  their launch and each pass (each layer's, with ``parallel.data_parallel``) starts with a
  ``launch`` segment of its kernels × the launch time and the GPU's wait for the host that
  issues them (:mod:`.host`); ``pass_overhead`` per pass; per step
  the fp16 unscale + inf-check pass (8 bytes per local fp32 gradient: read, write), the
  clipping norm's pass (4 bytes: read) and the tied word-embedding gradient
  (vocab · hidden / tp fp32 values, Megatron's ``main_grad``) of the first and last chunk;
  with tp > 1 and no sequence parallelism, ``recv_gather`` = the b·s·h boundary tensor the
  receiver all-gathers from the 1/tp pieces the TP ranks sent (Megatron-LM 2021's
  ``--scatter-gather-tensors-in-pipeline``, on by default: ``gather_split_1d_tensor`` after
  every receive; with sequence parallelism the tensor already is the s/tp shard).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache, partial
from itertools import accumulate

import numpy as np

from ..errors import ScenarioError
from ..hardware.interference import deepep_sms_for, nccl_ctas_for
from ..memory_kinds import StaticMemory
from .cnn import cnn_layers
from .cost_model import CostModel
from .fp8 import check_fp8, fp8_cache_bytes, fp8_linear_params, te_fp8_layer, weight_cast_seconds
from .fp8_recipes import check_recipe, default_recipe
from .grad_accumulation import with_grad_accumulation
from .host import host_waits
from .host_kernels import HostModel
from .kernel_impls import DEFAULT_KERNELS
from .lazy_passes import LazyPasses
from .loss_memory import loss_working_bytes
from .memory_model import DTYPE_BYTES, ELEMENT_BYTES, static_bytes, zero_shards
from .moe_dispatch import ExpertSplit, dispatch_buffer_bytes
from .ops import ExpertRanks
from .precision_aware import optimizer_state_bytes, step_bytes
from .profile_rows import read_profile
from .resolve import resolve_transformer
from .segments import backward_items, compute_time, forward_items, launch_op, to_segments
from .selective_ac import (
    MEGATRON_MODULES,
    check_modules,
    check_op_policy,
    module_recompute,
    op_recompute_ops,
    op_saved_bytes,
    policy_of,
)
from .sp_regather import regathers, with_regather
from .stage_cost import StageCost, even_partition
from .tp_overlap import TPOverlap, overlap_of
from .transformer_ops import embedding_ops, layer_ops, mtp_ops, output_ops
from .zero3_modules import submodules

#: bytes per gradient element on the data-parallel wire: Megatron accumulates and
#: all-reduces fp32 ``main_grad`` (``--accumulate-allreduce-grads-in-fp32``) — the same
#: fp32 gradients the 18 bytes/param memory model counts — for every precision
GRAD_COMM_BYTES = {"bf16": 4, "fp32": 4, "fp16": 4, "fp8": 4}
ZERO3_COMM_FACTOR = 1.5  # ZeRO-3: reduce-scatter grads + all-gather params in F and B
#: HBM bytes per local fp32 gradient of the per-step passes: the fp16 unscale and inf check
#: (``torch._amp_foreach_non_finite_check_and_unscale_``, in place: read + write) and the
#: clipping norm (``multi_tensor_l2norm``: read) — Megatron-LM's optimizer.py / clip_grads.py
UNSCALE_BYTES, GRAD_NORM_BYTES = 8, 4
#: a chunk's passes: forward, backward, and a split backward's halves (inputs, weights)
PHASES = ("F", "B", "Bi", "W")


@dataclass(frozen=True)
class TrainSetup:
    """What the scenario says about one GPU's share of the training step."""

    micro_batch: int
    tp: int
    dp: int
    sp: bool
    zero: int
    precision: str
    optimizer: str
    recompute: str
    granularity: str
    gpu: str

    @classmethod
    def of(cls, sc, gpu: str | None = None) -> TrainSetup:
        """The setup of scenario ``sc`` on GPU type ``gpu`` (default ``cluster.gpu``)."""
        tr, par = sc.training, sc.parallel
        return cls(
            tr.micro_batch,
            par.tp,
            sc.dp * par.cp,  # ZeRO shards over the data-parallel group with its CP ranks
            par.sequence_parallel and par.tp > 1,
            max(par.zero, 1 if par.data_parallel and par.data_parallel.distributed_optimizer else 0),
            tr.precision,
            tr.optimizer,
            tr.recompute,
            sc.simulation.granularity,
            gpu or sc.cluster.gpu,
            (par.data_parallel.shard_group_size or 0) if par.data_parallel and par.zero == 3 else 0,
            overlap_of(par, sc.cluster.comm_compute_slowdown),
            par.cp,
            par.cp_comm_type,
            ExpertSplit(
                par.ep,
                par.etp or par.tp,
                par.moe_token_dispatcher,
                par.moe_shared_expert_overlap,
                par.moe_permute_fusion,
                # the FP8 GEMM model prices one GEMM a kernel: FP8 experts stay per expert
                par.moe_expert_mlp if tr.precision != "fp8" else "sequential",
                par.moe_host_sync,
                max(1, min(par.ep, sc.cluster.gpus_per_node // (par.etp or par.tp))),
            ),
            grad_dtype=par.data_parallel.grad_reduce_dtype if par.data_parallel else None,
            fp8_params=bool(par.data_parallel) and par.data_parallel.param_gather_dtype == "fp8",
            zero3=par.zero == 3 and bool(par.data_parallel) and par.data_parallel.deepspeed_zero3 is not None,
            fp32_params=par.zero == 3 and bool(par.data_parallel) and bool(par.data_parallel.fsdp2),
            kernels=tr.memory_kernels or tr.framework,
            fp8_recipe=tr.fp8_recipe or default_recipe(tr.framework, gpu or sc.cluster.gpu),
            selective=policy_of(tr.framework),
            regather=regathers(tr.framework),
            optimizer_bytes=_optimizer_bytes(sc, gpu),
        )

    shards: int = 0
    #: TP collectives pipelined with their GEMMs (``parallel.tp_comm_overlap``; :mod:`.tp_overlap`)
    tp_overlap: TPOverlap | None = None
    cp: int = 1
    cp_comm: str = "p2p"
    #: how MoE layers split their experts (:mod:`.moe_dispatch`)
    split: ExpertSplit = ExpertSplit()
    #: the gradient buffer's dtype (``parallel.data_parallel.grad_reduce_dtype``; None: the
    #: precision's own — :func:`.memory_model.static_bytes`)
    grad_dtype: str | None = None
    #: the FP8 linears' weights held as FP8 (``param_gather_dtype: fp8``; :mod:`.fp8`)
    fp8_params: bool = False
    #: ZeRO-3 through DeepSpeed's coordinator: the layers' hooked submodules are kept (:mod:`.zero3_modules`)
    zero3: bool = False
    #: FSDP2's fp32 sharded parameters, the optimizer's own (:func:`.memory_model.static_bytes`)
    fp32_params: bool = False
    #: whose memory-bound kernel implementations run (:mod:`.kernel_impls`)
    kernels: str = DEFAULT_KERNELS
    #: Transformer Engine's recipe under FP8 (``training.fp8_recipe`` or the profile's; :mod:`.fp8_recipes`)
    fp8_recipe: str = "delayed"
    #: what ``recompute: selective`` keeps: ``attention_core`` or torchtitan's ``op`` policy (:mod:`.selective_ac`)
    selective: str = "attention_core"
    #: the sequence-parallel backward gathers the column-parallel inputs again (:mod:`.sp_regather`)
    regather: bool = True
    #: Megatron-Core's ``recompute_modules`` under the ``attention_core`` policy (:mod:`.selective_ac`)
    modules: tuple[str, ...] = MEGATRON_MODULES
    #: the optimizer states' bytes per parameter (``training.precision_aware_optimizer``;
    #: None: the precision's and optimizer's own — :func:`.memory_model.static_bytes`)
    optimizer_bytes: float | None = None

    def __post_init__(self):
        if not self.shards:  # ZeRO shards over the whole DP group unless HSDP says fewer
            object.__setattr__(self, "shards", self.dp)

    @property
    def expert_shards(self) -> int:
        """Over how many GPUs ZeRO shards expert state: the expert-data-parallel group."""
        return max(1, self.tp * self.dp // (self.split.etp * self.split.ep))

    @property
    def e(self) -> int:
        return ELEMENT_BYTES[self.precision]


@dataclass(frozen=True)
class FixedCosts:
    """``training.fixed_costs`` resolved on one GPU type: seconds per kernel launch and per
    pass, and which per-step work runs."""

    launch_s: float
    pass_overhead: float
    unscale: bool
    grad_norm: bool
    tied_embedding: bool
    pipeline_gather: bool
    grad_accumulation: bool = False
    #: what the host spends issuing each op, forward and backward (:mod:`.host_kernels`;
    #: nothing with CUDA graphs)
    host: HostModel = HostModel(0.0, 0.0)

    @classmethod
    def of(cls, sc, cm: CostModel, precision: str, hidden_bytes: float = 0.0) -> FixedCosts:
        """The fixed costs of scenario ``sc`` with kernels priced by ``cm`` (the launch
        default is ``cm``'s calibrated ``launch_s``, the host's the framework's stack's,
        none with CUDA graphs); the unscale runs with fp16 only. ``hidden_bytes``: one pass
        over the GPU's [tokens, hidden] activation, what the extra small kernels move."""
        tr = sc.training
        fc = tr.fixed_costs
        launch = cm.eff.launch_s if fc.kernel_launch is None else fc.kernel_launch
        host = HostModel.of(
            tr.framework,
            fc.host_dispatch,
            tr.cuda_graphs,
            fc.small_kernels,
            hidden_bytes,
            tr.precision == "fp8",
        )
        return cls(
            launch,
            fc.microbatch_overhead,
            fc.loss_scale_check and precision == "fp16",
            fc.grad_clip,
            fc.tied_embedding_allreduce,
            fc.pipeline_gather,
            fc.grad_accumulation,
            host,
        )

    def wait(self, items: list[tuple], backward: bool = False) -> float:
        """Seconds the GPU stream waits for the host in the pass of ``items`` (:func:`.host.host_waits`)."""
        return host_waits([items], self.launch_s, self._dispatch(backward))[0]

    def _dispatch(self, backward: bool) -> float:
        """Host seconds per kernel without its own host time, and per collective call."""
        return self.host.dispatch("B" if backward else "F")

    def pass_segments(self, pieces: list[list], granularity: str, backward: bool = False) -> tuple:
        """The Segments of each piece of one pass (:func:`.segments.to_segments`), each
        piece led by its launch op: its kernels' launches and the GPU's wait for the host
        in it (:func:`.host.host_waits`, the race carried from piece to piece in the order
        they run: the last first for the ``backward`` pieces of a model's layers)."""
        return self.priced_pass(pieces, granularity, backward)[0]

    def priced_pass(self, pieces: list[list], granularity: str, backward: bool = False) -> tuple:
        """(:meth:`pass_segments`, the GPU's wait for the host in each piece — what
        :meth:`wait` gives a pass of one piece): both from one race of the host."""
        key = tuple(map(tuple, pieces))
        try:
            return cached_pass_segments(self, key, granularity, backward)
        except TypeError:  # an item holding a list (unhashable): priced uncached, raising what it raises
            return _pass_segments(self, key, granularity, backward)


def _pass_segments(fixed: FixedCosts, pieces: tuple, granularity: str, backward: bool) -> tuple:
    """:meth:`FixedCosts.priced_pass` of ``pieces`` (a tuple of item tuples)."""
    order = slice(None, None, -1 if backward else 1)
    dispatch = fixed._dispatch(backward)
    waits = host_waits(list(pieces[order]), fixed.launch_s, dispatch)[order]
    segments = tuple(
        to_segments(items, granularity, launch_op(items, fixed.launch_s, wait, dispatch))
        for items, wait in zip(pieces, waits)
    )
    return segments, tuple(waits)


#: the same pass items come back in every plan of a search that changes none of what
#: prices them (data parallelism, schedule, ...): their segments and waits — a function of the items
#: and the fixed costs alone, immutable — are built once
cached_pass_segments = lru_cache(maxsize=4096)(_pass_segments)


def _cost_model(sc, st: TrainSetup) -> CostModel:
    custom = sc.cluster.custom_gpu
    if st.precision == "fp8":
        if custom is not None and custom.name == st.gpu:
            raise ScenarioError(
                "training.precision",
                "fp8",
                f"the custom GPU {st.gpu!r} has no FP8 calibration; use bf16 or fp16, or a catalog GPU",
            )
        check_fp8(st.gpu)
        check_recipe(st.fp8_recipe, st.gpu)
    elif sc.training.fp8_recipe is not None:
        raise ScenarioError(
            "training.fp8_recipe",
            sc.training.fp8_recipe,
            f"a Transformer Engine recipe needs training.precision: fp8 (not {st.precision}); leave it unset",
        )
    elif st.fp8_params:
        raise ScenarioError(
            "parallel.data_parallel.param_gather_dtype",
            "fp8",
            f"FP8 parameters need training.precision: fp8 (not {st.precision}); use bf16 or fp32",
        )
    profile = getattr(sc.model, "profile", None)
    cm = CostModel.for_gpu(st.gpu, read_profile(profile) if profile else None, custom)
    custom_here = custom is not None and custom.name == st.gpu
    ctas = 0 if custom_here else nccl_ctas_for(sc.cluster, st.gpu)
    flex = sc.parallel.moe_token_dispatcher == "flex" and not custom_here
    deepep = deepep_sms_for(sc.cluster, st.gpu) if flex else 0  # DeepEP's kernels, not NCCL's
    return replace(cm, nccl_ctas=ctas, deepep_sms=deepep) if ctas or deepep else cm


#: the cost model of a scenario's GPU as the stage builder prices it (the generation steps' too)
cost_model_of = _cost_model


def _check_profile(cm: CostModel, st: TrainSetup) -> None:
    """Once every op of the model is priced: refuse ``model.profile`` rows no op matched."""
    if cm.profile is not None:
        cm.profile.check_all_used(f"this model (micro-batch {st.micro_batch}, tp {st.tp})")


def _static(
    st: TrainSetup, params: float, buffers: float, expert: float = 0.0, fp8: tuple[float, float] = (0.0, 0.0)
) -> tuple[StaticMemory, StaticMemory]:
    """Static bytes of ``params`` on one GPU, of which ``expert`` are expert-parallel experts
    (ZeRO shards those over the expert-data-parallel group, the rest over DP): all of them,
    and the experts' part. ``fp8``: the (dense, expert) parameters held as FP8 (:mod:`.fp8`)."""
    dense_fp8, expert_fp8 = fp8 if st.fp8_params else (0.0, 0.0)
    (w, g, o), (we, ge, oe) = (
        static_bytes(
            n,
            st.precision,
            st.optimizer,
            st.zero,
            shards,
            grad_dtype=st.grad_dtype,
            fp8_params=f8,
            fp32_params=st.fp32_params,
            optimizer_bytes=st.optimizer_bytes,
        )
        for n, shards, f8 in ((params - expert, st.shards, dense_fp8), (expert, st.expert_shards, expert_fp8))
    )
    total = StaticMemory(weights=int(w + we), grads=int(g + ge), optimizer=int(o + oe), buffers=int(buffers))
    return total, StaticMemory(weights=int(we), grads=int(ge), optimizer=int(oe))


def _optimizer_bytes(sc, gpu: str | None) -> float | None:
    """The optimizer states' bytes per parameter under ``training.precision_aware_optimizer``
    (:mod:`.precision_aware`), None without it."""
    tr = sc.training
    if tr.precision_aware_optimizer is None:
        return None
    recipe = tr.fp8_recipe or default_recipe(tr.framework, gpu or sc.cluster.gpu)
    return optimizer_state_bytes(
        tr.precision_aware_optimizer, tr.precision, recipe, tr.optimizer, tr.framework
    )


def _grad_bytes(st: TrainSetup, params: float) -> int:
    return int(params * GRAD_COMM_BYTES[st.precision] * (ZERO3_COMM_FACTOR if st.zero >= 3 else 1.0))


def _local_grads(st: TrainSetup, params: float, expert: float) -> float:
    """The fp32 gradients the optimizer steps on this GPU: its shard of the dense and of
    the expert-parallel experts' parameters (``expert`` of ``params``)."""
    dense = (params - expert) / zero_shards("optimizer", st.zero, st.shards)
    return dense + expert / zero_shards("optimizer", st.zero, st.expert_shards) if expert else dense


@dataclass(frozen=True)
class _PassItems:
    """A chunk's kernel items per pass: forward, backward (whole), backward for inputs — how
    to build them: only zero-bubble schedules split the backward — and backward for weights."""

    f: list
    b: list
    bi: Callable[[], list]
    w: list


def _inputs_items(rec: list, ops: list, cm: CostModel, overlap: TPOverlap | None = None) -> list:
    """The items of a backward for inputs of ``ops``, after the recomputed forward's ``rec``."""
    return rec + backward_items(ops, cm, weight=False, overlap=overlap)


def _stage(
    st: TrainSetup,
    cm: CostModel,
    fixed: FixedCosts,
    items: _PassItems,
    params: float,
    act_mem: float,
    send_bytes: float,
    work_buffer: float,
    expert: float = 0.0,
    fp8: tuple[float, float] = (0.0, 0.0),
) -> StageCost:
    # F and B hold the host's waits; W's time is the cost's backward_weight: built now. Bi only
    # a split backward reads (zero-bubble schedules): built when first read
    by_phase = {"F": items.f, "B": items.b, "W": items.w}
    priced = {ph: fixed.priced_pass([i], st.granularity, backward=ph != "F") for ph, i in by_phase.items()}
    made = {ph: segments[0] for ph, (segments, _) in priced.items()}
    inputs = partial(_first_segments, fixed, items.bi, st.granularity)
    passes = LazyPasses(PHASES, made, {"Bi": inputs})
    grads = _local_grads(st, params, expert)  # the optimizer's local fp32 gradients
    # buffers: the recompute working set and the p2p send and recv buffers
    static, experts = _static(st, params, work_buffer + 2 * send_bytes, expert, fp8)
    (tf, ff), (tb, fb), (tw, _) = (compute_time(passes[k]) for k in ("F", "B", "W"))
    return StageCost(
        forward=tf,
        backward=tb,
        backward_weight=tw,
        activation_bytes=int(send_bytes),
        activation_memory=int(act_mem),
        static=static,
        expert_static=experts,
        optimizer=cm.optimizer_time(grads, *step_bytes(st.optimizer_bytes)),
        forward_flops=ff,
        backward_flops=fb,
        grad_bytes=_grad_bytes(st, params - expert),
        expert_grad_bytes=_grad_bytes(st, expert),
        passes=passes,
        pass_overhead=fixed.pass_overhead,
        unscale=cm.memory_pass(grads * UNSCALE_BYTES) if fixed.unscale else 0.0,
        grad_norm=cm.memory_pass(grads * GRAD_NORM_BYTES) if fixed.grad_norm else 0.0,
        host_wait=priced["F"][1][0] + priced["B"][1][0],  # :meth:`FixedCosts.wait` of each
    )


def _first_segments(fixed: FixedCosts, items: Callable[[], list], granularity: str) -> tuple:
    """The segments of a backward pass of one piece, the ``items`` built."""
    return fixed.priced_pass([items()], granularity, backward=True)[0][0]


@dataclass(frozen=True)
class _LayerKind:
    """One kind of layer (dense or MoE MLP, windowed or full attention) compiled once: its
    pass items (the backward for inputs' built when first read: only a split backward runs
    it), parameters (of them, expert-parallel experts'), kept activation bytes,
    recompute working set, FP8 weight cache and token-dispatch buffers."""

    f: list
    b: list
    bi_items: Callable[[], list]
    w: list
    params: float
    act: float
    work: float
    fp8_cache: float
    expert: float = 0.0
    dispatch: float = 0.0
    #: (dense, expert) parameters of its FP8 linears (:func:`.fp8.fp8_linear_params`)
    fp8_linear: tuple[float, float] = (0.0, 0.0)
    #: the hooked submodules DeepSpeed ZeRO-3 fetches for (:mod:`.zero3_modules`; empty unless it runs)
    modules: tuple = ()
    #: seconds of TE's once-per-step quantization of its FP8 weights (:func:`.fp8.weight_cast_seconds`)
    fp8_weight_cast: float = 0.0

    @cached_property
    def bi(self) -> list:
        """The items of the layer's backward for inputs."""
        return self.bi_items()


def _layer_kind(cfg, st: TrainSetup, cm: CostModel, shape: tuple[bool, int], accumulate: bool) -> _LayerKind:
    """The costs of a layer of ``shape`` (MoE MLP, sliding window: one of
    :meth:`~.transformer.TransformerConfig.layer_shapes`)."""
    moe, window = shape
    cfg = replace(cfg, sliding_window=window)
    b, tp, sp, e = st.micro_batch, st.tp, st.sp, st.e
    layer = layer_ops(cfg, b, tp, sp, e, moe, st.cp, st.cp_comm, st.split, st.kernels)
    fp8_cache, fp8_linear, fp8_cast = 0.0, (0.0, 0.0), 0.0
    if st.precision == "fp8":
        layer = te_fp8_layer(layer, st.fp8_recipe)
        fp8_cache = fp8_cache_bytes(layer, st.gpu, st.fp8_recipe, st.fp8_params)
        fp8_linear = fp8_linear_params(layer)
        # FP8 parameters: the optimizer's step writes the FP8 weight itself (its 16-bit copy's
        # write in :meth:`.cost_model.CostModel.optimizer_time`), TE recasts nothing
        fp8_cast = 0.0 if st.fp8_params else weight_cast_seconds(layer, st.gpu, st.fp8_recipe)
    if sp and st.regather:  # the backward gathers the column-parallel inputs again
        layer = with_regather(layer)
    if accumulate:
        layer = with_grad_accumulation(layer, e)
    ov = st.tp_overlap
    lf, lb = forward_items(layer, cm, overlap=ov), backward_items(layer, cm, overlap=ov)
    lw = backward_items(layer, cm, inputs=False, overlap=ov)
    full_act = sum(op.activation for op in layer if hasattr(op, "activation"))
    rep = b * cfg.seq_len * cfg.hidden / (tp if sp else 1)
    if st.recompute == "selective" and st.selective == "op":  # torchtitan's op-level policy
        check_op_policy(cfg, st.cp)
        chosen = forward_items(op_recompute_ops(layer, cfg, b, tp, e), cm)
        kept = op_saved_bytes(cfg, b, tp, sp, e)
    else:  # Megatron's modules: the attention core (Korthikanti), MLA's up projections
        rerun, dropped = module_recompute(layer, st.modules, b, cfg.seq_len, cfg.heads // tp)
        # the items only selective recompute re-runs (their ops are the layer's: priced in lf)
        chosen = forward_items(rerun, cm) if st.recompute == "selective" else []
        kept = full_act - dropped
    rec = {"full": lf, "selective": chosen, "none": []}[st.recompute]
    act = {"none": full_act, "full": rep * e, "selective": kept}[st.recompute]
    work = {"none": 0.0, "full": full_act, "selective": max(0.0, full_act - act)}[st.recompute]
    params = sum(op.params for op in layer if hasattr(op, "params"))
    expert = sum(op.params for op in layer if isinstance(op, ExpertRanks))
    dispatch = dispatch_buffer_bytes(cfg, b, tp, e, st.split) if expert else 0.0
    modules = submodules(layer, cfg, tp, cm, st.recompute == "full") if st.zero3 else ()
    return _LayerKind(
        lf,
        rec + lb,
        partial(_inputs_items, rec, layer, cm, ov),
        lw,
        params,
        act,
        work,
        fp8_cache,
        expert,
        dispatch,
        fp8_linear,
        modules,
        fp8_cast,
    )


def _ends(cfg, st: TrainSetup, cm: CostModel, inference: bool, accumulate: bool) -> tuple[list, list, dict]:
    """The ops before a model's first layer (its embedding) and after its last (final norm,
    output layer, loss but in ``inference``, MTP layers), and their items per phase
    (:func:`_edge_items`)."""
    b, tp, sp, e = st.micro_batch, st.tp, st.sp, st.e
    emb = embedding_ops(cfg, b, tp, sp, e)
    out = output_ops(cfg, b, tp, sp, e, st.kernels) + mtp_ops(cfg, b, tp, sp, e, st.split, st.kernels)
    if inference:  # a request's forward ends at the logits: no loss
        out = [op for op in out if op.name.partition(".")[0] != "cross_entropy"]
    if accumulate:
        emb, out = with_grad_accumulation(emb, e), with_grad_accumulation(out, e)
    return emb, out, _edge_items(emb, out, cm)


#: a layer kind's and the model ends' ops, items, bytes and parameters are pure functions of
#: the model, the setup and the cost model, immutable once made (their lists are copied,
#: never changed): the plans of a search that differ in none of them (data parallelism,
#: schedule, pipeline) share them
cached_layer_kind = lru_cache(maxsize=256)(_layer_kind)
cached_ends = lru_cache(maxsize=64)(_ends)


def _by_value(cached, made, cfg, st: TrainSetup, cm: CostModel, *rest):
    """``made(cfg, st, cm, *rest)``, from ``cached`` (its shared cache) — except under a
    model profile, whose rows record the ops they price (:func:`_check_profile` reads that)."""
    if cm.profile is None:
        try:
            return cached(cfg, st, cm, *rest)
        except TypeError:  # a setting holding a list (unhashable): made uncached, raising what it raises
            pass
    return made(cfg, st, cm, *rest)


def cache_clear() -> None:
    """Empty the caches the stage builder shares across scenarios (pass segments, layer
    kinds, model ends): what a first pricing of a configuration finds."""
    for cache in (cached_pass_segments, cached_layer_kind, cached_ends):
        cache.cache_clear()


def transformer_chunk_costs(
    sc, chunks: int, partition: list[int] | None = None, gpu: str | None = None, layers: bool = False
) -> list[StageCost]:
    """Per-chunk StageCosts of a transformer scenario on GPU type ``gpu`` (see module doc);
    the layers of each shape — dense or MoE, windowed or full attention
    (:meth:`~.transformer.TransformerConfig.layer_shapes`) — are compiled once, and a chunk
    runs its layers in order. ``layers`` (at ``granularity: layer``): each pass is built
    layer by layer — a layer's kernels never merge with the next one's, each layer's
    pieces led by their own launch op (:meth:`FixedCosts.pass_segments`, the host's race
    carried across them) — and every segment carries its model layer (``Segment.layer``;
    the embedding with the first layer, the output layer with the last), for exports that
    label their ops (:mod:`clustersim.interop.chakra_split`)."""
    st = TrainSetup.of(sc, gpu)
    cfg = resolve_transformer(sc.model)
    st = replace(st, modules=check_modules(sc.training, cfg, st.cp))
    if st.cp > 1:  # every op but attention's core runs on the GPU's s/cp tokens
        cfg = replace(cfg, seq_len=cfg.seq_len // st.cp)
    cm = _cost_model(sc, st)
    b, tp, sp, e = st.micro_batch, st.tp, st.sp, st.e
    fixed = FixedCosts.of(sc, cm, st.precision, b * cfg.seq_len * cfg.hidden / (tp if sp else 1) * e)
    # kernels (their launches are the passes' own segments) and what the host spends issuing them
    km = replace(cm.without_launch(), host=fixed.host)
    inference, accumulate = sc.training.mode == "inference", fixed.grad_accumulation
    # the embedding's and the output layer's ops and items, priced once
    emb, out, edges = _by_value(cached_ends, _ends, cfg, st, km, inference, accumulate)
    order = cfg.layer_shapes()
    kinds = {
        shape: _by_value(cached_layer_kind, _layer_kind, cfg, st, km, shape, accumulate)
        for shape in sorted(set(order))
    }
    tied = int(cfg.vocab * cfg.hidden / tp * GRAD_COMM_BYTES[st.precision])
    training = sc.training.mode != "inference"
    loss_work = loss_working_bytes(cfg, b, tp, e, st.kernels) if training else 0.0
    send = b * cfg.seq_len * cfg.hidden * e / tp
    partition = partition or even_partition(cfg.layers, chunks)

    def ends_of(phase: str, first: bool, last: bool) -> tuple[list, list]:
        """A chunk's items of ``phase`` before its first layer and after its last."""
        head, tail = edges[phase]
        return head if first else [], tail if last else []

    def chunk(first: bool, last: bool, mine: tuple, start: int = -1) -> StageCost:
        pre, post = (emb if first else []), (out if last else [])
        edge = LazyPasses(
            PHASES,
            {ph: ends_of(ph, first, last) for ph in "FBW"},
            {"Bi": partial(ends_of, "Bi", first, last)},
        )
        runs = [kinds[shape] for shape in mine]
        count = {shape: mine.count(shape) for shape in kinds if shape in mine}
        (f0, f1), (b0, b1), (w0, w1) = (edge[ph] for ph in "FBW")
        f = f0 + [i for L in runs for i in L.f] + f1
        b_all = b1 + [i for L in runs[::-1] for i in L.b] + b0
        w = w1 + [i for L in runs[::-1] for i in L.w] + w0

        def bi() -> list:  # built where a split backward reads it
            bi0, bi1 = edge["Bi"]
            return bi1 + [i for L in runs[::-1] for i in L.bi] + bi0

        extra = [op for op in pre + post if hasattr(op, "params")]
        params = sum(c * kinds[shape].params for shape, c in count.items()) + sum(op.params for op in extra)
        act_mem = sum(c * kinds[shape].act for shape, c in count.items()) + sum(op.activation for op in extra)
        # the recompute working set, or on the last chunk the loss's if larger (:mod:`.loss_memory`)
        work = max([kinds[shape].work for shape in count] + [loss_work if last else 0.0])
        buffers = work + sum(c * kinds[shape].fp8_cache for shape, c in count.items())
        buffers += max(
            (kinds[shape].dispatch for shape in count), default=0.0
        )  # one layer exchanges at a time
        expert = sum(c * kinds[shape].expert for shape, c in count.items())
        expert += sum(op.params for op in post if isinstance(op, ExpertRanks))  # the MTP layers'
        fp8 = tuple(sum(c * kinds[shape].fp8_linear[i] for shape, c in count.items()) for i in (0, 1))
        send_out = 0 if last else send
        cost = _stage(
            st, cm, fixed, _PassItems(f, b_all, bi, w), params, act_mem, send_out, buffers, expert, fp8
        )
        extra = {}  # the fields the stage's own cost leaves out, set in one copy
        recast = sum(c * kinds[moe].fp8_weight_cast for moe, c in count.items())
        if recast:  # TE's weight quantization on the step's first micro-batch, after the step
            extra["optimizer"] = cost.optimizer + recast
        if fixed.pipeline_gather and tp > 1 and not sp:
            extra["recv_gather"] = int(send * tp)
        if cfg.tied_embeddings and fixed.tied_embedding and len(partition) > 1 and (first or last):
            extra["tied_grad_bytes"] = tied  # the compiler keeps it where the ends' stages differ
        if extra:
            cost = replace(cost, **extra)
        if sc.parallel.data_parallel is not None:
            cost = _per_layer(sc, st, km, fixed, cost, (pre, post, edge), runs, cfg)
        if start >= 0:
            cost = _labelled(cost, _layer_passes(st, fixed, edge, runs), start)
        return cost

    # chunks of the same layers cost the same: a planner's profile is one chunk per layer,
    # of as many kinds as the model has, and a pipeline's middle stages are alike
    made: dict[tuple, StageCost] = {}
    costs, start = [], 0
    for k, n in enumerate(partition):
        key = (k == 0, k == len(partition) - 1, tuple(order[start : start + n]))
        if layers and st.granularity == "layer":  # a labelled chunk is its own: its layers' indices
            key += (start,)
        start += n
        if key not in made:
            made[key] = chunk(*key)
        costs.append(made[key])
    _check_profile(cm, st)
    return costs


def _per_layer(sc, st, cm, fixed: FixedCosts, cost, ends, runs: list[_LayerKind], cfg) -> StageCost:
    """``cost`` with its passes and DP bytes per layer (module doc). ``ends``: the ops
    before the first layer and after the last, and their items per phase
    (:func:`_edge_items`, empty where the chunk has none); ``runs``: the chunk's layers in order;
    ``cfg``: the model as the GPU runs it."""
    pre, post, edge = ends
    n = len(runs)
    passes = _layer_passes(st, fixed, edge, runs)
    params = [float(run.params) for run in runs]
    ends = [sum(op.params for op in ops if hasattr(op, "params")) for ops in (pre, post)]
    params[0] += ends[0]
    params[-1] += ends[1]
    expert = [run.expert for run in runs]  # expert-parallel experts: reduced over expert-DP
    expert_post = sum(op.params for op in post if isinstance(op, ExpertRanks))  # the MTP layers'
    expert[-1] += expert_post
    spec = sc.parallel.data_parallel
    grad, weight = DTYPE_BYTES[spec.grad_reduce_dtype], DTYPE_BYTES[spec.param_gather_dtype]
    # FP8 parameters: only the FP8 linears' weights gather in FP8, the rest in BF16
    other = DTYPE_BYTES["bf16"] if spec.param_gather_dtype == "fp8" else weight

    def gathered(q: float, fp8: float) -> int:
        return int(q * other - fp8 * (other - weight))

    fp8 = [run.fp8_linear for run in runs]
    if any(expert):
        params = [q - x for q, x in zip(params, expert)]
        cost = replace(
            cost,
            layer_expert_grads=tuple(int(x * grad) for x in expert),
            layer_expert_weights=tuple(gathered(x, f[1]) for x, f in zip(expert, fp8)),
        )
    if st.zero3:  # the embedding's submodules run before the first layer's, the output's after the last's
        modules = [run.modules for run in runs]
        modules[0] = submodules(pre, cfg, st.tp, cm) + modules[0] if pre else modules[0]
        modules[-1] = modules[-1] + submodules(post, cfg, st.tp, cm) if post else modules[-1]
        cost = replace(cost, layer_modules=tuple(modules))
    # a copy kernel's launch and HBM bytes/s: 2021's list-form collectives and FSDP2's copy-in/out
    copy = (fixed.launch_s, cm.gpu.hbm_bandwidth * cm.eff.memory)
    # PyTorch's copies over contiguous tensors run on the tuned curve (.memory_bandwidth)
    curve = cm.bandwidth.of("tuned") if cm.bandwidth is not None else None
    plateau = cm.gpu.hbm_bandwidth * (curve.frac_max if curve is not None else cm.eff.memory)
    return replace(
        cost,
        zero3_copy=copy,
        copy_kernel=(fixed.launch_s, plateau, curve.bytes_half if curve is not None else 0.0),
        root_weights=(int(ends[0] * other), int((ends[1] - expert_post) * other)),
        layers=n,
        layer_passes=passes,
        layer_grads=tuple(int(q * grad) for q in params),
        layer_weights=tuple(gathered(q, f[0]) for q, f in zip(params, fp8)),
    )


def _edge_items(pre: list, post: list, cm: CostModel) -> LazyPasses:
    """Per phase (F, B, Bi, W), the items of the ops ``pre`` before a model's first layer and
    ``post`` after its last (:func:`_layer_passes`' ``edge``; Bi's built when first read)."""
    made = {
        "F": (forward_items(pre, cm), forward_items(post, cm)),
        "B": (backward_items(pre, cm), backward_items(post, cm)),
        "W": (backward_items(pre, cm, inputs=False), backward_items(post, cm, inputs=False)),
    }
    return LazyPasses(PHASES, made, {"Bi": partial(_edge_inputs, pre, post, cm)})


def _edge_inputs(pre: list, post: list, cm: CostModel) -> tuple[list, list]:
    """:func:`_edge_items`' Bi: the backward for inputs of ``pre`` and of ``post``."""
    return _inputs_items([], pre, cm), _inputs_items([], post, cm)


def _layer_passes(st, fixed: FixedCosts, edge: dict, runs: list[_LayerKind]) -> dict:
    """Each phase's segments per layer of a chunk (model order), each layer's led by its
    launch op: ``edge`` per phase the items (:func:`_edge_items`) of the ops before the
    first layer (riding with it) and after the last (with the last), empty where the chunk
    has none; ``runs`` the chunk's layers in order."""
    body = {"F": "f", "B": "b", "Bi": "bi", "W": "w"}
    passes = {}
    for ph, (first, last) in edge.items():
        layers = [list(getattr(run, body[ph])) for run in runs]
        if ph == "F":
            layers[0] = first + layers[0]
            layers[-1] = layers[-1] + last
        else:  # a backward item list runs last op first
            layers[0] = layers[0] + first
            layers[-1] = last + layers[-1]
        passes[ph] = fixed.pass_segments(layers, st.granularity, backward=ph != "F")
    return passes


def _labelled(cost: StageCost, per_layer: dict, start: int) -> StageCost:
    """``cost`` whose passes run ``per_layer``'s pieces (:func:`_layer_passes`) one after
    another — a backward last layer first — each segment labelled with its model layer,
    counted from ``start`` (the chunk's first)."""

    def label(pieces: tuple, backward: bool) -> tuple:
        order = range(len(pieces) - 1, -1, -1) if backward else range(len(pieces))
        return tuple(replace(seg, layer=start + i) for i in order for seg in pieces[i])

    passes = {ph: label(pieces, ph != "F") for ph, pieces in per_layer.items()}
    layer_passes = {
        ph: tuple(tuple(replace(seg, layer=start + i) for seg in piece) for i, piece in enumerate(pieces))
        for ph, pieces in cost.layer_passes.items()
    }
    return replace(cost, passes=passes, layer_passes=layer_passes)


def balanced_partition(costs: list[float], chunks: int) -> list[int]:
    """Contiguous split of ``costs`` into ``chunks`` non-empty parts minimising the
    largest part's sum (PipeDream's optimiser does the same per stage)."""
    return contiguous_min_max([costs] * chunks)


def contiguous_min_max(rows: list[list[float]], fits=None) -> list[int] | None:
    """Split items 0..n−1 into ``len(rows)`` contiguous non-empty parts, part k costing
    ``Σ rows[k][i..j)``, minimising the largest part's cost among splits where every
    ``fits(k, i, j)`` (None: every part fits); None if none fits. A dynamic programme,
    O(chunks · n²), each part's table in one array pass: of equally good splits the one
    whose last cut comes first, part by part from the end."""
    chunks, n = len(rows), len(rows[0])
    ends, starts = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]
    best = np.full(n + 1, math.inf)  # best[i]: the largest part of the best split of 0..i so far
    best[0] = 0.0
    cuts = []
    for k, row in enumerate(rows):
        prefix = np.array(list(accumulate(row, initial=0.0)))  # (the sums a loop would make)
        # part k is items j..i: after k parts before it, leaving chunks − k − 1 after it
        ok = (starts >= k) & (starts < ends) & (ends > k) & (ends <= n - (chunks - k - 1))
        ok &= np.isfinite(best)[None, :]
        if fits is not None:
            for i, j in zip(*np.nonzero(ok)):
                ok[i, j] = fits(k, int(j), int(i))
        worst = np.where(ok, np.maximum(best[None, :], prefix[:, None] - prefix[None, :]), math.inf)
        cut = worst.argmin(axis=1)  # the first of the smallest
        best = worst[ends[:, 0], cut]
        cuts.append(cut)
    if best[n] == math.inf:
        return None
    sizes, i = [], n
    for cut in reversed(cuts):
        sizes.append(i - int(cut[i]))
        i = int(cut[i])
    return sizes[::-1]


def cnn_chunk_costs(
    sc, chunks: int, partition: list[int] | None = None, gpu: str | None = None
) -> list[StageCost]:
    """Per-chunk StageCosts of a CNN on GPU type ``gpu`` (data + pipeline parallel; balanced partition)."""
    st = TrainSetup.of(sc, gpu)
    if st.precision == "fp8":
        raise ScenarioError(
            "training.precision",
            "fp8",
            "FP8 (Transformer Engine) is for transformer models; use bf16, fp16 or fp32",
        )
    cm = _cost_model(sc, st)
    fixed = FixedCosts.of(sc, cm, st.precision)
    km = cm.without_launch()  # kernels; their launches are the passes' own segments
    layers = cnn_layers(sc.model.preset, st.micro_batch, st.e, sc.model.image_size, sc.model.classes)
    per_layer = [
        sum(i[1] for i in forward_items(list(L.ops), cm) + backward_items(list(L.ops), cm)) for L in layers
    ]
    partition = partition or balanced_partition(per_layer, chunks)
    costs, start = [], 0
    for n in partition:
        chunk = layers[start : start + n]
        ops = [op for L in chunk for op in L.ops]
        start += n
        full_act = sum(op.activation for op in ops)
        first_in = chunk[0].ops[0].activation
        act = {"none": full_act, "selective": full_act, "full": first_in}[st.recompute]
        rec = forward_items(ops, km) if st.recompute == "full" else []
        costs.append(
            _stage(
                st,
                cm,
                fixed,
                _PassItems(
                    forward_items(ops, km),
                    rec + backward_items(ops, km),
                    partial(_inputs_items, rec, ops, km),
                    backward_items(ops, km, inputs=False),
                ),
                sum(op.params for op in ops),
                act,
                0 if start == len(layers) else chunk[-1].output_bytes,
                full_act if st.recompute == "full" else 0.0,
            )
        )
    _check_profile(cm, st)
    return costs
