"""A ring across hosts timed in closed form while it has its links to itself, split back into
its messages the moment other traffic joins one of them (``balanced``: a fabric that
:attr:`~clustersim.network.base.Fabric.coarse_collectives` and can hold links, the ``flow``
model; ``packet`` keeps every chunk).

A reduce-scatter, all-gather or all-reduce by ring (:mod:`.ring`) over n ranks sends, at each
of its S steps, one message per hop. Chunk k leaves rank k at step 0 and goes on one hop per
step, each rank forwarding it once it has arrived: the messages form n *chains*. Where

* the ring is one channel whose every hop (with its folded twins' images, an
  :class:`~clustersim.network.orbits.Orbit`) crosses links no other hop crosses,
* no flow is on those links when the call is prepared (and none steps its bandwidth), and
* every hop's next message is issued, and its flow starts, only after its previous flow has
  carried its bytes — checked below from the hops' α, latency, rate and pace,

each message is a flow alone on its links (with its images, at one rate r_h: the least of
bandwidth ÷ multiplicity over its links), so chain k's message at step s is issued at

    d_k(s) = t0 + Σ_{j<s} (α_h + z_k / r_h + latency_h),  h = k + j (mod n),

starts α_h later, carries its z_k bytes at r_h and lands latency_h after that — the very
times the message-by-message run gives, up to float rounding (≤ 1e-12 relative in the
tests). :class:`MergedRing` holds the links (:meth:`~clustersim.network.flow.FlowFabric.watch`)
and schedules one event, the last arrival; each member's finish is its last message's.

When a flow is about to start on a held link, :meth:`MergedRing.split` builds the ring's
messages and puts each where the message-by-message run has it at that moment — landed,
landing (its latency running), in flight (a flow of the bytes it has left, at that moment
re-shared with the newcomer), in its α, or not yet issued (its engine resumed at it, paced from
its last issue) — so from there on the run is the message-by-message one.
"""

from __future__ import annotations

from itertools import accumulate

from .schedule import land, reach, resume_engine, send_after, split

#: the margin by which a hop's next flow must start after its last one carried its bytes,
#: relative to the step (float rounding of the closed form stays far below it)
_MARGIN = 1e-9


class RingPlan:
    """What a ring call's closed form needs that does not change between its runs: its order,
    chunk sizes, steps, per hop its α, latency, rate and pace, and the links it holds."""

    __slots__ = (
        "kind",
        "order",
        "sizes",
        "steps",
        "alpha",
        "latency",
        "rate",
        "pace",
        "pace_of",
        "head",
        "ids",
    )

    def hold(self, env, fabric, finish: dict, label: str, delay: float):
        """A :class:`MergedRing` of this plan started ``delay`` from now (the protocol's
        latency), its links held — or None where another flow is on one of them."""
        if not fabric.idle(self.ids):
            return None
        return MergedRing(self, env, fabric, finish, label, delay)


def plan(group, kind: str, nbytes: int, steps_of, orders, head: float | None) -> RingPlan | None:
    """The :class:`RingPlan` of a ring call (``steps_of``: the kind's steps over n ranks;
    ``orders``: its channels' orders; ``head``: the fill α a ``latency: nccl`` ring pays before
    its first step, its messages then paying none; None: α per message), or None where the
    closed form is not exact (module docstring)."""
    fabric = group.fabric
    if not getattr(fabric, "coarse_collectives", False) or not hasattr(fabric, "watch") or len(orders) != 1:
        return None
    order = orders[0]
    n = len(order)
    if n < 2:
        return None
    p = RingPlan()
    p.kind, p.order, p.sizes, p.steps, p.head = kind, order, split(nbytes, n), steps_of(n), head
    p.alpha, p.latency, p.rate, p.pace, p.pace_of, ids = [], [], [], [], group.pace_of, []
    for i, src in enumerate(order):
        dst = order[(i + 1) % n]
        orbit, pace = fabric.orbit(src, dst), group.pace_of(src, dst)
        if orbit is None or not orbit.ids or pace is None:
            return None
        weights = orbit.weights or (1,) * len(orbit.ids)
        p.alpha.append(0.0 if head is not None else group.alpha_of(src, dst))
        p.latency.append(orbit.latency)
        p.rate.append(min(fabric.bandwidth(k) / w for k, w in zip(orbit.ids, weights, strict=True)))
        p.pace.append(pace)
        ids.extend(orbit.ids)
    p.ids = tuple(ids)
    if len(set(ids)) != len(ids) or min(p.rate) <= 0 or not _spaced(p):
        return None
    return p


