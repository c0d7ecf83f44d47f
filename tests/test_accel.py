"""The optional C accelerator (clustersim/network/_cmaxmin.c) against the Python it replaces.

The C must give what :meth:`Links.group_py` and :meth:`Links.fill_py` give, bit for bit — the
same group in the same order, the same flows frozen in the same order at the same floats — or
decline (``None``, the caller then runs the Python). Random states of links and flows
(hypothesis, ties on purpose), then whole simulations on both paths: every span, device row,
memory row and summary field the same. Skipped where the install built no accelerator (no C
compiler); ``CLUSTERSIM_NO_ACCEL`` does not skip them: they call the C directly.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.network import maxmin
from clustersim.network.maxmin import Links

_c = pytest.importorskip("clustersim.network._cmaxmin", reason="the C accelerator is not built here")

ROOT = Path(__file__).resolve().parents[1]

# Bandwidths that tie often and round differently by the order of subtractions, and any
# finite non-negative float.
BANDWIDTHS = st.one_of(
    st.sampled_from([1.0, 3.0, 10.0, 0.1, 1 / 3, 25e9, 12.5e9, 0.0, 5e-324]),
    st.floats(0.0, 1e15, allow_nan=False),
)


@st.composite
def histories(draw, weighted: bool = False):
    """Link bandwidths, then steps: a flow joins (its links, route order; ``weighted``: with
    a multiplicity on each link, or none), the n-th flow in flight leaves, or the rates are
    solved for a set of dirty links."""
    n_links = draw(st.integers(1, 24))
    bandwidth = draw(st.lists(BANDWIDTHS, min_size=n_links, max_size=n_links))
    link = st.integers(0, n_links - 1)
    route = st.lists(link, min_size=1, max_size=6, unique=True)
    if weighted:  # (1 to 16 flows of an orbit on a link: clustersim/network/orbits.py)
        route = route.flatmap(
            lambda r: st.tuples(
                st.just(r), st.none() | st.lists(st.integers(1, 16), min_size=len(r), max_size=len(r))
            )
        )
    step = st.one_of(
        st.tuples(st.just("join"), route),
        st.tuples(st.just("leave"), st.integers(0, 99)),
        st.tuples(st.just("solve"), st.lists(link, max_size=6, unique=True)),
    )
    return bandwidth, draw(st.lists(step, min_size=1, max_size=60))


@given(histories())
@settings(max_examples=400, deadline=None)
def test_c_equals_python_bit_for_bit(history):
    _replay(*history)


@pytest.mark.skipif(
    getattr(_c, "WEIGHTS", 0) != 1, reason="built before multiplicities: rebuild it (pip install -e .)"
)
@given(histories(weighted=True))
@settings(max_examples=200, deadline=None)
def test_c_equals_python_with_multiplicities(history):
    """Flows standing for several flows on a link (folding under contention) as well."""
    _replay(*history)


def _replay(bandwidth, steps) -> None:
    """Run ``steps`` on a :class:`Links`; at each solve, C and Python give the same groups,
    freeze order and rates, every bit."""
    net = Links()
    for _ in bandwidth:
        net.add_link()
    live: list[int] = []
    for kind, arg in steps:
        if kind == "join":
            route, weights = arg if isinstance(arg[0], list) else (arg, None)
            live.append(net.add_flow(tuple(route), None if weights is None else tuple(weights)))
        elif kind == "leave" and live:
            net.remove_flow(live.pop(arg % len(live)))
        elif kind == "solve":
            links, flows = _c.group(net.link_flows, net.flow_links, arg)
            assert (links, flows) == net.group_py(arg)
            caps = [bandwidth[k] for k in links]
            extra = (net.weights, net._load) if net.weighted else ()
            c_slots, c_rates = _c.fill(net.link_flows, net.flow_links, links, caps, *extra)
            slots, rates = net.fill_py(links, caps)
            assert c_slots == slots
            # repr: every last bit, and 0.0 told from -0.0
            assert [repr(r) for r in c_rates] == [repr(r) for r in rates]


def test_c_declines_what_it_cannot_match():
    """Non-finite capacities, a link listed twice, a link outside the group: None, and the
    Python answers."""
    net = Links()
    a, b = net.add_link(), net.add_link()
    net.add_flow((a, b))
    for links, caps in (
        ([a, b], [math.inf, 1.0]),
        ([a, b], [math.nan, 1.0]),
        ([a, a], [1.0, 1.0]),
        ([a], [1.0]),
    ):
        assert _c.fill(net.link_flows, net.flow_links, links, caps) is None
    assert _c.fill(net.link_flows, net.flow_links, [a, b], [2.0, 1.0]) == ([0], [1.0])


def test_the_flow_model_uses_it_unless_switched_off():
    assert maxmin.ACCELERATED == (maxmin._accel is not None)


class _Counted:
    """The C module, counting the calls it answered and the ones it declined."""

    def __init__(self):
        self.answered = self.declined = 0

    def group(self, *args):
        return self._count(_c.group(*args))

    def fill(self, *args):
        return self._count(_c.fill(*args))

    def _count(self, got):
        self.answered += got is not None
        self.declined += got is None
        return got


def _fingerprints():
    spec = importlib.util.spec_from_file_location("fingerprints", ROOT / "benchmarks" / "fingerprints.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "extra"),
    [
        ("two-jobs-oversubscribed-fat-tree", {}),
        # its data-parallel rings now run in closed form (collectives/merged_ring.py) and
        # share no links, so max-min is never asked: direct's every-pair messages are
        ("gpt-7.5b-64xh100-balanced", {"simulation.collectives.all_reduce": "direct"}),
        ("gpt3-175b-1024xa100-balanced", {}),
    ],
)
def test_both_paths_simulate_the_same(case, extra, monkeypatch):
    """The fingerprint cases that run the flow model (benchmarks/fingerprints.py): spans,
    devices, memory, requests and summary hashed with every float's repr — equal on the C
    and on the Python path; the C answered every call (declined none)."""
    fp = _fingerprints()
    path, overrides = next((p, o) for name, p, o in fp.cases() if name == case)
    overrides = {**overrides, **extra}
    counted = _Counted()
    monkeypatch.setattr(maxmin, "_accel", counted)
    accelerated = fp.fingerprint(path, overrides)
    assert counted.answered > 0 and counted.declined == 0
    monkeypatch.setattr(maxmin, "_accel", None)
    assert fp.fingerprint(path, overrides) == accelerated
