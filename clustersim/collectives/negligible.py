"""Collectives whose bytes are negligible — a gradient norm's or an amax's few bytes, a
barrier — which a network model sharing links at flow level may time by their α-β form
instead of message by message (:attr:`~clustersim.network.base.Fabric.coarse_collectives`,
docs/fidelity.md).

A call of a kind and by an algorithm whose form is its idle schedule's time (:data:`KINDS`,
:data:`ALGORITHMS`) qualifies
when its bytes add at most :data:`NEGLIGIBLE` of its α-β time to the time
the same algorithm and protocol take with no bytes at all: its time is then its latencies
(protocol, per-step α, path), which links shared with other traffic do not stretch. What
this gives up is each message's bytes at a contended share: a message sharing a link with
``k`` flows takes at most ``k`` times its idle byte time, so the call's error is at most
``k · NEGLIGIBLE`` of its own time (a 128-GPU gradient norm of ~30 µs: under 3 ns per
flow sharing its links), and the ≤ its bytes it takes from those flows' links.
"""

from __future__ import annotations

from .group import Group
from .protocol import Protocol
from .registry import estimate_time

#: the algorithms whose α-β form is their schedule's time on idle links when bytes are
#: negligible — direct's one step per phase, halving-doubling's log2 p steps each waiting for
#: the last (a multi-host ring's ``overlapped`` form hides α's behind work it lacks here, a
#: tree's form pays every level in full where its chunks overlap them)
ALGORITHMS = ("direct", "halving_doubling")
#: the kinds whose bytes the form prices at least as the schedule spends them (a broadcast's
#: or reduce's root sends its n − 1 copies through its own NIC, which the form prices as the host's)
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "barrier")

#: the most a call's bytes may add to its zero-byte α-β time, as a fraction of its α-β time
NEGLIGIBLE = 1e-3


def negligible_bytes(group: Group, kind: str, algorithm: str, protocol: Protocol, seconds: float) -> bool:
    """Whether ``kind`` by ``algorithm`` and ``protocol`` on ``group``, whose α-β time is
    ``seconds`` (:func:`~.registry.plan`'s), spends at most :data:`NEGLIGIBLE` of it on bytes."""
    if algorithm not in ALGORITHMS or kind not in KINDS or len(group.members) < 2 or not seconds > 0:
        return False
    if algorithm == "halving_doubling" and not _host_blocks(group):
        return False
    latency = protocol.latency + estimate_time(kind, algorithm, group.shape(), 0)
    return seconds - latency <= NEGLIGIBLE * seconds


def _host_blocks(group: Group) -> bool:
    """Whether ``group``'s members come host by host in blocks of one power-of-two size: the
    shape on which halving-doubling's form knows which steps cross hosts (distance ≥ m)."""
    m = len(next(iter(group.hosts.values())))
    if m & (m - 1) or any(len(v) != m for v in group.hosts.values()):
        return False
    at = [group.host[x] for x in group.members]
    return all(at[i] == at[i - i % m] for i in range(len(at)))
