"""The per-operation description every real model compiles to.

A :class:`LayerOp` is one kernel-level operation of a layer on ONE GPU (after tensor
parallelism has split it): its forward, backward-input and backward-weight work
(:class:`Work`: FLOPs, HBM bytes, GEMM shape), parameters it holds and activation bytes
it keeps for the backward pass. A :class:`TPComm` marks a tensor-parallel collective
between ops (Megatron's ``f``/``g`` operators). The cost model (:mod:`.cost_model`) turns
Work into seconds; :mod:`.stage_builder` turns op sequences into StageCost segments.
"""

from __future__ import annotations

from dataclasses import dataclass

MASK_BYTES = 1  # dropout masks are uint8 (Megatron fused dropout; Korthikanti §4.1)


@dataclass(frozen=True)
class AttentionShape:
    """What a fused attention kernel's efficiency depends on: head dim, key length (the
    sliding window where it binds), causal mask, whether it is the backward kernel, and
    which kernel runs (``fa2``, ``fa3``, ``cudnn``: :mod:`.attention_kernels`)."""

    head_dim: int
    seq_len: int
    causal: bool
    backward: bool
    impl: str = "fa2"


@dataclass(frozen=True)
class Work:
    """FLOPs and HBM bytes of one kernel; ``gemm`` = the (M, N, K) shape its efficiency
    depends on, or None for memory-bound kernels; ``attention`` marks a fused attention
    kernel (efficiency from the attention curve); ``fp8_casts`` marks an FP8 GEMM and
    lists the elements cast to FP8 before it (:mod:`.fp8`; None: not FP8) under the
    Transformer Engine recipe ``fp8_recipe`` (:mod:`.fp8_recipes`); ``memory_kind``
    which achieved-bandwidth curve a memory-bound kernel runs at (``tuned`` or ``generic``,
    :mod:`.memory_bandwidth`); ``shared_waves`` whether a batched product's GEMMs share one
    grid."""

    flops: float = 0.0
    bytes: float = 0.0
    gemm: tuple[int, int, int] | None = None
    attention: AttentionShape | None = None
    fp8_casts: tuple[float, ...] | None = None
    memory_kind: str = "tuned"
    fp8_recipe: str = "delayed"
    #: elements a Transformer Engine norm kernel quantizes as it writes them, for an FP8
    #: GEMM's input (:func:`.fp8.norm_cast_seconds`)
    fp8_norm_casts: tuple[float, ...] = ()
    #: whether a batched product's GEMMs share one kernel's grid (its waves quantize over all
    #: their tiles); False: each runs as its own kernel, one after another
    shared_waves: bool = True


NO_WORK = Work()


@dataclass(frozen=True)
class LayerOp:
    """One operation on one GPU: forward / backward-input / backward-weight work.

    ``params`` counts parameters held on this GPU; ``activation`` the bytes this op keeps
    from forward to backward for one micro-batch; ``attention_core`` marks the ops
    selective recompute recomputes (Korthikanti et al. 2022 §4.2).
    """

    name: str
    fwd: Work
    bwd_input: Work
    bwd_weight: Work = NO_WORK
    params: float = 0.0
    activation: float = 0.0
    attention_core: bool = False
    #: runs alongside the neighbouring collective (on its own stream, as Megatron-Core's
    #: ``moe_shared_expert_overlap`` runs the shared expert beside the token all-to-alls)
    overlap: bool = False

    @property
    def phases(self) -> dict[str, Work]:
        return {"F": self.fwd, "B": self.bwd_input, "W": self.bwd_weight}


#: the groups a collective point runs over: the stage's tensor-parallel group, and the
#: expert groups of :meth:`clustersim.parallel.plan.Plan.expert_group` (``ep``: the
#: expert-parallel group, ``etp``: expert-tensor-parallel, ``tp_ep``: both)
COMM_GROUPS = ("tp", "ep", "etp", "tp_ep")


