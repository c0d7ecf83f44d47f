"""``simulate(scenario) -> Result``: resolve → compile → engine → Result.

The scenario is resolved once into a :class:`~clustersim.resolve.Job`; the training mode
that runs it (:mod:`clustersim.compilers`) compiles the Program and contributes its part of
the Result (:mod:`clustersim.trace.assemble`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import simpy

from .compilers import TrainingMode, check_job, compile_job, mode_of, name_cycle
from .compilers.pipeline.context_parallel import rings_checked, unhidden_ring
from .compilers.pipeline.replicas import ReplicatedRun
from .engine.collector import collector_paused
from .engine.dag import choose_evaluator
from .engine.interpreter import Engine
from .engine.network_setup import build_network
from .engine.variability import compute_scales
from .errors import ScenarioError, SimulationStall
from .hardware.comm_contention import contention_rate, copy_rate_across
from .hardware.node_groups import device_memory
from .program import Program
from .progress import Reporter, SimProgress
from .progress import mode as progress_mode
from .record import Recorder
from .resolve import Job, Layout, resolve
from .resolve.estimate import ADVICE_S, Estimate, advice, check_budget
from .resolve.replication import contention_free, replica_obstacle
from .scenario import MultiJobScenario, Scenario, load_scenario
from .trace.assemble import assemble_result
from .trace.result import Result

LOG = logging.getLogger("clustersim")


def device_layout(sc: Scenario) -> Layout:
    """Where each device sits: ``coords(device) -> (stage, dp_rank, tp_rank)`` and ``node``
    (the Job's layout: the uniform Plan, or with ``parallel.stage_replicas`` the per-stage
    ReplicaLayout, whose dp_rank is the device's replica index within its stage)."""
    return resolve(sc).layout


def compile_scenario(sc: Scenario, fold: bool | None = None) -> Program:
    """The checked Program a scenario compiles to (without running it).

    ``fold``: None applies ``simulation.fold``; True folds whenever folding is exact
    (tools that only need one GPU per stage, e.g. the memory estimate)."""
    return compile_job(resolve_scenario(sc), fold)


def export_chakra(
    scenario: Scenario | Program | str | Path | dict[str, Any], folder: str | Path, layers: bool = False
) -> list[Path]:
    """Write the Program of ``scenario`` (a Scenario, a YAML path, a dict, or a Program
    itself) to ``folder`` as Chakra ET files, one per rank, plus ``comm_group.json``
    (:mod:`clustersim.interop.chakra_export`, docs/interop.md); returns the rank files.
    ``model: {kind: trace, chakra: folder}`` reads them back into the same Program.

    A scenario is compiled unfolded (ASTRA-sim replays every rank); a parameter-server,
    multi-job or fault scenario is refused, naming the field that makes it one: Chakra
    traces describe one job's ranks and collectives, with no server, no second job's
    placement and no failure (a Program compiled from such a scenario is still written,
    for clustersim's own round trip).

    ``layers`` (a transformer scenario at ``granularity: layer``): every pass is compiled
    layer by layer and each op labelled with its model layer (``clustersim.layer``), the
    model's per-layer gradient and boundary bytes in each rank's metadata — what
    ``model.replay_pp`` needs to split the trace's stages (:mod:`clustersim.interop.chakra_split`);
    the same iteration as without, in more compute ops."""
    from .interop.chakra_export import export_chakra as write_chakra  # (protobuf: only for this)

    if isinstance(scenario, Program):
        return write_chakra(scenario, folder)
    sc = load_scenario(scenario)
    _exportable(sc)
    if not layers:
        return write_chakra(compile_scenario(sc, fold=False), folder)
    if sc.model.kind != "transformer" or sc.simulation.granularity != "layer":
        field, value = (
            ("model.kind", sc.model.kind)
            if sc.model.kind != "transformer"
            else ("simulation.granularity", "stage")
        )
        raise ScenarioError(
            field,
            value,
            "layer labels are a transformer's passes compiled layer by layer (at granularity: stage a pass is "
            "one op); accepted: a transformer at simulation.granularity: layer, or an export without layers",
        )
    from .interop.chakra_layers import layer_table

    prog = compile_job(check_job(resolve(sc, layers=True)), fold=False)
    return write_chakra(prog, folder, layers=layer_table(sc))


def _exportable(sc: Scenario | MultiJobScenario) -> None:
    """Refuse what a Chakra trace cannot describe (:func:`export_chakra`)."""
    why = "a Chakra trace (ASTRA-sim's input) holds one job's ranks and collectives: "
    if isinstance(sc, MultiJobScenario):
        raise ScenarioError("jobs", f"{len(sc.jobs)} jobs", why + "export each job's scenario on its own")
    if sc.faults or sc.recovery is not None:
        raise ScenarioError(
            "faults", "set", why + "no failures or recovery; export the scenario without them"
        )
    if sc.parallel.parameter_server is not None:
        raise ScenarioError(
            "parallel.parameter_server",
            "set",
            why + "no parameter servers; accepted: all-reduce data parallelism",
        )
    for section in ("rlhf", "generation"):  # runs of many compiled steps, composed above the engine
        if getattr(sc, section) is not None:
            raise ScenarioError(
                section, "set", why + f"one compiled step; export the scenario without its {section} section"
            )


def simulate(scenario: Scenario | Job | str | Path | dict[str, Any], progress: bool | str = "auto") -> Result:
    """Simulate a scenario (a Scenario, a YAML path or a dict, or the checked Job of one,
    :func:`resolve_scenario`) and return its Result.

    ``progress``: show a bar of finished ops on a terminal or in Jupyter (``"auto"``),
    always (True), as periodic log lines on stderr (``"log"``) or never (False); see
    :mod:`clustersim.progress`."""
    if isinstance(scenario, Job):
        return run_job(scenario, progress)
    sc = load_scenario(scenario)
    # (the multi-job and whole-job runners are imported only by the scenarios that need them)
    if isinstance(sc, MultiJobScenario):  # several jobs sharing the cluster (docs/multi_job.md)
        from .multijob import simulate_jobs

        return simulate_jobs(sc, build_engine)
    if sc.faults or sc.recovery is not None:  # a whole job: one run per configuration (docs/faults.md)
        from .faults import simulate_job

        return simulate_job(sc, run_job, progress)
    if sc.rlhf is not None:  # RLHF: each phase a run of its own, on one timeline (docs/rlhf.md)
        from .rlhf import simulate_rlhf

        return simulate_rlhf(sc, run_job, build_engine)
    if sc.generation is not None:  # token generation: a scheduler runs each step (docs/generation.md)
        from .generation import simulate_generation

        return simulate_generation(sc, build_engine)
    with collector_paused():  # resolving too: the Job's costs live as long as the run (engine/collector.py)
        return run_job(resolve_scenario(sc), progress)


def checked(sc: Scenario | MultiJobScenario) -> Scenario | MultiJobScenario | Job:
    """What :func:`simulate` runs of loaded scenario ``sc``, refused where it cannot run:
    the checked Job of a single plain job (:func:`resolve_scenario`); a multi-job or a
    whole-job (faults), RLHF or generation scenario as it is — its runner checks each job (or
    step) as it resolves it."""
    whole = sc.faults or sc.recovery is not None or sc.rlhf is not None or sc.generation is not None
    if isinstance(sc, MultiJobScenario) or whole:
        return sc
    return resolve_scenario(sc)


def resolve_scenario(scenario: Scenario | str | Path | dict[str, Any]) -> Job:
    """The checked Job of a single-job scenario (a Scenario, a YAML path or a dict): resolved
    (:func:`clustersim.resolve.resolve`), then refused by the compiler that would run it
    where it cannot (:func:`clustersim.compilers.check_job`) — what :func:`simulate` does
    before it estimates, compiles or runs anything. The scenario's own field rules ran at
    load (:func:`clustersim.load_scenario`)."""
    return check_job(resolve(load_scenario(scenario)))


def run_job(job: Job, progress: bool | str = False) -> Result:
    """Compile and run a resolved Job, and build its Result (``progress`` as in :func:`simulate`).

    First the run's cost is estimated (:mod:`clustersim.resolve.estimate`): past
    ``simulation.max_events`` / ``max_ops`` it is refused before compiling; when shown, the
    estimate is the first line, with advice when the run would take over a minute (which
    also goes to the ``clustersim`` logger when nothing is shown)."""
    with collector_paused():  # from the estimate (it builds the topology graph) to the Result
        wall0 = time.perf_counter()
        mode = mode_of(job)
        est = check_budget(job, mode.name)  # (priced as replicated where simulate replicates it)
        how = progress_mode(progress)
        report = Reporter(job.name, bar=how == "bar") if how else None
        _announce(job, est, report, warn=progress == "auto", mode_name=mode.name)
        if job.resolved.get("energy") is not None:  # refused before the run, not after it
            from .energy import check_power_rows

            check_power_rows(job.resolved["cluster"])
        engine, evaluator_note = _compile_and_run(job, mode, report, how)
        why = unhidden_ring(job, engine)
        if why is not None:  # a mixed CP ring folded on trust did not hide: unfolded (fold: true refuses)
            job = replace(job, fold_refused=why)
            engine, evaluator_note = _compile_and_run(job, mode, report, how)
        with _phase(report, "building the result"):
            result = assemble_result(job, mode, engine, engine.recorder, time.perf_counter() - wall0)
        result.summary["evaluator"] = evaluator_note
        if job.resolved.get("energy") is not None:  # docs/energy.md
            from .energy import attach_energy

            attach_energy(result, job.resolved["energy"], job.resolved["cluster"])
        return result


def _compile_and_run(job: Job, mode: TrainingMode, report: Reporter | None, how: str | None) -> tuple:
    """Compile ``job`` in ``mode`` and run it on the evaluator that fits; returns that evaluator (the
    engine or the DAG pass, run) and the note saying which it is and why. An unfolded run
    whose twins are exact twins on a contention-free fabric runs its folded Program once
    and reads it as every replica's (:mod:`clustersim.compilers.pipeline.replicas`)."""
    why_not = replica_obstacle(job, mode.name)
    # the DAG pass runs any Program of such a job, and it proves the Program acyclic
    dag = job.simulation.evaluator != "des" and contention_free(job, None)[0]
    with _phase(report, "compiling"):
        prog = compile_job(job, True if why_not is None else None, acyclic=not dag, mode=mode)
    engine, evaluator_note = build_engine(job, prog, checks_rings=rings_checked(job))
    if why_not is None:
        counted = engine.finished_count if how == "log" else None
        with _phase(report, "running", counted, len(prog.ops)), _cycles_named(job, prog, mode):
            engine.run()
        run = ReplicatedRun(engine, job.plan)
        return (
            run,
            f"dag ×{run.twins} replicas (each stage's tp × dp twins evaluated once; {evaluator_note[5:]}",
        )
    if not job.fold.enabled and evaluator_note.startswith("dag"):
        evaluator_note += f"; not replicated: {why_not}"
    bar = SimProgress(len(prog.ops), desc=job.name) if how == "bar" and isinstance(engine, Engine) else None
    if bar is not None:
        bar.attach(engine.env, engine.finished_count)
    counted = engine.finished_count if how == "log" else None  # (a bar counts for itself)
    try:
        with _phase(report, "running", counted, len(prog.ops)), _cycles_named(job, prog, mode):
            engine.run()
    finally:
        if bar is not None:
            bar.close()
    if bar is not None:
        engine.events -= bar.events  # the bar's own wake-ups are not simulated events
    return engine, evaluator_note


@contextlib.contextmanager
def _cycles_named(job: Job, prog: Program, mode: TrainingMode):
    """A stalled run raises the ProgramError naming its Program's cycle, as compiling
    would have, if there is one (compiling leaves cycles to the DAG pass), else the stall."""
    try:
        yield
    except SimulationStall:
        name_cycle(job, prog, mode)
        raise


def build_engine(
    job: Job, prog: Program, gpus: int | None = None, checks_rings: bool = False
) -> tuple[Any, str]:
    """The evaluator (SimPy engine, or the DAG pass where exact) of ``prog`` on ``job``'s
    fabric, ready to run (its records: ``.recorder``), and the summary's ``evaluator`` note.
    ``gpus``: the devices with a GPU's memory capacity (default the Job's GPUs; a multi-job
    run: all of the cluster's); ``checks_rings``: whether the engine keeps when its folded
    ring sends' hops land, to check a CP ring of mixed hops folded on trust
    (:func:`~clustersim.compilers.pipeline.context_parallel.rings_checked`)."""
    env, rec = simpy.Environment(), Recorder()
    fabric = build_network(job, env, rec)
    capacity = device_memory(job.cluster, prog.num_devices, job.num_gpus if gpus is None else gpus)
    cl = job.cluster
    evaluator, evaluator_note = choose_evaluator(job, prog)  # the DAG pass where exact (engine/dag.py)
    engine = evaluator(
        prog,
        env,
        fabric,
        rec,
        capacity,
        alpha=cl.collective_alpha,
        collective_latency=cl.collective_latency,
        algorithms=job.simulation.collectives,
        comm_compute_slowdown=cl.comm_compute_slowdown,
        collective_model=job.simulation.collective_model,
        compute_scale=compute_scales(job, prog),
        protocols=cl.collective_protocols,
        comm_contention=contention_rate(cl),
        # every GPU the engine runs (a multi-job run's whole cluster): device // GPUs per node
        domains=[g // cl.gpus_per_node for g in range(job.num_gpus if gpus is None else gpus)],
        copy_across=copy_rate_across(cl),
    )
    if checks_rings:
        engine.ring_landed = {}
    return engine, evaluator_note


def _phase(report: Reporter | None, what: str, done=None, total: int | None = None):
    return report.phase(what, done, total) if report is not None else contextlib.nullcontext()


def _announce(job: Job, est: Estimate, report: Reporter | None, warn: bool, mode_name: str) -> None:
    """The estimate line (shown runs), with advice for a run estimated over a minute — which
    a run silent by default (``progress="auto"`` off a terminal) logs as a warning, so no
    long run starts unannounced; ``progress=False`` (a sweep's rows) stays silent."""
    tips = advice(job, est, mode_name) if est.seconds > ADVICE_S else []
    line = f"estimated {est.line()}"
    if tips:
        line += f"; faster: {'; '.join(tips[:3])}"
    if report is not None:
        report.note(line)
    elif tips and warn:
        LOG.warning("%s: %s", job.name, line)


__all__ = ["simulate", "build_engine", "compile_scenario", "device_layout", "export_chakra", "run_job"]
