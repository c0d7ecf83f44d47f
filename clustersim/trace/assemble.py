"""Assemble a run's Result: the generic tables and summary, plus the training mode's part.

Every run reports the same per-device rows (coordinates, busy and bubble fractions,
memory) and headline fields; the mode that compiled the Job contributes its window,
iteration time, summary fields and device columns (:class:`clustersim.compilers.ModeReport`).
Metric definitions: :mod:`.metrics` and ``docs/metrics.md``.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from .. import metrics
from ..engine.collector import collector_paused
from ..hardware.comm_contention import contention_rate, copy_rate_across
from ..hardware.datasheets import datasheets
from ..hardware.interference import deepep_sms_for, interference_model, nccl_ctas_for
from ..hardware.node_groups import describe, device_gpus
from ..metrics import COMM_KINDS
from ..program import COMPUTE
from ..record import Recorder
from ..resolve import Job
from .result import Result, spans_frame
from .throughput import throughput_metrics
from .versions import update_staleness
from .waits import wait_table

GIB = 2**30


@collector_paused()  # the tables' many small objects would each wake it over the live Program
def assemble_result(job: Job, mode, engine, rec: Recorder, wall_s: float) -> Result:
    """The Result of ``engine``'s finished run of ``job``, compiled by training ``mode``."""
    prog = engine.program
    replicated = (
        getattr(engine, "memory_frame", None) is not None
    )  # clustersim/compilers/pipeline/replicas.py
    report = mode.report(engine.spans if replicated else spans_frame(prog, rec), job)
    spans, window, iter_time = report.spans, report.window, report.iteration_time_s
    parts = _breakdown(engine, spans, window) if replicated else metrics.device_breakdown(spans, window)
    parts = parts.set_index("device")
    devices = _devices(job, engine, spans, parts)
    if report.devices is not None:
        devices = devices.join(report.devices, on="device")
    cols, oom_hint = mode.memory_table(job, devices, prog)  # memory by kind, and why it does not fit
    for key, values in cols.items():
        devices[key] = values
    stage_bubble = devices.groupby("stage")["bubble_fraction"].mean()
    plan = job.plan
    summary = {
        "name": job.name,
        "iteration_time_s": iter_time,
        "samples_per_s": job.training.global_batch / iter_time if iter_time > 0 else float("inf"),
        **throughput_metrics(job, iter_time, spans),
        "bubble_fraction": float(stage_bubble.mean()),
        "bubble_fraction_max": float(stage_bubble.max()),
        "exposed_comm_fraction": float(parts["exposed_comm"].mean()) if len(parts) else 0.0,
        **{
            f"exposed_{k}_fraction": float(parts[f"exposed_{k}"].mean()) if len(parts) else 0.0
            for k in COMM_KINDS
        },
        **(_interference(spans, window, iter_time) if job.parallel.tp_comm_overlap else {}),
        **_nccl_interference(engine, rec, window),
        **_comm_interference(engine, rec, window),
        **_interference_model(job),
        **_host_bound(job),
        "peak_memory_gib": float(devices["peak_memory_bytes"].max()) / GIB,
        "oom": bool(devices["oom"].any()),
        **({"oom_hint": oom_hint} if oom_hint else {}),
        "num_gpus": job.layout.num_devices,
        "tp": plan.tp,
        "pp": plan.pp,
        "dp": plan.dp,
        **({"cp": plan.cp, "cp_comm_type": job.parallel.cp_comm_type} if plan.cp > 1 else {}),
        "schedule": job.parallel.schedule,
        "num_microbatches": job.num_microbatches,
        **(
            {"microbatches_per_replica": [r.microbatches for r in job.replicas]}
            if job.parallel.dp_split != "even"
            else {}
        ),
        **({"gpus": describe(job.cluster)} if job.cluster.node_groups is not None else {}),
        **({"weight_staleness_max": _max_staleness(prog)} if mode.weight_versions else {}),
        **report.summary,
        "iterations": job.simulation.iterations,
        "network": job.simulation.network,
        "folded": job.fold.note,
        "sim_events": engine.events,
        "wall_time_s": wall_s,
    }
    if replicated:
        memory = engine.memory_frame
    else:
        memory = pd.DataFrame.from_records(rec.memory, columns=["device", "time_s", "allocated_bytes"])
        memory["device"] = memory["device"].map(dict(enumerate(prog.device_names)))
        if job.fold.enabled:  # the twins hold only their static memory: the timeline is the simulated GPUs'
            simulated = {
                f"gpu{r}"
                for r in set(
                    job.plan.representatives(
                        job.layout.coords_of(np.arange(job.layout.num_devices))[0]
                    ).tolist()
                )
            }
            memory = memory[memory["device"].isin(simulated)].reset_index(drop=True)
    return Result(
        summary,
        spans,
        devices,
        memory,
        job.resolved,
        requests=report.requests,
        waits=(lambda: engine.waits(wait_table(prog, rec.ops)))
        if replicated
        else partial(wait_table, prog, rec.ops),
    )


