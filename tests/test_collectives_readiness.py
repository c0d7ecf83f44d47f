"""A member's readiness is one dependency of a message (collectives/schedule.py): no message
carries more than three, a run reads each event of a readiness a bounded number of times
(not once per message that waits for it), and every algorithm runs to the same bit — finish
times, link spans, events scheduled — as the form it replaced, where each message waited for
every event of its members' readiness in turn."""

from __future__ import annotations

from itertools import chain

import pytest
import simpy

from clustersim.collectives import ALGORITHMS, Group
from clustersim.collectives.algorithm import Options
from clustersim.collectives.schedule import Readiness, all_of, recipe, replay, start
from clustersim.network import DirectFabric
from clustersim.network.base import FabricOptions
from clustersim.network.factory import build_fabric
from clustersim.record import Recorder
from clustersim.simpy_fast import scheduled_count
from clustersim.topology import build_topology

MiB = 1 << 20
#: (hosts, GPUs per host): odd and even groups, one host and several, a 16-member group
SHAPES = ((1, 5), (2, 4), (3, 2), (2, 8))
#: the most deps a message carries: a tree's up-message waits for its readiness and 2 children
MOST_DEPS = 3


def cluster(nodes: int, gpn: int) -> dict:
    return {
        "nodes": nodes,
        "gpus_per_node": gpn,
        "gpu": "H100-SXM5-80GB",  # (a Hopper NVSwitch: nvls has its hardware on one host)
        "pcie": None,
        "topology": {"kind": "fat_tree" if nodes > 1 else "single_node"},
        "intra_node": {"kind": "nvswitch", "bandwidth": 300e9, "latency": 1e-6, "efficiency": 1.0},
        "nic": {"bandwidth": 25e9, "latency": 1e-6, "per_node": 1, "efficiency": 1.0},
    }


class Counted:
    """An event seen through a counter of the reads of its ``callbacks``."""

    __slots__ = ("event", "reads")

    def __init__(self, event, reads: list[int]):
        self.event, self.reads = event, reads

    @property
    def callbacks(self):
        self.reads[0] += 1
        return self.event.callbacks


def flattened(engines) -> None:
    """The form before: each message waits for every event of its deps, one by one."""
    for msg in (m for prog in engines for m in prog):
        msg.deps = tuple(e for d in msg.deps for e in (d.events if type(d) is Readiness else (d,)))


def counted(engines, reads: list[int]) -> None:
    """Every event a message waits for (in a readiness too) counted; a readiness stays shared."""
    seen = {}
    for msg in (m for prog in engines for m in prog):
        deps = []
        for d in msg.deps:
            if type(d) is Readiness:
                if id(d) not in seen:
                    seen[id(d)] = Readiness([Counted(e, reads) for e in d.events])
                deps.append(seen[id(d)])
            else:
                deps.append(Counted(d, reads))
        msg.deps = tuple(deps)


