"""The scheduler on one fabric (clustersim.scheduler, docs/scheduler.md): a job alone is its
single-job run to the bit; shared stretches are the multi-job run's times, piecewise; each
policy's start order obeys its rule on random queues; bad input is a ScenarioError."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.scheduler import QueueScenario, schedule
from clustersim.scheduler.drive import drive
from clustersim.scheduler.policies import queue_rank
from tests.test_multi_job import SYNTH  # a 2-layer synthetic model: 1 + 2 ms a layer, 256 MiB

#: four 2-GPU nodes, two per leaf, one spine at 2:1: a job spread over the four nodes
#: crosses both leaf uplinks, so two such jobs share them
CLUSTER = {
    "nodes": 4,
    "gpus_per_node": 2,
    "gpu": "A100-SXM4-80GB",
    "nic": {"per_node": 1, "bandwidth": "100 Gbps", "latency": "2 us"},
    "topology": {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 1, "oversubscription": 2},
}
SIM = {"iterations": 1, "network": "flow"}


def _job(name, dp, iterations, arrival=0.0, policy="packed", priority=0):
    return {
        "name": name,
        "model": dict(SYNTH),
        "training": {"global_batch": dp, "micro_batch": 1},
        "parallel": {"dp": dp},
        "placement": {"policy": policy},
        "iterations": iterations,
        "arrival": arrival,
        "priority": priority,
    }


def _queue(jobs, policy="fifo", **sched):
    return {
        "name": "q",
        "cluster": CLUSTER,
        "simulation": SIM,
        "scheduler": {"policy": policy, **sched},
        "jobs": jobs,
    }


def test_one_job_alone_is_the_single_job_run_to_the_bit():
    single = cs.simulate(
        {
            "name": "a",
            "cluster": CLUSTER,
            "simulation": SIM,
            "model": dict(SYNTH),
            "training": {"global_batch": 4, "micro_batch": 1},
            "parallel": {"dp": 4, "gpus": 4},
        },
        progress=False,
    )
    it = single.summary["iteration_time_s"]
    out = schedule(_queue([_job("a", 4, 7, arrival=3.0)]))
    row = out.jobs.iloc[0]
    assert row["run_time_s"] == 7 * it
    assert row["alone_run_time_s"] == 7 * it
    assert row["end_s"] == 3.0 + 7 * it
    assert row["start_s"] == 3.0 and row["queueing_delay_s"] == pytest.approx(0, abs=1e-12)
    assert row["sharing_slowdown"] == 1.0
    assert list(out.timeline["iteration_time_s"]) == [it]
    assert not row["oom"]
    assert out.timeline["gpus"][0] == (0, 1, 2, 3)


def _shared_times():
    """Each spread job's iteration time alone and when both run (the multi-job run)."""
    both = cs.simulate(
        {
            "name": "two",
            "cluster": CLUSTER,
            "simulation": SIM,
            "jobs": [
                {
                    **{
                        k: v
                        for k, v in _job("a", 4, 1).items()
                        if k in ("name", "model", "training", "parallel")
                    },
                    "placement": {"gpus": [0, 2, 4, 6]},
                },
                {
                    **{
                        k: v
                        for k, v in _job("b", 4, 1).items()
                        if k in ("name", "model", "training", "parallel")
                    },
                    "placement": {"gpus": [1, 3, 5, 7]},
                },
            ],
        },
        progress=False,
    )
    return both.jobs["a"].summary["iteration_time_s"], both.jobs["b"].summary["iteration_time_s"]


