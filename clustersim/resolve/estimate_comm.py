"""The simulated events of communication, for the pre-run estimate (:mod:`.estimate`).

A message costs the events of its network model (:func:`message_events`: on ``packet``
``⌈bytes / chunk⌉`` chunks on each link of its route, on ``flow`` a start, an end and its
share of the re-rating others cause, on ``analytical``/``direct`` one timeout) plus the
step's own (:data:`STEP_EVENTS`). A collective on the fabric is the messages of the
algorithm the run picks for it — the same choice (:func:`clustersim.collectives.registry.plan`
over the group's hosts and links, or ``simulation.collectives``) — counted as each
algorithm module builds them (``collectives/ring.py``, ``tree.py``, …): a ring over n
members on N hosts of m is m channels of 2(n − 1) steps of n messages for an all-reduce,
a double binary tree 2 trees × k pipeline chunks × 2(n − 1) messages, and so on; a
message crossing hosts takes the route between nodes, one inside a host the intra-node route.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from ..collectives.domain import in_private_domain
from ..collectives.group import Group
from ..collectives.negligible import negligible_bytes
from ..collectives.registry import plan
from ..collectives.ring import pipeline_chunks
from ..errors import ScenarioError
from ..topology.graph import is_wire
from ..topology.lazy import link_data
from ..topology.routing import Router

#: events a flow-model message costs: its end, and its share of the allocations and timer
#: moves (flows starting at one moment share one allocation; measured on rings and
#: all-to-alls of 16–128 GPUs: 4.2–5.4 events per message with its step's)
FLOW_EVENTS = 1.5
#: events a folded twin's send costs on ``flow``, where it is a load (no event of its arrival,
#: :meth:`~clustersim.network.base.Fabric.load`): its share of the allocations and timer moves;
#: and its CPU in events at the base cost (its route, its place in the max-min groups and the
#: heap stay: GPT-3 175B balanced, 363 k loads)
LOAD_EVENTS, LOAD_WEIGHT = 0.1, 1.0
#: events a collective's point-to-point step costs besides its message (the step's process
#: waking, the send's completion and the receiver's wake-up; measured, docs/fidelity.md)
STEP_EVENTS = 3
#: the kinds a ring across hosts runs in closed form on ``flow`` (collectives/merged_ring.py)
MERGED_KINDS = ("all_reduce", "reduce_scatter", "all_gather")
#: a message shorter than this (latency-bound) ends about as soon as it starts: it adds no
#: lasting flow whose shares other flows' events re-solve (``Collectives.events``' width)
LASTING_BYTES = 64 * 1024


class Hops:
    """Links a message crosses inside a node and between nodes (two sample routes)."""

    def __init__(self, job, network: str):
        self.intra = self.inter = 1
        if network == "direct":
            return
        graph, gpn = job.graph, job.cluster.gpus_per_node
        router = Router(graph)
        gpus = job.cluster.num_gpus

        def hops(a: int, b: int) -> int:
            try:
                links = router.links(f"gpu{a}", f"gpu{b}")
            except ScenarioError:  # no route between the samples: the run says so if it needs one
                return 1
            return max(1, sum(1 for u, w in links if not is_wire(link_data(graph, u, w))))

        if gpn > 1:
            self.intra = hops(0, 1)
        # a GPU 32 nodes on: under another leaf of a fat tree (4–32 nodes per leaf by
        # default), else on another node — the longest route most traffic takes
        far = min(gpus - 1, 32 * gpn)
        self.inter = hops(0, far) if far >= gpn else self.intra


def message_events(network: str, chunk: int, max_chunks: int | None, nbytes: float, hops: float) -> float:
    """Simulated events of one point-to-point message of ``nbytes`` over ``hops`` links."""
    if network == "packet":
        if max_chunks:
            chunk = max(chunk, math.ceil(nbytes / max_chunks))
        return max(1, math.ceil(nbytes / chunk)) * hops
    return FLOW_EVENTS if network == "flow" else 1


class Collectives:
    """Prices whole collectives over device groups of one job under a network model: the
    events of every message of one call (all members' together), the algorithm chosen
    as the run chooses it (module docstring); choices are kept per (group, kind, bytes)."""

    def __init__(
        self, job, network: str, chunk: int, max_chunks: int | None, hops: Hops, merges: bool = True
    ):
        self.network, self.chunk, self.max_chunks, self.hops = network, chunk, max_chunks, hops
        #: whether a ring across hosts may run in closed form: not where folded twins' rings
        #: run beside it as loads (they join its links as it starts, so it splits)
        self.merges = merges and network == "flow"
        self.gpn = job.cluster.gpus_per_node
        self.requested = job.simulation.collectives
        cl = job.cluster
        self.tuning = (cl.collective_alpha, cl.collective_latency, cl.collective_protocols)
        self.fabric = None if network == "direct" else SimpleNamespace(graph=job.graph, router=None)
        self._known: dict[tuple, tuple[float, float, float]] = {}
        self._private: dict[tuple, bool] = {}
        self._negligible: dict[tuple, bool] = {}

    def events(self, members: tuple[int, ...], kind: str, nbytes: float) -> tuple[float, float, float]:
        """(events, messages, width) of one ``kind`` collective of ``nbytes`` over
        ``members``: all its messages (the schedule builds them when the call starts), and
        how many are in flight at once."""
        n = len(members)
        if n <= 1:
            return 0.0, 0.0, 0.0
        key = (members[0], members[-1], n, kind, int(nbytes))
        if key not in self._known:
            self._known[key] = self._price(members, kind, nbytes)
        return self._known[key]

    def private(self, members: tuple[int, ...]) -> bool:
        """Whether the run times collectives over ``members`` by their α-β form: on ``flow``
        (:attr:`~clustersim.network.base.Fabric.coarse_collectives`), a group inside one
        host's private links (:func:`~clustersim.collectives.domain.in_private_domain`)."""
        if self.network != "flow" or self.fabric is None:
            return False
        key = tuple(members)
        if key not in self._private:
            group = Group(None, self.fabric, [f"gpu{d}" for d in members])
            self._private[key] = in_private_domain(group)
        return self._private[key]

    def timed(self, members: tuple[int, ...], kind: str, nbytes: float) -> bool:
        """Whether the run times a ``kind`` call of ``nbytes`` over ``members`` by its α-β
        form on ``flow``: a group inside one host's private links (:meth:`private`) or a
        call whose bytes are negligible (:mod:`clustersim.collectives.negligible`)."""
        if self.private(members):
            return True
        if self.network != "flow" or self.fabric is None:
            return False
        key = (tuple(members), kind, int(nbytes))
        if key not in self._negligible:
            alpha, latency, protocols = self.tuning
            group = Group(None, self.fabric, [f"gpu{d}" for d in members], alpha, latency, protocols)
            name, protocol, t = plan(group, kind, int(nbytes), self.requested.get(kind, "auto"))
            self._negligible[key] = name is not None and negligible_bytes(group, kind, name, protocol, t)
        return self._negligible[key]

    def _algorithm(self, members: tuple[int, ...], kind: str, nbytes: float) -> str:
        requested = self.requested.get(kind, "auto")
        if self.fabric is None:
            return "ring" if requested == "auto" else requested
        alpha, latency, protocols = self.tuning
        group = Group(None, self.fabric, [f"gpu{d}" for d in members], alpha, latency, protocols)
        return plan(group, kind, int(nbytes), requested)[0] or "ring"

    def _price(self, members: tuple[int, ...], kind: str, s: float) -> tuple[float, float, float]:
        n = len(members)
        hosts = len({d // self.gpn for d in members})
        m = -(-n // hosts)  # members per host
        cross = hosts / n if hosts > 1 else 0.0  # share of neighbour messages that leave a host
        alg = self._algorithm(members, kind, s)
        if kind == "barrier":
            kind, s = "all_reduce", 0
        # (messages, bytes each, share crossing hosts) of the whole call; ``width``: the
        # messages one re-solve of the shares touches (a rank's one send; a ring's step on
        # one host's channels: its messages go one hop along the ring and share links with
        # few others, where direct's every-pair messages share every NIC)
        width = n
        if alg == "ring" and kind in ("broadcast", "reduce"):
            c = m if hosts > 1 else 1
            k = pipeline_chunks(int(s / c))
            parts = [(c * k * (n - 1), s / c / k, cross)]
        elif alg == "ring" and self.merges and hosts > 1 and m == 1 and kind in MERGED_KINDS:
            # one channel, one hop per host: timed in closed form while its links are its own
            # (collectives/merged_ring.py), one event its last arrival, no flow in flight
            parts, width = [(1, s, cross)], 0
        elif alg == "ring":
            c = m if hosts > 1 else 1
            steps = 2 * (n - 1) if kind == "all_reduce" else n - 1
            parts, width = [(c * steps * n, s / c / n, cross)], c
        elif alg == "tree":
            k = pipeline_chunks(int(s / 2))
            phases = 2 if kind == "all_reduce" else 1
            parts, width = [(2 * k * phases * (n - 1), s / 2 / k, cross)], 2 * (n - 1)
        elif alg == "halving_doubling":
            p = 1 << (n.bit_length() - 1)
            steps = max(1, int(math.log2(p)))
            steps *= 2 if kind == "all_reduce" else 1
            extra = 2 * (n - p)
            inter = max(0, math.log2(p) - math.log2(m)) / max(1, math.log2(p)) if hosts > 1 else 0.0
            parts = [(steps * p, s * (p - 1) / p / max(1, steps / (2 if kind == "all_reduce" else 1)), inter)]
            parts.append((extra, s, cross))
        elif alg == "nccl_tree":  # m channels × two trees (one on a host), n − 1 edges, up and down
            trees = m * (2 if hosts > 1 else 1)
            k = pipeline_chunks(int(s / trees))
            inter = (hosts - 1) / (n - 1) if hosts > 1 else 0.0
            parts, width = [(trees * k * 2 * (n - 1), s / trees / k, inter)], trees * (n - 1)
        elif alg == "nvls":  # per chunk: m² copies in, m sums out, (m back, m² multicast)
            k = pipeline_chunks(int(s / n))
            per = n * n + n + (n + n * n if kind == "all_reduce" else 0)
            parts, width = [(k * per, s / k / n, 0.0)], n * n
        elif alg == "pat":  # ⌈log2 n⌉ steps, every rank one message each, one GPU per node
            steps = max(1, (n - 1).bit_length())
            parts, width = [(n * steps, s * (n - 1) / n / steps, 1.0)], n
        elif alg == "hierarchical":
            parts = [(2 * (m - 1) * n, s / m, 0.0), (2 * (hosts - 1) * n, s / (m * hosts), 1.0)]
        else:  # direct (and the parameter server's pushes and pulls): every pair at once
            per = 2 if kind == "all_reduce" else 1
            pairs = n - 1 if kind in ("broadcast", "reduce") else n * (n - 1)
            parts = [(per * pairs, s / n if pairs > n else s, (n - m) / (n - 1) if hosts > 1 else 0.0)]
        if max(size for _, size, _ in parts) < LASTING_BYTES:
            width = 0  # its flows end before others start: they join no lasting group
        total = 0.0
        for count, size, inter in parts:
            hops = inter * self.hops.inter + (1 - inter) * self.hops.intra
            total += count * (
                STEP_EVENTS + message_events(self.network, self.chunk, self.max_chunks, size, hops)
            )
        return total, sum(count for count, _, _ in parts), width
