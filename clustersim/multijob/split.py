"""Split a merged multi-job run into one Result per job, and build the combined Result.

A job's Result is what :func:`clustersim.trace.assemble.assemble_result` makes of its own
Program and the records of its own ops and GPUs, with the job's device names
(``gpu0..gpu{n-1}``, job device d = cluster GPU ``placement[d]``): so a job alone on its
links reports exactly what it reports run alone. Link spans are shared by the jobs and go
to the combined Result only.

The combined Result has every op span under its cluster GPU name with a ``job`` column
(a collective's link spans: its job, read off its tag ``job/…``; other link spans: ``""``), one ``devices`` row per placed GPU (with ``job``), the memory timeline of
every GPU, and a summary of the whole run plus ``{job}.{key}`` for every number in each
job's summary (docs/multi_job.md).
"""

from __future__ import annotations

from functools import partial

import pandas as pd

from ..program import Program
from ..record import Recorder
from ..trace.assemble import assemble_result
from ..trace.result import Result, spans_frame
from ..trace.waits import wait_table
from ..viz.rows import natural_key
from .merge import Placed

#: numbers of a job's summary that belong to the whole run (reported once, unprefixed)
_RUN_WIDE = ("sim_events", "wall_time_s")


class _Memory:
    """A job's part of the engine's memory ledger (peaks and capacities of its GPUs)."""

    __slots__ = ("peak", "capacity")

    def __init__(self, ledger, gpus: tuple[int, ...]):
        self.peak = [ledger.peak[g] for g in gpus]
        self.capacity = [ledger.capacity[g] for g in gpus]

    def oom(self, device: int) -> bool:
        return self.peak[device] > self.capacity[device]


class _JobRun:
    """What :func:`assemble_result` reads of a finished engine, for one job of a merged run."""

    __slots__ = ("program", "memory", "events")

    def __init__(self, program: Program, memory: _Memory, events: int):
        self.program, self.memory, self.events = program, memory, events


def job_result(job, mode, program: Program, where: Placed, engine, rec: Recorder, wall_s: float) -> Result:
    """The Result of one job of a merged run, in the job's own device names (module docstring)."""
    local = {g: d for d, g in enumerate(where.gpus)}
    mine = Recorder()
    first = where.ops.start
    mine.ops = [(i - first, s, e) for i, s, e in rec.ops if i in where.ops]
    mine.memory = [(local[d], t, b) for d, t, b in rec.memory if d in local]
    run = _JobRun(program, _Memory(engine.memory, where.gpus), engine.events)
    return assemble_result(job, mode, run, mine, wall_s)


def combined_result(
    sc, merged: Program, placed: list[Placed], results: dict[str, Result], engine, rec, wall_s, note
):
    """The whole run's Result (module docstring); ``res.jobs`` = ``results``."""
    owner = {f"gpu{g}": p.name for p in placed for g in p.gpus}
    ours = Recorder()  # every job op (not the start waits) and every link span
    ours.ops = [r for r in rec.ops if any(r[0] in p.ops for p in placed)]
    ours.spans = rec.spans
    spans = spans_frame(merged, ours)
    tag_job = spans["name"].str.partition("/")[0]  # a collective's link spans carry its tag, ``job/…``
    links = (spans["lane"] == "link") & tag_job.isin(list(results))
    spans["job"] = spans["device"].map(owner).fillna("").where(~links, tag_job)
    per_node = sc.cluster.gpus_per_node
    tables = []
    for p in placed:
        table = results[p.name].devices.copy()
        table["device"] = [f"gpu{g}" for g in p.gpus]
        table["node"] = [g // per_node for g in p.gpus]
        table.insert(1, "job", p.name)
        tables.append(table)
    devices = pd.concat(tables, ignore_index=True)
    devices = devices.iloc[sorted(range(len(devices)), key=lambda i: natural_key(devices["device"][i]))]
    memory = pd.DataFrame.from_records(rec.memory, columns=["device", "time_s", "allocated_bytes"])
    memory["device"] = memory["device"].map(dict(enumerate(merged.device_names)))
    sums = {name: r.summary for name, r in results.items()}
    gpus = {name: s["num_gpus"] for name, s in sums.items()}
    summary = {
        "name": sc.name,
        "jobs": list(results),
        "num_jobs": len(results),
        "iteration_time_s": max(s["iteration_time_s"] for s in sums.values()),
        "bubble_fraction": sum(s["bubble_fraction"] * gpus[n] for n, s in sums.items()) / sum(gpus.values()),
        "peak_memory_gib": max(s["peak_memory_gib"] for s in sums.values()),
        "oom": any(s["oom"] for s in sums.values()),
        "num_gpus": sum(gpus.values()),
        "makespan_s": float(spans["end_s"].max()),
        **{
            f"{name}.{key}": value
            for name, s in sums.items()
            for key, value in s.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in _RUN_WIDE
        },
        "network": sc.simulation.network,
        "evaluator": note,
        "sim_events": engine.events,
        "wall_time_s": wall_s,
    }
    return Result(
        summary,
        spans,
        devices.reset_index(drop=True),
        memory,
        sc.resolved(),
        waits=partial(wait_table, merged, ours.ops),
        jobs=results,
    )
