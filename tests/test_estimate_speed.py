"""The plan estimate's speed-ups change no estimate (issue 38 item 8): the schedule shapes, layer
kinds, collective times and pass segments cached across estimators, the memory peak over the maximal live-count vectors
only, one pass pricing per distinct chunk cost, and the data-parallel and grad-stats groups
built from ranges — each equal, to the bit, to what it replaces."""

from __future__ import annotations

import random
import zlib

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from clustersim.collectives.registry import plan as collective_plan
from clustersim.errors import ClusterSimError, ScenarioError
from clustersim.experiments import plan_estimate
from clustersim.experiments.plan_estimate import Estimator, _maximal, schedule_shape
from clustersim.experiments.plans import MODERN_SCHEDULES
from clustersim.experiments.stage_timing import Timeline
from clustersim.parallel.data_parallel import grad_stats_group
from clustersim.parallel.plan import Plan
from clustersim.scenario import Scenario
from clustersim.scenario.loader import apply_overrides
from clustersim.schedules.orders import run_orders
from clustersim.schedules.registry import SCHEDULES
from clustersim.validation.megatron import megatron_rows, megatron_scenario
from clustersim.workload import stage_builder

counts = st.lists(st.integers(0, 40), min_size=2, max_size=8).map(lambda c: c[: len(c) // 2 * 2])


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda n: st.tuples(
            st.lists(st.tuples(*[st.integers(0, 30)] * (2 * n)), min_size=0, max_size=40),
            st.lists(
                st.one_of(st.integers(0, 2**40), st.floats(0, 1e12, allow_nan=False)),
                min_size=2 * n,
                max_size=2 * n,
            ),
        )
    )
)
def test_the_peak_over_the_maximal_vectors_is_the_peak_over_all_to_the_bit(case):
    """``_maximal`` drops only vectors another one bounds in every count: whatever the
    (non-negative, int or float) bytes, the largest dot product is the same number."""
    vectors, held = case

    def peak(vs):
        return max((sum(n * b for n, b in zip(vec, held)) for vec in vs), default=0)

    kept = _maximal(sorted(set(vectors)))
    assert set(kept) <= set(vectors)
    assert peak(kept) == peak(vectors)
    assert repr(peak(kept)) == repr(peak(vectors))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(1, 8), st.integers(1, 6), st.integers(1, 4), st.integers(0, 7))
def test_groups_built_from_ranges_are_the_per_device_groups(tp, pp, dp, cp, t):
    """A stage's DP group and a replica's grad-stats group, device by device as defined."""
    plan = Plan(tp=tp, pp=pp, dp=dp, gpus_per_node=8, cp=cp)
    t %= tp
    for s in range(pp):
        assert plan.dp_group(s, t) == tuple(plan.device(s, r, t) for r in range(plan.replicas))
    for r in range(plan.replicas):
        want = tuple(plan.device(s, r, k) for s in range(pp) for k in range(tp))
        assert grad_stats_group(plan, r, False) == want


def _cases() -> list[tuple[dict, dict]]:
    """(scenario dict, plan overrides): Table 1's rows under 1F1B and, under each modern
    schedule (chunks, split backwards, V placement, F&B pairs), the first pipelined row it runs."""
    rows = [megatron_scenario(r, granularity="stage") for r in megatron_rows()]
    out = [(raw, {}) for raw in rows]
    for schedule in MODERN_SCHEDULES:
        plan = {"parallel.schedule": schedule}
        if schedule == "interleaved":
            plan["parallel.virtual_stages"] = 2
        for raw in rows:
            try:
                Scenario(apply_overrides(raw, plan))
            except ScenarioError:
                continue
            out.append((raw, plan))
            break
    assert len(out) == len(rows) + len(MODERN_SCHEDULES)
    return out


def _estimate(raw: dict, plan: dict) -> tuple:
    e = Estimator().estimate(Scenario(apply_overrides(raw, plan)), plan)
    return tuple(repr(x) for x in e.__dict__.values())


def test_estimates_are_the_same_from_cold_and_shared_caches():
    """An estimate from emptied caches, and again with every shape, layer kind, collective
    time and pass shared by the estimators before it (in either order), is the same to the
    bit; a cached pass's segments are the uncached ones."""
    shared = (
        schedule_shape,
        stage_builder.cached_pass_segments,
        stage_builder.cached_layer_kind,
        stage_builder.cached_ends,
        plan_estimate.idle_collective,
    )
    for cache in shared:
        cache.cache_clear()
    cold = []
    for raw, plan in _cases():  # each from emptied caches
        for cache in shared:
            cache.cache_clear()
        cold.append(_estimate(raw, plan))
    warm = [_estimate(raw, plan) for raw, plan in _cases()]  # each after every other case's
    warm += [_estimate(raw, plan) for raw, plan in reversed(_cases())][::-1]
    assert all(cache.cache_info().hits > 0 for cache in shared)  # middle stages share passes, ...
    assert schedule_shape.cache_info().hits >= len(cold)
    assert warm == cold + cold
    # the cache only remembers: the segments of a pass, priced again, are equal
    sc = Scenario(megatron_scenario(megatron_rows()[3], granularity="stage"))
    job = plan_estimate.resolve(sc)
    assert all(c.passes for c in job.chunk_costs)
    stage_builder.cached_pass_segments.cache_clear()
    again = plan_estimate.resolve(sc)
    assert [c.passes for c in again.chunk_costs] == [c.passes for c in job.chunk_costs]


