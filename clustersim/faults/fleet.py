"""``simulate_fleet``: the Result of a scenario whose failures are drawn at rates
(``recovery.failures``, docs/fleet.md).

One iteration of the healthy configuration is simulated by the engine (elastic: also one
of each smaller configuration the job shrinks to); :mod:`.renewal` then draws the job's
failures and restarts at the job level, once per seed. ``res.job`` has one row per
failure (``seed``, ``time_s``, ``component``, ``lost_s``, ``down_s``,
``during_recovery``); ``res.fleet`` is the :class:`~.renewal.FleetJob` (what
:func:`.interval_study.goodput_curve` varies).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from ..compilers import check_job
from ..errors import ScenarioError
from ..resolve import resolve
from ..topology import build_topology
from .config import Config, scenario_of
from .domains import job_units, unit_sizes
from .rates import check_study, job_rates
from .renewal import COLUMNS, FleetJob, simulate
from .replan import new_dp
from .state import checkpoint_bytes, rank_checkpoint_bytes


def simulate_fleet(sc, run_job, progress=False):
    """Simulate the first configuration's iteration, then ``recovery.failures.seeds`` jobs."""
    wall0 = time.perf_counter()
    rec, spec = sc.recovery, sc.recovery.failures
    check_study(spec.study)
    start = Config(phys=tuple(range(sc.cluster.nodes)), dp=sc.dp)
    job0 = check_job(resolve(scenario_of(sc, start)))
    first = run_job(job0, progress=progress)
    runs = {0: first}

    def iteration_time(out: int) -> float:  # elastic: d nodes out of the job
        if out not in runs:
            nodes = sc.cluster.nodes - out
            try:
                dp = new_dp(sc, nodes, "recovery.failures", f"{out} node(s) out of the job")
            except ScenarioError:  # no plan fits: the job waits for a node to return
                return math.inf
            shape = Config(
                phys=tuple(range(dp * sc.parallel.tp * sc.parallel.pp // sc.cluster.gpus_per_node)), dp=dp
            )
            runs[out] = run_job(check_job(resolve(scenario_of(sc, shape))), progress=progress)
        return runs[out].summary["iteration_time_s"]

    fj = fleet_job(sc, job0, first.summary["iteration_time_s"], iteration_time)
    outcomes = [simulate(fj, spec.seed + i) for i in range(spec.seeds)]
    rows = [(spec.seed + i, *r) for i, o in enumerate(outcomes) for r in o.rows]
    first.job = pd.DataFrame(rows, columns=["seed", *COLUMNS])
    first.fleet = fj
    first.scenario = sc.resolved()
    first.summary["sim_events"] = sum(r.summary["sim_events"] for r in runs.values())
    first.summary["wall_time_s"] = time.perf_counter() - wall0
    first.summary.update(fleet_summary(fj, outcomes, sc.training.global_batch, rec.job_iterations))
    first.summary["checkpoint_bytes"] = checkpoint_bytes(job0)
    if "energy_per_step_j" in first.summary:  # an energy section: the job's energy
        first.summary.update(job_energy(first.summary))
    return first


def job_energy(s: dict) -> dict:
    """The job's energy (docs/fleet.md): its running time at the step's facility power,
    its time down at the idle cluster's, over the useful tokens."""
    running = s["job_time_s"] - s["down_time_s"]
    energy = running * s["energy_per_step_j"] / s["iteration_time_s"] + s["down_time_s"] * s["idle_power_w"]
    tokens = s["useful_iterations"] * (s.get("tokens_per_s") or 0.0) * s["iteration_time_s"]
    return {"job_energy_j": energy, "job_energy_per_token_j": energy / tokens if tokens else None}


def fleet_job(sc, job, iteration_s: float, iteration_time=None) -> FleetJob:
    """The :class:`FleetJob` of scenario ``sc`` (its resolved healthy ``job``, whose
    iteration takes ``iteration_s``); ``iteration_time(d)`` is used under ``elastic``."""
    rec, spec = sc.recovery, sc.recovery.failures
    cluster = sc.cluster.model_dump()
    counts, members = job_units(cluster, build_topology(cluster), spec.rack_nodes)
    ckpt = checkpoint_bytes(job)
    snapshot = None
    if spec.checkpoint_write == "async":  # every rank copies its shard at once
        snapshot = float(np.max(rank_checkpoint_bytes(job))) / spec.snapshot_bandwidth
    return FleetJob(
        work_s=rec.job_iterations * iteration_s,
        rates=job_rates(spec, counts),
        interval_s=rec.checkpoint_every * iteration_s if rec.checkpoint_every else math.inf,
        write_s=ckpt / rec.storage_bandwidth,
        snapshot_s=snapshot,
        detection_s=spec.detection_time,
        restart_s=rec.restart_time,
        replacement_s=spec.replacement_time,
        spares=spec.spares,
        repair_s=spec.repair_time,
        replan_s=rec.replan_time,
        iteration_time=iteration_time if rec.policy == "elastic" else None,
        nodes=sc.cluster.nodes,
        takes=unit_sizes(members),
    )


def young_daly(stop_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum checkpoint interval √(2·δ·M) (Young 1974; Daly 2006
    eq. 7's leading term): δ the checkpoint's stop, M the job's mean time between failures."""
    return math.sqrt(2.0 * stop_s * mtbf_s)


def fleet_summary(fj: FleetJob, outcomes, samples_per_iteration: int, iterations: int) -> dict:
    """Means over the seeds of the job-level outcomes, the configured and measured MTBF of
    the job and the Young/Daly interval."""
    total = sum(fj.rates.values())
    mtbf = 1.0 / total if total else math.inf
    job_time = float(np.mean([o.job_time_s for o in outcomes]))
    failures = sum(o.failures for o in outcomes)
    return {
        "job_time_s": job_time,
        "useful_iterations": iterations,
        "goodput_samples_per_s": iterations * samples_per_iteration / job_time if job_time else math.inf,
        "goodput_fraction": float(np.mean([o.goodput_fraction for o in outcomes])),
        "failures": failures / len(outcomes),
        "nodes_taken": sum(r[-1] for o in outcomes for r in o.rows) / len(outcomes),
        "failure_rates_per_h": {c: r * 3600.0 for c, r in sorted(fj.rates.items())},
        "mtbf_configured_s": mtbf,
        "mtbf_measured_s": sum(o.job_time_s for o in outcomes) / failures if failures else math.inf,
        "lost_work_s": float(np.mean([o.lost_s for o in outcomes])),
        "down_time_s": float(np.mean([o.down_s for o in outcomes])),
        "checkpoint_time_s": float(np.mean([o.checkpoint_s for o in outcomes])),
        "checkpoint_stop_s": fj.stop_s,
        "young_daly_interval_s": young_daly(fj.stop_s, mtbf) if fj.stop_s > 0 else None,
    }
