"""Send schedules: the point-to-point form every collective algorithm compiles into.

An algorithm does not move bytes itself. It builds, for every *engine* (one in-order
sender on one rank, like one NCCL channel's thread block), an ordered list of
:class:`Msg`. A message waits for the arrival of the messages it depends on (the data it
forwards or reduces), then for its engine to be free, then for the per-step latency α,
then travels on the fabric. :func:`start` runs the engines.

Timing assumptions (stated once, here):

* α is a *delay* between issuing a message and its first byte entering the fabric
  (software + protocol handshake, NCCL's ``hwLat``). It does not occupy the link, so the
  α of consecutive chunks in a pipeline overlap; a dependent step pays it again.
* An engine issues its next message once the previous one has been *injected*, i.e.
  ``nbytes / pace_bandwidth`` after it was issued. On a contended fabric that pace is
  optimistic and the fabric's FIFO links do the queueing; on a fabric without a known
  bandwidth the engine waits for arrival.
* Reductions are free (they run at HBM speed, far above link speed).

A member's readiness — every event it waits for before it may send — enters a message as one
dependency (:func:`all_of`, a :class:`Readiness` when it is more than one event), so no
message carries more than a constant number of them, and checking a readiness again costs
O(1): it remembers how many of its events it has found fired.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain

import simpy

from ..simpy_fast import call_soon, succeed_at

__all__ = [
    "Msg",
    "Readiness",
    "all_of",
    "land",
    "reach",
    "recipe",
    "replay",
    "resume_engine",
    "send_after",
    "split",
    "start",
]


class Readiness:
    """Several events as one dependency: it has fired once every event of ``events`` has.

    It answers ``callbacks`` as an event does — ``None`` once all have fired, else the
    callback list of the first that has not, so a waiter appended there is woken exactly
    where it would be had it checked the events one by one in order — and keeps the count
    ``fired`` of its leading events found fired, so every check after the first starts there:
    its waiters together read each event once, plus O(1) per check.
    """

    __slots__ = ("events", "fired")

    def __init__(self, events: Sequence):
        self.events, self.fired = tuple(events), 0

    @property
    def callbacks(self) -> list | None:
        """The callback list of the first event not yet fired (None: all have)."""
        events, k = self.events, self.fired
        while k < len(events):
            waiting = events[k].callbacks
            if waiting is not None:
                self.fired = k
                return waiting
            k += 1
        self.fired = k
        return None


def all_of(events: Iterable) -> tuple:
    """The deps of a message that waits for every event of ``events`` (``None`` skipped; a
    :class:`Readiness` among them stands for its own events, in place): the event itself
    when there is one, else one :class:`Readiness` over them in the same order."""
    flat = []
    for e in events:
        if e is not None:
            flat.extend(e.events if type(e) is Readiness else (e,))
    return tuple(flat) if len(flat) <= 1 else (Readiness(flat),)


class Msg:
    """One point-to-point message of a schedule: ``nbytes`` from ``src`` to ``dst``.

    ``deps`` are events (usually other messages' ``done``, or a member's :class:`Readiness`)
    that must have fired before it is issued; ``done`` fires when its last byte has arrived
    at ``dst``. ``share`` is the fraction of the sender's port its engine paces itself at
    (algorithms that run several engines on one port at once give each its part).
    ``alpha``, when set, is its step latency instead of the group's (a ring that paid its
    α's up front sets 0).
    """

    __slots__ = ("src", "dst", "nbytes", "deps", "done", "share", "alpha")

    def __init__(
        self, env: simpy.Environment, src: str, dst: str, nbytes: int, deps: Sequence = (), share: float = 1.0
    ):
        self.src, self.dst, self.nbytes, self.share = src, dst, int(nbytes), share
        self.deps = tuple(deps) if None not in deps else tuple(d for d in deps if d is not None)
        self.done = env.event()
        self.alpha: float | None = None


def recipe(engines: Sequence[Sequence[Msg]]) -> tuple:
    """What :func:`replay` needs to make ``engines`` again with fresh events: per engine,
    per message ``(src, dst, nbytes, share, alpha, deps)``, ``deps`` the positions (in
    engine then message order) of the messages whose arrivals it waits for — a tuple of
    positions for a :class:`Readiness`. Empty when a message waits for any other event (one
    the build scheduled itself, e.g. a ring's fill gate), which a replay could not make at
    the same moment."""
    position = {m.done: k for k, m in enumerate(chain.from_iterable(engines))}
    gates: dict[int, tuple | None] = {}  # id of a Readiness → its events' positions

    def where(dep):
        if type(dep) is not Readiness:
            return position.get(dep)
        if id(dep) not in gates:
            at = tuple(position.get(e) for e in dep.events)
            gates[id(dep)] = None if None in at else at
        return gates[id(dep)]

    rows = []
    for prog in engines:
        row = []
        for m in prog:
            deps = tuple(where(d) for d in m.deps)
            if None in deps:
                return ()
            row.append((m.src, m.dst, m.nbytes, m.share, m.alpha, deps))
        rows.append(tuple(row))
    return tuple(rows)


def replay(env: simpy.Environment, recipe: tuple) -> list[list[Msg]]:
    """The engines a :func:`recipe` was taken from, made again: the same messages, each
    with a new ``done`` event, waiting for the same messages' arrivals in the same order
    (messages that waited for the same events share one deps tuple and :class:`Readiness`)."""
    engines, made = [], []
    for row in recipe:
        prog = []
        for src, dst, nbytes, share, alpha, _ in row:
            m = Msg(env, src, dst, nbytes, (), share)
            m.alpha = alpha
            prog.append(m)
        engines.append(prog)
        made += prog
    # two caches, as their keys can be equal tuples: a message's deps (positions of what it
    # waits for) and a readiness (positions of the events it gathers)
    deps_made: dict[tuple, tuple] = {}
    gates: dict[tuple, Readiness] = {}

    def dep(k):
        if type(k) is int:
            return made[k].done
        if k not in gates:
            gates[k] = Readiness([made[j].done for j in k])
        return gates[k]

    for m, (*_, deps) in zip(made, chain.from_iterable(recipe)):
        if deps not in deps_made:
            deps_made[deps] = tuple(dep(k) for k in deps)
        m.deps = deps_made[deps]
    return engines


def split(total: int, parts: int) -> list[int]:
    """``total`` bytes cut into ``parts`` near-equal integer pieces (larger ones first)."""
    base, rem = divmod(int(total), parts)
    return [base + (1 if i < rem else 0) for i in range(parts)]


def start(
    env: simpy.Environment,
    fabric,
    engines: Sequence[Sequence[Msg]],
    alpha_of: Callable,
    pace_of: Callable,
    label: str,
    finish: dict[str, float],
    shadow: bool = False,
) -> simpy.Event | None:
    """Start every engine's messages now; return the event that fires when all have arrived
    (None when there are none, or for a ``shadow``).

    ``alpha_of(src, dst)`` gives the step latency α in seconds, ``pace_of(src, dst)``
    the injection bandwidth in bytes/s (or ``None`` to wait for arrival). ``finish``
    (member → seconds) is raised to the arrival time of every message a member sends or
    receives, so afterwards it holds each member's own completion time.

    Each engine is a :class:`_Sender` stepped by callbacks, which schedules the events a
    SimPy process running it would, in the same order (its start, its waits, its end), at
    a fraction of a generator's cost per step.

    A ``shadow`` (a folded twin's call: its traffic loads the links, nothing waits for its
    end) sends the messages no other message waits for as loads
    (:meth:`~clustersim.network.base.Fabric.load`), without the events of their arrivals, and
    ``finish`` is left as it is.
    """
    if shadow:
        unwaited = _unwaited(engines)
        for prog in engines:
            if prog:
                call_soon(env, _Sender(env, fabric, prog, alpha_of, pace_of, label, finish, unwaited).resume)
        return None
    # one countdown over every message: when the last one lands the collective is done
    # (every engine has issued its last message by then, so nothing else needs waiting for)
    left = [sum(len(prog) for prog in engines)]
    if not left[0]:
        return None
    all_done = env.event()

    def landed(_event) -> None:
        left[0] -= 1
        if not left[0]:
            all_done.succeed()

    for prog in engines:
        for m in prog:
            m.done.callbacks.append(landed)
        if prog:
            # where a process started now takes its first step (URGENT, at now)
            call_soon(env, _Sender(env, fabric, prog, alpha_of, pace_of, label, finish).resume)
    return all_done


def _unwaited(engines: Sequence[Sequence[Msg]]) -> set[int]:
    """The ids of the messages of ``engines`` whose arrival no message of them waits for."""
    waited, seen = set(), set()
    for prog in engines:
        for m in prog:
            for dep in m.deps:
                if type(dep) is not Readiness:
                    waited.add(id(dep))
                elif id(dep) not in seen:  # (an engine's messages share their member's readiness)
                    seen.add(id(dep))
                    waited.update(map(id, dep.events))
    return {id(m) for prog in engines for m in prog if id(m.done) not in waited}


class _Sender:
    """One engine: its messages in order, each issued once its deps have arrived and the
    engine is free (``free_at``), paced by ``pace_of`` or, without a known bandwidth,
    after the previous one arrived. :meth:`resume` is the callback of whatever it waits
    for; ``i`` is the message it is at, ``d`` the first of that message's deps not found
    processed, ``paced`` whether it has waited for the engine to be free for message ``i``;
    ``loads``: the ids of the messages it sends as loads (a shadow's that nothing waits for)."""

    __slots__ = (
        "env",
        "fabric",
        "prog",
        "alpha_of",
        "pace_of",
        "label",
        "finish",
        "i",
        "d",
        "paced",
        "free_at",
        "loads",
    )

    def __init__(self, env, fabric, prog, alpha_of, pace_of, label, finish, loads=frozenset()):
        self.env, self.fabric, self.prog, self.label, self.finish = env, fabric, prog, label, finish
        self.alpha_of, self.pace_of, self.loads = alpha_of, pace_of, loads
        self.i, self.d, self.paced, self.free_at = 0, 0, False, env.now

    def resume(self, _event=None) -> None:
        """Go on from where the engine waited, until it must wait again or is done."""
        env, prog = self.env, self.prog
        while self.i < len(prog):
            m = prog[self.i]
            if not self.paced:
                deps, d = m.deps, self.d
                while d < len(deps):
                    # not processed yet: look again once it is (a Readiness answers with its
                    # first event not yet processed, so it is looked at again until all are)
                    waiting = deps[d].callbacks
                    if waiting is not None:
                        waiting.append(self.resume)
                        self.d = d
                        return
                    d += 1
                self.paced = True
                if self.free_at > env.now:
                    env.timeout(self.free_at - env.now).callbacks.append(self.resume)
                    return
            alpha = self.alpha_of(m.src, m.dst) if m.alpha is None else m.alpha
            bw = self.pace_of(m.src, m.dst)
            if bw and id(m) in self.loads:  # (without a pace the engine waits for its arrival)
                _load(env, self.fabric, m, alpha, self.label)
            else:
                send_after(env, self.fabric, m, alpha, self.label, self.finish)
            self.i, self.d, self.paced = self.i + 1, 0, False
            if bw:
                self.free_at = env.now + m.nbytes / (bw * m.share)
            else:
                m.done.callbacks.append(self.resume)
                return
        # the end a process would schedule (nothing waits on it)
        succeed_at(env, env.event(), env.now)


def _load(env, fabric, m: Msg, alpha: float, label: str) -> None:
    """Send ``m`` as a load ``alpha`` from now: its flow, and no event of its arrival."""
    if alpha > 0:
        env.timeout(alpha).callbacks.append(lambda _event: fabric.load(m.src, m.dst, m.nbytes, label))
    else:
        fabric.load(m.src, m.dst, m.nbytes, label)


def send_after(env, fabric, m: Msg, alpha: float, label: str, finish: dict[str, float]) -> None:
    """Put ``m`` on ``fabric`` ``alpha`` from now; its arrival raises ``finish`` of both ends
    and fires ``m.done``."""

    def start(_event=None) -> None:
        fabric.transfer(m.src, m.dst, m.nbytes, label).callbacks.append(
            lambda _event: _arrived(env, m, finish)
        )

    if alpha > 0:
        env.timeout(alpha).callbacks.append(start)
    else:
        start()


def land(env, m: Msg, delay: float, finish: dict[str, float]) -> None:
    """``m``, its bytes carried, arrives ``delay`` from now (:func:`send_after`'s arrival)."""
    env.timeout(delay).callbacks.append(lambda _event: _arrived(env, m, finish))


def _arrived(env, m: Msg, finish: dict[str, float]) -> None:
    reach(finish, m, env.now)
    m.done.succeed(env.now)


def reach(finish: dict[str, float], m: Msg, t: float) -> None:
    """Raise ``finish`` of both ends of ``m`` to ``t``, its arrival."""
    if finish.get(m.src, 0.0) < t:
        finish[m.src] = t
    if finish.get(m.dst, 0.0) < t:
        finish[m.dst] = t


def resume_engine(env, fabric, prog: Sequence[Msg], at: int, free_at: float, pace_of, label, finish) -> None:
    """Run the engine ``prog`` from its message ``at`` on, as :func:`start` does from its
    first, its port free from ``free_at`` (a ring split back into messages mid-way,
    :mod:`.merged_ring`); every message from ``at`` on carries its own ``alpha``."""
    sender = _Sender(env, fabric, prog, None, pace_of, label, finish)
    sender.i, sender.free_at = at, free_at
    call_soon(env, sender.resume)
