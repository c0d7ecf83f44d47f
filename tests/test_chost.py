"""The optional C accelerator of a pass's walks over its items (clustersim/workload/_chost.c)
against the Python it replaces: the host's race (host._host_waits), the launch count
(segments._launch_count), the runs of kernels (segments._layer_segments) and their sums
(segments._run_sums), a pass's compute (segments.compute_time) and its seconds
(plan_estimate._pass_seconds) — the same floats
bit for bit and the same Segments, on random items with ties, signed zeros, repeated item
objects and every kind; and a configuration's chunk costs, every pass built, the same with and
without it. Skipped where the install built no accelerator (no C compiler);
``CLUSTERSIM_NO_ACCEL`` does not skip them: they call the C directly (the modules' own
``_accel`` set to it where they run through them)."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.experiments import plan_estimate
from clustersim.scenario import Scenario
from clustersim.validation.megatron import megatron_rows, megatron_scenario
from clustersim.workload import host, segments, stage_builder
from clustersim.workload.stage_cost import chunk_costs

_c = pytest.importorskip("clustersim.workload._chost", reason="the C accelerator is not built here")

# Seconds that tie often (the race's comparisons either side), and any finite non-negative float.
SECONDS = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, 0.1, 1 / 3, 2e-3, 5e-324, 1e-6]), st.floats(0.0, 1e3, allow_nan=False)
)
COUNTS = st.integers(0, 4)
HOSTS = st.one_of(st.none(), SECONDS)


def _kernel(kind: str):
    return st.tuples(st.just(kind), SECONDS, SECONDS, COUNTS, COUNTS, HOSTS)


ITEMS = st.one_of(
    _kernel("c"),
    _kernel("p"),
    st.tuples(st.just("e"), st.lists(SECONDS, min_size=1, max_size=4).map(tuple), st.just((1.0,)), COUNTS)
    .flatmap(lambda t: st.tuples(st.just(t), COUNTS, HOSTS))
    .map(lambda t: (*t[0], *t[1:])),
    # a GEMM pipelined with a TP collective: kind, bytes, name, seconds, flops, method, chunks, margin, host, launches
    st.tuples(SECONDS, COUNTS, HOSTS, COUNTS).map(
        lambda t: ("o", "all_gather", 8, "fc1", t[0], 1.0, "pipeline", t[1], 0.0, t[2], t[3])
    ),
    st.lists(SECONDS, max_size=3).map(lambda s: ("r", tuple(s), (0.0,) * len(s), 8, "attn")),
    st.booleans().map(lambda sync: ("x", "all_reduce", 8, "tp", "tp", (), sync, 0, 0.0)),
    st.just(("x", "all_reduce", 8, "tp", "tp", ())),
    st.just(("f", 1.0, "launch")),
)


@st.composite
def passes(draw):
    """A pass's pieces: items drawn from a few distinct ones, repeated (as a pass repeats its
    layers' item objects)."""
    pool = draw(st.lists(ITEMS, min_size=1, max_size=8))
    pieces = draw(st.lists(st.lists(st.sampled_from(pool), max_size=30), min_size=1, max_size=4))
    return pieces, draw(SECONDS), draw(SECONDS)


def _bits(xs) -> list[str]:
    return [float(x).hex() for x in xs]  # (hex tells -0.0 from 0.0, == does not)


@given(passes())
@settings(max_examples=400, deadline=None)
def test_the_hosts_race_is_the_pythons_bit_for_bit(case):
    pieces, launch_s, dispatch = case
    assert _bits(_c.host_waits(pieces, launch_s, dispatch)) == _bits(
        host._host_waits(pieces, launch_s, dispatch)
    )


@given(passes())
@settings(max_examples=200, deadline=None)
def test_the_launch_count_is_the_pythons(case):
    items = [i for piece in case[0] for i in piece]
    ours, theirs = _c.launch_count(items), segments._launch_count(items)
    assert ours == theirs and type(ours[0]) is type(theirs[0])


@given(passes(), st.sampled_from("cepxfz"))
@settings(max_examples=400, deadline=None)
def test_the_runs_of_kernels_are_the_pythons(case, empty):
    """The same runs (each asked for once per distinct run of item objects; ``empty``: the kind
    whose runs make no Segment), the same lone items, the same start of the last run."""
    items = [i for piece in case[0] for i in piece if i[0] != "f"] + [(empty, 0.0, 0.0, 0, 0, None)]

    def walk(fn):
        asked = []

        def run_segment(run):
            asked.append(("run", tuple(map(id, run))))
            return None if run[0][0] == empty else ("run", tuple(run))

        def lone_segment(item):
            asked.append(("lone", id(item)))
            return ("lone", item)

        segs, last = fn(items, run_segment, lone_segment)
        return segs, last, asked

    assert walk(_c.layer_segments) == walk(segments._layer_segments)


