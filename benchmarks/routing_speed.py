"""Routing: the evaluator's construction with routes named from the topology's hierarchy
against the same construction with every route searched breadth-first (issue 19, item 4).

    python benchmarks/routing_speed.py            # (b) 16,384 GPUs folded, (a) 1,024 folded and unfolded
    python benchmarks/routing_speed.py --quick    # skip the unfolded Program (~2M ops)

Per case the Program is compiled once (and moved out of the garbage collector's view);
then ``--repeat`` back-to-back rounds each build a fresh fabric and the evaluator the run
would use (``choose_evaluator``: the DAG pass at this fidelity) twice — on the Job's graph
(routes named, ``clustersim/topology/hierarchy.py``) and on a copy without its
``hierarchy`` (every route searched: the router before this work) — on CPU time. Construction
is where routing is paid: every send's fixed time and each collective's α-β shape. Printed:
the medians of both and of the rounds' ratios, and whether both gave the same records.
Also the topology's connectivity search, which an intact hierarchical build now skips.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import clustersim as cs
from clustersim.engine.dag import choose_evaluator
from clustersim.modes import compile_job
from clustersim.resolve import resolve
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
    searched = named.copy()
    del searched.graph["hierarchy"]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip the unfolded 1,024-GPU Program")
    ap.add_argument("--repeat", type=int, default=3, help="back-to-back rounds per case (default 3)")
    ap.add_argument("--only", default="", help="run only the cases whose label contains this text")
    args = ap.parse_args()
    print(f"fidelity {FAST}; CPU seconds, medians of {args.repeat} rounds")
    print(
        f"{'case':<30} {'GPUs':>6} {'ops':>10} {'searched':>10} {'named':>9} {'ratio':>8} "
        f"{'conn. s':>8}   check"
    )
    cases = [("(b) LLaMA-3-405B-like folded", llama3_405b()), ("(a) GPT-3 175B folded", gpt3_175b(True))]
    if not args.quick:
        cases.append(("(a) GPT-3 175B unfolded", gpt3_175b(False)))
    for label, raw in cases:
        if args.only in label:
            measure(label, raw, args.repeat)


if __name__ == "__main__":
    main()
