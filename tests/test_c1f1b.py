"""The optional C accelerator of 1F1B's pass loops (clustersim/experiments/_c1f1b.c) against the
Python it replaces (steady_1f1b._passes and _round): the same floats bit for bit — each stage's
end from :meth:`OneFOneB.run` on random pipelines (the steady-state skip taken or not), and the
state each loop leaves in the lists it writes, from random states with ties and signed zeros.
Skipped where the install built no accelerator (no C compiler); ``CLUSTERSIM_NO_ACCEL`` does
not skip them: they call the C directly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.experiments import steady_1f1b
from clustersim.experiments.steady_1f1b import OneFOneB

_c = pytest.importorskip("clustersim.experiments._c1f1b", reason="the C accelerator is not built here")

# Seconds that tie often (the comparisons' either side), and any finite non-negative float.
SECONDS = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, 0.1, 1 / 3, 2e-3, 5e-324, 1e9]), st.floats(0.0, 1e6, allow_nan=False)
)


def _bits(xs: list[float]) -> list[str]:
    return [float(x).hex() for x in xs]  # (hex tells -0.0 from 0.0, == does not)


def _run(p: int, m: int, durations: list[float], sends: list[float], accel) -> list[float]:
    saved, steady_1f1b._accel = steady_1f1b._accel, accel
    try:
        return OneFOneB(p, m).run(durations, sends)
    finally:
        steady_1f1b._accel = saved


@st.composite
def pipelines(draw):
    """p, m, per-key seconds and per-send seconds: each drawn freely, or a Megatron-like
    split (identical middle stages, one send time), where the steady state is skipped."""
    p, m = draw(st.integers(1, 12)), draw(st.integers(1, 70))
    if draw(st.booleans()):
        durations = draw(st.lists(SECONDS, min_size=2 * p, max_size=2 * p))
        sends = draw(st.lists(SECONDS, min_size=2 * p - 2, max_size=2 * p - 2))
    else:
        f, b, c, first, last = (draw(SECONDS) for _ in range(5))
        durations = [x for s in range(p) for x in (f, b)]
        durations[:2] = [f + first, b + first]
        durations[-2:] = [f + last, b + last]
        sends = [c] * (2 * p - 2)
    return p, m, durations, sends


@given(pipelines())
@settings(max_examples=300, deadline=None)
def test_run_is_the_pythons_bit_for_bit(pipeline):
    assert _bits(_run(*pipeline, _c)) == _bits(_run(*pipeline, None))


@given(
    st.lists(SECONDS, min_size=4, max_size=4),
    st.lists(SECONDS, min_size=1, max_size=20),
    st.booleans(),
    st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_passes_leaves_the_pythons_state(scalars, arrive, has_input, has_output):
    """From any clock, lane and arrivals: the same clock, lane and sends written."""
    n = len(arrive)
    outs = [[0.0] * n if has_output else None for _ in range(2)]
    got = [
        run(*scalars, arrive if has_input else None, out, n // 3, n)
        for run, out in zip((_c.passes, steady_1f1b._passes), outs)
    ]
    assert _bits(got[0]) == _bits(got[1])
    assert outs[0] is None or _bits(outs[0]) == _bits(outs[1])


@given(st.integers(1, 8), st.integers(0, 7), st.data())
@settings(max_examples=300, deadline=None)
def test_round_leaves_the_pythons_state(p, lo, data):
    """From any state of clocks, lanes and arrivals: the same state after one round."""
    lo, m = min(lo, p - 1), p + 3
    r = data.draw(st.integers(0, 3))
    floats = st.lists(SECONDS, min_size=m, max_size=m)
    state = [data.draw(st.lists(floats, min_size=p, max_size=p)) for _ in range(2)]  # f_at, b_at
    state += [data.draw(st.lists(SECONDS, min_size=p, max_size=p)) for _ in range(2)]  # clock, lane
    hops = data.draw(st.lists(SECONDS, min_size=4 * p, max_size=4 * p))
    warm = [min(p - s - 1, m - r - 1) for s in range(p)]
    after = []
    for one_round in (_c.round, steady_1f1b._round):
        f_at, b_at, clock, lane = (
            list(map(list, x)) if x and isinstance(x[0], list) else list(x) for x in state
        )
        f_in, f_out = [None, *f_at[:-1]], [*f_at[:-1], None]
        b_in, b_out = [*b_at[1:], None], [None, *b_at[1:]]
        rows = list(zip(warm, f_in, f_out, b_in, b_out, *(hops[k::4] for k in range(4))))
        one_round(r, lo, rows, clock, lane)
        after.append([_bits(x) for x in (*f_at, *b_at, clock, lane)])
    assert after[0] == after[1]
