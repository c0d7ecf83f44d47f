"""Issue 38 item 8's restated fast-path targets, with Calculon side by side where present.

    python benchmarks/calculon_side_by_side.py --calculon /path/to/calculon-checkout
    python benchmarks/calculon_side_by_side.py            # clustersim's rows only

Calculon is github.com/calculon-ai/calculon run from a checkout (the package of that name on
PyPI is unrelated); it is pure Python, so ``--calculon DIR`` puts the checkout on
``sys.path`` and calls it in this process. Rows, each a ratio measured in this one run:

* **Fast path** (``simulation.fidelity``'s fast settings of benchmarks/scale.py, folded):
  GPT-3 175B / 1,024 A100 as a warm call (the second ``simulate()`` in one process; target
  ≤ 0.5 s CPU) and as the first call after import (a fresh process, import excluded; target
  ≤ 1 s); GPT-1T / 3,072 A100 warm (target ≤ 3 s).
* **Estimate per configuration** against Calculon's ``Llm.compile`` + ``Llm.run`` on the same
  configurations: Megatron 2021 Table 1's ten rows and GPT-3 175B / 1,024 (TP, PP, DP,
  batch, micro-batch, full recompute, A100 80 GB), the runs interleaved (ours cold, ours
  warm, Calculon's; ``--estimate-repeat`` times, the medians). Ours is a fresh
  :class:`~clustersim.experiments.plan_estimate.Estimator` per configuration, the scenario
  loaded from its dict inside the timing; *cold* empties the caches estimators share (schedule
  shapes, :func:`~clustersim.experiments.plan_estimate.schedule_shape`, collectives'
  times, :func:`~clustersim.experiments.plan_estimate.idle_collective`, layer kinds, model
  ends and pass segments, :func:`clustersim.workload.stage_builder.cache_clear`)
  before each call, so nothing is reused; *warm* is the same configuration again (what a
  sweep gets where configurations share a shape); the target is ours ÷ Calculon's ≤ 1.
* **Plan search**: plans per CPU-second of clustersim's plan space for GPT-3 175B on 1,024
  A100 through the estimate (benchmarks/search_speed.py's loop) against Calculon's
  ``llm-optimal-execution`` loop (``OptimalExecution.search``, run in this process on a
  deterministic sample of its parameter sets, with ``--mbs-break`` as its README runs it),
  executions per CPU-second; target ours ÷ Calculon's ≥ 5.

Times are ``time.process_time`` (CPU seconds of this process); the machine is shared, so
read the ratios of one run, not the absolute rates.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import clustersim as cs
from clustersim.experiments.plan_estimate import Estimator, idle_collective, schedule_shape
from clustersim.resolve import resolve
from clustersim.scenario import Scenario, read_yaml
from clustersim.validation.megatron import megatron_rows, megatron_scenario, micro_batch
from clustersim.workload import stage_builder

sys.path.insert(0, str(Path(__file__).parent))
from scale import FAST, gpt3_175b  # noqa: E402, I001
from search_speed import estimate_all  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cpu(fn) -> tuple[float, object]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def verdict(value: float, target: float, at_least: bool) -> str:
    met = value >= target if at_least else value <= target
    return f"(target {'≥' if at_least else '≤'} {target:g}: {'met' if met else 'NOT met'})"


def gpt_1t() -> dict:
    raw = read_yaml(ROOT / "scenarios" / "validation" / "megatron-2021-gpt-1t.yaml")
    raw["simulation"] = {**raw.get("simulation", {}), **FAST, "fold": True}
    return raw


def first_call_s(raw: dict) -> float:
    """CPU seconds of the first ``simulate()`` in a fresh process, import excluded."""
    code = (
        "import json, sys, time; import clustersim as cs; sc = cs.load_scenario(json.loads(sys.argv[1])); "
        "t = time.process_time(); cs.simulate(sc, progress=False); print(time.process_time() - t)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(raw)], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def fast_path(repeat: int) -> None:
    print("Fast path (fidelity fast, folded), CPU s:")
    for label, raw, warm_target, cold_target in (
        ("GPT-3 175B / 1,024 A100", gpt3_175b(True), 0.5, 1.0),
        ("GPT-1T / 3,072 A100", gpt_1t(), 3.0, None),
    ):
        sc = cs.load_scenario(raw)
        cs.simulate(sc, progress=False)  # the first call: imports and caches warm up
        warm = statistics.median(cpu(lambda sc=sc: cs.simulate(sc, progress=False))[0] for _ in range(repeat))
        print(f"  {label}, warm (median of {repeat}) {warm:8.3f} s {verdict(warm, warm_target, False)}")
        if cold_target is not None:
            cold = statistics.median(first_call_s(raw) for _ in range(repeat))
            print(f"  {label}, first call after import {cold:8.3f} s {verdict(cold, cold_target, False)}")


def configurations() -> list[tuple[str, dict]]:
    """(label, scenario dict) of Table 1's rows and GPT-3 175B / 1,024 at layer granularity."""
    cases = [(f"Table 1 {r['params_b']:g}B / {r['gpus']}", megatron_scenario(r)) for r in megatron_rows()]
    cases.append(("GPT-3 175B / 1,024", gpt3_175b(True)))
    return cases


