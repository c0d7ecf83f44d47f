"""The memory-bound kernels of a MoE layer as Megatron-Core runs them: scoring, top-k, aux loss, permutation.

Byte counts of ``megatron/core/transformer/moe/moe_utils.py`` and ``router.py``, for a rank
that routes ``T`` tokens of hidden size ``h`` to ``k`` of ``E`` experts (``e`` bytes per
activation element; probabilities in the activation dtype, as ``softmax(…, dtype=fp32)
.type_as(logits)`` leaves them; routing maps ``bool``, indices ``int64``). Each count is
what the kernels read plus write in HBM, in three parts: per router score (``T·E``), per
routed copy of a hidden element (``T·k·h``) and per token's hidden element (``T·h``).

* **Scores and top-k** (``topk_routing_with_score_function``, unfused — Megatron's default
  ``moe_router_fusion: false``): ``softmax`` models take the top-k of the logits and a
  softmax over those k; the dense ``T × E`` probabilities and routing map are scattered
  into zeros — per score: top-k read ``e``, probabilities zeros + scatter ``e``, an int
  map zeros ``4``, ``.bool()`` ``4 + 1``: ``2e + 9``. ``sigmoid`` models (DeepSeek-V3)
  cast the logits to fp32 (``e + 4``), take the sigmoid (``4 + 4``) and cast back
  (``4 + e``), add the fp32 expert bias (``e + 4``), top-k (``4``) and scatter as above
  (``e + 9``): ``4e + 33``. Backward: the scatter's gradient gathered from the dense
  ``T × E`` gradient (``e``) and scattered back into zeros (``e``): ``2e``.
* **Auxiliary load-balancing loss** (``aux_loss``, ``switch_load_balancing_loss_func``
  with ``compute_routing_scores_for_aux_loss``): a softmax of the logits in fp32 (``e +
  4``), its top-k (``4``), a routing map (``9``), the tokens per expert (``map.sum(0)``:
  ``1``) and the probabilities' sum over tokens (``4``): ``e + 22``; backward the
  broadcast gradient (``4``), the softmax's backward (``4 + 4 + 4``) and the cast to the
  logits' dtype (``4 + e``): ``e + 20``.
* **Permute** (``permute``): unfused, the routing map transposed (``1 + 1``), its flat
  ``argsort`` (the keys read ``1``, sorted keys and ``int64`` indices written ``1 + 8``),
  the probabilities transposed (``2e``), then ``index_select`` of the token copies (``2e``
  per copy); backward ``index_select``'s gradient, an ``index_add_`` into zeros: zeros
  (``e`` per token), the copies' gradients read (``e`` per copy), the output read and
  written per add (``2e`` per token). Fused (Transformer Engine ``moe_permute_with_probs``,
  ``moe_permute_fusion: true``): the row-id map (map read ``1``, ``int32`` map written
  and read back ``4 + 4``), each token read once and written ``k`` times (``e`` per token,
  ``e`` per copy); backward the reverse, one read per copy and one write per token.
* **Unpermute** (``unpermute`` with the routing probabilities): unfused, the probabilities
  and map transposed and ``masked_select``-ed (``2e + 2 + e + 1``), the copies scaled by
  their probability (``2e`` per copy), zeros (``e`` per token) and ``scatter_add_`` (the
  copies read ``e``, the output read and written ``2e`` per token); backward the scatter's
  gather (``e`` per token read, ``e`` per copy written), the gradient scaled (``2e`` per
  copy) and the probabilities' gradient ``(grad · copy).sum(-1)`` (two reads and the
  product written and read back: ``4e`` per copy). Fused (``moe_unpermute`` with
  ``merging_probs``): copies read (``e``), tokens written (``e``); backward the token
  gradient read (``e`` per token), the forward copies read for the probabilities'
  gradient and the copies' gradient written (``2e`` per copy).
* **Sort chunks** (``sort_chunks_by_idxs``: the ``alltoall`` dispatcher regroups the
  received copies by local expert when a rank holds more than one, and restores the
  order before the combine): every copy read and written (``2e``), fused or not; its
  backward the same.

The per-kernel launch is the cost model's (one per op here), not counted in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScenarioError
from .ops import LayerOp, Work

ROUTER_SCORES = ("softmax", "sigmoid")


@dataclass(frozen=True)
class Bytes:
    """HBM bytes of one kernel pass: per router score (``T·E``), per routed copy of a
    hidden element (``T·k·h``), per token's hidden element (``T·h``)."""

    score: float = 0.0
    copy: float = 0.0
    token: float = 0.0

    def total(self, tokens: float, experts: int, copies: float, hidden: int) -> float:
        """Bytes for ``tokens`` tokens, ``copies`` routed copies, ``experts`` scores a token."""
        return self.score * tokens * experts + (self.copy * copies + self.token * tokens) * hidden