def test_overlapping_jobs_run_piecewise_at_the_shared_runs_times():
    shared_a, shared_b = _shared_times()
    out = schedule(_queue([_job("a", 4, 10, 0.0, "spread"), _job("b", 4, 10, 0.2, "spread")]))
    tl = out.timeline.set_index(["job", "start_s"])
    # each job alone on its spread GPUs (the stretch before b arrives, and after a ends)
    alone = {n: tl.loc[n, "iteration_time_s"].iloc[-1 if n == "b" else 0] for n in "ab"}
    assert shared_a > alone["a"]  # the uplinks are shared: a real slowdown
    assert tl.loc[("a", 0.2), "iteration_time_s"] == shared_a
    assert tl.loc[("b", 0.2), "iteration_time_s"] == shared_b
    # a: 0.2 s alone, then shared until b's end or its own; closed form of the pieces
    left_a = 10 - 0.2 / alone["a"]
    end_a = 0.2 + left_a * shared_a
    end_b_shared = 0.2 + 10 * shared_b
    jobs = out.jobs.set_index("job")
    assert end_a <= end_b_shared  # a leaves first (it had a head start)
    assert jobs.loc["a", "end_s"] == pytest.approx(end_a, rel=1e-12)
    left_b = 10 - (end_a - 0.2) / shared_b
    assert jobs.loc["b", "end_s"] == pytest.approx(end_a + left_b * alone["b"], rel=1e-12)
    assert (jobs["sharing_slowdown"] > 1).all()
    # against each alone on its own GPUs: a's 10 iterations took end_a instead of 10 × alone
    assert jobs.loc["a", "sharing_slowdown"] == pytest.approx(end_a / (10 * alone["a"]), rel=1e-12)
    # the timeline names the links each holds: both hold the NICs' and the leaf ↔ spine
    # links (one NIC per node), neither holds the other's GPU links
    la, lb = (set(out.timeline[out.timeline["job"] == n]["links"].iloc[0]) for n in "ab")
    common = la & lb
    assert {"leaf0->spine0", "spine0->leaf1", "node0.nic0->leaf0"} <= common
    assert not any("gpu" in link for link in common)
    assert 0 < out.summary["utilization"] <= 1


def test_easy_backfills_a_short_job_before_a_blocked_head():
    jobs = [
        _job("big", 4, 100, 0.0),
        _job("wide", 8, 5, 0.1),
        _job("short", 2, 5, 0.2),
        _job("long", 2, 1000, 0.3),
    ]
    fifo, easy = schedule(_queue(jobs)), schedule(_queue(jobs, "easy"))
    start = easy.jobs.set_index("job")["start_s"]
    assert start["short"] < start["wide"]  # ends before the shadow time: backfilled
    assert start["long"] > start["wide"]  # would delay the head: not backfilled
    # short runs inside node 2 while big holds nodes 0 and 1: no link shared, no slowdown
    assert easy.jobs.set_index("job")["sharing_slowdown"]["short"] == pytest.approx(1, rel=1e-12)
    # the head starts when it would under FIFO (the stretches differ: floating-point error)
    assert start["wide"] == pytest.approx(fifo.jobs.set_index("job")["start_s"]["wide"], rel=1e-12)


def test_priority_preempts_lower_priority_and_it_resumes_its_whole_iterations():
    jobs = [_job("low", 8, 50, 0.0, priority=0), _job("high", 8, 5, 0.05, priority=5)]
    out = schedule(_queue(jobs, "priority", preemption=True))
    assert [e[1:3] for e in out.events if e[1] in ("preempt", "start")] == [
        ("start", "low"),
        ("preempt", "low"),
        ("start", "high"),
        ("start", "low"),
    ]
    row = out.jobs.set_index("job").loc["low"]
    assert row["preemptions"] == 1 and row["run_time_s"] > row["alone_run_time_s"]


def test_poisson_arrivals_are_seeded():
    raw = _queue(
        [{**_job(n, 2, 3), "arrival": None} for n in "abc"],
        arrivals={"process": "poisson", "mean_interarrival": "1 s"},
    )
    for j in raw["jobs"]:
        del j["arrival"]
    one, two = QueueScenario(raw), QueueScenario(copy.deepcopy(raw))
    assert [j.arrival_s for j in one.jobs] == [j.arrival_s for j in two.jobs]
    other = QueueScenario({**raw, "simulation": {**SIM, "seed": 1}})
    assert [j.arrival_s for j in one.jobs] != [j.arrival_s for j in other.jobs]
    assert schedule(one).jobs.equals(schedule(two).jobs)


