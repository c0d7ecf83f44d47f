"""DeepEP's node-deduplicated token dispatch: Megatron-Core's ``flex`` dispatcher.

With ``parallel.moe_token_dispatcher: flex`` (Megatron-Core ``--moe-token-dispatcher-type
flex --moe-enable-deepep``; ``MoEFlexTokenDispatcher`` over ``fused_a2a.py``) DeepEP's
normal kernels move each token, not each routed copy: over RDMA a token crosses to every
*node* holding one of its experts once (to the GPU of the same local index there), which
forwards it over NVLink to every GPU of that node holding one of its experts, once per GPU
(deepseek-ai/DeepEP README, "normal kernels ... forwarding from NVLink to RDMA"; the
receiving GPU expands the copies per local expert in its own permute). The combine sends
the same tokens back (the GPU sums its experts' weighted outputs first).

For a uniform router (each token's k experts a uniform draw without replacement from E,
E/ep on each of the ep GPUs, m GPUs of the EP group per node, N = ep/m nodes) a token
reaches a given GPU with probability p_gpu and a given node with p_node:

    p_gpu  = 1 − C(E − E/ep, k) / C(E, k)        p_node = 1 − C(E − m·E/ep, k) / C(E, k)

so a rank that routes T tokens of h elements (e bytes) sends over RDMA
``T·h·e·(N − 1)·p_node`` bytes — T·h·e per distinct remote node a token reaches — where
Megatron's ``alltoall`` dispatcher sends one copy per routed expert,
``T·h·e·k·(ep − m)/ep``; and over NVLink to each GPU of its node ``N·T·p_gpu·h·e``: its
own tokens (T·p_gpu) and those it received over RDMA and forwards ((N − 1)·T·p_node of
them, each to a peer with p_gpu/p_node). As an all-to-all byte matrix (the direct
algorithm's NVLink and network engines, :mod:`clustersim.collectives.direct`) the RDMA
bytes to a node are spread over its m GPUs. A GPU then receives ``N·T·p_gpu`` tokens
from each of its m − 1 peers and ``T·p_gpu`` of its own, ``ep·T·p_gpu`` in all, which its
local permute expands into its experts' copies (and its unpermute sums back).

DeepEP's kernels hold 20 SMs (``Buffer.num_sms``; ``data/interference_measurements.csv``
row ``deepep``): the dispatch and combine say so (:attr:`.ops.TPComm.sms`) and the compute
beside them is priced on the SMs left (:mod:`.comm_interference`, docs/overlap.md).
The achieved NVLink and RDMA rates are the links' (checked against DeepEP's rows in
``data/ep_alltoall_measurements.csv``, tests/test_moe_kernels.py). The bytes follow the
uniform router whatever ``model.expert_load`` says (the experts' compute follows the load
model); where the last node holds fewer of the group's GPUs its share is its own.
"""

from __future__ import annotations

from math import comb


def hit_probability(experts: int, top_k: int, held: int) -> float:
    """Probability that a token's ``top_k`` distinct experts, drawn uniformly from
    ``experts``, include at least one of ``held`` given ones."""
    return 1.0 - comb(experts - held, top_k) / comb(experts, top_k)


def dispatch_matrix(cfg, ep: int, per_node: int, bytes_per_token: float) -> tuple[tuple[int, ...], ...]:
    """The DeepEP dispatch's bytes from each of the ``ep`` ranks (``per_node`` of them on
    each node, in order) to each, every rank routing tokens of ``bytes_per_token`` as the
    module doc says: ``bytes_per_token`` is T·h·e."""
    per_gpu, k = cfg.experts // ep, cfg.experts_per_token
    nodes = -(-ep // per_node)
    near = int(nodes * hit_probability(cfg.experts, k, per_gpu) * bytes_per_token)
    # a node's share per GPU (the last node may hold fewer of the group's GPUs)
    size = [min(per_node, ep - n * per_node) for n in range(nodes)]
    far = [int(hit_probability(cfg.experts, k, per_gpu * m) * bytes_per_token / m) for m in size]

    def row(i: int) -> tuple[int, ...]:
        return tuple(
            0 if j == i else near if j // per_node == i // per_node else far[j // per_node] for j in range(ep)
        )

    return tuple(row(i) for i in range(ep))


def received_tokens(cfg, ep: int, tokens: float) -> float:
    """Tokens a GPU receives (its own included) when each of ``ep`` ranks routes
    ``tokens``: ``ep·T·p_gpu`` (module doc)."""
    return ep * tokens * hit_probability(cfg.experts, cfg.experts_per_token, cfg.experts // ep)