def _interference(spans: pd.DataFrame, window: tuple[float, float], iter_time: float) -> dict:
    """``interference_fraction`` (:func:`metrics.interference_fraction`) and
    ``interference_tp_s`` (the same in seconds of the ``iter_time`` s iteration: what TE's SM
    margin cost the GEMMs beside TP overlap's userbuffers) where a run has interference ops,
    else nothing. Asked only of TP-overlap runs: the name scan costs ~0.3 µs a span, 30 % of
    an unfolded 175B run's CPU."""
    share = metrics.interference_fraction(spans, window)
    return {"interference_fraction": share, "interference_tp_s": share * iter_time} if share else {}


def _host_bound(job: Job) -> dict:
    """``host_bound_s``: per GPU (mean over the pipeline's stages), the seconds of an
    iteration its compute stream waits for the host that issues its kernels — each chunk's
    wait per micro-batch (:attr:`~clustersim.workload.stage_cost.StageCost.host_wait`) times
    the micro-batches; nothing where the host never holds a GPU back (or no model is priced)."""
    costs = job.costs.get(job.cluster.gpu) if job.costs else None
    wait = sum(c.host_wait for c in costs or ())
    if not wait:
        return {}
    return {"host_bound_s": wait * job.num_microbatches / job.plan.pp}


def _lost_per_gpu(engine, rec: Recorder, window: tuple[float, float], attr: str, compute: bool) -> float:
    """The engine's per-op lost seconds ``attr`` of the ops starting inside ``window``, per
    GPU: over the GPUs that computed (``compute``) or those the counted ops ran on; 0.0
    where the engine counted none."""
    lost_by_op = getattr(engine, attr, None)
    if not lost_by_op:
        return 0.0
    t0, t1 = window
    ops = engine.program.ops
    lost = sum(lost_by_op.get(i, 0.0) for i, start, _ in rec.ops if t0 <= start < t1)
    if compute:
        gpus = {ops[i].device for i, _, _ in rec.ops if ops[i].kind == COMPUTE}
    else:
        gpus = {ops[i].device for i in lost_by_op}
    return lost / len(gpus)


def _nccl_interference(engine, rec: Recorder, window: tuple[float, float]) -> dict:
    """``interference_nccl_s``: per GPU (mean over the GPUs that computed), the seconds its
    compute ops starting inside ``window`` lost running at 1/``comm_compute_slowdown`` beside
    NCCL collectives (the engine's count, :class:`clustersim.engine.interpreter.Interpreter`);
    nothing where no compute was slowed."""
    lost = _lost_per_gpu(engine, rec, window, "slowed_s", compute=True)
    return {"interference_nccl_s": lost} if getattr(engine, "slowed_s", None) else {}


