"""Issue 19's speed targets, each measured as a ratio in one run.

    python benchmarks/targets.py              # ~2 minutes on the 2-core machine
    python benchmarks/targets.py --unfolded   # also the unfolded GPT-3 175B rates (minutes)

Rows, each with its target and the measured value ÷ the target (≥ 1 is met for "≥"
targets, ≤ 1 for "≤" ones):

* quickstart (packet fabric): SimPy events per CPU-second of the whole ``simulate()``
  and of ``Engine.run`` alone, ÷ a bare SimPy timeout loop's events per CPU-second timed
  right after it (benchmarks/baseline.py); median of ``--repeat`` back-to-back pairs, as
  in benchmarks/engine_speed.py. Target ≥ 0.6.
* GPT-3 175B / 1,024 A100 at scale.py's fast fidelity, folded (and unfolded with
  ``--unfolded``): ops per CPU-second of ``simulate()`` ÷ the bare loop's events per
  CPU-second (target ≥ 1.0; the ops of every GPU, also when an unfolded run is evaluated
  as replicas, compilers/pipeline/replicas.py), and the evaluator that runs it (``auto``: the DAG pass,
  replicated where exact) against the SimPy engine (``simulation.evaluator: des``) — CPU
  time of ``simulate()`` des ÷ auto.
* The issue's sizes (GPT-3 175B folded/unfolded, LLaMA-3-405B-like on 16,384 GPUs
  folded/unfolded, GPT-1T on 3,072 folded) at the fast fidelity: ``simulate()`` CPU seconds
  and peak RSS, each in a fresh process (benchmarks/scale.py).
* ``import clustersim`` and ``clustersim --help`` in a fresh interpreter (target ≤ 0.5 s),
  median of 5, beside an interpreter that imports nothing.
* ``clustersim run scenarios/quickstart.yaml --out DIR`` in a fresh process (target ≤ 3 s
  wall), and with ``--plots`` for context.

The commands' times are CPU seconds of the child (user + system), with wall seconds beside
them: on an idle machine a one-core process's wall time is its CPU time, and the CPU time
stays put when other jobs load the machine.

CPU rates use ``time.process_time``; the machine is shared and its speed drifts, so read
the ratios of a pair, not absolute rates.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import clustersim as cs
from clustersim.resolve import resolve
from clustersim.simulate import build_engine

sys.path.insert(0, str(Path(__file__).parent))
from baseline import bare_simpy_rate  # noqa: E402, I001
from scale import FAST, gpt3_175b, in_subprocess, llama3_405b  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def row(what: str, value: float, unit: str, target: float, at_least: bool, note: str = "") -> None:
    sign = "≥" if at_least else "≤"
    met = value >= target if at_least else value <= target
    print(
        f"  {what:<46} {value:9.3f} {unit:<4} target {sign} {target:<5g} "
        f"÷ target {value / target:6.2f} {'✓' if met else '✗'}  {note}"
    )


def cpu(fn) -> tuple[float, object]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def engine_run_rate(sc) -> float:
    """SimPy events per CPU-second of ``Engine.run`` alone (the quickstart's fabric), on the
    engine ``simulate()`` builds (``build_engine``: its NCCL protocols, compute scales)."""
    job = resolve(sc)
    engine, _ = build_engine(job, cs.compile_scenario(sc))
    t, _ = cpu(engine.run)
    return engine.events / t


def quickstart_events(repeat: int) -> None:
    sc = cs.load_scenario(QUICKSTART)
    whole, alone = [], []
    for _ in range(repeat):
        t, res = cpu(lambda: cs.simulate(sc, progress=False))
        events = res.summary["sim_events"]
        whole.append(events / t / bare_simpy_rate(events))
        alone.append(engine_run_rate(sc) / bare_simpy_rate(events))
    print(f"quickstart ({events:,} SimPy events, {res.summary['network']} fabric), median of {repeat} pairs:")
    row("events/CPU-s ÷ bare loop, whole simulate()", statistics.median(whole), "×", 0.6, True)
    row("events/CPU-s ÷ bare loop, Engine.run alone", statistics.median(alone), "×", 0.6, True)


def gpt3(fold: bool, repeat: int) -> None:
    raw = gpt3_175b(fold)
    sc = {
        k: cs.load_scenario({**raw, "simulation": {**raw["simulation"], "evaluator": k}})
        for k in ("auto", "des")
    }
    rates, speedups = [], []
    for _ in range(repeat):
        t_auto, res = cpu(lambda: cs.simulate(sc["auto"], progress=False))
        ops = int((res.spans["kind"] != "link").sum())  # every GPU's ops, replicated or not
        rates.append(ops / t_auto / bare_simpy_rate(200_000))
        t_des, _ = cpu(lambda: cs.simulate(sc["des"], progress=False))
        speedups.append(t_des / t_auto)
    label = "folded" if fold else "unfolded"
    print(
        f"GPT-3 175B / 1,024 A100, {label} ({ops:,} ops; {res.summary['evaluator'][:40]}…), median of {repeat}:"
    )
    row("ops/CPU-s of simulate() ÷ bare loop events/CPU-s", statistics.median(rates), "×", 1.0, True)
    print(f"  {'the SimPy engine vs auto (des ÷ auto CPU)':<46} {statistics.median(speedups):9.2f} ×")


#: (label, scenario, CPU s target, peak RSS GiB target or None): the issue's sizes
def sizes() -> list[tuple[str, dict, float, float | None]]:
    from clustersim.scenario import read_yaml

    one_t = read_yaml(ROOT / "scenarios" / "validation" / "megatron-2021-gpt-1t.yaml")
    one_t["simulation"] = {**one_t.get("simulation", {}), **FAST, "fold": True}
    unfolded_405b = llama3_405b()
    unfolded_405b["simulation"] = {**unfolded_405b["simulation"], "fold": False}
    return [
        ("GPT-3 175B / 1,024 A100 folded", gpt3_175b(True), 0.1, None),
        ("GPT-3 175B / 1,024 A100 unfolded", gpt3_175b(False), 5.0, 1.0),
        ("LLaMA-3-405B-like / 16,384 H100 folded", llama3_405b(), 0.5, None),
        ("LLaMA-3-405B-like / 16,384 H100 unfolded", unfolded_405b, 120.0, 8.0),
        ("GPT-1T / 3,072 A100 folded", one_t, 0.5, None),
    ]


def size_rows() -> None:
    """``simulate()`` CPU seconds and the process's peak RSS, each case in a fresh process
    (benchmarks/scale.py ``in_subprocess``: the imports are outside the timing), at the fast
    fidelity."""
    print("simulate() of the issue's sizes at the fast fidelity, a fresh process each:")
    for label, raw, cpu_target, rss_target in sizes():
        r = in_subprocess(raw)
        row(f"{label}, CPU", r["cpu_s"], "s", cpu_target, False, f"({r['wall_s']:.2f} s wall, {r['folded']})")
        if rss_target is not None:
            row(f"{label}, peak RSS", r["rss_gib"], "GiB", rss_target, False)


def child_times(cmd: list[str], repeat: int) -> tuple[float, float]:
    """Median (wall s, CPU s) of running ``cmd`` in a fresh process; the CPU time (user +
    system, from ``getrusage``) is what the wall time is on an idle machine for a process
    that uses one core, and stays put when other jobs share the machine."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def startup() -> None:
    py = [sys.executable, "-c"]
    w, c = child_times([*py, "pass"], 5)
    print(
        f"start-up of a fresh interpreter, median of 5 (one that imports nothing: {c:.3f} s CPU, {w:.2f} s wall):"
    )
    help_ = "import sys; from clustersim.cli import main; sys.argv = ['clustersim', '--help']; main()"
    for what, code in (("import clustersim", "import clustersim"), ("clustersim --help", help_)):
        w, c = child_times([*py, code], 5)
        row(what, c, "s", 0.5, False, f"CPU ({w:.2f} s wall)")


def cli_out() -> None:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "clustersim.cli", "run", str(QUICKSTART), "--out", out, "--quiet"]
        print(
            "clustersim run scenarios/quickstart.yaml --out DIR, CPU s of the command (wall s in brackets):"
        )
        w, c = child_times(cmd, 3)
        row("--out (pictures off, the default)", c, "s", 3.0, False, f"({w:.2f} s wall) median of 3")
        w, c = child_times([*cmd, "--plots"], 1)
        row("--out --plots", c, "s", 3.0, False, f"({w:.2f} s wall) one run, for context")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--unfolded",
        action="store_true",
        help="also the unfolded GPT-3 175B rates, with its SimPy run (minutes)",
    )
    args = ap.parse_args()
    quickstart_events(args.repeat)
    gpt3(True, args.repeat)
    if args.unfolded:
        gpt3(False, 1)
    size_rows()
    startup()
    cli_out()


if __name__ == "__main__":
    main()
