"""Max-min filling over arrays (clustersim/network/maxmin.py) against the textbook form.

The reference below is progressive filling as the flow model first did it — flows and links
as objects, a dict of capacities, one heap entry pushed per frozen flow and link — and the
group walk beside it. The array form must give the same group in the same order and the same
rates bit for bit (not approximately): results of the ``balanced`` fidelity must not move.
"""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.network.maxmin import Links


class _RefFlow:
    __slots__ = ("links", "rate")

    def __init__(self, links):
        self.links, self.rate = links, 0.0


class _RefLink:
    __slots__ = ("flows",)

    def __init__(self):
        self.flows: dict[_RefFlow, None] = {}


def _ref_group(dirty):
    links: dict[_RefLink, None] = {}
    flows: dict[_RefFlow, None] = {}
    stack = [link for link in dirty if link.flows]
    for link in stack:
        links[link] = None
    while stack:
        for f in stack.pop().flows:
            if f not in flows:
                flows[f] = None
                for other in f.links:
                    if other not in links:
                        links[other] = None
                        stack.append(other)
    return list(links), list(flows)


def _ref_fill(links, capacity):
    """Sets each flow's rate; returns the flows in the order they were frozen."""
    cap = {link: capacity[link] for link in links}
    left = {link: len(link.flows) for link in links}
    order = {link: i for i, link in enumerate(links)}
    heap = [(cap[link] / left[link], i, link) for i, link in enumerate(links)]
    heapq.heapify(heap)
    frozen: dict[_RefFlow, None] = {}
    while heap:
        share, i, link = heapq.heappop(heap)
        if left[link] == 0:
            continue
        fair = max(cap[link], 0.0) / left[link]
        if fair != share:
            heapq.heappush(heap, (fair, i, link))
            continue
        for f in link.flows:
            if f in frozen:
                continue
            frozen[f] = None
            f.rate = fair
            for other in f.links:
                cap[other] -= fair
                left[other] -= 1
                if other is not link and left[other]:
                    heapq.heappush(heap, (max(cap[other], 0.0) / left[other], order[other], other))
    return list(frozen)


# Bandwidths from a few values, some of them awkward in binary, so that shares tie often and
# round differently depending on the order of subtractions.
BANDWIDTHS = st.sampled_from([1.0, 3.0, 10.0, 0.1, 1 / 3, 25e9, 12.5e9, 0.0])


@st.composite
def scenarios(draw):
    """Links, then steps: a flow joins (its links in route order) or the n-th flow in
    flight leaves; then the links marked dirty by the last steps."""
    n_links = draw(st.integers(1, 12))
    bandwidth = draw(st.lists(BANDWIDTHS, min_size=n_links, max_size=n_links))
    route = st.lists(st.integers(0, n_links - 1), min_size=1, max_size=5, unique=True)
    steps = draw(st.lists(st.one_of(route, st.integers(0, 40)), min_size=1, max_size=40))
    dirty = draw(st.lists(st.integers(0, n_links - 1), max_size=6, unique=True))
    return bandwidth, steps, dirty


@given(scenarios())
@settings(max_examples=300, deadline=None)
def test_array_filling_equals_reference_bit_for_bit(case):
    bandwidth, steps, dirty = case
    net, ref_links = Links(), [_RefLink() for _ in bandwidth]
    for _ in bandwidth:
        net.add_link()
    live: list[tuple[int, _RefFlow]] = []  # (slot, reference flow), in the order they joined
    for step in steps:
        if isinstance(step, list):
            f = _RefFlow(tuple(ref_links[k] for k in step))
            for link in f.links:
                link.flows[f] = None
            live.append((net.add_flow(tuple(step)), f))
        elif live:
            slot, f = live.pop(step % len(live))
            for link in f.links:
                del link.flows[f]
            assert net.remove_flow(slot) == tuple(ref_links.index(link) for link in f.links)
    ref_of = dict(live)
    links, flows = net.group(dirty)
    want_links, want_flows = _ref_group([ref_links[k] for k in dirty])
    assert [ref_links[k] for k in links] == want_links
    assert [ref_of[slot] for slot in flows] == want_flows
    if not links:
        return
    capacity = {ref_links[k]: bandwidth[k] for k in links}
    want_order = _ref_fill(want_links, capacity)
    slots, rates = net.fill(links, [bandwidth[k] for k in links])
    assert [ref_of[slot] for slot in slots] == want_order  # the same links bind, in the same order
    got = dict(zip(slots, rates, strict=True))
    # exact: the same floats, not close ones (repr tells 0.0 from -0.0 and every last bit)
    assert [repr(got[slot]) for slot in flows] == [repr(ref_of[slot].rate) for slot in flows]
