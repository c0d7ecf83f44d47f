"""How a rank runs its local experts' FFNs: Megatron-Core's three expert MLP modules.

``parallel.moe_expert_mlp`` names the module (``megatron/core/transformer/moe/experts.py``):

* ``sequential`` — ``SequentialMLP`` (Megatron-Core's default, ``--moe-grouped-gemm`` off):
  a Python loop over the local experts, each an MLP of its own — up GEMM, activation, down
  GEMM, each one kernel the host issues in turn (:func:`.moe.expert_ops`' per-expert ops):
  3·G kernels forward for G local experts, each GEMM priced at its own expert's tokens.
* ``te_grouped`` — ``TEGroupedMLP`` (``--moe-grouped-gemm`` with Transformer Engine, the
  module the Megatron-Core MoE README's Quick Start trains with): each projection is one
  ``GroupedLinear`` call, which Transformer Engine runs as G cuBLAS GEMMs spread over its
  ``num_compute_streams = 4`` streams (``transformer_engine/common/util/multi_stream.cpp``;
  ``multi_stream_cublas_gemm`` in ``gemm/cublaslt_gemm.cu`` @d0067d0 — the CUTLASS grouped
  kernel is opt-in, ``NVTE_USE_CUTLASS_GROUPED_GEMM``); the activation is one kernel over
  all the rank's tokens. The G GEMMs run in ⌈G/4⌉ rounds of up to 4 kernels on 4 streams;
  a round's GPU time is its GEMMs' times one after another, each with its own wave
  quantization — no credit for the streams' concurrency: no kernel-level measurement of it
  was found, an expert GEMM of ≥ 1k tokens fills the SMs on its own, and the measurements
  that exist say TE's grouped path is no faster than separate GEMMs (TransformerEngine#2939:
  ``GroupedLinear`` ~2× a loop of ``F.linear`` on B300 Mixtral EP 2, CPU overhead;
  #1499: its PyTorch ops' CPU time). A round has one launch latency (the others overlap it
  on their own streams) and one host issue: the host spends
  one eager dispatch on the ``GroupedLinear`` call and a raw ``cuLaunchKernel`` per GEMM
  (1.3 µs, ``data/host_dispatch.csv``), 6.8 + 1.3·G µs — for G = 16, 27.6 µs against the
  27.2 µs of 4 rounds at 6.8 µs.
* ``grouped`` — the legacy ``GroupedMLP`` (``--moe-use-legacy-grouped-gemm``: the
  ``grouped_gemm`` package's CUTLASS kernel) or TE with its CUTLASS path: one kernel per
  projection and pass over all G groups (one launch, one issue), priced as one kernel over
  all their tiles — what DeepGEMM's grouped kernels measure (tests/test_moe_experts.py:
  within 12 % of its masked-layout rows at 256–1024 tokens per expert, where the separate
  GEMMs were priced up to 1.5× slow).

Groups are priced at their mean token count (exact for an even load; an uneven load's
per-group tile padding is not modelled, nor cuBLAS's slower kernels for split sizes that
are not multiples of the tile, TransformerEngine#2151); an expert that receives no token
costs nothing and keeps its parameters. A round is priced without split-K once its grid
fills the SMs, so below ~256 tokens per expert a round can price slower than its GEMMs
apart (each of which the cost model lets split K): right for a grouped kernel, pessimistic
for TE's streams there (tests/test_moe_experts.py checks grouped ≤ sequential from 256).
Under ``training.precision: fp8`` the experts run ``sequential`` (the FP8 GEMM model,
:mod:`.fp8`, prices one GEMM a kernel; stage_builder falls back). Backward, each projection's dgrad and wgrad are grouped the same
way (``GroupedLinear``'s backward runs both as grouped GEMMs).
"""

from __future__ import annotations

from ..errors import ScenarioError
from .ops import NO_WORK, LayerOp, elementwise, gemm

EXPERT_MLPS = ("sequential", "te_grouped", "grouped")
#: Transformer Engine's compute streams for its multi-stream grouped GEMM (multi_stream.cpp)
TE_STREAMS = 4


def rounds(groups: int, impl: str) -> list[int]:
    """How many GEMMs each kernel round of a projection runs together: ``te_grouped`` up
    to :data:`TE_STREAMS` at a time, ``grouped`` all ``groups`` in one kernel."""
    if impl == "grouped":
        return [groups] if groups else []
    if impl == "te_grouped":
        full, rest = divmod(groups, TE_STREAMS)
        return [TE_STREAMS] * full + ([rest] if rest else [])
    raise ScenarioError("parallel.moe_expert_mlp", impl, f"accepted: {', '.join(EXPERT_MLPS)}")


def grouped_expert_ops(cfg, counts, ft: int, e: int, impl: str) -> list[LayerOp]:
    """The routed experts of one rank at ``counts`` tokens each, FFN ``ft`` per expert,
    run by the grouped module ``impl`` (module doc)."""
    h, gated = cfg.hidden, cfg.gated_mlp
    up_n = ft * (2 if gated else 1)
    per_expert = float(h * up_n + ft * h)
    busy = [n for n in counts if n > 0]
    idle = len(counts) - len(busy)
    ops = [LayerOp("experts_idle", NO_WORK, NO_WORK, NO_WORK, params=idle * per_expert)] if idle else []
    if not busy:
        return ops
    tokens = sum(busy)
    m = tokens / len(busy)
    parts = rounds(len(busy), impl)
    shared = impl == "grouped"  # TE's streams: no concurrency credited (module doc)
    ops += [
        gemm("experts_up", m, up_n, h, e, batch=g, activation=g * m * h * e, shared_waves=shared)
        for g in parts
    ]
    act = tokens * up_n
    # keeps its input and the copies' routing probabilities (:func:`.moe._expert`)
    kept = (act + tokens) * e
    ops.append(elementwise("experts_act", act, 1.5 * e if gated else 2 * e, 3 * e, activation=kept))
    ops += [
        gemm("experts_down", m, h, ft, e, batch=g, activation=g * m * ft * e, shared_waves=shared)
        for g in parts
    ]
    return ops