@dataclass(frozen=True)
class TPComm:
    """A collective point between ops: ``fwd``/``bwd`` kind (or "") of ``nbytes`` over
    ``group`` (one of :data:`COMM_GROUPS`; the tensor-parallel group unless it says).
    ``matrix[i][j]``: the bytes the group's i-th member sends its j-th in an uneven
    all-to-all forward (the backward sends the transpose); empty: even. ``fwd_nbytes`` /
    ``bwd_nbytes``: one direction's bytes where they differ from ``nbytes`` (None: the same;
    Transformer Engine all-gathers quantized tensors, :func:`.fp8.te_fp8_layer`). ``host_sync``: the
    host waits for the device before it issues the forward collective (a ``.cpu()`` of the
    split sizes, :mod:`.host`). ``sms``: the SMs its kernels hold where they are not NCCL's
    channels (DeepEP's ``Buffer.num_sms``; 0: NCCL's, :mod:`.comm_interference`)."""

    name: str
    fwd: str
    bwd: str
    nbytes: int
    group: str = "tp"
    matrix: tuple[tuple[int, ...], ...] = ()
    fwd_nbytes: int | None = None
    bwd_nbytes: int | None = None
    host_sync: bool = False
    sms: int = 0

    @property
    def forward_nbytes(self) -> int:
        """Bytes of the forward collective."""
        return self.nbytes if self.fwd_nbytes is None else self.fwd_nbytes

    @property
    def backward_nbytes(self) -> int:
        """Bytes of the backward collective."""
        return self.nbytes if self.bwd_nbytes is None else self.bwd_nbytes


@dataclass(frozen=True)
class ExpertRanks:
    """The routed experts of one MoE layer under expert parallelism: ``ranks[i]`` are the
    ops of expert-parallel rank i (its own experts at their token counts), so ranks of one
    expert-parallel group run different work. ``params`` are what one rank holds (every
    rank holds E/ep experts of one size); ``activation`` the most any rank keeps."""

    name: str
    ranks: tuple[tuple[LayerOp, ...], ...]
    attention_core: bool = False
    overlap: bool = False

    @property
    def params(self) -> float:
        return sum(op.params for op in self.ranks[0])

    @property
    def activation(self) -> float:
        return max(sum(op.activation for op in ops) for ops in self.ranks)

    def map(self, fn) -> ExpertRanks:
        """The same ranks with ``fn(list of ops) -> list of ops`` applied to each."""
        return ExpertRanks(self.name, tuple(tuple(fn(list(ops))) for ops in self.ranks))


def gemm(
    name: str,
    m: int,
    n: int,
    k: int,
    e: int,
    *,
    weight: bool = True,
    activation: float = 0.0,
    batch: int = 1,
    attention_core: bool = False,
    shared_waves: bool = True,
) -> LayerOp:
    """Y[m×n] = X[m×k] · W[k×n], ``batch`` times, elements of ``e`` bytes (``shared_waves``:
    the ``batch`` products share one kernel's grid, else each is priced as its own kernel).

    Backward: dX = dY·Wᵀ (m×k from n) and, for a weight, dW = Xᵀ·dY (k×n from m); for an
    activation–activation product (attention), both operand gradients are input work.
    """

    def w(mm, nn, kk):
        flops, nbytes = 2.0 * mm * nn * kk * batch, float(e) * (mm * kk + kk * nn + mm * nn) * batch
        return Work(flops, nbytes, (mm, nn, kk), shared_waves=shared_waves)

    fwd, dx, dw = w(m, n, k), w(m, k, n), w(k, n, m)
    if weight:
        return LayerOp(
            name,
            fwd,
            dx,
            dw,
            params=float(k * n * batch),
            activation=activation,
            attention_core=attention_core,
        )
    both = Work(dx.flops + dw.flops, dx.bytes + dw.bytes, dx.gemm)
    return LayerOp(name, fwd, both, activation=activation, attention_core=attention_core)


def elementwise(
    name: str,
    elements: float,
    fwd_bytes_per_el: float,
    bwd_bytes_per_el: float,
    *,
    params: float = 0.0,
    activation: float = 0.0,
    attention_core: bool = False,
) -> LayerOp:
    """A memory-bound kernel touching ``elements`` values (bytes per element per pass)."""
    return LayerOp(
        name,
        Work(0.0, elements * fwd_bytes_per_el),
        Work(0.0, elements * bwd_bytes_per_el),
        params=params,
        activation=activation,
        attention_core=attention_core,
    )
