"""The one place that reaches into SimPy's private state, for the engine's and the packet
fabric's fast paths.

SimPy keeps its pending events in ``Environment._queue``, a heapq list of entries
``(time, priority, eid, event)``: ``eid`` comes from the counter ``Environment._eid`` and
breaks ties between equal (time, priority) in creation (FIFO) order; ``Environment._now``
is the clock, set by ``step()`` to the time of the entry it pops. An event that has
succeeded carries ``_ok = True`` and its ``_value``; ``step()`` calls its ``callbacks``
and sets them to None. Two hot loops use this directly, each to save a Python frame and
an allocation per op or per chunk-hop:

* the engine's run loop (:mod:`clustersim.engine.interpreter`) arms one
  :class:`Succeeded` event per lane at an absolute time, and pops those events itself
  (``heappop(queue)``, reading entries at :data:`TIME` and :data:`EVENT`) instead of
  letting ``step()`` call them back;
* the packet fabric (:mod:`clustersim.network.packet`) schedules its chunk-hop events
  (:class:`Fired`: the engine's loop calls their ``fire`` in place of ``step()``, and
  ``fire`` goes on with the chunk-hops at the head of the queue), and with
  :func:`succeed_at` a message's end, at absolute times (no ``now + (at − now)`` rounding).

Both get the queue and the eid counter from here (:func:`event_queue`,
:func:`event_ids`) and push entries ``(at, NORMAL, next(ids), event)`` inline — the one
piece of the layout written outside this module, because a function call there costs
3–6 % of the engine's time per op (a Python frame, 40–100 ns, against ≈ 1.6 µs per
event). Nothing else in clustersim reads or writes SimPy's underscored names. This
layout has been the same from SimPy 3.0 to 4.1; ``setup.cfg`` pins ``simpy>=4.0,<4.2``
(the versions this module was checked against), and ``tests/test_simpy_fast.py`` fails
against a real Environment if the layout or these attributes change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from heapq import heappush

import simpy
from simpy.events import NORMAL, URGENT, Event

__all__ = [
    "EVENT",
    "FIRE",
    "NORMAL",
    "TIME",
    "URGENT",
    "Fired",
    "Succeeded",
    "call_soon",
    "event_ids",
    "event_queue",
    "scheduled_count",
    "set_now",
    "succeed_at",
]

#: index of the time, and of the event, in an entry of SimPy's event queue
TIME, EVENT = 0, 3


class Succeeded(Event):
    """Base of events that have succeeded (value None) from the moment they exist and are
    put on the queue by their owner (an entry ``(at, NORMAL, next(ids), event)``), not
    by ``succeed()``. Subclasses set ``env`` and ``callbacks`` themselves and skip
    ``Event.__init__`` (one frame less per event); ``_ok`` and ``_value`` are read from
    the class."""

    _ok = True
    _value = None


def _fire(event: Fired) -> None:
    event.callbacks = FIRE  # step() cleared it: the event may be pushed again
    event.fire(event.env._now)


#: the callbacks of every :class:`Fired` event: its own ``fire(now)``, nothing else
FIRE = (_fire,)


class Fired(Succeeded):
    """A :class:`Succeeded` event whose one callback is its own :meth:`fire` — the owner's
    bookkeeping, which nothing else listens to. Subclasses set ``callbacks = FIRE`` and
    ``env``; ``callbacks`` is FIRE again when ``fire`` runs, so ``fire`` may push the
    event again (re-arm it) whether ``step()`` or a loop called it. A loop that pops the
    queue itself may, on an entry whose event's ``callbacks is FIRE``, call
    ``event.fire(time)`` in place of ``step()``: the same call, without step's frame.
    ``fire`` may go on to pop and handle the entries after its own at the head of the
    queue, in queue order, that are its own kind; it then sets the clock (:func:`set_now`)
    to the last one's time, so a caller reads ``env.now`` after it."""

    def fire(self, now: float) -> None:
        """Do what this event stands for, at ``now`` (the time of its queue entry), and
        perhaps what the entries of its kind after it do (see the class)."""
        raise NotImplementedError


def event_queue(env: simpy.Environment) -> list:
    """``env``'s heap of pending entries ``(time, priority, eid, event)``; a loop that pops
    it itself must keep it a heap (``heapq``) and set the clock (:func:`set_now`)."""
    return env._queue


def event_ids(env: simpy.Environment) -> Iterator[int]:
    """``env``'s event counter: ``next(ids)`` is the eid of an entry pushed now, which puts
    it after every entry already at its (time, priority)."""
    return env._eid


def succeed_at(env: simpy.Environment, event: Event, at: float) -> None:
    """Succeed ``event`` (value None) and schedule it at the absolute time ``at``, as
    ``event.succeed()`` would at ``now``; its callbacks run when ``env`` reaches ``at``."""
    event._ok, event._value = True, None
    heappush(env._queue, (at, NORMAL, next(env._eid), event))


def call_soon(env: simpy.Environment, callback: Callable[[Event], None]) -> None:
    """Call ``callback(event)`` at the current time, where a process started now would take
    its first step: before the NORMAL events at this time, after the URGENT ones already
    there — one event, where a process costs two (its start and its end)."""
    event = Event(env)
    event.callbacks.append(callback)
    event._ok, event._value = True, None
    env.schedule(event, URGENT)


def set_now(env: simpy.Environment, now: float) -> None:
    """Set ``env``'s clock to ``now``, the time of the entry a loop popped itself."""
    env._now = now


def scheduled_count(env: simpy.Environment) -> int:
    """How many events ``env`` has scheduled so far (SimPy numbers them from 0). It
    advances the counter by one, so call it once, after the run."""
    return next(env._eid)