def _spaced(p: RingPlan) -> bool:
    """Whether every hop's next message is issued after its pace allows and starts after its
    last flow has carried its bytes. Rank i = k + s sends chain k + 1 at step s − 1, then chain
    k at step s, a gap d_k(s) − d_{k+1}(s − 1) = α_k + latency_k + z_k / r_k + Σ_{0<j<s}
    (z_k − z_{k+1}) / r_{k+j} apart; its least is bounded below by the least first term less
    (S − 2) · (the sizes' spread) ÷ the least rate."""
    zmin, zmax = min(p.sizes), max(p.sizes)
    slowest = min(p.rate)
    gap = min(a + lat + zmin / r for a, lat, r in zip(p.alpha, p.latency, p.rate, strict=True))
    gap -= max(0, p.steps - 2) * (zmax - zmin) / slowest
    need = zmax / min(min(p.rate), min(p.pace))
    return gap > need + _MARGIN * gap


class MergedRing:
    """One run of a :class:`RingPlan`: its links held, its last arrival the one event it
    schedules, until :meth:`split` (module docstring). ``done`` fires when every message has
    landed; ``finish`` (member → s) then holds each member's last arrival."""

    def __init__(self, p: RingPlan, env, fabric, finish: dict, label: str, delay: float):
        self.p, self.env, self.fabric, self.finish, self.label = p, env, fabric, finish, label
        now = env.now
        # the engines start after the protocol's latency; a fill α is a gate set at build time
        self.t0 = max(now + delay, now + p.head) if p.head is not None else now + delay
        n, steps = len(p.order), p.steps
        # Σ over hops 0 .. j − 1 (mod n) of α + latency, and of 1 / rate
        self.cum_q = [0.0, *accumulate(p.alpha[j % n] + p.latency[j % n] for j in range(n + steps))]
        self.cum_t = [0.0, *accumulate(1.0 / p.rate[j % n] for j in range(n + steps))]
        self.done = env.event()
        self.split_at: float | None = None
        last = max(self._times(k, steps - 1)[3] for k in range(n))
        fabric.watch(p.ids, self)
        env.timeout(last - now).callbacks.append(self._landed)

    def _times(self, k: int, s: int) -> tuple[float, float, float, float]:
        """Chain ``k``'s message at step ``s``: when it is issued, when its flow starts, when it
        has carried its bytes, when it lands."""
        p, n = self.p, len(self.p.order)
        z, h = p.sizes[k], (k + s) % n
        issued = self.t0 + (self.cum_q[k + s] - self.cum_q[k]) + z * (self.cum_t[k + s] - self.cum_t[k])
        starts = issued + p.alpha[h]
        carried = starts + z / p.rate[h]
        return issued, starts, carried, carried + p.latency[h]

    def _landed(self, _event) -> None:
        """The last arrival, unless the ring was split: every member's finish, then done."""
        if self.split_at is not None:
            return
        p, n, finish = self.p, len(self.p.order), self.finish
        self.fabric.unwatch(p.ids)
        last = p.steps - 1
        for i, member in enumerate(p.order):
            sent = self._times((i - last) % n, last)[3]  # its last message and its predecessor's
            got = self._times((i - 1 - last) % n, last)[3]
            finish[member] = max(finish.get(member, 0.0), sent, got)
        self.done.succeed()

    def split(self) -> None:
        """Go on message by message from now, each message where the message-by-message run
        has it (module docstring)."""
        from .ring import build_ring  # (ring builds this module's plans)

        env, p, now = self.env, self.p, self.env.now
        self.split_at = now
        self.fabric.unwatch(p.ids)
        n = len(p.order)
        engines, _ = build_ring(env, p.kind, [p.order], sum(p.sizes), {})
        arrived, left = set(), []
        for i, prog in enumerate(engines):
            at, free_at = len(prog), self.t0
            for s, m in enumerate(prog):
                m.alpha = p.alpha[i]
                issued, starts, carried, lands = self._times((i - s) % n, s)
                if issued > now:
                    at = s
                    break
                free_at = issued + m.nbytes / p.pace[i]  # as its engine paced it
                if lands <= now:
                    arrived.add(m.done)
                    reach(self.finish, m, lands)
                    continue
                left.append(m)
                rest = m.nbytes - p.rate[i] * (now - starts)  # bytes not yet carried
                if carried <= now or (starts <= now and rest <= 0):
                    land(env, m, lands - now, self.finish)
                elif starts <= now:
                    m.nbytes = rest  # (a float) its flow from now on
                    send_after(env, self.fabric, m, 0.0, self.label, self.finish)
                else:
                    send_after(env, self.fabric, m, starts - now, self.label, self.finish)
            for m in prog[at:]:
                m.alpha = p.alpha[i]
                m.deps = tuple(d for d in m.deps if d not in arrived)
                left.append(m)
            if at < len(prog):
                resume_engine(env, self.fabric, prog, at, free_at, p.pace_of, self.label, self.finish)
        count = [len(left)]

        def landed(_event) -> None:
            count[0] -= 1
            if not count[0]:
                self.done.succeed()

        for m in left:
            m.done.callbacks.append(landed)
        if not left:
            self.done.succeed()
