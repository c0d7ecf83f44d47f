"""Whether a folded job's twins meet the network as their representative does.

Folding simulates replica 0, TP rank 0 of each stage and gives every twin its
representative's times, so each twin's pipeline sends and data-parallel ring must cross
the same kind of links as the representative's. On the hierarchical topologies
(each topology declares its ``placement``, :mod:`clustersim.topology.plugin`) a route's
links follow from where its two GPUs sit relative to each other: on one server, under one
leaf switch, in one site, or in two sites. Folding is exact when, for every
twin, each peer it sends to sits at the same level as the representative's peer — it is
not when, say, a stage's replicas straddle a site border that the next stage's replicas
do not. The context-parallel groups of a stage (``parallel.cp``; every pair of CP ranks)
and its expert groups (:meth:`~clustersim.parallel.plan.Plan.expert_groups`)
must each be laid out as the representative's. Topologies whose placement is a reason (routes depend on position: ``ring``,
``torus_2d``, ``star``, ``custom``, wan sites that differ) are not compared: folding is
refused there with that reason. A placement may name levels at which routes depend on
position (``unlike``, :class:`clustersim.topology.plugin.Placements`: a rail topology's
cross-rail level once it has spines): folding is refused, with that reason, where any
compared pair — the representative's or a twin's — sits at one of them.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

#: what a pair of GPUs shares, by level (0 = the same server … 3 = nothing: two sites)
LEVELS = ("one server", "one leaf switch", "one site", "two sites")


def _level(where: dict[str, tuple], a: int, b: int) -> int:
    (site_a, leaf_a, host_a), (site_b, leaf_b, host_b) = where[f"gpu{a}"], where[f"gpu{b}"]
    return 0 if host_a == host_b else 1 if leaf_a == leaf_b else 2 if site_a == site_b else 3


class _Levels:
    """:func:`_level` over arrays of GPU indices: the placement as (host, leaf, site) codes
    per GPU, so every twin of a 16,384-GPU plan is compared in a few array passes."""

    def __init__(self, where: dict[str, tuple], gpus: int):
        places = [where[f"gpu{i}"] for i in range(gpus)]
        leaves: dict[frozenset, int] = {}
        self.site = np.array([site for site, _, _ in places])
        self.leaf = np.array([leaves.setdefault(leaf, len(leaves)) for _, leaf, _ in places])
        self.host = np.array([host for _, _, host in places])

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.where(
            self.host[a] == self.host[b],
            0,
            np.where(self.leaf[a] == self.leaf[b], 1, np.where(self.site[a] == self.site[b], 2, 3)),
        )


def twin_obstacle(plan, where: dict[str, tuple], wrap: bool = False, cp_ring: bool = False) -> str | None:
    """:func:`route_obstacle` for ``plan`` on the placement ``where`` (GPU name → (site,
    leaf switches, server)); ``wrap``: the last stage also sends to the first (interleaved
    schedules); ``cp_ring``: the CP ranks pass K/V around a ring (ring attention), each
    rank's step waiting on its own receive."""
    level = _Levels(where, plan.num_devices)
    unlike = getattr(where, "unlike", {})
    # device(stage, replica, tp rank) = tp rank + tp × (replica + replicas × stage)
    devices = np.arange(plan.num_devices).reshape(plan.pp, plan.replicas, plan.tp)
    hops = [(s, s + 1) for s in range(plan.pp - 1)]
    if wrap and plan.pp > 1:
        hops.append((plan.pp - 1, 0))  # an interleaved schedule's chunks wrap around
    if hops:
        src, nxt = (devices[[h[k] for h in hops]] for k in (0, 1))
        twins = level(src, nxt)  # (hop, replica, tp rank)
        differ = (twins != twins[:, :1, :1]) | np.isin(twins, list(unlike))
        if differ.any():
            h, r, t = np.unravel_index(np.argmax(differ), differ.shape)
            s, n = hops[h]
            if twins[h, r, t] in unlike:
                return f"{unlike[twins[h, r, t]]} (stage {s}'s replica {r}, TP rank {t} sends to stage {n})"
            return (
                f"stage {s}'s replica {r}, TP rank {t} sends to stage {n} within {LEVELS[twins[h, r, t]]}, "
                f"replica 0 within {LEVELS[twins[h, 0, 0]]}"
            )
    rings = level(devices, np.roll(devices, -1, axis=1))  # each data-parallel group's ring
    at = np.isin(rings, list(unlike))  # (stage, replica, tp rank): a ring neighbour at an unlike level
    if at.any():
        s, r, t = np.unravel_index(np.argmax(at), at.shape)
        return f"{unlike[rings[s, r, t]]} (stage {s}'s data-parallel ring of TP rank {t}, from replica {r})"
    differ = (rings != rings[:, :, :1]).any(axis=1)  # (stage, tp rank): unlike TP rank 0's
    if differ.any():
        s, t = np.unravel_index(np.argmax(differ), differ.shape)
        return f"stage {s}'s data-parallel group of TP rank {t} is laid out unlike TP rank 0's"
    return _cp_obstacle(plan, devices, level, unlike, cp_ring) or _expert_obstacle(plan, where, unlike)


