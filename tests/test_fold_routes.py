"""The fold check's array pass (clustersim/parallel/fold_routes.py) names the same first
twin as a plain loop over every twin, on random plans and placements."""

from __future__ import annotations

from itertools import combinations, product

from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.parallel.fold_routes import LEVELS, _level, twin_obstacle
from clustersim.parallel.plan import Plan


def looped(plan: Plan, where: dict, wrap: bool, cp_ring: bool = False) -> str | None:
    """Every twin compared one by one, in (stage, replica, TP rank) order."""
    hops = [(s, s + 1) for s in range(plan.pp - 1)] + ([(plan.pp - 1, 0)] if wrap and plan.pp > 1 else [])
    for s, nxt in hops:
        level = _level(where, plan.device(s), plan.device(nxt))
        for r in range(plan.replicas):
            for t in range(plan.tp):
                twin = _level(where, plan.device(s, r, t), plan.device(nxt, r, t))
                if twin != level:
                    return (
                        f"stage {s}'s replica {r}, TP rank {t} sends to stage {nxt} within {LEVELS[twin]}, "
                        f"replica 0 within {LEVELS[level]}"
                    )

    def ring(group):
        return [_level(where, a, b) for a, b in zip(group, group[1:] + group[:1])]

    for s in range(plan.pp):
        for t in range(1, plan.tp):
            if ring(plan.dp_group(s, t)) != ring(plan.dp_group(s)):
                return f"stage {s}'s data-parallel group of TP rank {t} is laid out unlike TP rank 0's"
    return looped_cp(plan, where, cp_ring)


def looped_cp(plan: Plan, where: dict, cp_ring: bool) -> str | None:
    """Every CP group compared one by one with its stage's first: each rank's receive on the
    ring (in (stage, dp rank, CP rank, TP rank) order), then each pair of CP ranks."""
    groups = {
        (s, d, t): plan.cp_ring(s, d * plan.cp, t)
        for s in range(plan.pp)
        for d in range(plan.dp)
        for t in range(plan.tp)
    }
    ring = product(range(plan.pp), range(plan.dp), range(plan.cp), range(plan.tp))
    for s, d, c, t in ring if cp_ring and plan.cp > 1 else ():
        first, g = _level(where, groups[s, 0, 0][-1], groups[s, 0, 0][0]), groups[s, d, t]
        got = _level(where, g[c - 1], g[c])
        if got != first:
            return (
                f"stage {s}'s context-parallel ring {list(g)} receives at CP rank {c} within "
                f"{LEVELS[got]}, at CP rank 0 within {LEVELS[first]} "
                "(ring attention's ranks would run at different paces)"
            )
    for i, j in combinations(range(plan.cp), 2):
        for (s, _d, _t), g in groups.items():
            first = _level(where, groups[s, 0, 0][i], groups[s, 0, 0][j])
            got = _level(where, g[i], g[j])
            if got != first:
                return (
                    f"stage {s}'s context-parallel group {list(g)} has CP ranks {i} and {j} within "
                    f"{LEVELS[got]}, the representative's within {LEVELS[first]}"
                )
    return None


@st.composite
def plans_and_placements(draw):
    tp, pp, dp, cp = (draw(st.sampled_from(v)) for v in ((1, 2, 4), (1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3)))
    plan = Plan(tp=tp, pp=pp, dp=dp, gpus_per_node=draw(st.sampled_from((1, 2, 4, 8))), cp=cp)
    n = plan.num_devices
    if draw(st.booleans()):  # servers under leaves in sites, as the builders lay them out
        per_host, per_leaf, per_site = (draw(st.integers(1, 6)) for _ in range(3))
        hosts = [i // per_host for i in range(n)]
    else:  # anything at all
        hosts = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
        per_leaf, per_site = 1, 1
    leaves = [frozenset({f"leaf{h // per_leaf}"}) for h in hosts]
    if draw(st.booleans()):
        leaves = [frozenset(draw(st.sets(st.sampled_from(("l0", "l1")), max_size=2))) for _ in hosts]
    where = {f"gpu{i}": (hosts[i] // per_leaf // per_site, leaves[i], hosts[i]) for i in range(n)}
    return plan, where, draw(st.booleans()), draw(st.booleans())


@given(case=plans_and_placements())
@settings(max_examples=300, deadline=None)
def test_the_array_pass_names_the_first_twin_the_loop_names(case):
    plan, where, wrap, cp_ring = case
    assert twin_obstacle(plan, where, wrap, cp_ring) == looped(plan, where, wrap, cp_ring)


def test_a_straddled_leaf_is_named_at_its_first_twin():
    # 2 stages × 4 replicas, one GPU per server: replica r of stage 0 is gpu r and sends to
    # gpu 4 + r; gpu6 and gpu7 sit under another leaf, so replicas 0 and 1 send within a
    # leaf and replica 2 is the first to cross leaves
    plan = Plan(tp=1, pp=2, dp=4, gpus_per_node=1)
    leaf = [0, 0, 0, 0, 0, 0, 1, 1]
    where = {f"gpu{i}": (0, frozenset({leaf[i]}), i) for i in range(8)}
    assert twin_obstacle(plan, where) == (
        "stage 0's replica 2, TP rank 0 sends to stage 1 within one site, replica 0 within one leaf switch"
    )
