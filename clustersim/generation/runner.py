"""``simulate_generation``: the Result of a scenario with a ``generation`` section.

The scheduler (:mod:`.scheduler`) runs above the engine, as the fault timeline does
(:mod:`clustersim.faults`): for each step it picks the batch, the step is priced
(:meth:`.step_cost.StepModel.costs`), compiled through the compile layer (the ``generation``
mode, :mod:`clustersim.compilers.generation`) and run on the engine over the job's fabric
(TP collectives, pipeline sends); the step lasts from the Program's start to its last op's
end. The engine gains no scheduling logic: each step is a Program of its own. Steps of the
same shape (the same (new, context) pairs and samples) are run once. With ``parallel.dp`` > 1
each replica serves on its own tp × pp GPUs (:mod:`.replicas`); disaggregated, a prefill and
a decode pool do (:mod:`.disaggregate`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import pandas as pd

from ..compilers import check_job, compile_job, mode_of
from ..errors import ScenarioError
from ..metrics import device_breakdown
from ..program import ARRIVAL_LANE
from ..resolve import resolve
from ..trace.result import Result, spans_frame
from ..workload.resolve import resolve_transformer
from ..workload.stage_cost import even_partition
from .disaggregate import pool_scenario, serve_disaggregated
from .host_overhead import check_host_overhead, host_overhead_s
from .kv_cache import kv_cache_of
from .metrics import memory_tables, request_table, step_table, summary_of
from .replicas import dispatch
from .requests import requests_of
from .scheduler import Scheduler
from .step_cost import StepModel, StepSeq, check_generation_model


class StepPricer:
    """Seconds of a generation step of a resolved generation ``job`` on the engine
    (``build_engine(job, prog) -> (evaluator, note)``, :func:`clustersim.simulate.build_engine`)."""

    def __init__(self, sc, job, build_engine):
        self.sc, self.job, self.build_engine = sc, job, build_engine
        cfg = resolve_transformer(sc.model)
        partition = list(job.partition) if job.partition else even_partition(cfg.layers, job.plan.pp)
        self.model = StepModel(sc, partition)
        self.mode = mode_of(job)
        self.cache: dict[tuple, tuple[float, pd.DataFrame]] = {}
        self.order: list[tuple] = []  # the steps priced, in the order they ran
        self.events = 0
        self.host = sc.generation.host_overhead  # the engine's CPU time a step (.host_overhead)

    def __call__(self, seqs: tuple[StepSeq, ...], sampled: int) -> float:
        key = (seqs, sampled)
        if key not in self.cache:
            self.cache[key] = self.run(seqs, sampled)
        self.order.append(key)
        gpu = self.cache[key][0]
        return gpu + host_overhead_s(len(seqs)) if self.host else gpu

    def step_job(self, seqs: tuple[StepSeq, ...], sampled: int):
        """The Job of one step: the scenario's, with the step's chunk costs."""
        costs = self.model.costs(seqs, sampled)
        return replace(self.job, costs={self.job.cluster.gpu: costs}, num_microbatches=1, replicas=None)

    def run(self, seqs: tuple[StepSeq, ...], sampled: int) -> tuple[float, pd.DataFrame]:
        """Compile the step and run it on the engine: its makespan (s) and its spans (the
        arrival lane's zero-length op left out)."""
        job = self.step_job(seqs, sampled)
        prog = compile_job(job, fold=False, mode=self.mode)
        engine, _ = self.build_engine(job, prog)
        engine.run()
        self.events += engine.events
        spans = spans_frame(prog, engine.recorder)
        return max(end for _, _, end in engine.recorder.ops), spans[spans["lane"] != ARRIVAL_LANE]

    def spans(self, starts) -> pd.DataFrame:
        """Every step's spans on the run's clock: the i-th step priced starts at ``starts[i]``."""
        frames = []
        for key, t in zip(self.order, starts):
            frame = self.cache[key][1].copy()
            frame[["start_s", "end_s"]] += t
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)


