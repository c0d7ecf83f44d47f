"""1F1B's round recurrence with its steady state skipped (clustersim/experiments/steady_1f1b.py)
ends every stage where the pass-by-pass Timeline and the independent longest path over the
orders do — to the bit where nothing is skipped, within its stated 1e-12 where the skip is
taken — and the estimate's closed-form live counts are the order replay's."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.experiments.plan_estimate import _live_vectors, _maximal, schedule_shape
from clustersim.experiments.stage_timing import Timeline
from clustersim.experiments.steady_1f1b import TOLERANCE, OneFOneB
from clustersim.schedules.orders import run_orders
from clustersim.schedules.registry import SCHEDULES
from tests.test_estimate_speed import _longest_path, _seconds

ONE_F_ONE_B = SCHEDULES["1f1b"]


def _pipeline_like(p: int, seed: int) -> tuple[dict, float]:
    """Per (phase, stage) seconds as a Megatron split gives them — identical middle stages,
    heavier first and last ones — and one send time: the shape whose steady state is reached."""
    rnd = random.Random(seed)
    f, b, c = rnd.uniform(0.01, 0.1), rnd.uniform(0.02, 0.3), rnd.uniform(0.0, 0.01)
    ends = {0: rnd.uniform(1.0, 1.1), p - 1: rnd.uniform(1.0, 1.2)}
    return {(ph, s): t * ends.get(s, 1.0) for s in range(p) for ph, t in (("F", f), ("B", b))}, c


def _within(got: list[float], want: list[float]) -> bool:
    return all(abs(x - y) <= TOLERANCE * max(want) for x, y in zip(got, want))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 10), st.integers(1, 60), st.integers(0, 2**31), st.booleans())
def test_the_rounds_end_where_the_timeline_and_the_longest_path_do(p, m, seed, uniform):
    """Random pass and send times (every stage its own; or pipeline-like, so the steady
    state is skipped): the same keys, sends and busy times as the Timeline built from the
    orders, and each stage's end within the tolerance of both the Timeline's and the
    independent longest path's."""
    orders = run_orders(ONE_F_ONE_B, p, m, 1, 1)
    exact, fast = Timeline(ONE_F_ONE_B, orders, p), OneFOneB(p, m)
    assert sorted(fast.keys) == sorted(exact.keys) and sorted(fast.sends) == sorted(exact.sends)
    if uniform:
        times, c = _pipeline_like(p, seed)
        durations = [times[key[0], key[1]] for key in fast.keys]
        sends = [c] * len(fast.sends)
        want = exact.run([times[key[0], key[1]] for key in exact.keys], [c] * len(exact.sends))
    else:
        durations = [_seconds(seed, key) for key in fast.keys]
        sends = [_seconds(seed, x) for x in fast.sends]
        want = _longest_path(ONE_F_ONE_B, orders, p, seed, False)
        assert (
            exact.run([_seconds(seed, key) for key in exact.keys], [_seconds(seed, x) for x in exact.sends])
            == want
        )
    got = fast.run(durations, sends)
    assert _within(got, want)
    by_key = dict(zip(fast.keys, durations))
    assert fast.busy(durations) == exact.busy([by_key[key] for key in exact.keys])


def test_the_skip_is_taken_and_without_it_the_rounds_are_the_timeline_to_the_bit(monkeypatch):
    """A 64-stage, 512-micro-batch pipeline-like run jumps over its steady rounds (else the
    round recurrence is the Timeline's own floating-point operations: equal to the bit)."""
    p, m = 64, 512
    times, c = _pipeline_like(p, 7)
    fast = OneFOneB(p, m)
    durations, sends = [times[key[0], key[1]] for key in fast.keys], [c] * len(fast.sends)
    jumps = []
    real = OneFOneB._jump

    def spy(r, end, *args):
        jumps.append((r, real(r, end, *args)))
        return jumps[-1][1]

    monkeypatch.setattr(OneFOneB, "_jump", staticmethod(spy))
    skipped = fast.run(durations, sends)
    assert any(r != to for r, to in jumps) and max(to for _, to in jumps) > m - 2 * p
    exact = Timeline(ONE_F_ONE_B, run_orders(ONE_F_ONE_B, p, m, 1, 1), p)
    want = exact.run([times[key[0], key[1]] for key in exact.keys], [c] * len(exact.sends))
    assert _within(skipped, want)
    monkeypatch.setattr(OneFOneB, "_jump", staticmethod(lambda r, *_: r))
    assert fast.run(durations, sends) == want


def test_a_spread_past_the_tolerance_is_not_skipped(monkeypatch):
    """The jump is refused where the rounds' shift differs between entries by more than the
    bound allows (here: every entry but one shifted by λ); with a period of two rounds, it
    lands a whole number of periods on."""
    clock, lane = [1.0, 2.0], [1.0, 2.0]
    f_at = [[0.0] * 9, [0.0] * 9]
    last = clock + lane + [1.0]
    state = [x + 0.5 for x in last]
    state[1] += 1e-9
    assert OneFOneB._jump(1, 6, [last, state], clock, lane, f_at, [1, 0]) == 1
    state[1] -= 1e-9
    assert OneFOneB._jump(1, 6, [last, state], clock, lane, f_at, [1, 0]) == 6
    assert clock == [3.5, 4.5] and f_at[0][7] == f_at[0][2] + 2.5
    odd = [x + (0.2, 0.3)[i % 2] for i, x in enumerate(last)]  # half way, not one shift
    clock, lane = [1.5, 2.5], [1.5, 2.5]
    assert OneFOneB._jump(2, 7, [last, odd, state], clock, lane, f_at, [1, 0]) == 6
    assert clock == [2.5, 3.5]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 40))
def test_the_closed_form_live_counts_are_the_order_replays(p, m):
    """The estimate's shape of 1F1B (no orders built) holds the live vectors, chunks and
    split the order replay finds."""
    orders = run_orders(ONE_F_ONE_B, p, m, 1, 1)
    schedule_shape.cache_clear()
    shape = schedule_shape(ONE_F_ONE_B, p, m, 1, 1)
    assert isinstance(shape.timeline, OneFOneB) and not shape.split
    assert shape.vectors == [_maximal(_live_vectors(ONE_F_ONE_B, o, s, p, 1)) for s, o in enumerate(orders)]
    assert shape.chunks == [[s] for s in range(p)]