def topk_bytes(score: str, e: int) -> tuple[Bytes, Bytes]:
    """(forward, backward) bytes of the unfused scoring and top-k (module doc)."""
    if score == "softmax":
        fwd = 2 * e + 9
    elif score == "sigmoid":
        fwd = 4 * e + 33
    else:
        raise ScenarioError("model.router_score", score, f"accepted: {', '.join(ROUTER_SCORES)}")
    return Bytes(score=fwd), Bytes(score=2 * e)


def aux_loss_bytes(e: int) -> tuple[Bytes, Bytes]:
    """(forward, backward) bytes of the auxiliary load-balancing loss (module doc)."""
    return Bytes(score=e + 22), Bytes(score=e + 20)


def permute_bytes(e: int, fused: bool) -> tuple[Bytes, Bytes]:
    """(forward, backward) bytes of the token permutation into expert order (module doc)."""
    if fused:
        return Bytes(score=1 + 4 + 4, copy=e, token=e), Bytes(copy=e, token=e)
    return Bytes(score=2 + 1 + 9 + 2 * e, copy=2 * e), Bytes(copy=e, token=3 * e)


def unpermute_bytes(e: int, fused: bool) -> tuple[Bytes, Bytes]:
    """(forward, backward) bytes of the weighted un-permutation back to token order (module doc)."""
    if fused:
        return Bytes(copy=e, token=e), Bytes(copy=2 * e, token=e)
    return Bytes(score=3 * e + 3, copy=3 * e, token=3 * e), Bytes(copy=7 * e, token=e)


def sort_chunks_bytes(e: int) -> tuple[Bytes, Bytes]:
    """(forward, backward) bytes of regrouping received copies by local expert (module doc)."""
    return Bytes(copy=2 * e), Bytes(copy=2 * e)


def _op(name: str, passes: tuple[Bytes, Bytes], size: tuple, activation: float = 0.0) -> LayerOp:
    """A memory-bound op of ``passes`` bytes for ``size`` = (tokens, experts, copies, hidden)."""
    fwd, bwd = (p.total(*size) for p in passes)
    return LayerOp(name, Work(0.0, fwd), Work(0.0, bwd), activation=activation)


def scoring_ops(cfg, tokens: float, e: int) -> list[LayerOp]:
    """Scores, top-k and the auxiliary loss of ``tokens`` routed tokens; each keeps its
    ``T × E`` fp32 scores for backward."""
    size = (tokens, cfg.experts, 0.0, cfg.hidden)
    return [
        # the fp32 scores kept for the backward, as before this module priced them
        _op("moe_topk", topk_bytes(cfg.router_score, e), size, activation=tokens * cfg.experts * 4),
        # its fp32 softmax is kept for the softmax's backward
        _op("moe_aux_loss", aux_loss_bytes(e), size, activation=tokens * cfg.experts * 4),
    ]


def permute_op(cfg, tokens: float, copies: float, e: int, fused: bool, experts: int = 0) -> LayerOp:
    """Permute ``tokens`` tokens into ``copies`` expert-ordered copies over a routing map
    of ``experts`` columns (0: all the model's; the allgather dispatcher's local map has
    its rank's experts only)."""
    size = (tokens, experts or cfg.experts, copies, cfg.hidden)
    return _op("moe_permute", permute_bytes(e, fused), size)


def unpermute_op(cfg, tokens: float, copies: float, e: int, fused: bool, experts: int = 0) -> LayerOp:
    """Sum of ``copies`` expert outputs back to ``tokens`` tokens (``experts``: as
    :func:`permute_op`). It keeps nothing: since Megatron-Core's memory-efficient token
    permutation (MR !2668, 2025-04, in every release from 25.09) every dispatcher calls
    ``unpermute`` without the probabilities — they scale the experts' activation instead
    (``weighted_bias_swiglu_impl``; :func:`.moe.expert_ops` keeps them there) — so its
    backward needs no copy. Its HBM bytes are still those of the weighted form above."""
    size = (tokens, experts or cfg.experts, copies, cfg.hidden)
    return _op("moe_unpermute", unpermute_bytes(e, fused), size)


def sort_chunks_op(name: str, hidden: int, copies: float, e: int) -> LayerOp:
    """Regroup ``copies`` received copies by local expert (or back)."""
    return _op(name, sort_chunks_bytes(e), (0.0, 0, copies, hidden))
