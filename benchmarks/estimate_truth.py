"""Does the pre-run estimate tell the truth? (issue 38 item 6)

    python benchmarks/estimate_truth.py                   # every shipped scenario
    python benchmarks/estimate_truth.py --only llama      # the scenarios whose file name has "llama"
    python benchmarks/estimate_truth.py --skip 175b,deepseek

For each shipped scenario (scenarios/*.yaml and scenarios/validation/*.yaml, run as shipped:
folded or fast where that is their default) a fresh process estimates the run
(clustersim/resolve/estimate.py, as ``simulate`` does) and then runs it; the table puts
the estimate beside the truth: ops (the Program's; a replicated run: the rows it records),
simulated events (``summary['sim_events']``), CPU seconds of the run and its peak RSS
(read when the run returns: counting the ops compiles the Program again, and a replicated
run's unfolded Program is one ``simulate`` never builds), each with the ratio estimate / actual. The machine's load average is printed with the
table: CPU seconds are the process's own, but a loaded machine still stretches them
(caches, frequency), so the CPU ratio is only meaningful at a load of 2 or less.

:func:`truth` is what tests/test_estimate_truth.py asserts on (events within 2×).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from scale import peak_rss_gib  # noqa: E402


def shipped() -> list[Path]:
    """Every shipped scenario file."""
    return sorted((ROOT / "scenarios").glob("*.yaml")) + sorted(
        (ROOT / "scenarios" / "validation").glob("*.yaml")
    )


def truth(path: Path | str, overrides: dict | None = None) -> dict:
    """Estimate, then run, the scenario at ``path`` in this process: the estimate's ops,
    events, seconds and RSS beside the run's (a multi-job scenario: its jobs' estimates
    summed; a scenario with faults: its first, fault-free configuration, the one run every
    such scenario has; a run evaluated as replicas of its folded Program: the rows it
    records and the folded pass's events, as the estimate counts them)."""
    import clustersim as cs
    from clustersim.compilers import compile_job, mode_of
    from clustersim.multijob import resolve_jobs
    from clustersim.resolve.estimate import estimate
    from clustersim.scenario import MultiJobScenario
    from clustersim.simulate import resolve_scenario, run_job

    sc = cs.load_scenario(path).with_overrides(overrides or {})
    if isinstance(sc, MultiJobScenario):
        jobs = list(resolve_jobs(sc).values())  # each on its placed GPUs (where it folds, it is checked)
        ests = [estimate(job) for job in jobs]
        c0 = time.process_time()
        res = cs.simulate(sc, progress=False)
        cpu, rss = time.process_time() - c0, peak_rss_gib()
        ops, events = sum(len(compile_job(job).ops) for job in jobs), res.summary["sim_events"]
        est = {
            "ops": sum(e.ops for e in ests),
            "events": sum(e.events for e in ests),
            "seconds": sum(e.seconds for e in ests),
            "rss_gib": max(e.rss_bytes for e in ests) / 2**30,
        }
    else:
        one = sc.with_overrides({"faults": [], "recovery": None}) if sc.faults else sc
        job = resolve_scenario(one)
        e = estimate(job, mode_name=mode_of(job).name)
        c0 = time.process_time()
        res = run_job(job)
        cpu, rss = time.process_time() - c0, peak_rss_gib()  # (before counting ops compiles again)
        if e.replicas > 1:  # the rows it records, and the events of the folded pass it evaluates
            ops = len(res.spans)
            events = run_job(resolve_scenario(one.with_overrides({"simulation.fold": True})))
            events = events.summary["sim_events"]
        else:
            ops, events = len(compile_job(job).ops), res.summary["sim_events"]
        est = {"ops": e.ops, "events": e.events, "seconds": e.seconds, "rss_gib": e.rss_bytes / 2**30}
    return {
        "name": Path(path).stem,
        "est": est,
        "ops": ops,
        "events": events,
        "cpu_s": cpu,
        "rss_gib": rss,
    }


def in_subprocess(path: Path, timeout_s: float) -> dict:
    """:func:`truth` in a fresh process (its peak RSS its own), given up after ``timeout_s``."""
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(path)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"name": path.stem, "error": f"not finished in {timeout_s:.0f} s (wall)"}
    if out.returncode:
        return {"name": path.stem, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ratio(est: float, actual: float) -> str:
    return f"{est / actual:5.2f}" if actual else "    -"


def main() -> None:
    ap = argparse.ArgumentParser(description="the pre-run estimate against the run")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--only", help="run only the scenarios whose file name contains this text")
    ap.add_argument("--skip", default="", help="comma-separated texts: skip scenarios whose name has one")
    ap.add_argument("--timeout", type=float, default=300, help="wall seconds per scenario (default 300)")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(truth(args.one)))
        return
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (CPU ratios are fair at load ≤ 2)")
    head = ("ops", "est/act", "events", "est/act", "CPU s", "est/act", "RSS GiB", "est/act")
    print(f"{'scenario':<40} " + " ".join(f"{h:>9}" for h in head))
    skip = [s for s in args.skip.split(",") if s]
    for path in shipped():
        if (args.only and args.only not in path.name) or any(s in path.name for s in skip):
            continue
        r = in_subprocess(path, args.timeout)
        if "error" in r:
            print(f"{r['name']:<40} error: {r['error']}", flush=True)
            continue
        e = r["est"]
        cells = (
            r["ops"],
            _ratio(e["ops"], r["ops"]),
            r["events"],
            _ratio(e["events"], r["events"]),
            f"{r['cpu_s']:.2f}",
            _ratio(e["seconds"], r["cpu_s"]),
            f"{r['rss_gib']:.2f}",
            _ratio(e["rss_gib"], r["rss_gib"]),
        )
        print(f"{r['name']:<40} " + " ".join(f"{c:>9}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