def _cp_obstacle(plan, devices: np.ndarray, level: _Levels, unlike: dict, ring: bool) -> str | None:
    """Why some context-parallel group of a stage is laid out unlike the representative's
    (every pair of CP ranks compared: the all-to-all's pairs, of which the ring's
    neighbours are some) or has a pair at an ``unlike`` level, or — ``ring`` — why some
    CP rank receives over another kind of hop than the representative (CP rank 0, from
    the last rank) does: ring attention's ranks each wait on their own receive, so a ring
    of mixed hops (two ranks per server: NVLink, then the NIC) runs its ranks at different
    paces — or None."""
    groups = devices.reshape(plan.pp, plan.dp, plan.cp, plan.tp)  # (stage, dp rank, cp rank, tp rank)
    if ring and plan.cp > 1:
        hops = level(np.roll(groups, 1, axis=2), groups)  # (.., c, ..): CP rank c − 1 → c
        differ = hops != hops[:, :1, :1, :1]  # (each stage has its representative)
        if differ.any():
            s, d, c, t = np.unravel_index(np.argmax(differ), differ.shape)
            return (
                f"stage {s}'s context-parallel ring {groups[s, d, :, t].tolist()} receives at CP rank {c} "
                f"within {LEVELS[hops[s, d, c, t]]}, at CP rank 0 within {LEVELS[hops[s, 0, 0, 0]]} "
                "(ring attention's ranks would run at different paces)"
            )
    for i, j in combinations(range(plan.cp), 2):
        pair = level(groups[:, :, i], groups[:, :, j])  # (stage, dp rank, tp rank)
        bad = np.isin(pair, list(unlike)) | (pair != pair[:, :1, :1])
        if bad.any():
            s, d, t = np.unravel_index(np.argmax(bad), bad.shape)
            group = groups[s, d, :, t].tolist()
            if pair[s, d, t] in unlike:
                return f"{unlike[pair[s, d, t]]} (stage {s}'s context-parallel group {group})"
            return (
                f"stage {s}'s context-parallel group {group} has CP ranks {i} and {j} within "
                f"{LEVELS[pair[s, d, t]]}, the representative's within {LEVELS[pair[s, 0, 0]]}"
            )
    return None


def _expert_obstacle(plan, where, unlike) -> str | None:
    """Why some expert group of a stage is laid out unlike the representative's (each
    pair of its members compared, in group order) or has a pair at an ``unlike`` level,
    or None."""
    if plan.ep == 1 and plan.expert_tp == plan.tp:
        return None
    for s in range(plan.pp):
        for kind in ("ep", "etp", "tp_ep", "edp"):
            first, *rest = plan.expert_groups(s, kind)
            pattern = [_level(where, a, b) for a, b in combinations(first, 2)]
            for group in (first, *rest):
                pairs = [_level(where, a, b) for a, b in combinations(group, 2)]
                at = [lv for lv in pairs if lv in unlike]
                if at:
                    return f"{unlike[at[0]]} (stage {s}'s {kind} group {list(group)})"
                if pairs != pattern:
                    return f"stage {s}'s {kind} group {list(group)} is laid out unlike {list(first)}"
    return None
