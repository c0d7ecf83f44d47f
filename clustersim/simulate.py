"""``simulate(scenario) -> Result``: scenario → plan and costs → Program → engine → Result."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import simpy

from . import metrics
from .coarsen import coarsen
from .engine.dag import choose_evaluator
from .engine.interpreter import Engine
from .engine.network_setup import build_network
from .engine.variability import compute_scales
from .faults import simulate_job
from .hardware.node_groups import describe, device_gpus, device_memory
from .parallel.fold import FoldDecision, can_fold, decide_fold, representative
from .parallel.hetero import ReplicaWork, needs_replica_work, replica_work
from .parallel.plan import Plan
from .planner import resolve_partition
from .program import Program
from .progress import SimProgress, wanted
from .record import Recorder
from .scenario import Scenario, load_scenario
from .schedules import SCHEDULES, compile_pipeline, update_staleness
from .schedules.compression import compression_of
from .schedules.inference import arrival_times, compile_inference
from .schedules.parameter_server import parameter_server_program
from .schedules.replicated import ReplicaLayout, compile_replicated
from .trace.ps_metrics import harmonic_period, ps_summary
from .trace.requests import request_metrics, split_requests
from .trace.result import Result, spans_frame
from .trace.throughput import throughput_metrics
from .trace.waits import wait_table
from .workload.memory_model import memory_columns
from .workload.stage_cost import chunk_costs

GIB = 2**30


def device_layout(sc: Scenario) -> Plan | ReplicaLayout:
    """Where each device sits: ``coords(device) -> (stage, dp_rank, tp_rank)`` and ``node``.

    The uniform Plan, or with ``parallel.stage_replicas`` the per-stage ReplicaLayout
    (dp_rank = the device's replica index within its stage)."""
    if sc.parallel.stage_replicas is not None:
        return ReplicaLayout(sc.parallel.stage_replicas, sc.cluster.gpus_per_node)
    return Plan.of(sc)


def compile_scenario(sc: Scenario, fold: bool | None = None) -> Program:
    """The checked Program a scenario compiles to (without running it).

    ``fold``: None applies ``simulation.fold``; True folds whenever folding is exact
    (tools that only need one GPU per stage, e.g. the memory estimate)."""
    return _compile(sc, decide_fold(sc).enabled if fold is None else fold and can_fold(sc))[0]


def _compile(sc: Scenario, fold: bool) -> tuple[Program, list[ReplicaWork] | None]:
    """:func:`compile_scenario`'s Program (folded if ``fold``, a decision already checked),
    and the work each data-parallel replica was compiled with (None when replicas do not
    differ, :func:`needs_replica_work`)."""
    if sc.parallel.parameter_server is not None:
        return _finish(sc, parameter_server_program(sc)), None
    plan = Plan.of(sc)
    chunks = plan.pp * sc.parallel.virtual_stages
    partition = resolve_partition(sc, chunks)
    costs = chunk_costs(sc, chunks, partition)
    schedule = SCHEDULES[sc.parallel.schedule]
    replicas = replica_work(sc, plan, schedule, partition) if needs_replica_work(sc) else None
    if sc.training.mode == "inference":
        times = arrival_times(sc.training.arrival, sc.num_microbatches * plan.dp, sc.simulation.seed)
        prog = compile_inference(plan, costs, sc.num_microbatches, times, replicas)
    elif sc.parallel.stage_replicas is not None:
        prog = compile_replicated(
            schedule, device_layout(sc), costs, sc.num_microbatches, sc.simulation.iterations
        )
    else:
        prog = compile_pipeline(
            schedule,
            plan,
            costs,
            sc.num_microbatches,
            sc.simulation.iterations,
            fold=fold,
            compression=compression_of(sc.parallel.gradient_compression, sc.cluster),
            activations=compression_of(sc.parallel.activation_compression, sc.cluster),
            replicas=replicas,
        )
    return _finish(sc, prog), replicas


def _finish(sc: Scenario, prog: Program) -> Program:
    """Check ``prog``, then coarsen it when ``simulation.granularity`` is ``stage``."""
    prog.check()
    return coarsen(prog) if sc.simulation.granularity == "stage" else prog


def simulate(scenario: Scenario | str | Path | dict[str, Any], progress: bool | str = "auto") -> Result:
    """Simulate a scenario (a Scenario, a YAML path or a dict) and return its Result.

    ``progress``: show a bar of finished ops on a terminal or in Jupyter (``"auto"``),
    always (True) or never (False); see :mod:`clustersim.progress`."""
    sc = load_scenario(scenario)
    if sc.faults or sc.recovery is not None:  # a whole job: one run per configuration (docs/faults.md)
        return simulate_job(sc, simulate, progress)
    wall0 = time.perf_counter()
    fold = decide_fold(sc)
    prog, replicas = _compile(sc, fold.enabled)
    env, rec = simpy.Environment(), Recorder()
    fabric = build_network(sc, env, rec)
    capacity = device_memory(sc.cluster, prog.num_devices)
    cl = sc.cluster
    evaluator, evaluator_note = choose_evaluator(sc, prog)  # the DAG pass where exact (engine/dag.py)
    engine = evaluator(
        prog,
        env,
        fabric,
        rec,
        capacity,
        alpha=cl.collective_alpha,
        algorithms=sc.simulation.collectives,
        comm_compute_slowdown=cl.comm_compute_slowdown,
        collective_model=sc.simulation.collective_model,
        compute_scale=compute_scales(sc, prog),
    )
    bar = SimProgress(len(prog.ops), desc=sc.name) if wanted(progress) and evaluator is Engine else None
    if bar is not None:
        bar.attach(env, engine.finished_count)
    try:
        engine.run()
    finally:
        if bar is not None:
            bar.close()
    if bar is not None:
        engine.events -= bar.events  # the bar's own wake-ups are not simulated events
    wall = time.perf_counter() - wall0
    result = build_result(sc, engine, rec, wall, replicas, fold)
    result.summary["evaluator"] = evaluator_note
    return result


def build_result(
    sc: Scenario,
    engine: Engine,
    rec: Recorder,
    wall_s: float,
    replicas: list[ReplicaWork] | None,
    fold: FoldDecision,
) -> Result:
    """Assemble the Result tables and summary from what the run recorded; ``replicas``: the
    per-replica work the Program was compiled with (its micro-batch counts are reported);
    ``fold``: whether it was folded."""
    plan, layout = Plan.of(sc), device_layout(sc)
    spans = spans_frame(engine.program, rec)
    inference = sc.training.mode == "inference"
    n_it = sc.simulation.iterations
    if inference:  # the "iteration" is serving every request: from t = 0 to the last one's end
        requests, spans = split_requests(spans, layout)
        window = (0.0, float(requests["end_s"].max()))
    else:
        requests = None
        window = metrics.iteration_window(spans)
    if not inference and not SCHEDULES[sc.parallel.schedule].flush and n_it > 1:
        # flush-free schedules overlap iterations: report the period between the ends of two
        # iterations, before the final drain when there are three or more (docs/schedules.md)
        k = n_it - 2 if n_it >= 3 else n_it - 1
        window = (metrics.iteration_window(spans, k - 1)[1], metrics.iteration_window(spans, k)[1])
    t0, t1 = window
    iter_time = t1 - t0
    ps = sc.parallel.parameter_server is not None
    if ps:  # workers run at their own pace: the harmonic mean of their periods (docs/metrics.md)
        ps_entries, ps_workers = ps_summary(spans)
        iter_time = harmonic_period(ps_workers["period_s"])
    parts = metrics.device_breakdown(spans, window).set_index("device")
    bubbles = 1.0 - parts["compute"]
    comp = spans[spans["lane"] == "compute"]
    busy_all = comp.groupby("device")["end_s"].sum() - comp.groupby("device")["start_s"].sum()
    makespan = float(spans["end_s"].max())
    gpus = device_gpus(sc.cluster)
    rows = []
    for dev in range(layout.num_devices):
        stage, dp_rank, tp_rank = layout.coords(dev)
        rep = representative(plan, dev) if fold.enabled else dev  # a folded GPU shows its twin's row
        name = f"gpu{rep}"
        rows.append(
            {
                "device": f"gpu{dev}",
                "node": layout.node(dev),
                "gpu": gpus[dev],
                "stage": stage,
                "tp_rank": tp_rank,
                "dp_rank": dp_rank,
                "busy_fraction": float(busy_all.get(name, 0.0)) / makespan if makespan > 0 else 0.0,
                "bubble_fraction": bubbles.get(name, 1.0),
                "peak_memory_bytes": engine.memory.peak[rep],
                "memory_capacity_bytes": engine.memory.capacity[rep],
                "oom": engine.memory.oom(rep),
            }
        )
    devices = pd.DataFrame(rows)
    if ps:
        devices = devices.join(ps_workers, on="device")
    oom_hint = ""
    if sc.model.kind != "synthetic" and not inference:  # real models: memory by kind, and why it does not fit
        cols, oom_hint = memory_columns(sc, devices, engine.program, SCHEDULES[sc.parallel.schedule])
        for key, values in cols.items():
            devices[key] = values
    stage_bubble = devices.groupby("stage")["bubble_fraction"].mean()
    samples = sc.training.global_batch
    summary = {
        "name": sc.name,
        "iteration_time_s": iter_time,
        "samples_per_s": samples / iter_time if iter_time > 0 else float("inf"),
        **throughput_metrics(sc, iter_time),
        "bubble_fraction": float(stage_bubble.mean()),
        "bubble_fraction_max": float(stage_bubble.max()),
        "exposed_comm_fraction": float(parts["exposed_comm"].mean()) if len(parts) else 0.0,
        "peak_memory_gib": float(devices["peak_memory_bytes"].max()) / GIB,
        "oom": bool(devices["oom"].any()),
        **({"oom_hint": oom_hint} if oom_hint else {}),
        "num_gpus": layout.num_devices,
        "tp": plan.tp,
        "pp": plan.pp,
        "dp": plan.dp,
        **({"stage_replicas": list(sc.parallel.stage_replicas)} if sc.parallel.stage_replicas else {}),
        "schedule": sc.parallel.schedule,
        "num_microbatches": sc.num_microbatches,
        **(
            {"microbatches_per_replica": [r.microbatches for r in replicas]}
            if sc.parallel.dp_split != "even"
            else {}
        ),
        **({"gpus": describe(sc.cluster)} if sc.cluster.node_groups is not None else {}),
        "weight_staleness_max": _max_staleness(engine.program),
        **(request_metrics(requests) if inference else {}),
        **({"ps_mode": sc.parallel.parameter_server.mode, **ps_entries} if ps else {}),
        "iterations": sc.simulation.iterations,
        "network": sc.simulation.network,
        "folded": fold.note,
        "sim_events": engine.events,
        "wall_time_s": wall_s,
    }
    memory = pd.DataFrame.from_records(rec.memory, columns=["device", "time_s", "allocated_bytes"])
    memory["device"] = memory["device"].map(dict(enumerate(engine.program.device_names)))
    return Result(
        summary,
        spans,
        devices,
        memory,
        sc.resolved(),
        requests=requests,
        waits=partial(wait_table, engine.program, rec.ops),
    )


def _max_staleness(prog: Program) -> int:
    st = update_staleness(prog)
    return int(st["staleness"].max()) if len(st) else 0


__all__ = ["simulate", "compile_scenario", "device_layout"]