def _comm_interference(engine, rec: Recorder, window: tuple[float, float]) -> dict:
    """``interference_comm_s``: per GPU (mean over the GPUs its collectives ran on), the
    seconds the collectives starting inside ``window`` ran past the link's time because their
    kernels' SMs copy no faster (DeepEP on ``Buffer.num_sms``, :mod:`clustersim.hardware.comm_sms`);
    nothing where none was."""
    lost = _lost_per_gpu(engine, rec, window, "comm_slowed_s", compute=False)
    return {"interference_comm_s": lost} if getattr(engine, "comm_slowed_s", None) else {}


def _interference_model(job: Job) -> dict:
    """``interference_model``: which model priced each kind's interference (where any is on)."""
    cl = job.cluster
    if cl.comm_compute_slowdown == 1.0:
        return {}
    custom = cl.custom_gpu is not None and cl.custom_gpu.name == cl.gpu
    sheet = None if custom else datasheets().get(cl.gpu)
    sms = (cl.custom_gpu.sms or 0) if custom else (sheet.sms if sheet else 0)
    ctas = 0 if custom else nccl_ctas_for(cl, cl.gpu)
    flex = not custom and job.parallel.moe_token_dispatcher == "flex" and job.parallel.ep > 1
    deepep = deepep_sms_for(cl, cl.gpu) if flex else 0
    return {
        "interference_model": interference_model(
            sms,
            cl.comm_compute_slowdown,
            job.parallel.tp_comm_overlap,
            ctas,
            deepep,
            contention_rate(cl),
            copy_rate_across(cl),
        )
    }


def _breakdown(run, spans: pd.DataFrame, window: tuple[float, float]) -> pd.DataFrame:
    """:func:`metrics.device_breakdown` of a replicated run (clustersim/compilers/pipeline/replicas.py):
    computed over the representatives' rows only — a twin's spans are its
    representative's, so its row is too, to the bit — and copied to every GPU, in the
    order the spans first show them (as the breakdown's own rows are)."""
    reps = metrics.device_breakdown(spans[run.on_representative], window).set_index("device")
    names = np.array(run.program.device_names, dtype=object)
    order = run.first_seen
    parts = reps.loc[names[run.representative[order]]].reset_index(drop=True)
    parts.insert(0, "device", names[order])
    return parts


def _devices(job: Job, engine, spans: pd.DataFrame, parts: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU of the job (a folded GPU shows its representative's row), built
    column by column: coordinates from the layout's arrays, each GPU's values taken from
    its representative's."""
    layout, n = job.layout, job.layout.num_devices
    stage, dp_rank, tp_rank = layout.coords_of(np.arange(n))
    rep = job.plan.representatives(stage) if job.fold.enabled else np.arange(n)
    rep_names = [f"gpu{r}" for r in rep.tolist()]
    comp = spans[spans["lane"] == "compute"]
    busy_all = comp.groupby("device")["end_s"].sum() - comp.groupby("device")["start_s"].sum()
    makespan = float(spans["end_s"].max())
    busy = busy_all.reindex(rep_names, fill_value=0.0).to_numpy(dtype=float)
    bubbles = (parts["bubble"] + parts["idle"]).reindex(rep_names, fill_value=1.0)
    mem, reps = engine.memory, rep.tolist()
    oom = {r: mem.oom(r) for r in set(reps)}
    return pd.DataFrame(
        {
            "device": [f"gpu{d}" for d in range(n)],
            "node": layout.node(np.arange(n)),
            "gpu": device_gpus(job.cluster)[:n],
            "stage": stage,
            "tp_rank": tp_rank,
            "dp_rank": dp_rank,
            "busy_fraction": busy / makespan if makespan > 0 else np.zeros(n),
            "bubble_fraction": bubbles.to_numpy(dtype=float),
            "peak_memory_bytes": [mem.peak[r] for r in reps],
            "memory_capacity_bytes": [mem.capacity[r] for r in reps],
            "oom": [oom[r] for r in reps],
        }
    )


def _max_staleness(prog) -> int:
    st = update_staleness(prog)
    return int(st["staleness"].max()) if len(st) else 0
