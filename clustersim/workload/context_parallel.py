"""The attention core of a layer under context parallelism (``parallel.cp``; docs/context_parallel.md).

With CP, every op of a layer runs on the ``s/cp`` tokens a GPU holds (its layer ops are
built with ``seq_len = s/cp``), except attention, which needs every key and value of the
sequence. Megatron-Core hands that to Transformer Engine (``--cp-comm-type``):

* ``p2p`` — ring attention (``AttnFuncWithCPAndKVP2P``). The sequence is cut into 2·cp
  chunks and rank r holds chunks r and 2cp−1−r (causal load balancing). Attention runs in
  cp steps: step 0 on the rank's own K/V, step i on the K/V of rank r−i, which arrived by
  the previous step's send/recv around the ring while that step computed. Per step a rank
  sends ``2·b·(s/cp)·kv_heads/tp·head_dim`` elements (K and V of its tokens). Causal: step
  0 is a causal kernel over the local 2 chunks (3 of its 4 chunk × chunk blocks, 2 of them
  diagonal halves: 2 blocks of work); at step i ≥ 1 the KV block comes from an earlier
  rank (both local queries see its first chunk, none its second) or a later one (only the
  local second query chunk sees both of its chunks), so half the 4 blocks are skipped: 2
  blocks of work again. Every step is 1/cp of the rank's attention, and that is
  ``4·b·s²·a·d/(2·cp)`` FLOPs — the causal half of the whole, divided by cp. The backward
  runs the steps again and passes dK/dV with K/V: at step 0 K/V only, then K/V and the dK/dV
  accumulated so far, at the last step dK/dV only (TE's ``p2p_comm_buffers`` of shape
  ``(2, *kv.shape)``, sending ``[0]`` at i = 0 and ``[1]`` at i = cp − 1).
* ``a2a`` — Ulysses (``AttnFuncWithCPAndQKVOA2A``; Jacobs et al. 2023). An all-to-all over
  the CP group turns Q, K, V from [s/cp tokens, all heads/tp] into [s tokens, heads/(tp·cp)],
  one FlashAttention kernel runs on the whole sequence with those heads, and a second
  all-to-all turns O back; the backward does the reverse pair on dO and dQ, dK, dV. TE
  issues the all-to-all of Q, K and V back to back; here they are one all-to-all of their
  bytes.

The per-step merge of partial outputs (TE's ``flash_attn_fwd_out_correction``, elementwise
on ``b·s/cp·a/tp·d`` values per step) is not priced.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import ScenarioError
from .attention import FLASH_BACKWARD_FACTOR, LSE_BYTES, flash_attention, flash_forward_flops
from .ops import AttentionShape, Work

#: Megatron-Core's ``--cp-comm-type`` values modelled
CP_COMM_TYPES = ("p2p", "a2a")


@dataclass(frozen=True)
class CPComm:
    """A collective over the context-parallel group between ops (Ulysses' all-to-alls): the
    ``fwd`` and ``bwd`` kinds (or "") of ``nbytes`` per rank."""

    name: str
    fwd: str
    bwd: str
    nbytes: int


@dataclass(frozen=True)
class CPRing:
    """Ring attention over the CP group: per step the attention chunk's work (``fwd``, and
    ``bwd`` for the backward's steps) and the bytes the step sends to the next rank while it
    computes (``fwd_bytes``, ``bwd_bytes``; 0: nothing sent). ``activation``: bytes kept for
    the backward (local Q, K, V and the log-sum-exp); ``attention_core`` False, as for
    flash: selective recompute has nothing to re-run."""

    name: str
    fwd: tuple[Work, ...]
    bwd: tuple[Work, ...]
    fwd_bytes: tuple[int, ...]
    bwd_bytes: tuple[int, ...]
    activation: float
    params: float = 0.0
    attention_core: bool = False


def ring_step_bytes(cp: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(forward, backward) K/V blocks sent at each of the cp steps, in units of one K/V block:
    forward 1 at every step but the last (its K/V is not passed on); backward K/V at step 0,
    K/V + dK/dV in between, dK/dV alone at the last step (module docstring)."""
    fwd = (1,) * (cp - 1) + (0,)
    bwd = (1,) + (2,) * (cp - 2) + (1,)
    return fwd, bwd


def kv_block_bytes(b: int, local_seq: int, kvt: int, head_dim: int, e: int) -> int:
    """Bytes of one rank's K and V on one TP rank: ``2·b·(s/cp)·(kv_heads/tp)·head_dim·e``."""
    return 2 * b * local_seq * kvt * head_dim * e


def ring_attention(cfg, b: int, at: int, kvt: int, e: int, cp: int) -> CPRing:
    """The ring attention of one layer on one GPU; ``cfg.seq_len`` is the local ``s/cp``."""
    sl, d, causal = cfg.seq_len, cfg.head_dim, cfg.causal
    q = o = b * sl * at * d * e
    kv = kv_block_bytes(b, sl, kvt, d, e)
    lse = b * at * sl * LSE_BYTES
    # every step is 1/cp of the rank's attention (load balanced): a local causal kernel's FLOPs
    flops = flash_forward_flops(b, sl, at, d, causal)

    def step(i: int, backward: bool) -> Work:
        shape = AttentionShape(d, sl, causal and i == 0, backward, cfg.attention_kernel)
        if backward:
            return Work(FLASH_BACKWARD_FACTOR * flops, 3 * q + o + 2 * kv + lse, attention=shape)
        return Work(flops, q + kv + o + lse, attention=shape)

    fwd_blocks, bwd_blocks = ring_step_bytes(cp)
    return CPRing(
        "ring_attention",
        tuple(step(i, False) for i in range(cp)),
        tuple(step(i, True) for i in range(cp)),
        tuple(n * kv for n in fwd_blocks),
        tuple(n * kv for n in bwd_blocks),
        activation=q + kv + lse,
    )


def ulysses_attention(cfg, b: int, at: int, kvt: int, e: int, cp: int) -> list:
    """Ulysses attention of one layer on one GPU: all-to-all of Q, K, V, the flash kernel on
    the whole sequence with ``at/cp`` heads, all-to-all of O; ``cfg.seq_len`` is ``s/cp``."""
    sl, d = cfg.seq_len, cfg.head_dim
    qkv = b * sl * (at + 2 * kvt) * d * e
    out = b * sl * at * d * e
    core = flash_attention(replace(cfg, seq_len=sl * cp), b, at // cp, kvt // cp, e)
    return [
        CPComm("cp a2a qkv", "all_to_all", "all_to_all", qkv),
        core,
        CPComm("cp a2a out", "all_to_all", "all_to_all", out),
    ]


def context_parallel_ops(cfg, b: int, at: int, kvt: int, e: int, cp: int, comm: str) -> list:
    """The attention core under CP ``comm`` (``p2p`` or ``a2a``); ``cfg.seq_len`` is ``s/cp``."""
    if comm == "a2a":
        return ulysses_attention(cfg, b, at, kvt, e, cp)
    if cfg.sliding_window:  # the ring's steps would each skip a different part of the band
        raise ScenarioError(
            "model.sliding_window",
            cfg.sliding_window,
            "not modelled under ring attention (parallel.cp_comm: p2p); use a2a",
        )
    return [ring_attention(cfg, b, at, kvt, e, cp)]
