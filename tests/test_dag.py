"""The DAG evaluator (clustersim/engine/dag.py) against the SimPy engine: on every
contention-free case built from the shipped scenarios, and on random Programs, both give
the same spans, memory samples (same order), peaks, event counts and Results, bit for bit;
and ``contention_free`` names what makes a run need SimPy."""

from __future__ import annotations

from pathlib import Path

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.engine.dag import DagEngine, choose_evaluator, contention_free
from clustersim.engine.interpreter import Engine
from clustersim.engine.lane_core import Calendar, LaneStepper
from clustersim.memory_kinds import StaticMemory
from clustersim.network.base import DirectFabric
from clustersim.program import Program
from clustersim.record import Recorder
from clustersim.simulate import compile_scenario
from tests.conftest import synthetic
from tests.test_program_checks import _cycle, _missing_member

SCENARIOS = Path(__file__).parents[1] / "scenarios"
FAST = {"simulation.network": "analytical", "simulation.collective_model": "analytical"}
STAGE = {**FAST, "simulation.granularity": "stage"}


def _case(base, overrides: dict) -> cs.Scenario:
    sc = cs.load_scenario(SCENARIOS / base if isinstance(base, str) else base)
    return sc.with_overrides(overrides) if overrides else sc


def _frames(res) -> list:
    return [res.spans, res.devices, res.memory, res.requests, res.job]