def clear_shared() -> None:
    """Empty the caches estimators share (schedule shapes, collective times, layer kinds,
    model ends, pass segments): what a configuration seen first finds."""
    schedule_shape.cache_clear()
    stage_builder.cache_clear()
    idle_collective.cache_clear()


def our_estimate(raw: dict) -> None:
    """One estimate: the scenario loaded from its dict, a fresh Estimator."""
    Estimator().estimate(Scenario(raw), {})


def calculon_config(raw: dict) -> tuple[dict, dict]:
    """Calculon's application and execution JSON of one scenario dict."""
    sc = cs.load_scenario(raw)
    m, p, t = resolve(sc).transformer, sc.parallel, sc.training
    app = {
        "hidden": m.hidden,
        "feedforward": m.ffn_hidden,
        "seq_size": m.seq_len,
        "attn_heads": m.heads,
        "attn_size": m.hidden // m.heads,
        "num_blocks": m.layers,
    }
    exe = {
        "num_procs": sc.num_gpus,
        "tensor_par": p.tp,
        "pipeline_par": p.pp,
        "data_par": p.dp,
        "tensor_par_net": 0,
        "pipeline_par_net": 1,
        "data_par_net": 1,
        "batch_size": t.global_batch,
        "microbatch_size": t.micro_batch or micro_batch(t.global_batch, p.dp, p.pp),
        "datatype": "float16",
        "fused_activation": True,
        "attention_type": "multihead",
        "activation_recompute": "full",
        "pipeline_interleaving": 1,
        "optimizer_sharding": False,
        "tensor_par_comm_type": "ar",
        "tensor_par_overlap": "none",
        "seq_par_ag_redo": False,
        "data_par_overlap": False,
        "weight_offload": False,
        "activations_offload": False,
        "optimizer_offload": False,
        "training": True,
    }
    return app, exe


