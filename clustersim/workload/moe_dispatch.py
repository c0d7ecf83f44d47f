"""The MoE MLP of one layer under expert parallelism: token dispatch, per-rank experts, combine.

With ``parallel.ep`` > 1 (or an expert-tensor-parallel size ``etp`` other than ``tp``) a
layer's ``E`` routed experts are split over the ``ep`` ranks of an expert-parallel group,
``E/ep`` per rank, each expert's FFN over ``etp`` ranks (Megatron-Core's MoE parallel
folding; :meth:`clustersim.parallel.plan.Plan.expert_group` places the groups). Every rank
routes the ``T_loc`` tokens it holds — ``b·s/tp`` (sequence parallelism, which Megatron-Core
requires with EP and TP) — and the ``etp·ep`` ranks of one expert-tensor × expert group pool
``T_pool = etp·ep·T_loc`` tokens, which the load model (:func:`.moe.layer_expert_tokens`) assigns
to the experts: expert-parallel rank i runs its own experts at their token counts, so a
seeded skew makes one rank the straggler the others wait for at the combine.

Token dispatchers (Megatron-Core ``moe_token_dispatcher_type``,
``megatron/core/transformer/moe/token_dispatcher.py``):

* ``alltoall``: with ``host_sync`` (Megatron-Core's dropless dispatcher), all-gather each
  rank's routed tokens per expert over the ETP × EP group (``preprocess``:
  ``gather_from_sequence_parallel_region(num_local_tokens_per_expert,
  group=self.tp_ep_group)``, ``E`` int64 counts a rank — the split sizes the host then
  copies; an all-gather on the compute stream, forward only; Megatron-Core's
  pad-to-capacity mode still runs it, without the sync: not modelled apart),
  permute the ``T_loc·k`` routed copies, all-to-all over the EP group
  (each rank's send buffer ``T_loc·k·h`` elements), all-gather over the ETP group when
  ``etp`` > 1, regroup the received copies by local expert (``sort_chunks_by_idxs``, when
  a rank holds more than one), experts, restore the order, reduce-scatter over ETP,
  all-to-all back, unpermute (kernel bytes: :mod:`.moe_kernels`). Backward runs
  the same collectives in reverse order (an all-to-all's gradient is an all-to-all; an
  all-gather's a reduce-scatter).
* ``allgather``: all-gather the ``T_loc·h`` hidden states over the ETP × EP group (each
  rank then holds all ``T_pool`` tokens), permute its experts' tokens, experts,
  unpermute, reduce-scatter over the same group.
* ``flex`` (DeepEP, ``--moe-enable-deepep``; etp = 1): DeepEP's node-deduplicated
  dispatch of the ``T_loc`` tokens (:mod:`.deepep`: bytes per NVLink peer and per remote
  node), each rank's permute of the tokens it received into its experts' copies, experts,
  unpermute, DeepEP's combine (the dispatch's transpose).

Megatron-Core's dispatchers copy the exchange's split sizes to the host every layer's
forward when dropless (the alltoall dispatcher's ``cuda_sync_point`` ``before_ep_alltoall``;
the allgather dispatcher's ``local_map.sum(dim=0).long().cpu()`` after its gather; DeepEP's
dispatch waits on the host for its received-token count): with
``host_sync`` (``parallel.moe_host_sync``) the dispatch collective carries the host's wait
for the device (:mod:`.host`).

The all-to-all bytes follow the assignment: every source routes its ``T_loc`` tokens as
the pool does, so it sends rank j ``T_loc/T_pool · c_j · h · e`` bytes, ``c_j`` the routed
copies rank j's experts take (after capacity dropping, which Megatron-Core applies before
the exchange) — ``S/ep`` each, ``S = T_loc·k·h·e``, when the load is even. An uneven load
makes the dispatch an all-to-all-v whose heavy receivers take longer (the combine sends
the transpose back); the expert-TP all-gather keeps the mean size.

The shared expert follows the attention's parallelism (tensor-parallel, Megatron-Core's
``SharedExpertMLP``): a TP all-gather, up / activation / down on ``b·s`` tokens at
``shared_ffn/tp``, a TP reduce-scatter. With ``moe_shared_expert_overlap`` (alltoall
only) its up projection and activation run beside the dispatch all-to-all and its down
projection beside the combine (Megatron-Core MoE README: "The MLP computation part in the
shared experts are overlapped with the AlltoAll communications in the dispatcher");
otherwise it runs after the routed experts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..hardware.interference import sm_budget
from . import deepep
from .moe import expert_ops, layer_expert_tokens, router_ops
from .moe_kernels import permute_op, sort_chunks_op, unpermute_op
from .ops import ExpertRanks, TPComm

DISPATCHERS = ("alltoall", "allgather", "flex")


@dataclass(frozen=True)
class ExpertSplit:
    """How one MoE layer's routed experts are split: ``ep`` expert-parallel ranks, each
    expert's FFN over ``etp`` ranks; the token ``dispatcher``; whether the shared expert
    overlaps the all-to-alls; whether the permutations run Transformer Engine's fused
    kernels (``moe_permute_fusion``, :mod:`.moe_kernels`); the fields below."""

    ep: int = 1
    etp: int = 1
    dispatcher: str = "alltoall"
    shared_overlap: bool = False
    permute_fusion: bool = False
    #: the routed experts' module (:mod:`.moe_experts`)
    expert_mlp: str = "sequential"
    #: the host waits for the device before each layer's dispatch (:mod:`.host`)
    host_sync: bool = False
    #: GPUs of one EP group per node (DeepEP's RDMA deduplication, :mod:`.deepep`)
    per_node: int = 8

    def active(self, tp: int) -> bool:
        """Whether tokens are dispatched at all: with ep = 1 and etp = tp the experts sit
        inside the tensor-parallel region as every other MLP (:mod:`.moe`)."""
        return self.ep > 1 or self.etp != tp


def rank_tokens(cfg, split: ExpertSplit, pool: float) -> tuple[float, ...]:
    """Tokens each expert-parallel rank's experts process when the pool of ``pool``
    tokens is routed (experts ``i·E/ep … (i+1)·E/ep − 1`` on rank i)."""
    per = cfg.experts // split.ep
    counts = layer_expert_tokens(cfg, int(pool))
    return tuple(sum(counts[i * per : (i + 1) * per]) for i in range(split.ep))


def _ranks(cfg, split: ExpertSplit, pool: float, e: int, held: float = 0.0) -> ExpertRanks:
    """Each rank's routed experts: with ``held`` tokens on each rank (allgather: the pool;
    flex: those DeepEP delivered), its own permute and unpermute of them over its
    experts' routing map; else (alltoall) with the regrouping of its received copies by
    local expert and back, when it holds more than one expert."""
    counts = layer_expert_tokens(cfg, int(pool))
    per, fused = cfg.experts // split.ep, split.permute_fusion
    ranks = []
    for i in range(split.ep):
        mine = counts[i * per : (i + 1) * per]
        n = sum(mine)
        ops = expert_ops(cfg, mine, split.etp, e, impl=split.expert_mlp)
        if held:
            ops = [permute_op(cfg, held, n, e, fused, per), *ops, unpermute_op(cfg, held, n, e, fused, per)]
        elif per > 1:
            sort, unsort = (
                sort_chunks_op(name, cfg.hidden, n, e) for name in ("moe_sort_chunks", "moe_unsort_chunks")
            )
            ops = [sort, *ops, unsort]
        ranks.append(tuple(ops))
    return ExpertRanks("experts", tuple(ranks))


def _shared(cfg, b: int, tp: int, e: int) -> tuple[list, list, list]:
    """The shared expert's (enter, up + activation, down + exit) ops under TP with SP."""
    if not cfg.shared_ffn_hidden:
        return [], [], []
    ops = expert_ops(cfg, (), tp, e, shared=b * cfg.seq_len)
    nbytes = int(b * cfg.seq_len * cfg.hidden * e)
    enter = [TPComm("shared tp all-gather", "all_gather", "reduce_scatter", nbytes)] if tp > 1 else []
    leave = [TPComm("shared tp reduce-scatter", "reduce_scatter", "all_gather", nbytes)] if tp > 1 else []
    return enter, ops[:-1], [ops[-1], *leave]