CASES = {
    # every schedule, on the synthetic pipeline (direct and analytical networks)
    **{
        f"synthetic-{s}": (
            "synthetic-4stage-1f1b.yaml",
            {"parallel.schedule": s, "simulation.iterations": 3, **FAST},
        )
        for s in ("gpipe", "1f1b", "pipedream", "pipedream_2bw")
    },
    "synthetic-zb_h1": (
        "synthetic-4stage-1f1b.yaml",
        {"parallel.schedule": "zb_h1", "model.backward_weight": "1 ms", **FAST},
    ),
    "synthetic-zb_h2": (
        "synthetic-4stage-1f1b.yaml",
        {"parallel.schedule": "zb_h2", "model.backward_weight": "1 ms", **FAST},
    ),
    "synthetic-interleaved-direct": (
        "synthetic-4stage-1f1b.yaml",
        {"parallel.schedule": "interleaved", "parallel.virtual_stages": 2, "simulation.network": "direct"},
    ),
    # TP + PP + DP on a real model: layer and stage granularity, folded, each schedule family
    "quick-layer": ("quickstart.yaml", FAST),
    "quick-direct": (
        "quickstart.yaml",
        {**STAGE, "simulation.network": "direct"},
    ),
    "quick-stage": ("quickstart.yaml", STAGE),
    "quick-fold": ("quickstart.yaml", {**STAGE, "simulation.fold": True}),
    "quick-interleaved": (
        "quickstart.yaml",
        {**STAGE, "parallel.schedule": "interleaved", "parallel.virtual_stages": 2},
    ),
    "quick-2bw": (
        "quickstart.yaml",
        {**STAGE, "parallel.schedule": "pipedream_2bw", "simulation.iterations": 3},
    ),
    "quick-zb_h1": ("quickstart.yaml", {**STAGE, "parallel.schedule": "zb_h1"}),
    "quick-gpipe-zero1": ("quickstart.yaml", {**STAGE, "parallel.schedule": "gpipe", "parallel.zero": 1}),
    "quick-sp-selective": (
        "quickstart.yaml",
        {**STAGE, "parallel.sequence_parallel": True, "training.recompute": "selective"},
    ),
    # per-op factors fixed before the run: noise from the seed, stragglers
    "quick-noise": (
        "quickstart.yaml",
        {**STAGE, "simulation.compute_noise": {"sigma": 0.1}, "simulation.seed": 7},
    ),
    "quick-straggler": ("quickstart.yaml", {**STAGE, "cluster.stragglers": [{"gpus": [3], "slowdown": 1.5}]}),
    # the other shipped scenarios, contention-free
    "edgepipe-inference": ("edgepipe-vit-large-4xT4-1GbE.yaml", FAST),
    "fusionllm-wan": ("fusionllm-gpt-1.3b-48gpu-3sites-wan.yaml", FAST),
    "hap-mixed-gpus": ("hap-mixed-a100-v100.yaml", FAST),
    "megatron-162b-fold": ("megatron-162b-64gpu-search.yaml", {**STAGE, "simulation.fold": True}),
    "vgg16-dp16": ("pipedream-vgg16-16xV100-10GbE.yaml", FAST),
    "vgg16-15-1-replicas": ("pipedream-vgg16-16xV100-10GbE-15-1.yaml", FAST),
    "vgg16-15-1-straggler": ("pipedream-vgg16-10GbE-straggler.yaml", FAST),
    "ps-sync": ("ps-edge-16workers-20mbit.yaml", {**FAST, "simulation.iterations": 3}),
    "ps-async": (
        "ps-edge-16workers-20mbit.yaml",
        {
            **FAST,
            "simulation.iterations": 3,
            "parallel.parameter_server.mode": "async",
            "parallel.parameter_server.staleness": 2,
        },
    ),
    "gpu-fail-job": ("gpt-7.5b-32gpu-gpu-fail.yaml", {}),
    "validation-gpt-18.4b": ("validation/megatron-2021-gpt-18.4b.yaml", {**STAGE, "simulation.fold": "auto"}),
    # synthetic builders: DP replicas folded, inference with Poisson arrivals
    "synthetic-dp2-fold": (
        synthetic(4, 8, dp=2, network="analytical", params=1e8, activation=1e6),
        {"simulation.fold": True, "simulation.collective_model": "analytical"},
    ),
    "inference-poisson": (
        {
            **synthetic(3, 12, 1e-3, 2e-3, network="direct", activation=1e6),
            "training": {
                "global_batch": 12,
                "micro_batch": 1,
                "mode": "inference",
                "arrival": {"process": "poisson", "rate": 800},
            },
        },
        {},
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_dag_and_simpy_give_the_same_result(name):
    base, overrides = CASES[name]
    sc = _case(base, overrides)
    auto = cs.simulate(sc, progress=False)
    des = cs.simulate(sc.with_overrides({"simulation.evaluator": "des"}), progress=False)
    # (an unfolded run whose twins are twins runs as replicas of its folded Program:
    # clustersim/compilers/pipeline/replicas.py, tests/test_replicas.py)
    assert auto.summary["evaluator"].startswith(("dag (contention-free", "dag ×"))
    assert des.summary["evaluator"] == "des (simulation.evaluator: des)"
    if auto.summary["evaluator"].startswith("dag ×"):  # each GPU's memory rows in order (replicas.py)
        auto.memory, des.memory = (
            r.memory.sort_values("device", kind="stable").reset_index(drop=True) for r in (auto, des)
        )
    for a, b in zip(_frames(auto), _frames(des)):
        assert (a is None and b is None) or a.equals(b)
    drop = ("wall_time_s", "evaluator")
    assert {k: v for k, v in auto.summary.items() if k not in drop} == {
        k: v for k, v in des.summary.items() if k not in drop
    }


def _run(cls, prog: Program, fabric_of, capacity, **kw):
    env, rec = simpy.Environment(), Recorder()
    engine = cls(prog, env, fabric_of(env, rec), rec, capacity, **kw)
    engine.run()
    return rec.ops, rec.memory, engine.memory.peak, engine.events, engine.finished_count()


_durations = st.sampled_from([0.0, 0.5e-3, 1e-3, 1e-3, 2e-3])  # repeats and zeros: ties at equal times
_sizes = st.sampled_from([0, 1000, 4000])


@st.composite
def programs(draw):
    """A random acyclic Program on up to 4 devices × 3 lanes: every op's deps are earlier
    ops, a recv comes after its send, a collective's members are added one after another
    (so no rendezvous can close a cycle); memory frees stay within the static bytes."""
    n_dev = draw(st.integers(1, 4))
    prog = Program(n_dev)
    prog.static_memory = [StaticMemory(weights=10**6)] * n_dev
    lanes = ("compute", "send", "recv")
    for _ in range(draw(st.integers(1, 40))):
        n = len(prog.ops)

        def deps(n=n):
            return tuple(sorted(set(draw(st.lists(st.integers(0, n - 1), max_size=3))))) if n else ()

        kind = draw(st.sampled_from(["compute", "compute", "p2p", "collective"]))
        mem = {"mem_alloc": draw(st.sampled_from([0, 0, 100])), "mem_free": draw(st.sampled_from([0, 0, 50]))}
        if kind == "compute":
            dev = draw(st.integers(0, n_dev - 1))
            prog.add(
                dev,
                draw(st.sampled_from(lanes)),
                "compute",
                f"c{n}",
                duration=draw(_durations),
                deps=deps(),
                **mem,
            )
        elif kind == "p2p":
            src, dst = draw(st.integers(0, n_dev - 1)), draw(st.integers(0, n_dev - 1))
            nbytes = draw(_sizes)
            send = prog.add(src, "send", "send", f"s{n}", nbytes=nbytes, deps=deps(), **mem)
            recv = prog.add(dst, "recv", "recv", f"r{n}", nbytes=nbytes, peer=send.id, deps=deps())
            send.peer = recv.id
        else:
            group = tuple(draw(st.permutations(range(n_dev)))[: draw(st.integers(1, n_dev))])
            holders = draw(st.integers(1, len(group)))  # the others are folded away (arrivals)
            nbytes, kind = draw(_sizes), draw(st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]))
            d = deps()
            for dev in group[:holders]:
                prog.add(
                    dev,
                    "comm",
                    "collective",
                    f"ar{n}",
                    nbytes=nbytes,
                    group=group,
                    collective=kind,
                    tag=f"t{n}",
                    arrivals=holders if holders < len(group) else 0,
                    deps=d,
                    **mem,
                )
    prog.check()
    return prog