def test_trace_file_gives_the_arrivals(tmp_path):
    trace = tmp_path / "arrivals.csv"
    trace.write_text("job,arrival_s\nb,2.5\na,0.5\n")
    raw = _queue([_job("a", 2, 3), _job("b", 2, 3)], arrivals={"trace": str(trace)})
    for j in raw["jobs"]:
        del j["arrival"]
    assert [j.arrival_s for j in QueueScenario(raw).jobs] == [0.5, 2.5]


def _bad(tmp_path):
    ok = [_job("a", 2, 3), _job("b", 2, 3)]
    no_arrival = [{k: v for k, v in j.items() if k != "arrival"} for j in ok]

    def trace_of(text):
        trace = tmp_path / f"t{len(list(tmp_path.iterdir()))}.csv"
        trace.write_text(text)
        return {"arrivals": {"trace": str(trace)}}

    return [
        (_queue(ok, "fifo", preemption=True), "scheduler.preemption", "policy: priority"),
        (_queue(ok, "lifo"), "scheduler.policy", "fifo"),
        (_queue(no_arrival), "jobs[0].arrival", "an arrival time"),
        (
            _queue(ok, arrivals={"process": "poisson", "mean_interarrival": 1}),
            "jobs[0].arrival",
            "no arrival",
        ),
        (
            _queue(no_arrival, arrivals={"process": "poisson"}),
            "scheduler.arrivals.mean_interarrival",
            "mean gap",
        ),
        (_queue(no_arrival, arrivals={}), "scheduler.arrivals", "either trace or process"),
        (
            _queue(no_arrival, arrivals={"process": "poisson", "mean_interarrival": 0}),
            "scheduler.arrivals.mean_interarrival",
            "above 0",
        ),
        (
            _queue(no_arrival, arrivals={"trace": str(tmp_path / "none.csv")}),
            "scheduler.arrivals.trace",
            "existing",
        ),
        (_queue(no_arrival, **trace_of("job,when\na,1\n")), "scheduler.arrivals.trace", "header"),
        (
            _queue(no_arrival, **trace_of("job,arrival_s\na,1\nz,2\n")),
            "scheduler.arrivals.trace",
            "'z' is not",
        ),
        (_queue(no_arrival, **trace_of("job,arrival_s\na,1\na,2\n")), "scheduler.arrivals.trace", "twice"),
        (_queue(no_arrival, **trace_of("job,arrival_s\na,1\n")), "scheduler.arrivals.trace", "'b' has none"),
        (
            _queue(no_arrival, **trace_of("job,arrival_s\na,nan\nb,1\n")),
            "scheduler.arrivals.trace",
            "not a time",
        ),
        (_queue([_job("a", 16, 3)]), "jobs[0].parallel.gpus", "left free"),
        (_queue([_job("a", 2, 0)]), "jobs[0].iterations", "from 1"),
        (_queue([ok[0], ok[0]]), "jobs[1].name", "a name of its own"),
        (_queue([ok[0], {**ok[1], "model": {"kind": "nonsense"}}]), "jobs[1].model.kind", "transformer"),
        (
            _queue([{**ok[0], "placement": {"gpus": [0, 1]}}]),
            "jobs[0].placement.gpus",
            "accepted fields here: policy",
        ),
        (_queue([{**ok[0], "arrival": -1}]), "jobs[0].arrival", "greater than or equal to 0"),
        (
            _queue(ok, "fifo", polcy="easy"),
            "scheduler.polcy",
            "accepted fields here: arrivals, policy, preemption",
        ),
        (
            {**_queue(ok), "cluster": {**CLUSTER, "node_groups": [{"nodes": 4, "gpu": "H100-SXM5-80GB"}]}},
            "cluster.node_groups",
            "one GPU type",
        ),
        (["not", "a", "mapping"], "scenario", "mapping"),
        (
            {**_queue(ok), "cluster": {**CLUSTER, "nic": {"per_node": 4, "bandwidth": "100 Gbps"}}},
            "cluster.nic.per_node",
            "at most gpus_per_node",
        ),
    ]


