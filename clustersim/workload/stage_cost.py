"""Per-stage costs of a model, the input the schedules compile into a Program.

A :class:`StageCost` is what one pipeline stage costs per micro-batch on each of its GPUs
(forward, backward-input, backward-weight passes; activation bytes sent downstream and
kept in memory) and per iteration (optimizer time; parameter bytes). A pass is a sequence
of :class:`Segment` s — compute kernels and, for tensor parallelism, collectives over the
stage's TP group — so a real model's layer (GEMM, all-reduce, GEMM, all-reduce) compiles
to the ops Megatron-LM would run. The synthetic model has one compute segment per pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..memory_kinds import StaticMemory


@dataclass(frozen=True)
class Segment:
    """One step of a pass: ``compute`` for ``duration`` s (``flops`` ride along for
    metrics), a ``collective`` (``all_reduce``, ``all_gather``, ``reduce_scatter``,
    ``all_to_all``) of ``nbytes`` over ``group``: the stage's tensor-parallel group
    (``tp``), context-parallel group (``cp``) or an expert group (``ep``, ``etp``,
    ``tp_ep``; see :meth:`clustersim.parallel.plan.Plan.expert_group`), an ``overlap``: a TP
    collective pipelined with a GEMM of ``duration`` s in ``chunks`` by ``method``
    (:mod:`clustersim.workload.tp_overlap`), or ``ring`` attention over the CP group:
    attention chunks of ``steps`` seconds, step i sending ``step_bytes[i]`` to the next CP
    rank while it computes (:mod:`.context_parallel`; ``duration`` is their sum). A compute
    segment whose work differs between expert-parallel ranks lists each rank's
    ``(duration, flops)`` in ``ranks`` (``duration``: the slowest rank's); ``overlap`` (the
    flag) marks compute that runs beside its neighbouring collective instead of after it
    (the shared expert beside the token all-to-alls); ``matrix`` gives an uneven
    all-to-all's bytes from each member of the group to each
    (:attr:`clustersim.program.Op.split`)."""

    kind: str
    duration: float = 0.0
    flops: float = 0.0
    nbytes: int = 0
    collective: str = ""
    name: str = ""
    method: str = ""
    chunks: int = 0
    group: str = "tp"
    overlap: bool = False
    ranks: tuple[tuple[float, float], ...] = ()
    matrix: tuple[tuple[int, ...], ...] = ()
    steps: tuple[float, ...] = ()
    step_bytes: tuple[int, ...] = ()
    #: an ``overlap``'s GEMM: seconds TE's SM margin adds to it (:mod:`.tp_overlap`)
    margin: float = 0.0
    #: compute: its kernels' (memory-bound s, HBM B/s, (kind, SM-limited s)…) beside the
    #: collective kinds they are priced beside (:mod:`clustersim.workload.comm_interference`;
    #: empty: the scalar slowdown); collective: ``(SMs,)`` its kernels hold where they are
    #: not NCCL's (DeepEP), else empty
    beside: tuple = ()
    #: the model layer the segment belongs to where the compile labels layers (a Chakra
    #: export's, :func:`.stage_builder.transformer_chunk_costs`), else −1
    layer: int = -1


@dataclass(frozen=True)
class StageCost:
    """Costs of one pipeline stage on each of its GPUs.

    ``backward`` is the whole backward time (B + W); ``backward_weight`` its W part.
    ``activation_bytes`` is sent to the next stage per micro-batch (and the same gradient
    size comes back); ``activation_memory`` is kept per in-flight micro-batch; ``static``
    is held for the whole run, by kind, ``expert_static`` the part of it that is
    expert-parallel experts' (ZeRO shards it over the expert-data-parallel group; a
    checkpoint's writers follow, :mod:`clustersim.faults.state`).
    ``passes`` optionally maps a phase (``"F"``, ``"B"``, ``"W"``; ``"Bi"`` the input-
    gradient part of ``"B"``) to its segments; a phase without an entry is one compute
    segment of its time.
    ``layers`` is the number of model layers in the chunk; ``layer_passes`` optionally maps
    a phase (as ``passes``) to per-layer segments in model order (a real model's embedding
    rides with its first layer, the output layer with its last), and ``layer_grads`` /
    ``layer_weights`` are the per-layer bytes the data-parallel gradient reduction and
    parameter all-gather move (:mod:`clustersim.compilers.pipeline.data_parallel`); without them a
    pass splits into ``layers`` equal compute pieces and the bytes split evenly.
    The fixed costs (``training.fixed_costs``; real models only): ``pass_overhead`` s of
    framework work before each pass of a micro-batch; per step, ``unscale`` s (fp16: the
    loss scale's unscale and inf check over the local gradients) and ``grad_norm`` s (the
    clipping norm's pass over them), each followed by an all-reduce of one fp32 scalar, and
    ``tied_grad_bytes`` of tied-embedding gradient all-reduced between the first and the
    last chunk (:mod:`clustersim.compilers.pipeline.step_work`); the kernel launches are named
    segments of the passes; ``recv_gather`` bytes (the whole boundary tensor) are
    all-gathered over the TP group after each receive from another stage (Megatron's
    scatter/gather: each TP rank sent 1/tp of it).
    """

    forward: float
    backward: float
    backward_weight: float
    activation_bytes: int
    activation_memory: int
    static: StaticMemory
    optimizer: float
    forward_flops: float = 0.0
    backward_flops: float = 0.0
    grad_bytes: int | None = None
    #: gradient bytes of expert-parallel experts, reduced over the expert-data-parallel
    #: group (``grad_bytes`` then counts the rest, reduced over DP)
    expert_grad_bytes: int = 0
    passes: dict[str, tuple[Segment, ...]] = field(default_factory=dict)
    layers: int = 1
    layer_passes: dict[str, tuple[tuple[Segment, ...], ...]] = field(default_factory=dict)
    layer_grads: tuple[int, ...] = ()
    layer_weights: tuple[int, ...] = ()
    #: per layer, the expert-parallel experts' part of the data-parallel bytes (``layer_grads``
    #: and ``layer_weights`` then count the rest): reduced over the expert-data-parallel group
    layer_expert_grads: tuple[int, ...] = ()
    layer_expert_weights: tuple[int, ...] = ()
    #: of ``layer_weights``' first and last layer, the bytes of the ops before the first layer
    #: (the embedding) and after the last (final norm, output layer): FSDP2's root unit
    root_weights: tuple[int, int] = (0, 0)
    pass_overhead: float = 0.0
    unscale: float = 0.0
    grad_norm: float = 0.0
    tied_grad_bytes: int = 0
    recv_gather: int = 0
    expert_static: StaticMemory = StaticMemory()
    #: per layer, the submodules DeepSpeed ZeRO-3 fetches for (:mod:`.zero3_modules`; a real
    #: model's embedding's first, its output layer's last); empty unless it runs
    layer_modules: tuple = ()
    #: with per-layer DP bytes: (seconds per copy kernel's launch, HBM bytes/s) of ZeRO-3's copies
    zero3_copy: tuple[float, float] = (0.0, float("inf"))
    #: with per-layer DP bytes: a contiguous copy kernel's (launch s, plateau HBM bytes/s,
    #: ramp bytes) on the GPU's calibrated memory-bound curve (FSDP2's copy-in and copy-out)
    copy_kernel: tuple[float, float, float] = (0.0, float("inf"), 0.0)
    #: seconds per micro-batch (forward and backward) the GPU stream waits for the host that
    #: issues its kernels, inside the passes' launch ops (:mod:`clustersim.workload.host`)
    host_wait: float = 0.0

    def segments(self, phase: str, split_backward: bool = False) -> tuple[Segment, ...]:
        """The segments of ``phase``. With ``split_backward``, ``"B"`` is the input-gradient
        part only (backward − backward_weight) and ``"W"`` the weight-gradient part."""
        if split_backward and phase == "B" and "Bi" in self.passes:
            return self.passes["Bi"]  # the input-gradient part of a real model's backward
        if phase in self.passes:
            return self.passes[phase]
        if phase == "F":
            return (Segment("compute", self.forward, self.forward_flops),)
        w_share = self.backward_weight / self.backward if self.backward > 0 else 0.0
        if phase == "W":
            return (Segment("compute", self.backward_weight, self.backward_flops * w_share),)
        if split_backward:
            return (
                Segment("compute", self.backward - self.backward_weight, self.backward_flops * (1 - w_share)),
            )
        return (Segment("compute", self.backward, self.backward_flops),)

    def layer_segments(self, phase: str, split_backward: bool = False) -> tuple[tuple[Segment, ...], ...]:
        """The segments of ``phase`` per layer, in model order (a backward runs them last
        layer first). Without ``layer_passes``, one pass of one compute segment splits
        into ``layers`` equal pieces."""
        key = "Bi" if split_backward and phase == "B" else phase
        if key in self.layer_passes:
            return self.layer_passes[key]
        whole = self.segments(phase, split_backward)
        if len(whole) != 1 or whole[0].kind != "compute":
            raise ValueError(f"a {phase} pass of {len(whole)} segments has no per-layer split")
        seg, n = whole[0], self.layers
        return ((Segment("compute", seg.duration / n, seg.flops / n),),) * n

    def layer_bytes(self, kind: str, experts: bool = False) -> tuple[int, ...]:
        """Per-layer bytes (model order) of ``kind`` ``"grads"`` (what the data-parallel
        gradient reduction moves) or ``"weights"`` (what the parameter all-gather moves);
        ``experts``: those of the expert-parallel experts (empty when there are none)."""
        if experts:
            return self.layer_expert_grads if kind == "grads" else self.layer_expert_weights
        given = self.layer_grads if kind == "grads" else self.layer_weights
        if given:
            return given
        total = self.gradient_bytes if kind == "grads" else self.weight_bytes
        return (total // self.layers,) * self.layers

    @property
    def weight_bytes(self) -> int:
        """Bytes of one copy of the weights (what a stashed version costs)."""
        return self.static.weights

    @property
    def gradient_bytes(self) -> int:
        """Bytes of the data-parallel gradient all-reduce (default: the weight bytes)."""
        return self.static.weights if self.grad_bytes is None else self.grad_bytes


def even_partition(layers: int, chunks: int) -> list[int]:
    """Layers per chunk when ``layers`` split evenly into ``chunks`` consecutive chunks."""
    return [layers // chunks] * chunks


def chunk_costs(
    scenario, chunks: int, partition: list[int] | None = None, gpu: str | None = None, layers: bool = False
) -> list[StageCost]:
    """Costs of the scenario's model cut into ``chunks`` consecutive model chunks.

    ``partition`` gives the layers of each chunk (default: even). With ``v`` virtual
    stages a schedule places chunk ``k`` on pipeline stage ``k % pp``; with one, chunk
    ``k`` *is* stage ``k``. ``gpu`` prices the chunks on that GPU type instead of
    ``cluster.gpu`` (heterogeneous clusters; a synthetic model's times are the same on
    every GPU). ``layers``: a transformer's passes built and labelled layer by layer
    (:func:`.stage_builder.transformer_chunk_costs`); other models carry no labels.
    Every model kind implements this one entry point.
    """
    model = scenario.model
    if model.kind == "transformer":
        from .stage_builder import transformer_chunk_costs

        return transformer_chunk_costs(scenario, chunks, partition, gpu, layers)
    if model.kind == "cnn":
        from .stage_builder import cnn_chunk_costs

        return cnn_chunk_costs(scenario, chunks, partition, gpu)
    partition = partition or even_partition(model.layers, chunks)
    return [
        StageCost(
            forward=n * model.forward,
            backward=n * model.backward,
            backward_weight=n * model.backward_weight,
            activation_bytes=int(model.activation),
            activation_memory=int(n * model.activation),
            static=StaticMemory(weights=int(n * model.params)),
            optimizer=model.optimizer,
            layers=n,
        )
        for n in partition
    ]
