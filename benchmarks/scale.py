"""Scale benchmark: wall time and peak memory of large simulations (issue "Scale").

    python benchmarks/scale.py            # every row of docs/performance.md's table (the unfolded
                                          # 1,024-GPU run takes minutes)
    python benchmarks/scale.py --quick    # skip the unfolded run
    python benchmarks/scale.py --fidelity # README's "Which fidelity do I need?": 16 / 1,024 / 16,384
                                          # GPUs at exact / balanced / fast
    python benchmarks/scale.py --quick --only "(b)" --against /tmp/main   # before → after
    python benchmarks/scale.py --family --sizes 16,64,256,1024   # issue 38's benchmark family
    python benchmarks/scale.py --family --tp-overlap --sizes 64,128,256,512 --against /tmp/main
    python benchmarks/scale.py --accel --sizes 512   # the C accelerator against the pure Python
    python benchmarks/scale.py --family --rail-spines 8 --sizes 256,512 --against /tmp/main

Prints a table:
  (a) GPT-3 175B on 1,024 A100 (DGX-A100 fat tree; TP 8, PP 16, DP 8; batch 1,536, micro-batch 1;
      1F1B; full recompute), one iteration, folded and unfolded;
  (b) a LLaMA-3-405B-like job on 16,384 H100 (TP 8, PP 16, DP 128; batch 2,048), folded;
  (c) wall time against GPU count (64 → 16,384) and against micro-batches per iteration;
  (d) engine events per second against a bare SimPy loop (benchmarks/engine_speed.py).
Every run is a fresh subprocess so its peak RSS is its own. Fidelity for (a)–(c):
``network: analytical``, ``collective_model: analytical``, ``granularity: stage`` — the fastest
that keeps Megatron's Table 1 within its stated error (docs/validation.md).

``--fidelity`` runs the quickstart (16 GPUs), GPT-3 175B (1,024, the balanced scenario) and
(b) (16,384) under each ``simulation.fidelity`` preset, the scenario's own network settings
removed so the preset decides; a run whose pre-run estimate (clustersim/resolve/estimate.py)
is over ``--max-s`` seconds (default 60: where clustersim starts printing advice) is not run
and its estimate is printed instead.

``--family`` runs issue 38's benchmark family: ``scenarios/gpt-7.5b-64xh100-balanced.yaml``
with TP 8, PP 1, DP = GPUs / 8, global batch 8 × DP, micro-batch 1 on a 1:1 fat tree, at
each of ``--sizes`` GPUs (default 16, 64, 256, 1,024, 4,096; the 1,024 and 4,096 runs take
minutes on the project's 2-core machine), each in a fresh process; it prints CPU seconds,
peak RSS and simulated events with the pre-run estimate of each (estimate / actual), and
the growth exponent between successive sizes, log(CPU ratio) / log(GPU ratio).
``--tp-overlap`` runs the family as TP overlap needs it — ``parallel.tp_comm_overlap`` with
sequence parallelism, ``simulation.granularity: layer`` — at ``fidelity: fast`` (issue 38: at
most 10 s CPU each from 64 to 512 GPUs); ``--against DIR`` adds each size's CPU seconds on
the code in ``DIR`` (before → after).

``--rail-spines N`` runs the family on a ``rail`` topology with ``N`` spines beside the same
sizes on the fat tree, each in a fresh process, and prints both CPU seconds and rail ÷ fat
tree (issue 38: at most 1.5); with ``--against DIR`` the ratio on that code too.

``--accel`` times the optional C accelerator (setup.py; the flow model's max-min loops,
clustersim/network/_cmaxmin.c) against the pure-Python path it replaces: the balanced GPT-3
175B scenario and the family at each of ``--sizes``, each run in a fresh process with
``CLUSTERSIM_NO_ACCEL=1`` then without, ``--repeat`` times alternating; it prints the median
CPU seconds of each, accelerated ÷ pure, and whether both gave the same iteration time and
events.

``--counts CASE`` (a family size in GPUs, or ``405b``: (b) at ``balanced``) simulates that one
case in a fresh process and prints the collective calls it runs message by message, by (kind,
algorithm, members, hosts, messages a call sends) with how often each ran, beside the run's
CPU seconds and events: where a run's events come from (calls timed by a closed form — inside
an NVLink domain, of negligible bytes, a ring across hosts that kept its links to itself
(clustersim/collectives/merged_ring.py) — send no message and are not listed).

``--against DIR`` runs every row of the table a second time on the code in ``DIR`` (another
checkout, put first on ``PYTHONPATH``) right before this checkout's run, and adds both runs'
CPU seconds and their ratio to the row; ``--only TEXT`` keeps the rows whose label contains
``TEXT``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

FAST = {"network": "analytical", "collective_model": "analytical", "granularity": "stage"}
ROOT = Path(__file__).resolve().parent.parent
#: the simulation settings a fidelity preset sets (a scenario stating one overrides its preset)
PRESET_KEYS = ("network", "collective_model", "granularity", "fold")


def gpt3_175b(fold: bool) -> dict:
    return {
        "name": "gpt3-175b-1024xA100",
        "cluster": {"preset": "dgx_a100", "nodes": 128},
        "model": {"kind": "transformer", "preset": "gpt3-175b"},
        "training": {"global_batch": 1536, "micro_batch": 1, "recompute": "full"},
        "parallel": {"tp": 8, "pp": 16, "dp": 8, "schedule": "1f1b"},
        "simulation": {**FAST, "fold": fold},
    }


def llama3_405b() -> dict:
    return {
        "name": "llama3-405b-16384xH100",
        "cluster": {"preset": "dgx_h100", "nodes": 2048},
        "model": {"kind": "transformer", "preset": "llama3-405b"},
        "training": {"global_batch": 2048, "micro_batch": 1, "recompute": "full"},
        "parallel": {
            "tp": 8,
            "pp": 16,
            "dp": 128,
            "schedule": "1f1b",
            "partition": "balanced",
            "sequence_parallel": True,
            "zero": 1,
        },
        "simulation": {**FAST, "fold": True},
    }


def gpus_sweep(gpus: int, m: int = 8) -> dict:
    """GPT 18.4B (Megatron Table 1) with TP 8 × PP 8 and as many DP replicas as fit."""
    dp = gpus // 64
    return {
        "name": f"gpt-18.4b-{gpus}gpu-m{m}",
        "cluster": {"preset": "dgx_a100", "nodes": gpus // 8},
        "model": {"kind": "transformer", "preset": "gpt-18.4b"},
        "training": {"global_batch": m * dp, "micro_batch": 1, "recompute": "full"},
        "parallel": {"tp": 8, "pp": 8, "dp": dp, "schedule": "1f1b"},
        "simulation": {**FAST, "fold": "auto"},
    }


def family(gpus: int, tp_overlap: bool = False, rail_spines: int | None = None) -> dict:
    """Issue 38's benchmark family at ``gpus`` GPUs (module docstring); ``tp_overlap``: its
    layer-granularity TP-overlap variant at ``fidelity: fast``; ``rail_spines``: on a rail
    topology with that many spines instead of the fat tree."""
    from clustersim.scenario import read_yaml

    raw = read_yaml(ROOT / "scenarios" / "gpt-7.5b-64xh100-balanced.yaml")
    dp = gpus // 8
    overlap = {"tp_comm_overlap": True, "sequence_parallel": True} if tp_overlap else {}
    sim = {"fidelity": "fast", "granularity": "layer"} if tp_overlap else raw["simulation"]
    topology = {"kind": "fat_tree", "oversubscription": 1}
    if rail_spines is not None:
        topology = {"kind": "rail", "spines": rail_spines}
    return {
        **raw,
        "name": f"gpt-7.5b-{gpus}xh100-{'tp-overlap-layer-fast' if tp_overlap else 'balanced'}",
        "cluster": {**raw["cluster"], "nodes": gpus // 8, "topology": topology},
        "training": {**raw["training"], "global_batch": 8 * dp, "micro_batch": 1},
        "parallel": {**raw["parallel"], "tp": 8, "pp": 1, "dp": dp, **overlap},
        "simulation": sim,
    }


def family_table(sizes: list[int], tp_overlap: bool = False, against: str | None = None) -> None:
    """One row per size of the family (``tp_overlap``: its TP-overlap variant): CPU s, peak
    RSS and events, each beside its estimate, the CPU growth exponent from the size before
    and whether the run folded; ``against``: also the CPU s of the code in that directory,
    run just before."""
    head = ("GPUs", "CPU s", "est/act", "RSS GiB", "est/act", "events", "est/act", "exponent", "folded")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(" ".join(f"{h:>9}" for h in head) + ("   CPU s before → after" if against else ""))
    before = None
    for gpus in sizes:
        old = in_subprocess(family(gpus, tp_overlap), code=against) if against else None
        r = in_subprocess(family(gpus, tp_overlap))
        exponent = ""
        if before is not None:
            exponent = f"{math.log(r['cpu_s'] / before['cpu_s']) / math.log(gpus / before['gpus']):.2f}"
        cells = (
            gpus,
            f"{r['cpu_s']:.2f}",
            f"{r['est_s'] / r['cpu_s']:.2f}",
            f"{r['rss_gib']:.2f}",
            f"{r['est_rss_gib'] / r['rss_gib']:.2f}",
            r["events"],
            f"{r['est_events'] / r['events']:.2f}",
            exponent,
            r["folded"],
        )
        vs = f"   {old['cpu_s']:.2f} → {r['cpu_s']:.2f} ({old['folded']} → {r['folded']})" if old else ""
        print(" ".join(f"{c:>9}" for c in cells) + vs, flush=True)
        before = r


def rail_table(sizes: list[int], spines: int, against: str | None = None) -> None:
    """One row per size: the family's CPU s on the fat tree and on a rail topology with
    ``spines`` spines, rail ÷ fat tree and whether each folded; ``against``: the same ratio
    on the code in that directory, run just before."""
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; rail with {spines} spines")
    head = ("GPUs", "fat CPU s", "rail CPU s", "rail÷fat", "folded")
    print(" ".join(f"{h:>10}" for h in head) + ("   rail÷fat before → after" if against else ""))
    for gpus in sizes:
        runs = [(code, spine) for code in ([against] if against else []) + [None] for spine in (None, spines)]
        (*old, fat, rail) = [
            in_subprocess(family(gpus, rail_spines=spine), code=code) for code, spine in runs
        ]
        cells = (gpus, f"{fat['cpu_s']:.2f}", f"{rail['cpu_s']:.2f}", f"{rail['cpu_s'] / fat['cpu_s']:.2f}")
        folded = f"{fat['folded']}/{rail['folded']}"
        vs = f"   {old[1]['cpu_s'] / old[0]['cpu_s']:.2f} → {rail['cpu_s'] / fat['cpu_s']:.2f}" if old else ""
        print(" ".join(f"{c:>10}" for c in (*cells, folded)) + vs, flush=True)


def accel_table(sizes: list[int], repeat: int) -> None:
    """Median CPU s of each row on the pure-Python path and with the C accelerator (module
    docstring), their ratio, and whether the two runs agree."""
    from clustersim.network import maxmin
    from clustersim.scenario import read_yaml

    if maxmin._accel is None:
        print("the C accelerator is not built here (or CLUSTERSIM_NO_ACCEL is set): nothing to compare")
        return
    rows = [("GPT-3 175B balanced", read_yaml(ROOT / "scenarios" / "gpt3-175b-1024xa100-balanced.yaml"))]
    rows += [(f"family, {gpus} GPUs", family(gpus)) for gpus in sizes]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians of {repeat}")
    print(f"{'case':<24} {'pure CPU s':>10} {'C CPU s':>8} {'C ÷ pure':>8}  same results")
    for label, raw in rows:
        pure, accel = [], []
        for _ in range(repeat):
            pure.append(in_subprocess(raw, accel=False))
            accel.append(in_subprocess(raw))
        same = all(
            (a["iteration_s"], a["events"]) == (p["iteration_s"], p["events"])
            for a, p in zip(accel, pure, strict=True)
        )
        used = all(a["accelerated"] for a in accel) and not any(p["accelerated"] for p in pure)
        p_cpu, a_cpu = (statistics.median(r["cpu_s"] for r in runs) for runs in (pure, accel))
        print(
            f"{label:<24} {p_cpu:>10.2f} {a_cpu:>8.2f} {a_cpu / p_cpu:>8.2f}  "
            f"{'yes' if same else 'NO'}{'' if used else ' (the switch did not take)'}",
            flush=True,
        )


def at_fidelity(raw: dict, fidelity: str) -> dict:
    """``raw`` under a fidelity preset, with the settings the preset decides removed."""
    sim = {k: v for k, v in raw.get("simulation", {}).items() if k not in PRESET_KEYS}
    return {**raw, "name": f"{raw['name']} {fidelity}", "simulation": {**sim, "fidelity": fidelity}}


def fidelity_cases() -> list[tuple[str, dict]]:
    """The three sizes of README's fidelity table."""
    from clustersim.scenario import read_yaml

    return [
        ("quickstart (GPT 1.3B)", read_yaml(ROOT / "scenarios" / "quickstart.yaml")),
        ("GPT-3 175B", read_yaml(ROOT / "scenarios" / "gpt3-175b-1024xa100-balanced.yaml")),
        ("LLaMA-3-405B-like", llama3_405b()),
    ]


