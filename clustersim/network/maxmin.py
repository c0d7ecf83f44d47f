"""Max-min fair shares of links among flows, over integer-indexed arrays.

The flow model (:mod:`clustersim.network.flow`) keeps its links and flows here as small
integers: a link's flows are an insertion-ordered dict of flow slots, a flow's links a tuple
of link ids, and the per-allocation state (capacity left, unfrozen flows, a link's place in
the group, marks) lives in flat lists reused by every allocation — nothing per flow or per
link is rebuilt when rates are re-solved.

:meth:`Links.fill` is progressive filling in a fixed order, so its rates are bit-for-bit
reproducible: repeatedly the live link with the smallest ``(max(capacity left, 0) / unfrozen
flows, place in the group)`` fixes its unfrozen flows at that share (in the order they joined
the link), and each such flow takes the share off every link it crosses, one subtraction at
a time. Sorted first entries and a heap with lazy re-insertion find that link: every live
link has an entry no larger than its current share, and one that comes out stale is put
back with the current share, so the link taken is always the smallest by current share.
A flow may stand for several flows on a link (its multiplicity there: folding under
contention, :mod:`.orbits`): it then counts that many times among the link's unfrozen flows
and takes its share that many times off the link.

:meth:`Links.group` and :meth:`Links.fill` run in C (``_cmaxmin.c``, the same operations in the
same order, so the same results bit for bit) where the install built it — it needs a C
compiler — and the environment variable ``CLUSTERSIM_NO_ACCEL`` is unset (or ``0``); otherwise,
or for an input the C declines, the Python of :meth:`Links.group_py` and :meth:`Links.fill_py`.
"""

from __future__ import annotations

import math
from heapq import heappop, heappush

from ..accel import load

_accel = load("clustersim.network._cmaxmin")  # built by setup.py where a C compiler works
#: whether :class:`Links` runs its loops in C in this process
ACCELERATED = _accel is not None
#: whether the C fill takes flows' multiplicities (a build from before them does not)
_WEIGHTS = getattr(_accel, "WEIGHTS", 0) == 1