def check_steps(sc, reqs, price: StepPricer) -> None:
    """Refuse, before it starts, a run whose steps (at most one per output token plus the
    prompts' chunks, preemptions aside) times the ops of a step pass ``simulation.max_ops``."""
    gen = sc.generation
    steps = sum(r.output + -(-r.prompt // gen.max_num_batched_tokens) for r in reqs)
    ops = len(compile_job(price.step_job((StepSeq(1, 1),), 1), fold=False, mode=price.mode).ops)
    budget = sc.simulation.max_ops
    if steps * ops > budget:
        raise ScenarioError(
            "simulation.max_ops",
            budget,
            f"this generation run takes up to {steps:,} steps of {ops} ops each ({steps * ops:,} ops); "
            "serve fewer requests or tokens, or raise simulation.max_ops",
        )


@dataclass
class Pool:
    """GPUs serving one phase (or both): its steps as scheduled and priced, and the index of
    its first GPU in the job (the decode pool of a disaggregated run follows the prefill's)."""

    sched: Scheduler
    price: StepPricer
    name: str
    first_gpu: int = 0


def serve(sc, job, cache, reqs, build_engine, name: str = "all", first_gpu: int = 0) -> Pool:
    """Serve ``reqs`` on one pool of ``job``'s GPUs (a one-replica Job of scenario ``sc``)."""
    price = StepPricer(sc, job, build_engine)
    check_steps(sc, reqs, price)
    sched = Scheduler(reqs, cache, sc.generation, price)
    sched.run()
    return Pool(sched, price, name, first_gpu)


def serve_replicas(sc, dp: int, reqs, build_engine) -> list[Pool]:
    """Serve ``reqs`` on the ``dp`` replicas of scenario ``sc``, each on tp × pp GPUs
    with its own scheduler and KV cache, dispatched by ``generation.dispatch`` (:mod:`.replicas`)."""
    pool_sc = pool_scenario(sc)
    job = resolve(pool_sc)
    cache = kv_cache_of(job, resolve_transformer(sc.model), sc.generation)
    prices = [StepPricer(pool_sc, job, build_engine) for _ in range(dp)]
    check_steps(pool_sc, reqs, prices[0])
    scheds = [Scheduler([], cache, sc.generation, p) for p in prices]
    scheds[0].check(reqs)  # before any step runs
    dispatch(scheds, reqs, sc.generation.dispatch)
    gpus = job.plan.num_devices
    return [Pool(s, p, f"replica{k}", k * gpus) for k, (s, p) in enumerate(zip(scheds, prices))]


def simulate_generation(sc, build_engine) -> Result:
    """Serve the requests of scenario ``sc`` (module doc; disaggregated: :mod:`.disaggregate`);
    ``res.requests`` one row per request, ``res.steps`` one per step, the summary's latency
    and throughput fields (:mod:`.metrics`, docs/generation.md)."""
    wall0 = time.perf_counter()
    check_generation_model(sc)
    check_host_overhead(sc)
    job = check_job(resolve(sc))
    gen = sc.generation
    reqs = requests_of(gen, sc.simulation.seed)
    if gen.disaggregated:
        pools, done, extra = serve_disaggregated(sc, job, reqs, build_engine, serve)
    elif job.plan.dp > 1:
        pools, extra = serve_replicas(sc, job.plan.dp, reqs, build_engine), {}
        done = [s for p in pools for s in p.sched.done]
    else:
        cache = kv_cache_of(job, resolve_transformer(sc.model), gen)
        pools, extra = [serve(sc, job, cache, reqs, build_engine)], {}
        done = pools[0].sched.done
    cache = pools[0].sched.cache
    done = sorted(done, key=lambda q: q.req.index)
    steps = pd.concat(
        [step_table(p.sched.steps, cache).assign(pool=p.name) for p in pools], ignore_index=True
    ).sort_values("start_s", kind="stable", ignore_index=True)
    requests = request_table(done)
    if job.plan.dp > 1 and not gen.disaggregated:  # which replica served each request
        replica_of = {s.req.index: k for k, p in enumerate(pools) for s in p.sched.done}
        requests["replica"] = [replica_of[i] for i in requests["request"]]
    summary = {**summary_of(done, requests, steps, cache), **extra}
    memory, devices, spans = _pool_tables(pools, cache, gen)
    parts = device_breakdown(spans, (0.0, summary["iteration_time_s"]))
    parts["bubble_fraction"] = parts["bubble"] + parts["idle"]
    devices = devices.merge(parts, on="device", how="left")
    devices["oom"] = False  # the KV cache holds what fits beside the weights
    summary.update(
        peak_memory_gib=float(devices["peak_memory_bytes"].max()) / 2**30,
        bubble_fraction=float(devices.groupby("stage")["bubble_fraction"].mean().mean()),
        oom=False,
        num_gpus=job.plan.num_devices,
        tp=job.plan.tp,
        pp=job.plan.pp,
        sim_events=sum(p.price.events for p in pools),
        step_programs=sum(len(p.price.cache) for p in pools),
        wall_time_s=time.perf_counter() - wall0,
    )
    return Result(summary, spans, devices, memory, sc.resolved(), requests=requests, steps=steps)


def _pool_tables(pools: list[Pool], cache, gen) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(memory, devices, spans) of every pool, its GPUs named by their index in the job."""
    memories, devices, spans = [], [], []
    for p in pools:
        steps = step_table(p.sched.steps, cache)
        memory, dev = memory_tables(p.price.job, cache, steps)
        rename = {f"gpu{d}": f"gpu{d + p.first_gpu}" for d in range(p.price.job.plan.num_devices)}
        frames = [memory, dev]
        if len(steps):  # a replica the dispatcher never chose ran no step
            # a step's Program starts once its swaps are done
            frames.append(p.price.spans(steps["start_s"] + steps["swap_bytes"] / (gen.swap_bandwidth or 1.0)))
            spans.append(frames[-1])
        for df in frames:
            df["device"] = df["device"].map(lambda d, r=rename: r.get(d, d))
        memories.append(memory)
        devices.append(dev)
    return (
        pd.concat(memories, ignore_index=True),
        pd.concat(devices, ignore_index=True),
        pd.concat(spans, ignore_index=True).sort_values("start_s", kind="stable", ignore_index=True),
    )