def ep_moe_ops(cfg, b: int, tp: int, e: int, split: ExpertSplit) -> list:
    """The MoE MLP of one layer on one GPU under expert parallelism (module doc), in
    forward order: LayerOps, collective points over the ``ep``/``etp``/``tp_ep`` groups
    and one :class:`~.ops.ExpertRanks` for the routed experts."""
    h, k = cfg.hidden, cfg.experts_per_token
    local = b * cfg.seq_len / tp
    pool = split.etp * split.ep * local
    ops = router_ops(cfg, local, e)
    enter, up, down = _shared(cfg, b, tp, e)
    if split.dispatcher == "allgather":
        nbytes = int(pool * h * e)
        # the tokens per local expert go to the host after the gather (``.cpu()``); the race
        # gives the collective no time, so the sync is placed with it
        sync = split.host_sync
        ops.append(TPComm("ep all-gather", "all_gather", "reduce_scatter", nbytes, "tp_ep", host_sync=sync))
        ops.append(_ranks(cfg, split, pool, e, held=pool))
        ops.append(TPComm("ep reduce-scatter", "reduce_scatter", "all_gather", nbytes, group="tp_ep"))
        return ops + enter + up + down
    if split.dispatcher == "flex":
        matrix = deepep.dispatch_matrix(cfg, split.ep, split.per_node, local * h * e)
        sent = sum(matrix[0])
        sync = split.host_sync
        sms = sm_budget("deepep").comm_sms  # DeepEP's kernels hold Buffer.num_sms, not NCCL's channels
        ops.append(
            TPComm("ep dispatch", "all_to_all", "all_to_all", sent, "ep", matrix, host_sync=sync, sms=sms)
        )
        ops.append(_ranks(cfg, split, pool, e, held=deepep.received_tokens(cfg, split.ep, local)))
        back = tuple(zip(*matrix))
        ops.append(TPComm("ep combine", "all_to_all", "all_to_all", sent, group="ep", matrix=back, sms=sms))
        return ops + enter + up + down
    copies = local * k
    a2a = int(copies * h * e)
    matrix = dispatch_matrix(rank_tokens(cfg, split, pool), local / pool * h * e)
    if split.host_sync:  # the split sizes the host waits for (module doc)
        ops.append(split_sizes_gather(cfg, split))
    ops.append(permute_op(cfg, local, copies, e, split.permute_fusion))
    overlap = split.shared_overlap and bool(up)
    if overlap:
        ops += enter
    ops.append(
        TPComm("ep dispatch", "all_to_all", "all_to_all", a2a, "ep", matrix, host_sync=split.host_sync)
    )
    if overlap:
        ops += [replace(op, overlap=True) for op in up]
    if split.etp > 1:
        ops.append(TPComm("etp all-gather", "all_gather", "reduce_scatter", split.etp * a2a, group="etp"))
    ops.append(_ranks(cfg, split, pool, e))
    if split.etp > 1:
        ops.append(TPComm("etp reduce-scatter", "reduce_scatter", "all_gather", split.etp * a2a, group="etp"))
    back = tuple(zip(*matrix))
    ops.append(TPComm("ep combine", "all_to_all", "all_to_all", a2a, group="ep", matrix=back))
    if overlap:
        ops += [replace(down[0], overlap=True), *down[1:]]
    ops.append(unpermute_op(cfg, local, copies, e, split.permute_fusion))
    return ops if overlap else ops + enter + up + down