class Calculon:
    """Calculon called in this process from a checkout."""

    def __init__(self, checkout: Path) -> None:
        sys.path.insert(0, str(checkout))
        import calculon
        from calculon.llm import Llm
        from calculon.llm.optimal_execution import OptimalExecution

        self.llm, self.search_cls = Llm, OptimalExecution
        self.system = calculon.System(calculon.io.read_json_file(str(checkout / "systems" / "a100_80g.json")))
        self.logger = __import__("logging").getLogger("calculon")

    def run(self, app_json: dict, exe_json: dict) -> None:
        """One ``Llm.compile`` + ``Llm.run`` of the configuration."""
        model = self.llm(self.llm.Application(app_json), self.logger)
        model.compile(self.system, self.llm.Execution.from_json(exe_json))
        model.run(self.system)

    def search_rate(self, app_json: dict, procs: int, batch: int, budget_s: float) -> tuple[int, float]:
        """(executions, CPU s) of ``llm-optimal-execution``'s loop on a strided sample of its
        parameter sets, until ``budget_s`` CPU seconds are spent."""
        llm, oe, app = self.llm, self.search_cls, self.llm.Application(app_json)
        params = []
        for tp in llm.get_all_tensor_parallelisms(procs, app.hidden, app.attn_heads):
            for pp in llm.get_all_pipeline_parallelisms(procs, tp, app.num_blocks):
                dp = llm.get_data_parallelism(procs, tp, pp)
                batch_size = oe.get_batch_size(dp, batch)
                if batch_size is None:
                    continue
                for ppint in llm.get_valid_pipeline_interleavings(app.num_blocks, pp):
                    for recompute in ("full", "attn_only", "none"):
                        for sharding in (True, False) if dp > 1 else (False,):
                            for comm in ("ar", "p2p_rs_ag", "rs_ag"):
                                params.append((tp, pp, dp, ppint, batch_size, recompute, sharding, comm))
        stride = max(1, len(params) // 64)
        executions, spent = 0, 0.0
        for tp, pp, dp, ppint, bs, recompute, sharding, comm in params[::stride]:
            args = (False, 1, False, procs, batch, "float16", app, self.system, tp, pp, dp, ppint, bs)
            args += (recompute, sharding, comm, [True], True, True, True)
            t, found = cpu(lambda a=args: oe.search(*a))
            executions, spent = executions + found[1], spent + t
            if spent >= budget_s:
                break
        return executions, spent


def estimate_rows(calc: Calculon | None, repeat: int) -> None:
    print(
        f"Estimate per configuration, CPU ms, median of {repeat} interleaved runs (ours: a fresh Estimator "
        "and scenario load each; cold: the shared shape and pass caches emptied first; warm: the same "
        "configuration again):"
    )
    ratios: dict[str, list[float]] = {"cold": [], "warm": []}
    for label, raw in configurations():
        config = calculon_config(raw) if calc is not None else None
        our_estimate(raw)  # the first call: imports and module data loaded
        if calc is not None:
            calc.run(*config)
        # interleaved, run by run (the machine is shared: a busy second falls on both sides):
        # ours from emptied caches, ours again (warm), Calculon's
        runs: dict[str, list[float]] = {"cold": [], "warm": [], "Calculon": []}
        for _ in range(repeat):
            clear_shared()
            runs["cold"].append(cpu(partial(our_estimate, raw))[0])
            runs["warm"].append(cpu(partial(our_estimate, raw))[0])
            if calc is not None:
                runs["Calculon"].append(cpu(partial(calc.run, *config))[0])
        ours = {k: statistics.median(runs[k]) for k in ("cold", "warm")}
        line = f"  {label:<24} clustersim cold {ours['cold'] * 1e3:7.2f} warm {ours['warm'] * 1e3:7.2f}"
        if calc is not None:
            theirs = statistics.median(runs["Calculon"])
            for k in ratios:
                ratios[k].append(ours[k] / theirs)
            line += f"   Calculon {theirs * 1e3:6.2f}   ratio cold {ratios['cold'][-1]:6.2f} warm {ratios['warm'][-1]:6.2f}"
        print(line)
    for k, rs in ratios.items():
        if rs:
            print(f"  worst ratio {k} (clustersim ÷ Calculon) {max(rs):.2f} {verdict(max(rs), 1.0, False)}")


def search_rows(calc: Calculon | None, budget_s: float) -> None:
    raw = gpt3_175b(True)
    sc = cs.load_scenario(raw)
    n, fit, spent = estimate_all(sc)
    ours = n / spent
    print(
        f"Plan search, GPT-3 175B / 1,024 A100: clustersim {n} plans ({len(fit)} fit) at {ours:,.0f} plans/CPU-s"
    )
    if calc is None:
        return
    app, _ = calculon_config(raw)
    executions, t = calc.search_rate(app, sc.num_gpus, sc.training.global_batch, budget_s)
    theirs = executions / t
    print(
        f"  Calculon llm-optimal-execution: {executions:,} executions in {t:.1f} CPU s, {theirs:,.0f}/CPU-s"
    )
    print(f"  ratio {ours / theirs:.2f} {verdict(ours / theirs, 5.0, True)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calculon", type=Path, help="a checkout of github.com/calculon-ai/calculon")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each fast-path row (the median)")
    ap.add_argument(
        "--estimate-repeat",
        type=int,
        default=15,
        help="runs of each estimate row, ours and Calculon's (the median: a few ms each, so many are cheap)",
    )
    ap.add_argument("--search-budget", type=float, default=10.0, help="CPU s of Calculon's search loop")
    rows = {"fast": fast_path, "estimate": estimate_rows, "search": search_rows}
    ap.add_argument(
        "--rows", nargs="+", choices=rows, default=list(rows), help="which rows to run (default: all)"
    )
    args = ap.parse_args()
    calc = None
    if args.calculon is not None:
        calc = Calculon(args.calculon)
    else:
        print("Calculon not given (--calculon DIR): clustersim's rows only")
    if "fast" in args.rows:
        fast_path(args.repeat)
    if "estimate" in args.rows:
        estimate_rows(calc, args.estimate_repeat)
    if "search" in args.rows:
        search_rows(calc, args.search_budget)


if __name__ == "__main__":
    main()