def run_one(raw: dict, max_s: float | None = None) -> dict:
    """Simulate in this process; report wall time, peak RSS and the headline numbers — or,
    when the pre-run estimate is over ``max_s`` seconds, only the estimate."""
    from clustersim import load_scenario, simulate  # imports what simulate needs, outside the timing
    from clustersim.compilers import mode_of
    from clustersim.network import maxmin
    from clustersim.resolve import resolve
    from clustersim.resolve.estimate import estimate

    job = resolve(load_scenario(raw))
    est = estimate(job, mode_name=mode_of(job).name)
    if max_s is not None and est.seconds > max_s:
        return {"name": raw["name"], "estimate": est.line()}
    del job
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(raw, progress=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = res.summary
    return {
        "name": raw["name"],
        "gpus": s["num_gpus"],
        "folded": s["folded"].split(":")[0].split(" (")[0],
        "wall_s": wall,
        "cpu_s": cpu,  # the process's own CPU seconds: what a shared machine's load does not stretch
        "rss_gib": peak_rss_gib(),
        "iteration_s": s["iteration_time_s"],
        "events": s["sim_events"],
        "tflops_per_gpu": s.get("tflops_per_gpu"),
        "m": s["num_microbatches"],
        "est_s": est.seconds,
        "est_events": est.events,
        "est_rss_gib": est.rss_bytes / 2**30,
        "accelerated": maxmin.ACCELERATED,
    }


def count_collectives(case: str) -> dict:
    """Simulate ``case`` (``--counts``) here, counting every collective call that runs."""
    from clustersim import simulate
    from clustersim.collectives import api

    raw = at_fidelity(llama3_405b(), "balanced") if case == "405b" else family(int(case))
    counts: dict[tuple, int] = {}
    engines = api.Call._engines

    def counted(call):
        made = engines(call)
        msgs = sum(len(prog) for prog in made)
        key = (call.kind, call.name, len(call.group.members), len(call.group.hosts), msgs)
        counts[key] = counts.get(key, 0) + 1
        return made

    api.Call._engines = counted
    c0 = time.process_time()
    s = simulate(raw, progress=False).summary
    rows = [[*key, n] for key, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return {"cpu_s": time.process_time() - c0, "events": s["sim_events"], "rows": rows}


def counts_table(case: str) -> None:
    """``--counts``: one row per kind of collective call ``case`` runs message by message, in
    a fresh process."""
    out = subprocess.run(
        [sys.executable, __file__, "--count-one", case], capture_output=True, text=True, env=os.environ
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"load average {os.getloadavg()[0]:.1f}; {case}: CPU {r['cpu_s']:.2f} s, {r['events']} events")
    print(f"{'kind':<15} {'algorithm':<17} {'members':>7} {'hosts':>6} {'messages':>9} {'calls':>6}")
    for kind, name, n, hosts, msgs, calls in r["rows"]:
        print(f"{kind:<15} {name:<17} {n:>7} {hosts:>6} {msgs:>9} {calls:>6}")


def peak_rss_gib() -> float:
    """This process's peak RSS: Linux's ``VmHWM`` (the high-water mark of this program's own
    memory) where there is one — ``ru_maxrss`` also keeps that of the parent it was forked
    from, so a child of a large benchmark process reported the parent's peak — else
    ``ru_maxrss``."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def in_subprocess(raw: dict, max_s: float | None = None, code: str | None = None, accel: bool = True) -> dict:
    """:func:`run_one` in a fresh process, on the code in directory ``code`` when given;
    ``accel=False``: with the C accelerator switched off (``CLUSTERSIM_NO_ACCEL=1``)."""
    cmd = [sys.executable, __file__, "--one", json.dumps(raw)] + (
        [] if max_s is None else ["--max-s", str(max_s)]
    )
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERSIM_NO_ACCEL"}
    if code is not None:
        env["PYTHONPATH"] = code
    if not accel:
        env["CLUSTERSIM_NO_ACCEL"] = "1"
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(label: str, r: dict, target: str = "") -> str:
    tf = f"{r['tflops_per_gpu']:.0f}" if r.get("tflops_per_gpu") else "-"
    return (
        f"{label:<34} {r['gpus']:>6} {r['m']:>5} {r['folded']:>7} {r['wall_s']:>9.2f} {r['cpu_s']:>8.2f} "
        f"{r['rss_gib']:>8.2f} "
        f"{r['iteration_s']:>10.3f} {tf:>7} {r['events']:>10}  {target}"
    )


def fidelity_table(max_s: float) -> None:
    """One row per size and preset: wall and CPU seconds and simulated events, or the estimate."""
    head = ("GPUs", "fidelity", "wall s", "CPU s", "events", "iter s")
    print(f"{'case':<24} " + " ".join(f"{h:>9}" for h in head) + "  estimate")
    for label, raw in fidelity_cases():
        for fidelity in ("exact", "balanced", "fast"):
            r = in_subprocess(at_fidelity(raw, fidelity), max_s)
            if "estimate" in r:
                cells, note = ["", fidelity, "-", "-", "-", "-"], f"{r['estimate']} (not run)"
            else:
                cells = [r["gpus"], fidelity, f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}", r["events"]]
                cells, note = cells + [f"{r['iteration_s']:.4f}"], ""
            print(f"{label:<24} " + " ".join(f"{c:>9}" for c in cells) + f"  {note}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description="clustersim scale benchmark")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="skip the unfolded 1,024-GPU run")
    ap.add_argument("--fidelity", action="store_true", help="README's table: 3 sizes × 3 fidelity presets")
    ap.add_argument(
        "--max-s", type=float, help="--fidelity: run only what is estimated under this (default 60 s)"
    )
    ap.add_argument("--family", action="store_true", help="issue 38's benchmark family (module docstring)")
    ap.add_argument(
        "--sizes",
        help="--family (default 16,64,256,1024,4096), --accel (default 512): GPU counts, comma-separated",
    )
    ap.add_argument(
        "--tp-overlap", action="store_true", help="--family: its layer-granularity TP-overlap variant"
    )
    ap.add_argument(
        "--rail-spines", type=int, help="--family: rail ÷ fat tree CPU time, the rail with this many spines"
    )
    ap.add_argument("--accel", action="store_true", help="the C accelerator against the pure Python")
    ap.add_argument("--repeat", type=int, default=3, help="--accel: runs of each path per row")
    ap.add_argument("--counts", help="a family size in GPUs or 405b: its collective calls (docstring)")
    ap.add_argument("--count-one", help=argparse.SUPPRESS)
    ap.add_argument("--only", help="run only the rows whose label contains this text")
    ap.add_argument("--against", help="also run each row on the code in this directory (before → after)")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one), args.max_s)))
        return
    if args.count_one:
        print(json.dumps(count_collectives(args.count_one)))
        return
    if args.counts:
        counts_table(args.counts)
        return
    if args.accel:
        accel_table([int(n) for n in (args.sizes or "512").split(",")], args.repeat)
        return
    if args.family and args.rail_spines is not None:
        rail_table([int(n) for n in (args.sizes or "256,512").split(",")], args.rail_spines, args.against)
        return
    if args.family:
        family_table(
            [int(n) for n in (args.sizes or "16,64,256,1024,4096").split(",")], args.tp_overlap, args.against
        )
        return
    if args.fidelity:
        fidelity_table(60.0 if args.max_s is None else args.max_s)
        return
    print(
        f"{'case':<34} {'GPUs':>6} {'m':>5} {'folded':>7} {'wall s':>9} {'CPU s':>8} {'RSS GiB':>8} "
        f"{'iter s':>10} "
        f"{'TFLOP/s':>7} {'events':>10}  target" + ("   CPU s before → after, ratio" if args.against else "")
    )

    def show(label: str, raw: dict, target: str = "") -> None:
        if args.only and args.only not in label:
            return
        before = in_subprocess(raw, code=args.against) if args.against else None
        r = in_subprocess(raw)
        line = row(label, r, target)
        if before is not None:
            line += f"   {before['cpu_s']:.2f} → {r['cpu_s']:.2f}, {before['cpu_s'] / r['cpu_s']:.1f}×"
        print(line, flush=True)

    show("(a) GPT-3 175B folded", gpt3_175b(True), "≤ 5 s")
    if not args.quick:
        show("(a) GPT-3 175B unfolded", gpt3_175b(False), "≤ 600 s")
    show("(b) LLaMA-3-405B-like folded", llama3_405b(), "≤ 60 s, ≤ 4 GiB")
    for gpus in (64, 256, 1024, 4096, 16384):
        show(f"(c) GPT 18.4B, {gpus} GPUs", gpus_sweep(gpus))
    for m in (8, 32, 128, 512):
        show(f"(c) GPT 18.4B, 1024 GPUs, m={m}", gpus_sweep(1024, m))
    if args.only and args.only not in "(d)":
        return
    out = subprocess.run([sys.executable, "benchmarks/engine_speed.py"], capture_output=True, text=True)
    print("(d) " + "\n    ".join(out.stdout.strip().splitlines()))


if __name__ == "__main__":
    main()
