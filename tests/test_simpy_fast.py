"""clustersim.simpy_fast against a real SimPy Environment: these fail when an upgrade of
SimPy changes the private layout the engine's and the packet fabric's fast paths rely on
(queue entries ``(time, priority, eid, event)``, the ``_eid`` counter, the clock, and how
``step()`` reads ``_ok``/``_value``/``callbacks``), or when the installed SimPy is outside
the range ``setup.cfg`` pins."""

from __future__ import annotations

import configparser
from heapq import heappop, heappush
from pathlib import Path

import simpy
from packaging.specifiers import SpecifierSet
from simpy.events import Event

from clustersim.simpy_fast import (
    EVENT,
    FIRE,
    NORMAL,
    TIME,
    URGENT,
    Fired,
    Succeeded,
    call_soon,
    event_ids,
    event_queue,
    scheduled_count,
    set_now,
    succeed_at,
)


class _Mark(Succeeded):
    """A Succeeded event that records, when SimPy processes it, its name and the time."""

    def __init__(self, env, name, log):
        self.env, self.name = env, name
        self.callbacks = [lambda ev: log.append((ev.name, ev.env.now))]


def test_queue_entries_are_time_priority_eid_event():
    env = simpy.Environment(initial_time=1.0)
    first, second = env.timeout(2.5), env.timeout(2.5)
    urgent = env.event()
    env.schedule(urgent, URGENT, 0.5)
    entries = sorted(event_queue(env))
    assert [len(e) for e in entries] == [4, 4, 4]
    assert [(e[TIME], e[EVENT]) for e in entries] == [(1.5, urgent), (3.5, first), (3.5, second)]
    assert [e[1] for e in entries] == [URGENT, NORMAL, NORMAL]
    assert entries[1][2] < entries[2][2]  # the eid breaks the tie in creation order
    assert scheduled_count(env) == 3  # events numbered 0, 1, 2 so far


def _push(env, at, event):
    """What the engine's run loop and the packet fabric write inline."""
    heappush(event_queue(env), (at, NORMAL, next(event_ids(env)), event))


def test_pushed_event_is_processed_by_step_at_its_absolute_time_in_fifo_order():
    env, log = simpy.Environment(), []
    t_before = env.timeout(0.1 + 0.2)
    t_before.callbacks.append(lambda ev: log.append(("timeout before", env.now)))
    mark = _Mark(env, "pushed", log)
    _push(env, 0.1 + 0.2, mark)  # an absolute time: no now + (at - now) rounding
    t_after = env.timeout(0.1 + 0.2)
    t_after.callbacks.append(lambda ev: log.append(("timeout after", env.now)))
    env.run()
    assert log == [("timeout before", 0.1 + 0.2), ("pushed", 0.1 + 0.2), ("timeout after", 0.1 + 0.2)]
    assert (mark.triggered, mark.processed, mark.ok, mark.value) == (True, True, True, None)
    assert mark.callbacks is None  # step() consumed them


def test_a_popped_entry_and_set_now_advance_the_clock_as_step_does():
    env = simpy.Environment()
    _push(env, 7.25, _Mark(env, "own", []))
    later = env.timeout(9.0)
    at = heappop(event_queue(env))[TIME]
    set_now(env, at)
    assert env.now == 7.25 and env.peek() == 9.0
    env.step()
    assert env.now == 9.0 and later.processed


def test_succeed_at_schedules_a_pending_event_with_value_none():
    env, seen = simpy.Environment(), []
    ev = Event(env)
    ev.callbacks.append(lambda e: seen.append((env.now, e.ok, e.value)))
    succeed_at(env, ev, 3.0)
    assert ev.triggered and not ev.processed
    env.run()
    assert seen == [(3.0, True, None)]


def test_call_soon_runs_where_a_process_started_now_takes_its_first_step():
    env, log = simpy.Environment(), []

    def proc(name):
        log.append(name)
        yield env.timeout(0)

    normal = env.event()
    normal.callbacks.append(lambda ev: log.append("normal event"))
    normal.succeed()  # NORMAL at now, created first
    env.process(proc("process started before"))
    call_soon(env, lambda ev: log.append("call_soon"))
    env.process(proc("process started after"))
    env.run()
    assert log == ["process started before", "call_soon", "process started after", "normal event"]
    assert scheduled_count(env) == 8  # normal, call_soon, 2 × (initialize, timeout, end)


class _Ticks(Fired):
    """Fires ``left`` times, ``step`` apart, re-arming itself; logs each time it fires."""

    def __init__(self, env, step, left, log):
        self.env, self.callbacks, self.step, self.left, self.log = env, FIRE, step, left, log

    def fire(self, now):
        self.log.append(now)
        self.left -= 1
        if self.left:
            _push(self.env, now + self.step, self)


def _ticks_and_a_timeout(env, log):
    _push(env, 0.5, _Ticks(env, 0.5, 4, log))
    env.timeout(1.25).callbacks.append(lambda ev: log.append(("timeout", env.now)))


def test_a_fired_event_re_arms_itself_under_step_and_in_a_loop_that_calls_fire_in_place():
    env, by_step = simpy.Environment(), []
    _ticks_and_a_timeout(env, by_step)
    env.run()
    assert by_step == [0.5, 1.0, ("timeout", 1.25), 1.5, 2.0]  # callbacks are FIRE again each time

    env2, in_place = simpy.Environment(), []
    _ticks_and_a_timeout(env2, in_place)
    queue = event_queue(env2)
    while queue:
        if queue[0][EVENT].callbacks is FIRE:
            entry = heappop(queue)
            set_now(env2, entry[TIME])
            entry[EVENT].fire(entry[TIME])
        else:
            env2.step()
    assert in_place == by_step and env2.now == env.now == 2.0
    assert scheduled_count(env2) == scheduled_count(env) == 5


def test_installed_simpy_is_in_the_range_setup_cfg_pins():
    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).resolve().parent.parent / "setup.cfg")
    (pin,) = [r for r in cfg["options"]["install_requires"].split() if r.startswith("simpy")]
    spec = SpecifierSet(pin.removeprefix("simpy"))
    assert "<" in str(spec), f"{pin}: expected an upper bound (the fast path reads SimPy internals)"
    assert simpy.__version__ in spec, (
        f"SimPy {simpy.__version__} is outside {pin}; check clustersim.simpy_fast"
    )
