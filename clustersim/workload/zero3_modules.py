"""A layer's submodules as DeepSpeed ZeRO-3 hooks them: their parameters and compute time.

DeepSpeed gathers parameters per submodule (``fetch_sub_module``, :mod:`clustersim.parallel.zero3`),
so the ZeRO-3 emitter needs each layer's submodules in the order they run, each with its
parameters' sizes and the seconds it computes. A submodule is one op that owns parameters
(a linear, a norm, the embedding, the output layer) together with the parameter-free ops that
follow it up to the next one (the attention core rides with the QKV linear, the residual with
the projection): those fetch nothing, so their kernels run under the preceding fetch.

A parameter is named by a key, unique in its layer; the embedding's word matrix is
``shared:word_embeddings`` everywhere, so a tied output layer fetches the same parameter
again (Megatron-DeepSpeed registers it as an external parameter of the output layer).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScenarioError
from .ops import ExpertRanks, LayerOp
from .segments import backward_items, forward_items

#: the linears whose bias ``TransformerConfig.bias`` adds (the ops lump the four into qkv's count)
BIASED = ("qkv", "attn_out", "mlp_up", "mlp_down")
WORD_EMBEDDINGS = "shared:word_embeddings"


@dataclass(frozen=True)
class Submodule:
    """One hooked submodule: its parameters ``(key, elements)`` on this GPU, in the order
    their gradients arrive, its ``forward`` / ``backward`` seconds, and whether activation
    checkpointing runs its forward again before its backward (``recompute``)."""

    params: tuple[tuple[str, int], ...]
    forward: float
    backward: float
    recompute: bool = False


def _params(op, cfg, tp: int) -> tuple[tuple[str, int], ...]:
    """The parameters of ``op`` (its weight then its bias where it has one)."""
    name = getattr(op, "name", "")
    if name == "embedding":
        words = int(cfg.vocab * cfg.hidden / tp)
        pos = int(cfg.positions * cfg.hidden)
        return ((WORD_EMBEDDINGS, words),) + ((("embedding.positions", pos),) if pos else ())
    if name == "logits" and not op.params:  # tied: the embedding's word matrix
        return ((WORD_EMBEDDINGS, int(cfg.vocab * cfg.hidden / tp)),)
    if not getattr(op, "params", 0):
        return ()
    if isinstance(op, LayerOp) and op.bwd_weight.flops and op.fwd.gemm:
        _, n, k = op.fwd.gemm
        bias = ((f"{name}.bias", int(n)),) if cfg.bias and name in BIASED else ()
        return ((f"{name}.weight", int(n * k)),) + bias
    if name.startswith("norm") or name == "final_norm":
        return tuple((f"{name}.{i}", int(cfg.hidden)) for i in range(int(op.params // cfg.hidden)))
    return ((f"{name}.params", int(op.params)),)


def _seconds(items) -> float:
    """Compute seconds of ``items`` (a per-rank item counts its slowest rank)."""
    out = 0.0
    for i in items:
        if i[0] in ("c", "p"):
            out += i[1]
        elif i[0] == "e":
            out += max(i[1])
    return out


def submodules(ops: list, cfg, tp: int, cm, recompute: bool = False) -> tuple[Submodule, ...]:
    """The hooked submodules of ``ops`` (forward order, module doc), timed by ``cm``;
    ``recompute``: full recompute re-runs their forward."""
    if any(isinstance(op, ExpertRanks) for op in ops):
        raise ScenarioError(
            "parallel.data_parallel.deepspeed_zero3",
            "set",
            "DeepSpeed ZeRO-3's coordinator over MoE layers is not modelled; accepted: null (FSDP units)",
        )
    groups: list[list] = []
    for op in ops:
        if _params(op, cfg, tp) or not groups:
            groups.append([op])
        else:
            groups[-1].append(op)
    return tuple(
        Submodule(
            tuple(p for op in group for p in _params(op, cfg, tp)),
            _seconds(forward_items(group, cm)),
            _seconds(backward_items(group, cm)),
            recompute,
        )
        for group in groups
    )