class Links:
    """Links and the flows on them, as integers (module docstring)."""

    __slots__ = (
        "link_flows",
        "flow_links",
        "_cap",
        "_left",
        "_place",
        "_low",
        "_link_mark",
        "_flow_mark",
        "_free",
        "_stamp",
        "weights",
        "_load",
        "weighted",
    )

    def __init__(self):
        #: per link id: its flows' slots, in the order they joined (a dict as an ordered set)
        self.link_flows: list[dict[int, None]] = []
        #: per flow slot: the ids of the links it crosses, in route order (() when free)
        self.flow_links: list[tuple[int, ...]] = []
        self._cap: list[float] = []  # per link: capacity not yet handed out, this allocation
        self._left: list[int] = []  # per link: its flows not yet frozen
        self._place: list[int] = []  # per link: its position in the group (breaks share ties)
        self._low: list[float] = []  # per link: the share of its latest heap entry
        self._link_mark: list[int] = []  # per link: the stamp of the last walk that reached it
        self._flow_mark: list[int] = []  # per flow: likewise, then the stamp of its freezing
        self._free: list[int] = []  # flow slots to reuse (last freed first: deterministic)
        self._stamp = 0
        #: per flow slot: its multiplicity on each of its links (route order), or None for 1
        #: on each — a folded orbit of twin flows at one rate (:mod:`clustersim.network.orbits`)
        self.weights: list[tuple[int, ...] | None] = []
        self._load: list[int] = []  # per link: its flows' summed multiplicities
        #: flows in flight with weights (a C build from before them fills only while none is)
        self.weighted = 0

    def add_link(self) -> int:
        """A new link with no flows; its id."""
        self.link_flows.append({})
        for column in (self._left, self._place, self._link_mark, self._load):
            column.append(0)
        self._cap.append(0.0)
        self._low.append(0.0)
        return len(self.link_flows) - 1

    def add_flow(self, links: tuple[int, ...], weights: tuple[int, ...] | None = None) -> int:
        """A flow on ``links`` (ids, route order), last on each of them; its slot.
        ``weights``: its multiplicity on each link (None: 1 on each) — it then stands for
        that many flows there, all at its rate: it counts that many times in a link's share
        and takes that many times its rate off the link."""
        if self._free:
            slot = self._free.pop()
            self.flow_links[slot] = links
            self.weights[slot] = weights
        else:
            slot = len(self.flow_links)
            self.flow_links.append(links)
            self.weights.append(weights)
            self._flow_mark.append(0)
        load = self._load
        for link in links:
            self.link_flows[link][slot] = None
            load[link] += 1
        if weights is not None:
            self.weighted += 1
            for link, w in zip(links, weights, strict=True):
                load[link] += w - 1
        return slot

    def remove_flow(self, slot: int) -> tuple[int, ...]:
        """Take flow ``slot`` off its links (its slot is reused later); the links it was on."""
        links, weights, load = self.flow_links[slot], self.weights[slot], self._load
        for link in links:
            del self.link_flows[link][slot]
            load[link] -= 1
        if weights is not None:
            self.weighted -= 1
            for link, w in zip(links, weights):
                load[link] -= w - 1
            self.weights[slot] = None
        self.flow_links[slot] = ()
        self._free.append(slot)
        return links

    def group(self, dirty) -> tuple[list[int], list[int]]:
        """The links and flows connected, through shared links, to the links ``dirty`` that
        carry flows: links in ``dirty``'s order then as a depth-first walk reaches them,
        flows as it reaches them."""
        if _accel is not None:
            got = _accel.group(self.link_flows, self.flow_links, dirty)
            if got is not None:
                return got
        return self.group_py(dirty)

    def group_py(self, dirty) -> tuple[list[int], list[int]]:
        """:meth:`group` in Python."""
        self._stamp += 1
        stamp, link_mark, flow_mark = self._stamp, self._link_mark, self._flow_mark
        link_flows, flow_links = self.link_flows, self.flow_links
        links = [link for link in dirty if link_flows[link]]
        for link in links:
            link_mark[link] = stamp
        stack = list(links)
        flows: list[int] = []
        while stack:
            for f in link_flows[stack.pop()]:
                if flow_mark[f] != stamp:
                    flow_mark[f] = stamp
                    flows.append(f)
                    for other in flow_links[f]:
                        if link_mark[other] != stamp:
                            link_mark[other] = stamp
                            links.append(other)
                            stack.append(other)
        return links, flows

    def fill(self, links: list[int], capacities: list[float]) -> tuple[list[int], list[float]]:
        """Max-min fair rates of the flows on ``links`` (a whole group, from :meth:`group`;
        ``capacities`` their bandwidths now): the flows' slots in the order they were frozen,
        and their rates (a weighted flow's: each of the flows it stands for)."""
        if _accel is not None:
            if not self.weighted:
                got = _accel.fill(self.link_flows, self.flow_links, links, capacities)
            elif _WEIGHTS:
                got = _accel.fill(
                    self.link_flows, self.flow_links, links, capacities, self.weights, self._load
                )
            else:  # a build from before multiplicities: the Python
                got = None
            if got is not None:
                return got
        return self.fill_py(links, capacities)

    def fill_py(self, links: list[int], capacities: list[float]) -> tuple[list[int], list[float]]:
        """:meth:`fill` in Python."""
        cap, left, place, low = self._cap, self._left, self._place, self._low
        link_flows, flow_links, weights, load = self.link_flows, self.flow_links, self.weights, self._load
        # every link's first entry, sorted once (most are never moved: they come out with
        # their flows all frozen elsewhere); entries put back or moved go on a heap, and the
        # smaller of the two heads comes out next
        first = []
        for i, link in enumerate(links):
            c, n = capacities[i], load[link]
            cap[link], left[link], place[link] = c, n, i
            low[link] = c / n
            first.append((c / n, i, link))
        first.sort()
        end = len(first)
        first.append((math.inf, end, -1))  # past the last: no entry is larger
        heap: list[tuple[float, int, int]] = []
        self._stamp += 1
        stamp, frozen = self._stamp, self._flow_mark
        slots: list[int] = []
        rates: list[float] = []
        k = 0
        while True:
            if heap and heap[0] < first[k]:
                share, i, link = heappop(heap)
            elif k < end:
                share, i, link = first[k]
                k += 1
            else:
                break
            n = left[link]
            if not n:
                continue
            c = cap[link]
            fair = (0.0 if c < 0.0 else c) / n  # max(c, 0.0), NaN kept as max() keeps it
            if fair != share:  # the share has moved since: back in at the current one
                low[link] = fair
                heappush(heap, (fair, i, link))
                continue
            touched: list[int] = []
            for f in link_flows[link]:
                if frozen[f] == stamp:
                    continue
                frozen[f] = stamp
                slots.append(f)
                rates.append(fair)
                route, many = flow_links[f], weights[f]
                if many is None:
                    for other in route:
                        cap[other] -= fair
                        left[other] -= 1
                else:  # it stands for w flows on a link: w shares off it
                    for other, w in zip(route, many):
                        cap[other] -= fair * w
                        left[other] -= w
                touched.extend(route)
            # A link needs a new entry only when its share fell below its latest one (by
            # rounding: in exact arithmetic shares only grow as flows freeze); a share that
            # grew is found when the lower entry comes out, and put back then
            for other in set(touched):
                n = left[other]
                if n:
                    c = cap[other]
                    share = (0.0 if c < 0.0 else c) / n
                    if share < low[other]:
                        low[other] = share
                        heappush(heap, (share, place[other], other))
        return slots, rates