def test_every_bad_input_is_a_scenario_error_naming_its_field(tmp_path):
    for raw, field, words in _bad(tmp_path):
        with pytest.raises(ScenarioError) as info:
            QueueScenario(raw)
        assert info.value.field.startswith(field), (field, str(info.value))
        assert words in str(info.value), (words, str(info.value))


# --- the policies' rules on random small queues (a stub prices iterations: exact estimates)

JOBS = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 3, 4, 8]),  # GPUs
        st.integers(1, 20),  # iterations
        st.sampled_from([0.0, 0.5, 1.0, 2.5, 4.0, 7.0]),  # arrival
        st.integers(0, 3),  # priority
        st.sampled_from([0.1, 0.25, 1.0]),  # iteration time
        st.sampled_from(["packed", "spread", "per_rail"]),  # placement policy
    ),
    min_size=1,
    max_size=7,
)


def _run(spec, policy, preemption=False):
    jobs = [
        SimpleNamespace(name=f"j{k}", index=k, gpus=g, iterations=n, priority=p, arrival_s=a, placement=where)
        for k, (g, n, a, p, _, where) in enumerate(spec)
    ]
    tau = {f"j{k}": s[4] for k, s in enumerate(spec)}
    trace = drive(jobs, 8, 2, policy, preemption, lambda placed: {n: tau[n] for n in placed})
    return {j.name: j for j in jobs}, trace, tau


def _check_common(jobs, trace, tau):
    """Every job ends, on its GPU count, having run its iterations (more if preempted: the
    iteration in progress is lost); two stretches that overlap in time hold disjoint GPUs."""
    assert {e[2] for e in trace.events if e[1] == "end"} == set(jobs)
    segs = trace.segments
    for name, job in jobs.items():
        mine = [s for s in segs if s.job == name]
        assert all(len(s.gpus) == job.gpus for s in mine)
        run_s, alone_s = sum(s.run_s for s in mine), job.iterations * tau[name]
        if any(e[1] == "preempt" and e[2] == name for e in trace.events):
            assert run_s >= alone_s * (1 - 1e-12)
        else:
            assert run_s == pytest.approx(alone_s, rel=1e-12)
    for i, a in enumerate(segs):
        for b in segs[i + 1 :]:
            if a.start_s < b.end_s - 1e-12 and b.start_s < a.end_s - 1e-12:
                assert not set(a.gpus) & set(b.gpus), (a, b)


def _starts_in_rank_order(jobs, trace, policy):
    """At every start, no waiting job ranks ahead of the one starting."""
    rank = {n: queue_rank(policy, j.priority, j.arrival_s, j.index) for n, j in jobs.items()}
    waiting = set()
    for _, kind, name, _ in trace.events:
        if kind in ("arrive", "preempt"):
            waiting.add(name)
        elif kind == "start":
            assert all(rank[name] <= rank[k] for k in waiting), (name, waiting)
            waiting.remove(name)


@settings(max_examples=100, deadline=None)
@given(JOBS)
def test_fifo_starts_in_arrival_order(spec):
    jobs, trace, tau = _run(spec, "fifo")
    _check_common(jobs, trace, tau)
    _starts_in_rank_order(jobs, trace, "fifo")
    order = [e[2] for e in trace.events if e[1] == "start"]
    assert order == sorted(order, key=lambda n: (jobs[n].arrival_s, jobs[n].index))


