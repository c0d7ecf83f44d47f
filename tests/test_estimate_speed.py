"""The plan estimate's speed-ups change no estimate (issue 38 item 8): the schedule shapes and
pass segments cached across estimators, the memory peak over the maximal live-count vectors
only, one pass pricing per distinct chunk cost, and the data-parallel and grad-stats groups
built from ranges — each equal, to the bit, to what it replaces."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.errors import ScenarioError
from clustersim.experiments import plan_estimate
from clustersim.experiments.plan_estimate import Estimator, _maximal, schedule_shape
from clustersim.experiments.plans import MODERN_SCHEDULES
from clustersim.parallel.data_parallel import grad_stats_group
from clustersim.parallel.plan import Plan
from clustersim.scenario import Scenario
from clustersim.scenario.loader import apply_overrides
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
    """An estimate from emptied caches, and again with every shape and pass shared by the
    estimators before it, is the same to the bit; a cached pass's segments are the uncached ones."""
    schedule_shape.cache_clear()
    stage_builder.cached_pass_segments.cache_clear()
    cold = [_estimate(raw, plan) for raw, plan in _cases()]
    assert stage_builder.cached_pass_segments.cache_info().hits > 0  # middle stages share passes
    warm = [_estimate(raw, plan) for raw, plan in _cases()]
    assert schedule_shape.cache_info().hits >= len(warm)
    assert warm == cold
    # the cache only remembers: the segments of a pass, priced again, are equal
    sc = Scenario(megatron_scenario(megatron_rows()[3], granularity="stage"))
    job = plan_estimate.resolve(sc)
    assert all(c.passes for c in job.chunk_costs)
    stage_builder.cached_pass_segments.cache_clear()
    again = plan_estimate.resolve(sc)
    assert [c.passes for c in again.chunk_costs] == [c.passes for c in job.chunk_costs]
