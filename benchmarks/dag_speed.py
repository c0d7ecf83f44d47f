"""DAG evaluator vs SimPy engine: ops per CPU-second on GPT-3 175B / 1,024 A100, folded and
unfolded, at the fast fidelity of benchmarks/scale.py, against a bare SimPy timeout loop.

    python benchmarks/dag_speed.py            # folded and unfolded (the unfolded Program: ~2M ops)
    python benchmarks/dag_speed.py --quick    # folded only

Per case the Program is compiled once; then ``--repeat`` back-to-back rounds each build a
fresh fabric and run the SimPy engine (``Engine``), the DAG evaluator (``DagEngine``) and a
bare SimPy loop of as many timeouts as the engine had events, all on CPU time
(``time.process_time``). Reported per evaluator, as the median over rounds: ops per
CPU-second of ``run()`` alone and of construction + ``run()`` (construction reads the
fabric's send times, so it pays for routing), the ratio to the bare loop's events per
CPU-second of the same round, and the DAG's speed-up over the engine. The compiled Program
is moved out of the garbage collector's view (``gc.freeze``) before the rounds, so neither
side pays for traversing it; each run also checks that both gave the same records.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import simpy

import clustersim as cs
from clustersim.compilers import compile_job
from clustersim.engine.dag import DagEngine
from clustersim.engine.interpreter import Engine
from clustersim.engine.network_setup import build_network
from clustersim.engine.variability import compute_scales
from clustersim.hardware.node_groups import device_memory
from clustersim.network.factory import build_fabric
from clustersim.record import Recorder
from clustersim.resolve import resolve

sys.path.insert(0, str(Path(__file__).parent))
from baseline import bare_simpy_rate  # noqa: E402, I001
from scale import gpt3_175b  # noqa: E402


def timed_run(cls, sc, prog, graph=None) -> tuple[float, float, tuple]:
    """(construction CPU s, run CPU s, records) of one evaluator on a fresh fabric (on
    ``graph`` instead of the scenario's topology when given)."""
    env, rec = simpy.Environment(), Recorder()
    if graph is None:
        fabric = build_network(sc, env, rec)
    else:
        fabric = build_fabric(sc.simulation.network, env, rec, graph)
    cl = sc.cluster
    t0 = time.process_time()
    engine = cls(
        prog,
        env,
        fabric,
        rec,
        device_memory(cl, prog.num_devices, sc.num_gpus),
        alpha=cl.collective_alpha,
        collective_latency=cl.collective_latency,
        algorithms=sc.simulation.collectives,
        comm_compute_slowdown=cl.comm_compute_slowdown,
        collective_model=sc.simulation.collective_model,
        compute_scale=compute_scales(sc, prog),
    )
    t1 = time.process_time()
    engine.run()
    t2 = time.process_time()
    return t1 - t0, t2 - t1, (rec.ops, rec.memory, engine.memory.peak, engine.events)


def measure(label: str, raw: dict, repeat: int) -> None:
    sc = resolve(cs.load_scenario(raw))  # the Job: the fabric is built on its topology graph
    t0 = time.process_time()
    prog = compile_job(sc)
    compile_s = time.process_time() - t0
    gc.collect()
    gc.freeze()
    n = len(prog.ops)
    rows = {"des": [], "dag": []}
    bare = []
    for _ in range(repeat):
        des_build, des_run, des_rec = timed_run(Engine, sc, prog)
        dag_build, dag_run, dag_rec = timed_run(DagEngine, sc, prog)
        if des_rec != dag_rec:
            raise SystemExit(f"{label}: the DAG evaluator's records differ from the engine's")
        events = des_rec[3]
        del des_rec, dag_rec
        bare.append(bare_simpy_rate(events))
        rows["des"].append((des_build, des_run))
        rows["dag"].append((dag_build, dag_run))
    gc.unfreeze()
    print(f"{label}: {n:,} ops, {events:,} SimPy events in the engine, compile {compile_s:.1f} s CPU")
    med = statistics.median
    b = med(bare)
    print(f"  bare SimPy loop        : {b:12,.0f} events/s")
    for name, runs in rows.items():
        run_rate = med(n / r for _, r in runs)
        all_rate = med(n / (c + r) for c, r in runs)
        print(
            f"  {name} run()            : {run_rate:12,.0f} ops/s  ({run_rate / b:.2f} × bare)   "
            f"construction + run(): {all_rate:12,.0f} ops/s  ({all_rate / b:.2f} × bare)   "
            f"median CPU s: build {med(c for c, _ in runs):.3f}, run {med(r for _, r in runs):.3f}"
        )
    speed_run = med(d[1] / g[1] for d, g in zip(rows["des"], rows["dag"]))
    speed_all = med(sum(d) / sum(g) for d, g in zip(rows["des"], rows["dag"]))
    print(
        f"  dag speed-up over des  : run() {speed_run:.2f}×, construction + run() {speed_all:.2f}×  (median of {repeat} rounds)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="folded case only")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    measure("GPT-3 175B / 1,024 A100, folded", gpt3_175b(True), args.repeat)
    if not args.quick:
        measure("GPT-3 175B / 1,024 A100, unfolded", gpt3_175b(False), max(1, args.repeat // 2))


if __name__ == "__main__":
    main()