#: bytes of one routed-token count: ``routing_map.sum(dim=0).long()`` (int64)
COUNT_BYTES = 8


def split_sizes_gather(cfg, split: ExpertSplit) -> TPComm:
    """The alltoall dispatcher's gather of every rank's tokens per expert (module doc):
    ``E`` int64 counts from each of the ``etp·ep`` ranks, forward only (integer counts
    carry no gradient)."""
    nbytes = split.etp * split.ep * cfg.experts * COUNT_BYTES
    return TPComm("ep split-size all-gather", "all_gather", "", nbytes, group="tp_ep")


def dispatch_matrix(copies: tuple[float, ...], bytes_per_copy: float) -> tuple[tuple[int, ...], ...]:
    """The dispatch all-to-all's bytes from each EP rank to each (module doc): every row
    is ``copies[j] · bytes_per_copy``; empty when every rank takes the same."""
    if len(set(copies)) == 1:
        return ()
    row = tuple(int(c * bytes_per_copy) for c in copies)
    return (row,) * len(copies)


def dispatch_buffer_bytes(cfg, b: int, tp: int, e: int, split: ExpertSplit) -> float:
    """Bytes a rank holds for one layer's token exchange while it runs: the all-to-all's
    send and receive buffers (the receive buffer of the rank that takes most, under an
    uneven load) and the expert-TP all-gather's output, or the all-gather dispatcher's
    gathered tokens."""
    local = b * cfg.seq_len / tp
    pool = split.etp * split.ep * local
    if split.dispatcher == "allgather":
        return pool * cfg.hidden * e
    if split.dispatcher == "flex":
        matrix = deepep.dispatch_matrix(cfg, split.ep, split.per_node, local * cfg.hidden * e)
        return sum(matrix[0]) + max(sum(col) for col in zip(*matrix))
    a2a = local * cfg.experts_per_token * cfg.hidden * e
    matrix = dispatch_matrix(rank_tokens(cfg, split, pool), local / pool * cfg.hidden * e)
    received = max(sum(col) for col in zip(*matrix)) if matrix else a2a
    return a2a + received + (split.etp * a2a if split.etp > 1 else 0.0)
