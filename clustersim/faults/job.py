"""``simulate_job``: the Result of a scenario with ``faults`` / ``recovery``.

The Result is the first configuration's own (spans, devices, memory of one simulated
iteration window), with ``res.job`` (the timeline, one row per segment) and goodput
fields added to ``res.summary`` (``sim_events`` and ``wall_time_s`` then count every
configuration's run). Each configuration is simulated once, fault-free.
"""

from __future__ import annotations

import time

import networkx as nx
import pandas as pd

from ..compilers import check_job
from ..errors import ScenarioError
from ..resolve import Job, resolve
from ..topology import build_topology
from ..topology.graph import gpu_names
from ..topology.registry import build_site, no_link_reason, remove_failed_links
from .config import Config, scenario_of
from .fleet import simulate_fleet
from .replan import replan
from .state import checkpoint_bytes
from .timeline import COLUMNS, JobModel, JobTimeline


def simulate_job(sc, run_job, progress=False):
    """Simulate every configuration the job of ``sc`` runs in and lay the job out.

    ``run_job(job, progress=…) -> Result`` runs one fault-free configuration, resolved (it
    is :func:`clustersim.simulate.run_job`, handed in because the simulate layer sits above
    this package: it calls here for scenarios with faults)."""
    if sc.recovery is not None and sc.recovery.failures is not None:  # drawn at rates
        return simulate_fleet(sc, run_job, progress)
    wall0 = time.perf_counter()
    check_fault_links(sc)
    runs: dict[Config, object] = {}
    jobs: dict[Config, Job] = {}
    cuts: dict[tuple, set[int]] = {}

    def cut(cfg: Config, link: tuple[str, str]) -> set[int]:
        if (cfg, link) not in cuts:
            cuts[cfg, link] = cut_off(sc, cfg, link)
        return cuts[cfg, link]

    def run(cfg: Config):
        if cfg not in runs:
            jobs[cfg] = check_job(resolve(scenario_of(sc, cfg)))
            res = run_job(jobs[cfg], progress=progress)
            if runs and res.summary["oom"]:
                raise ScenarioError(
                    "recovery.policy",
                    sc.recovery.policy,
                    f"after a re-plan to {cfg.label()} the "
                    f"GPUs cannot hold the model ({res.summary.get('oom_hint', 'out of memory')})",
                )
            runs[cfg] = res
        return runs[cfg]

    start = Config(
        phys=tuple(range(sc.cluster.nodes)),
        dp=sc.dp,
        failed_links=tuple(tuple(link) for link in sc.cluster.failed_links),
    )
    first = run(start)
    rec = sc.recovery
    ckpt = checkpoint_bytes(jobs[start])
    model = JobModel(
        iteration_time=lambda cfg: run(cfg).summary["iteration_time_s"],
        replan=lambda cfg, nodes, field, value: replan(sc, cfg, nodes, field, value),
        cut_off=cut,
        checkpoint_write_s=ckpt / rec.storage_bandwidth,
        checkpoint_read_s=ckpt / rec.storage_bandwidth,
        gpus_per_node=sc.cluster.gpus_per_node,
    )
    job = pd.DataFrame(JobTimeline(rec, sc.faults, model, start, sc.cluster.nodes).run(), columns=COLUMNS)
    job["iteration"] = job["iteration"].astype("Int64")  # None on checkpoint, failure, restart… rows
    first.job = job
    first.scenario = sc.resolved()
    first.summary["sim_events"] = sum(r.summary["sim_events"] for r in runs.values())
    first.summary["wall_time_s"] = time.perf_counter() - wall0
    first.summary.update(
        goodput_summary(
            job,
            sc.training.global_batch,
            first.summary["samples_per_s"],
            ckpt,
            applied=int((job["kind"].isin(["failure", "join", "reroute"])).sum()),
        )
    )
    return first


def goodput_summary(
    job: pd.DataFrame, samples_per_iteration: int, samples_per_s: float, ckpt_bytes: float, applied: int
) -> dict:
    """Goodput fields of the summary (docs/faults.md), all read off the timeline rows."""
    dur = job["end_s"] - job["start_s"]
    job_time = float(job["end_s"].max()) if len(job) else 0.0
    useful = int(job["useful"].sum())
    goodput = useful * samples_per_iteration / job_time if job_time > 0 else float("inf")
    return {
        "job_time_s": job_time,
        "useful_iterations": useful,
        "goodput_samples_per_s": goodput,
        "goodput_fraction": goodput / samples_per_s if samples_per_s else None,
        "lost_work_s": float(dur[job["lost"]].sum()),
        "checkpoint_time_s": float(dur[(job["kind"] == "checkpoint") & ~job["lost"]].sum()),
        "restart_time_s": float(dur[job["kind"] == "restart"].sum()),
        "replan_time_s": float(dur[job["kind"] == "replan"].sum()),
        "migration_time_s": float(dur[job["kind"] == "migration"].sum()),
        "checkpoint_bytes": ckpt_bytes,
        "faults_applied": applied,
    }


def cut_off(sc, cfg: Config, link: tuple[str, str]) -> set[int]:
    """Physical nodes whose GPUs ``link``'s failure cuts off from the rest (the part with
    the most GPUs, ties: the one with GPU 0, stays); empty if it only re-routes."""
    cluster = sc.cluster.model_copy(update={"nodes": cfg.nodes, "failed_links": []}).model_dump()
    g = build_site(cluster, "cluster")
    remove_failed_links(g, [*cfg.failed_links, link])
    gpus = set(gpu_names(g))
    parts = sorted(
        (sorted(int(n[3:]) for n in comp if n in gpus) for comp in nx.strongly_connected_components(g)),
        key=lambda p: (-len(p), p[:1]),
    )
    parts = [p for p in parts if p]
    gpn = sc.cluster.gpus_per_node
    return {cfg.phys[gpu // gpn] for part in parts[1:] for gpu in part}


def check_fault_links(sc) -> None:
    """Every ``link_fail`` must name a link of the healthy cluster (both ends linked) that
    neither ``cluster.failed_links`` nor another ``link_fail`` already takes down."""
    g = build_topology(sc.cluster.model_copy(update={"failed_links": []}).model_dump())
    down = {frozenset(link): f"cluster.failed_links[{i}]" for i, link in enumerate(sc.cluster.failed_links)}
    for k, f in enumerate(sc.faults):
        if f.kind != "link_fail":
            continue
        if not (g.has_edge(*f.link) or g.has_edge(*f.link[::-1])):
            raise ScenarioError(f"faults[{k}].link", list(f.link), no_link_reason(g))
        cable = frozenset(f.link)
        if cable in down:
            raise ScenarioError(
                f"faults[{k}].link",
                list(f.link),
                f"the link is already down ({down[cable]}); a link fails once",
            )
        down[cable] = f"faults[{k}]"


__all__ = ["simulate_job", "goodput_summary", "cut_off", "check_fault_links"]