@settings(max_examples=100, deadline=None)
@given(JOBS)
def test_easy_never_delays_the_heads_reserved_start(spec):
    jobs, trace, tau = _run(spec, "easy")
    _check_common(jobs, trace, tau)
    reserved, started = {}, {}
    for t, kind, name, detail in trace.events:
        if kind == "reserve":
            reserved.setdefault(name, detail)
        elif kind == "start":
            started[name] = t
    for name, shadow in reserved.items():
        assert started[name] <= shadow + 1e-9 * max(1.0, shadow), (name, started[name], shadow)
    # a job starts ahead of an earlier one only as a backfill: the earliest waiting job
    # (the head) was given a reservation at that instant
    rank = {n: (j.arrival_s, j.index) for n, j in jobs.items()}
    waiting, head_reserved = set(), None
    for t, kind, name, _ in trace.events:
        if kind == "arrive":
            waiting.add(name)
        elif kind == "reserve":
            head_reserved = (t, name)
        elif kind == "start":
            ahead = [n for n in waiting if rank[n] < rank[name]]
            if ahead:
                assert head_reserved == (t, min(waiting, key=rank.get)), (name, ahead, head_reserved)
            waiting.remove(name)


@settings(max_examples=100, deadline=None)
@given(JOBS, st.booleans())
def test_priority_order_and_preemption_only_of_lower_priority(spec, preemption):
    jobs, trace, tau = _run(spec, "priority", preemption)
    _check_common(jobs, trace, tau)
    _starts_in_rank_order(jobs, trace, "priority")
    starts = {(t, n) for t, kind, n, _ in trace.events if kind == "start"}
    for t, kind, victim, by in trace.events:
        if kind == "preempt":
            assert preemption and jobs[by].priority > jobs[victim].priority
            assert (t, by) in starts


def test_the_schedule_command_prints_saves_and_refuses_bad_input(tmp_path, capsys):
    from clustersim.cli import main

    path = tmp_path / "queue.yaml"
    raw = _queue([_job("a", 2, 30, 0.0), _job("b", 8, 2, 0.1, priority=2)], "priority", preemption=True)
    path.write_text(yaml.safe_dump(raw))
    assert main(["schedule", str(path), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split()[:2] == ["job", "gpus"] and "utilization" in printed
    saved = {p.name for p in (tmp_path / "out").iterdir()}
    assert saved == {"jobs.csv", "timeline.csv", "events.csv", "summary.json", "schedule.png"}
    events = (tmp_path / "out" / "events.csv").read_text()
    assert "preempt,a,b" in events
    assert main(["run", str(path)]) == 2  # a queue handed to run: the command that reads it
    assert "run it with `clustersim schedule FILE`" in capsys.readouterr().err
    raw["scheduler"]["preemption"] = "sometimes"
    path.write_text(yaml.safe_dump(raw))
    assert main(["schedule", str(path)]) == 2
    assert capsys.readouterr().err.startswith("error: scheduler.preemption: 'sometimes' is invalid")


def test_the_picture_has_one_bar_per_gpu_and_stretch_and_a_row_per_shared_link():
    out = schedule(_queue([_job("a", 4, 3, 0.0, "spread"), _job("b", 4, 3, 0.001, "spread")]))
    gpus, links = out.plot().axes
    assert sum(len(c.get_paths()) for c in gpus.collections) == sum(len(g) for g in out.timeline["gpus"])
    la, lb = (set(out.timeline[out.timeline["job"] == n]["links"].iloc[0]) for n in "ab")
    assert [t.get_text() for t in links.get_yticklabels()] == sorted(la & lb)


def test_a_job_that_does_not_fit_its_gpus_memory_is_flagged():
    fat = _job("fat", 2, 2)
    fat["model"] = {**fat["model"], "params": "40 GiB"}  # 2 layers × 40 GiB of weights: over 80 GB
    out = schedule(_queue([fat, _job("thin", 2, 2)]))
    assert out.jobs.set_index("job")["oom"].to_dict() == {"fat": True, "thin": False}
