"""Routing: the evaluator's construction with routes named from the topology's hierarchy
against the same construction with every route searched breadth-first (issue 19, item 4).

    python benchmarks/routing_speed.py            # (b) 16,384 GPUs folded, (a) 1,024 folded and unfolded
    python benchmarks/routing_speed.py --quick    # skip the unfolded Program (~2M ops)
    python benchmarks/routing_speed.py --only unfolded --unfolded-batch 128   # m = 16: same routes

Per case the Program is compiled once (and moved out of the garbage collector's view);
then ``--repeat`` back-to-back rounds each build a fresh fabric and the evaluator the run
would use (``choose_evaluator``: the DAG pass at this fidelity) twice — on the Job's graph
(routes named, ``clustersim/topology/hierarchy.py``) and on a copy without its
``hierarchy`` (every route searched: the router before this work) — on CPU time. Construction
is where routing is paid: every send's fixed time and each collective's α-β shape. Printed:
the medians of both and of the rounds' ratios, and whether both gave the same records.
Also the topology's connectivity search, which an intact hierarchical build now skips, and
(row "routing alone", not with ``--quick``) the routes of the 16,384-GPU job unfolded.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import clustersim as cs
from clustersim.compilers import compile_job
from clustersim.engine.dag import choose_evaluator
from clustersim.resolve import resolve
from clustersim.topology import Router
from clustersim.topology.graph import check_connected

sys.path.insert(0, str(Path(__file__).parent))
from dag_speed import timed_run  # noqa: E402, I001
from scale import FAST, gpt3_175b, llama3_405b  # noqa: E402


def measure(label: str, raw: dict, repeat: int) -> None:
    job = resolve(cs.load_scenario(raw))
    prog = compile_job(job)
    gc.collect()
    gc.freeze()
    named = job.graph
    searched = _searched(named).graph
    t0 = time.process_time()
    check_connected(named, "cluster.topology")
    check_s = time.process_time() - t0
    rows = []
    for _ in range(repeat):
        cls, _ = choose_evaluator(job, prog)
        before, _, rec_before = timed_run(cls, job, prog, searched)
        after, _, rec_after = timed_run(cls, job, prog, named)
        if rec_before != rec_after:
            raise SystemExit(f"{label}: named and searched routes gave different records")
        rows.append((before, after))
    b, a = (statistics.median(r[k] for r in rows) for k in (0, 1))
    ratio = statistics.median(r[0] / r[1] for r in rows)
    print(
        f"{label:<30} {job.num_gpus:>6} {len(prog.ops):>10,} {b:>10.3f} {a:>9.3f} {ratio:>7.1f}× "
        f"{check_s:>8.3f}   same records",
        flush=True,
    )
    gc.unfreeze()


def unfolded_routes(label: str, raw: dict, sample: int = 32) -> None:
    """Routing alone for the job unfolded: every pipeline send's route (both directions)
    and every data- and tensor-parallel ring step's, named; the search timed on the routes
    to ``sample`` destinations and scaled by the number of destinations (one reverse BFS
    each, independent of the others). Memory: what the router's caches hold
    (tracemalloc)."""
    job = resolve(cs.load_scenario(raw))
    plan, graph = job.plan, job.graph
    pairs = set()
    for s in range(plan.pp):
        for r in range(plan.replicas):
            for t in range(plan.tp):
                d = plan.device(s, r, t)
                if s + 1 < plan.pp:
                    nxt = plan.device(s + 1, r, t)
                    pairs |= {(d, nxt), (nxt, d)}
                pairs.add((d, plan.device(s, (r + 1) % plan.replicas, t)))
                pairs.add((d, plan.device(s, r, (t + 1) % plan.tp)))
    pairs = sorted((f"gpu{a}", f"gpu{b}") for a, b in pairs if a != b)
    dsts = sorted({b for _, b in pairs})
    rows = []
    for router, chosen in ((Router(graph), pairs), (_searched(graph), None)):
        if chosen is None:  # the search: the routes to a sample of the destinations
            keep = set(dsts[:: max(1, len(dsts) // sample)])
            chosen = [p for p in pairs if p[1] in keep]
        t0 = time.process_time()
        for a, b in chosen:
            router.path(a, b)
        cpu = time.process_time() - t0
        router = Router(router.graph)  # again, for the memory its caches hold
        tracemalloc.start()
        for a, b in chosen:
            router.path(a, b)
        mem = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        scale = len(dsts) / len({b for _, b in chosen})
        rows.append((cpu * scale, mem * scale / 2**20))
    (named_s, named_mib), (searched_s, searched_mib) = rows
    print(
        f"{label:<30} {job.num_gpus:>6} {len(pairs):>10,} routes: searched {searched_s:.1f} s, "
        f"{searched_mib:,.0f} MiB (scaled from {sample} destinations) → named {named_s:.2f} s, "
        f"{named_mib:,.0f} MiB",
        flush=True,
    )


def _searched(graph) -> Router:
    """A router on a copy of ``graph`` without its hierarchy: every route searched."""
    searched = graph.copy()
    del searched.graph["hierarchy"]
    return Router(searched)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip the unfolded 1,024-GPU Program")
    ap.add_argument("--repeat", type=int, default=3, help="back-to-back rounds per case (default 3)")
    ap.add_argument("--only", default="", help="run only the cases whose label contains this text")
    ap.add_argument(
        "--unfolded-batch",
        type=int,
        help="global batch of the unfolded case (default scale.py's 1,536: m = 192); its routes do not depend on it",
    )
    args = ap.parse_args()
    print(f"fidelity {FAST}; CPU seconds, medians of {args.repeat} rounds")
    print(
        f"{'case':<30} {'GPUs':>6} {'ops':>10} {'searched':>10} {'named':>9} {'ratio':>8} "
        f"{'conn. s':>8}   check"
    )
    cases = [("(b) LLaMA-3-405B-like folded", llama3_405b()), ("(a) GPT-3 175B folded", gpt3_175b(True))]
    if not args.quick:
        unfolded = gpt3_175b(False)
        if args.unfolded_batch:
            unfolded["training"]["global_batch"] = args.unfolded_batch
        m = unfolded["training"]["global_batch"] // 8
        cases.append((f"(a) GPT-3 175B unfolded, m={m}", unfolded))
    for label, raw in cases:
        if args.only in label:
            measure(label, raw, args.repeat)
    if not args.quick and args.only in "(b) unfolded, routing alone":
        unfolded_routes("(b) unfolded, routing alone", llama3_405b())


if __name__ == "__main__":
    main()