def run(algorithm: str, kind: str, shape: tuple[int, int], network: str, latency: str, form: str):
    """One collective on an idle fabric with its messages' deps in ``form``: finish times,
    link spans, events scheduled, and the build's deps and readiness counts and event reads."""
    env, rec = simpy.Environment(), Recorder()
    members = [f"gpu{i}" for i in range(shape[0] * shape[1])]
    if network == "unpaced":  # no known bandwidth: each engine waits for arrival
        fabric = DirectFabric(env, rec, float("inf"), 1e-6)
    else:
        graph = build_topology(cluster(*shape))
        fabric = build_fabric(network, env, rec, graph, FabricOptions(chunk_size=MiB // 8))
    group = Group(env, fabric, members, {"intra_node": 2e-6, "inter_node": 5e-6}, latency)
    if ALGORITHMS[algorithm].hardware(group.shape(), kind) is not None:
        return None  # links it cannot run on (nvls without a graph's NVSwitch)
    root = members[-1] if kind in ("broadcast", "reduce") else None
    engines, _ = ALGORITHMS[algorithm].build(group, kind, MiB + 3, Options(root=root))
    msgs = [m for prog in engines for m in prog]
    readiness = {id(d): len(d.events) for m in msgs for d in m.deps if type(d) is Readiness}
    size = (max(len(m.deps) for m in msgs), sum(len(m.deps) for m in msgs), sum(readiness.values()))
    reads = [0]
    if form == "flat":
        flattened(engines)
    else:
        counted(engines, reads)
    finish = dict.fromkeys(members, 0.0)
    env.run(start(env, fabric, engines, group.alpha_of, group.pace_of, "c", finish))
    return (finish, rec.spans, scheduled_count(env)), size, reads[0]


def cases(algorithm: str):
    for shape in SHAPES:
        hosts = (shape[1],) * shape[0]
        for kind in sorted(ALGORITHMS[algorithm].kinds - {"barrier"}):  # a barrier is a 0-byte all-reduce
            if ALGORITHMS[algorithm].fits(kind, sum(hosts), hosts) is None:
                yield shape, kind


@pytest.mark.parametrize("network", ["packet", "flow", "unpaced"])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_readiness_is_one_dep_and_runs_as_every_event_waited_for_in_turn(algorithm, network):
    latencies = ("overlapped", "nccl") if algorithm == "ring" else ("overlapped",)  # nccl: a fill gate
    for shape, kind in cases(algorithm):
        for latency in latencies:
            ran = run(algorithm, kind, shape, network, latency, "readiness")
            if ran is None:
                continue
            new, (most, deps, events), reads = ran
            old, *_ = run(algorithm, kind, shape, network, latency, "flat")
            where = (algorithm, kind, shape, network, latency)
            assert new == old, where
            assert most <= MOST_DEPS, where
            # each dep is read when found fired and once per wait for it; a readiness's
            # events are read once each by all its waiters together, plus once per wait
            assert reads <= 2 * deps + 2 * events, where


def test_a_direct_all_reduce_reads_each_readiness_event_a_bounded_number_of_times():
    # its all-gather's n−1 messages from a rank all wait for the n−1 reduce-scatter arrivals
    # at that rank: checked one by one that is (n−1)² reads per rank, with one readiness n−1
    n = 16
    _, (_, deps, events), reads = run("direct", "all_reduce", (2, 8), "flow", "overlapped", "readiness")
    assert events == n * (n - 1) and deps == n * (n - 1)
    assert reads < n * (n - 1) ** 2 / 4


class Fake:
    """An event that has fired once ``callbacks`` is None; it counts the reads."""

    reads = 0

    def __init__(self):
        self.list: list | None = []

    @property
    def callbacks(self):
        Fake.reads += 1
        return self.list


def test_a_readiness_answers_its_first_event_not_fired_and_remembers_those_that_have():
    events = [Fake() for _ in range(50)]
    ready = Readiness(events)
    assert ready.callbacks is events[0].list
    for e in events[:30]:
        e.list = None
    assert ready.callbacks is events[30].list
    for e in events:
        e.list = None
    Fake.reads = 0
    for _ in range(100):
        assert ready.callbacks is None
    assert Fake.reads == 20  # the 20 not yet found fired, once: later checks read none


def test_all_of_keeps_one_event_as_itself_and_flattens_readiness_in_place():
    a, b, c = Fake(), Fake(), Fake()
    assert all_of(()) == () and all_of((None,)) == () and all_of([a]) == (a,)
    (inner,) = all_of((a, None, b))
    (outer,) = all_of((inner, c))
    assert inner.events == (a, b) and outer.events == (a, b, c)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_replay_waits_as_its_build_did(algorithm):
    """A prepared call's later runs are replays of its first build's recipe: every message
    of the replay waits for the same positions as the build's (its recipe is the build's
    recipe), through a deps tuple, a readiness where the build had one — also where a
    message's deps and a readiness gather equal positions."""
    for shape, kind in cases(algorithm):
        env = simpy.Environment()
        members = [f"gpu{i}" for i in range(shape[0] * shape[1])]
        group = Group(env, DirectFabric(env, Recorder(), float("inf"), 1e-6), members, 0.0, "overlapped")
        if ALGORITHMS[algorithm].hardware(group.shape(), kind) is not None:
            continue  # links it cannot run on (nvls: a direct fabric has no NVSwitch)
        root = members[-1] if kind in ("broadcast", "reduce") else None
        engines, _ = ALGORITHMS[algorithm].build(group, kind, MiB + 3, Options(root=root))
        taken = recipe(engines)
        if not taken:  # a build that schedules an event itself is made again, not replayed
            continue
        again = replay(env, taken)
        assert recipe(again) == taken
        for built, made in zip(chain.from_iterable(engines), chain.from_iterable(again)):
            assert type(made.deps) is tuple
            assert [type(d) is Readiness for d in made.deps] == [type(d) is Readiness for d in built.deps]


def test_a_replay_keeps_a_deps_tuple_and_a_readiness_of_the_same_positions_apart():
    # message 2 waits for messages 0 and 1 one by one, message 3 for their readiness: both
    # gather positions (0, 1), and the replay must make a tuple for one, a readiness for the other
    from clustersim.collectives.schedule import Msg

    env = simpy.Environment()
    a, b = Msg(env, "gpu0", "gpu1", 8, ()), Msg(env, "gpu1", "gpu0", 8, ())
    one_by_one = Msg(env, "gpu0", "gpu1", 8, (a.done, b.done))
    gathered = Msg(env, "gpu1", "gpu0", 8, (Readiness([a.done, b.done]),))
    engines = [[a, one_by_one], [b, gathered]]
    taken = recipe(engines)
    again = replay(env, taken)
    assert recipe(again) == taken
    _, first, _, last = chain.from_iterable(again)  # engine order: a, one_by_one, b, gathered
    assert [type(d) for d in first.deps] == [simpy.Event, simpy.Event]
    assert [type(d) for d in last.deps] == [Readiness]