def _seconds(seed: int, what: tuple) -> float:
    """A pseudo-random duration for ``what`` (stable across processes: no ``hash()``)."""
    return random.Random(seed ^ zlib.crc32(repr(what).encode())).uniform(1e-4, 5e-2)


def _longest_path(schedule, orders, p: int, seed: int, apart: bool) -> list[float]:
    """Per stage, the end of its last pass, evaluated straight from the orders (the
    semantics of clustersim/experiments/stage_timing.py): a pass starts once its stage is
    free and its input has arrived — its producer's end, plus the send (after the sending
    stage's earlier sends) where the producer sits on another stage; an F&B pair waits for
    both inputs and both outputs leave at its end (``apart``: forward, then backward)."""
    n_chunks = len({k for o in orders for ph, _, k in o if ph != "O"})
    route = [schedule.route(k, n_chunks) for k in range(n_chunks)]
    stage_of = [schedule.stage_of(k, p) for k in range(n_chunks)]
    items = [[x for x in o if x[0] != "O"] for o in orders]
    split = [{(j, k) for ph, j, k in its if ph == "W"} for its in items]
    clock, lane, pos = [0.0] * p, [0.0] * p, [0] * p
    arrival: dict[tuple, float] = {}

    def source(x):
        ph, j, k = x
        c = k - 1 if ph == "F" else k + 1
        return (ph, j, c) if ph in ("F", "B") and c in route[k] else None

    def key(s, x):
        ph, j, k = x
        src = source(x)
        phase = ("Bi" if (j, k) in split[s] else "B") if ph == "B" else ph
        return (phase, k, src is not None and stage_of[src[2]] != s)

    def leave(s, x, t):
        ph, j, k = x
        if ph not in ("F", "B"):
            return
        nxt = k + 1 if ph == "F" else k - 1
        if nxt in route[k] and stage_of[nxt] != s:
            lane[s] = arrival[x] = max(t, lane[s]) + _seconds(seed, (s, stage_of[nxt], min(k, nxt)))
        else:
            arrival[x] = t

    def start(s, x):
        src = source(x)
        return clock[s] if src is None else max(clock[s], arrival[src])

    while any(pos[s] < len(items[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while pos[s] < len(items[s]):
                i = pos[s]
                group = items[s][i : i + 2] if i in orders[s].pairs else items[s][i : i + 1]
                if any(source(x) is not None and source(x) not in arrival for x in group):
                    break
                if len(group) == 2 and not apart:
                    f, b = group
                    both = ("F&B",) + key(s, f)[1:] + key(s, b)
                    t = start(s, f)
                    if source(b) is not None:
                        t = max(t, arrival[source(b)])
                    clock[s] = t + _seconds(seed, both)
                    leave(s, f, clock[s])
                    leave(s, b, clock[s])
                else:
                    for x in group:
                        clock[s] = start(s, x) + _seconds(seed, key(s, x))
                        leave(s, x, clock[s])
                pos[s], moved = i + len(group), True
        assert moved
    return clock


FLUSHING = sorted(name for name, sch in SCHEDULES.items() if sch.flush)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(FLUSHING),
    st.integers(1, 8),
    st.integers(1, 24),
    st.integers(1, 3),
    st.integers(0, 2**31),
)
def test_the_timeline_is_the_longest_path_over_the_orders_to_the_bit(name, p, m, v, seed):
    """:class:`Timeline` (its steps built once per shape, run per plan) ends every stage
    where the longest path over the schedule's own orders does, to the bit, for random pass
    and send times — pairs as one pass and apart, split backwards, chunks, V placement."""
    schedule = SCHEDULES[name]
    v = v if schedule.chunks is None else 1
    try:
        schedule.validate(p, m, v)
        orders = run_orders(schedule, p, m, v, 1)
    except ClusterSimError:
        assume(False)
    timeline = Timeline(schedule, orders, p)
    durations = [0.0 if not key else _seconds(seed, key) for key in timeline.keys]
    sends = [_seconds(seed, x) for x in timeline.sends]
    for apart in (False, True) if any(o.pairs for o in orders) else (False,):
        got = timeline.run(durations, sends, apart)
        assert [repr(x) for x in got] == [repr(x) for x in _longest_path(schedule, orders, p, seed, apart)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]),
            st.lists(st.integers(0, 255), min_size=2, max_size=24, unique=True),
            st.sampled_from([1024.0, 3e6, 2.5e8]),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_a_collective_shared_by_groups_of_the_same_members_per_host_is_its_own(asks):
    """The shared cache (:func:`plan_estimate.idle_collective`) gives a collective's time to
    every group with as many members on each host, in order (every stage's DP group), on
    any network alike: each equals its own closed form, on its own devices."""
    net = plan_estimate._Network(plan_estimate.resolve(Scenario(megatron_scenario(megatron_rows()[4]))))
    for kind, devices, nbytes in asks:
        assert repr(net.collective(kind, tuple(devices), nbytes)) == repr(
            _own(net, kind, tuple(devices), nbytes)
        )


def _own(net, kind: str, devices: tuple[int, ...], nbytes: float) -> float:
    """The closed form of ``kind`` over ``devices`` themselves (the engine's choice and time)."""
    per_host = sum(1 for d in devices if d // net.gpn == devices[0] // net.gpn)
    shape = {**net.shape, "bw_inter": net.nic_bw * min(net.nics, per_host) / per_host}
    group = plan_estimate._Host(devices, net.gpn, shape, net.protocols)
    return collective_plan(group, kind, int(nbytes), net.algorithms.get(kind) or "auto")[2]