BESIDE = st.one_of(
    st.just(()),
    st.tuples(SECONDS, st.sampled_from([1.0, 2.0]), st.tuples(st.sampled_from(["nccl", 24]), SECONDS)),
    st.tuples(SECONDS, st.just(1.0), st.tuples(st.just("nccl"), SECONDS), st.tuples(st.just(24), SECONDS)),
)


@given(
    st.lists(
        st.tuples(st.sampled_from("cp"), SECONDS, st.one_of(SECONDS, st.integers(0, 2**60)), BESIDE),
        max_size=30,
    ),
    st.sampled_from([None, ()]),
)
@settings(max_examples=400, deadline=None)
def test_a_run_s_sums_are_the_pythons_bit_for_bit(rows, beside):
    """Seconds and FLOPs (ints past 2**53 among them) summed in order, the beside tuples by
    beside_sum (kernels with none, and with different rates or kinds, among them)."""
    items = [(k, t, f, 1, 1, None, *((own,) if own else ())) for k, t, f, own in rows]

    def sums(fn):
        t, f, b = fn(items, 0.0, 0.0, beside, segments.beside_sum)
        return float(t).hex(), float(f).hex(), repr(b)

    assert sums(_c.run_sums) == sums(segments._run_sums)


class _Seg:
    """What a pass's seconds read of a Segment."""

    def __init__(self, kind: str, overlap: bool):
        self.kind, self.overlap = kind, overlap


@given(
    st.lists(
        st.tuples(st.sampled_from(["compute", "collective", "ring", "overlap"]), st.booleans(), SECONDS),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.integers(0, 5), max_size=40),
)
@settings(max_examples=400, deadline=None)
def test_a_pass_s_seconds_are_the_pythons_bit_for_bit(pool, picks):
    """Segments drawn from a few (repeated objects, as a pass repeats its layers'), each of
    its seconds asked for once per identity; overlapped pairs take the longer, to the bit."""
    segs = [_Seg(kind, overlap) for kind, overlap, _ in pool]
    seconds = {id(seg): t for seg, (*_, t) in zip(segs, pool)}
    drawn = [segs[k % len(segs)] for k in picks]

    def total(fn):
        asked = []

        def seconds_of(seg):
            asked.append(id(seg))
            return seconds[id(seg)]

        return float(fn(drawn, seconds_of)).hex(), asked

    assert total(_c.pass_seconds) == total(plan_estimate._pass_seconds)


class _Timed:
    """What a pass's compute reads of a Segment."""

    def __init__(self, kind: str, duration, margin, flops):
        self.kind, self.duration, self.margin, self.flops = kind, duration, margin, flops


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["compute", "collective", "ring", "overlap"]),
            SECONDS,
            st.one_of(SECONDS, st.just(0)),
            st.one_of(SECONDS, st.integers(0, 2**60)),
        ),
        max_size=30,
    )
)
@settings(max_examples=300, deadline=None)
def test_a_pass_s_compute_is_the_pythons_bit_for_bit(rows):
    """Seconds (duration + margin) and FLOPs of the non-collective segments: the same sums, to
    the bit and the type (an empty pass's are the int 0)."""
    segs = [_Timed(*row) for row in rows]
    ours = _c.compute_sums(segs)
    with patch.object(segments, "_accel", None):
        theirs = segments.compute_time(segs)
    assert [(type(x), repr(x)) for x in ours] == [(type(x), repr(x)) for x in theirs]


def test_a_kind_of_more_than_one_letter_is_refused_by_both():
    for fn in (_c.layer_segments, segments._layer_segments):
        with pytest.raises(ValueError, match="one letter"):
            fn([("cc", 1.0, 0.0, 0, 0, None)], list, list)


@pytest.mark.parametrize("row", [0, 5, 9])
@pytest.mark.parametrize("granularity", ["layer", "stage"])
def test_estimates_and_chunk_costs_are_the_same_with_and_without_the_accelerator(
    monkeypatch, row, granularity
):
    sc = Scenario(megatron_scenario(megatron_rows()[row], granularity=granularity))

    def priced():
        stage_builder.cache_clear()
        plan_estimate.idle_collective.cache_clear()
        estimate = plan_estimate.Estimator().estimate(sc, {})
        return repr(chunk_costs(sc, sc.parallel.pp)), repr(estimate)  # every pass built

    def priced_with(accel):  # set on each module: under CLUSTERSIM_NO_ACCEL they loaded none
        for module in (host, segments, plan_estimate):
            monkeypatch.setattr(module, "_accel", accel)
        return priced()

    assert priced_with(_c) == priced_with(None)