@settings(max_examples=120, deadline=None)
@given(
    prog=programs(),
    scale=st.lists(st.sampled_from([1.0, 0.5, 1.5]), min_size=160, max_size=160),
    latency=st.sampled_from([0.0, 1e-4]),
    alpha=st.sampled_from([None, 0.0]),
)
def test_random_programs_agree(prog, scale, latency, alpha):
    # zero latency and α make zero-time sends and collectives, and sends and collectives as
    # long as compute ops (1000 B at 1 MB/s = 1 ms): ties, where the order is at stake
    def fabric(env, rec):
        return DirectFabric(env, rec, 1e6, latency)

    kw = {"collective_model": "analytical", "compute_scale": scale[: len(prog.ops)], "alpha": alpha}
    capacity = [10**6 + 500] * prog.num_devices  # some runs go over: oom is read from the peaks
    assert _run(DagEngine, prog, fabric, capacity, **kw) == _run(Engine, prog, fabric, capacity, **kw)


@pytest.mark.parametrize(
    "base, overrides, reason",
    [
        (
            "quickstart.yaml",
            {**STAGE, "simulation.network": "packet"},
            "network 'packet' times sends by what shares their links",
        ),
        (
            "quickstart.yaml",
            {"simulation.network": "flow"},
            "network 'flow' times sends by what shares their links",
        ),
        (
            "quickstart.yaml",
            {**STAGE, "simulation.collective_model": "fabric"},
            "collective_model 'fabric' runs collectives as steps on the network",
        ),
        (
            "quickstart.yaml",
            {**STAGE, "cluster.comm_compute_slowdown": 1.3},
            "comm_compute_slowdown 1.3 couples compute to collectives",
        ),
        (  # degradation windows need collective_model fabric: a pipeline without collectives
            "synthetic-4stage-1f1b.yaml",
            {
                "simulation.network": "analytical",
                "cluster.link_degradations": [
                    {"between": ["gpu0", "nvswitch0"], "factor": 0.5, "start": 0, "end": 1}
                ],
            },
            "link_degradations make a send's time depend on when it starts",
        ),
    ],
)
def test_what_needs_simpy_is_named(base, overrides, reason):
    sc = _case(base, overrides)
    prog = compile_scenario(sc)
    assert contention_free(sc, prog) == (False, reason)
    assert choose_evaluator(sc, prog) == (Engine, f"des ({reason})")
    with pytest.raises(cs.ScenarioError, match=r"simulation\.evaluator.*not contention-free"):
        choose_evaluator(sc.with_overrides({"simulation.evaluator": "dag"}), prog)


def test_programs_without_collectives_or_sends_need_no_analytical_model():
    # a single pipeline stage replica: sends and no collectives, so collective_model does not matter
    sc = _case(
        "synthetic-4stage-1f1b.yaml",
        {"simulation.network": "direct", "simulation.collective_model": "fabric"},
    )
    assert contention_free(sc, compile_scenario(sc)) == (
        True,
        "contention-free: network direct, collective_model fabric",
    )


@pytest.mark.parametrize(
    "stalled, says", [(_cycle, "2 ops unfinished"), (_missing_member, "never arrived: gpu2")]
)
def test_a_stall_is_reported_as_the_engine_reports_it(stalled, says):
    # unchecked Programs (Program.check refuses both): the same SimulationStall text
    prog, reports = stalled(), []
    for cls in (DagEngine, Engine):
        with pytest.raises(cs.SimulationStall) as e:
            _run(
                cls,
                prog,
                lambda env, rec: DirectFabric(env, rec, 1e9, 0.0),
                [10**12] * 3,
                collective_model="analytical",
            )
        reports.append(str(e.value))
    assert reports[0] == reports[1] and says in reports[0]


def test_the_lane_core_takes_its_time_from_one_source():
    # the engine hands the core its SimPy environment, the DAG pass a calendar: one, not both
    for sources in ({}, {"env": simpy.Environment(), "calendar": Calendar()}):
        with pytest.raises(ValueError, match="one source: env or calendar"):
            LaneStepper([], [], [], None, [], lane_type=object, **sources)
