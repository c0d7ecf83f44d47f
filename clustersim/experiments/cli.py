"""The ``clustersim sweep`` and ``clustersim search`` subcommands (added to the main CLI).

``clustersim sweep SCENARIO --grid parallel.pp=1,2,4 --grid parallel.schedule=1f1b,gpipe
[--zip KEY=V,..] [--out runs.csv] [--executor local|dask] [--workers N] [--scheduler URL]
[--timeout SECONDS]``
(SCENARIO may also be a sweep file with a ``sweep:`` section), and
``clustersim search SCENARIO --gpus 64 [--objective throughput|time|cost] [--top-k 5|all]
[--time-budget SECONDS] [--out plans.csv]``.
"""

from __future__ import annotations

import argparse
import sys

SWEEP_SHOWN = (
    "status",
    "iteration_time_s",
    "samples_per_s",
    "tokens_per_s",
    "bubble_fraction",
    "exposed_comm_fraction",
    "peak_memory_gib",
    "oom",
)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _top_k(text: str) -> int | None:
    """``--top-k``: a count, or ``all`` (None: simulate every plan that fits)."""
    if text.strip().lower() == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of plans or 'all'") from None


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _executor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--executor",
        default="local",
        choices=["local", "dask"],
        help="local process pool (default) or a Dask cluster",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: all CPUs; 1 = in-process)"
    )
    p.add_argument("--scheduler", default=None, help="Dask scheduler address, e.g. tcp://host:8786")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop a run that takes longer; its row gets status 'timeout' (local executor only)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (default: a bar on a terminal, else a log line every 15 s; "
        "--no-progress: nothing)",
    )


def add_commands(sub, parents=(), epilog: str | None = None) -> None:
    """Register ``sweep`` and ``search`` on the main parser's subparsers (with the main
    parser's common options ``parents`` and its ``epilog``)."""
    sw = sub.add_parser(
        "sweep", parents=parents, epilog=epilog, help="simulate a grid of scenario variants, one row per run"
    )
    sw.add_argument("scenario", help="scenario YAML file, or a sweep file with a `sweep:` section")
    sw.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="an axis crossed with the others, e.g. --grid parallel.pp=1,2,4 (repeatable)",
    )
    sw.add_argument(
        "--zip",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="axes advanced together (equal lengths), e.g. --zip a=1,2 --zip b=x,y",
    )
    sw.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override the base scenario"
    )
    sw.add_argument("--out", help="results table (.csv or .parquet); rerunning resumes it")
    sw.add_argument(
        "--max-runs",
        type=int,
        help="refuse a grid of more runs than this before expanding it (default 100,000: docs/limits.md)",
    )
    _executor_args(sw)
    sw.set_defaults(func=cmd_sweep)

    se = sub.add_parser(
        "search", parents=parents, epilog=epilog, help="search the parallel plans for N GPUs and rank them"
    )
    se.add_argument("scenario", help="scenario YAML file (its model, batch, cluster and network)")
    se.add_argument(
        "--gpus", type=_ints, default=None, help="GPU count(s), e.g. 64 or 32,64 (default: the cluster's)"
    )
    se.add_argument("--objective", default="throughput", choices=["throughput", "time", "cost"])
    se.add_argument(
        "--budget", type=float, default=None, help="samples (or tokens) to train on, for time/cost"
    )
    se.add_argument("--price", type=float, default=1.0, help="price per GPU-hour (cost objective)")
    se.add_argument("--micro-batches", type=_ints, default=None, help="micro-batch sizes to try, e.g. 1,2,4")
    se.add_argument("--schedules", type=_names, default=None, help="schedules to try, e.g. 1f1b,gpipe")
    se.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="values of another knob to try, or one value to fix it, e.g. --vary training.recompute=full",
    )
    se.add_argument(
        "--memory-fraction", type=float, default=1.0, help="usable share of GPU memory (default 1)"
    )
    se.add_argument("--top", type=int, default=5, help="plans to print")
    se.add_argument(
        "--top-k",
        type=_top_k,
        default=5,
        metavar="K",
        help="simulate the K best plans by the analytical estimate (default 5); 'all': every plan "
        "that fits, pruned by the exact memory replay (the search before the estimate)",
    )
    se.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wall seconds for the whole search: plans not estimated by then are 'unexplored', "
        "simulations get what is left as their time limit",
    )
    se.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override the base scenario"
    )
    se.add_argument(
        "--out", help="table of every plan (.csv or .parquet); simulated runs resume from its journal"
    )
    _executor_args(se)
    se.set_defaults(func=cmd_search)


def _base(args):
    from ..scenario import load_scenario, parse_overrides

    if not args.set:
        return args.scenario
    return load_scenario(args.scenario, parse_overrides(args.set))


def _progress(flag: bool | None) -> bool | str:
    """The sweep's ``progress`` for ``--progress`` / ``--no-progress`` / neither: off a
    terminal, log lines, so a long sweep or search is never silent."""
    if flag is not None:
        return flag
    return sys.stderr.isatty() or "log"


def cmd_sweep(args) -> int:
    from .grid import is_sweep_file, load_sweep_file, parse_axes
    from .sweeper import sweep

    grid, zipped = parse_axes(args.grid, "--grid"), parse_axes(args.zip, "--zip")
    base = args.scenario
    if is_sweep_file(base):
        base, file_grid, file_zip = load_sweep_file(base)
        grid, zipped = {**file_grid, **grid}, {**file_zip, **zipped}
    args.scenario = base
    df = sweep(
        _base(args),
        grid,
        zipped or None,
        executor=args.executor,
        workers=args.workers,
        out=args.out,
        scheduler=args.scheduler,
        progress=_progress(args.progress),
        timeout=args.timeout,
        max_runs=args.max_runs,
    )
    swept = list(dict.fromkeys([*grid, *zipped]))
    shown = swept + [c for c in SWEEP_SHOWN if c in df.columns]
    import pandas as pd  # here, not at the top: `clustersim --help` need not load pandas

    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 60):
        print(df[shown].to_string(index=False))
    counts = df["status"].value_counts().to_dict()
    print(
        f"\n{len(df)} runs: "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + (f"; rows in {args.out}" if args.out else "")
    )
    for row in df[df["status"] != "ok"].head(3).to_dict("records"):
        print(f"  {', '.join(f'{k}={row[k]}' for k in swept)}: {row['error']}")
    return 0


def cmd_search(args) -> int:
    from .grid import parse_axes
    from .plan_search import Execution, SearchSpace, search

    gpus = args.gpus[0] if args.gpus and len(args.gpus) == 1 else args.gpus
    res = search(
        _base(args),
        gpus,
        objective=args.objective,
        budget=args.budget,
        price_per_gpu_hour=args.price,
        space=SearchSpace(
            args.micro_batches, args.schedules, parse_axes(args.vary, "--vary"), args.memory_fraction
        ),
        execution=Execution(
            args.executor, args.workers, args.scheduler, _progress(args.progress), args.timeout
        ),
        out=args.out,
        top_k=args.top_k,
        time_budget=args.time_budget,
    )
    print(res.explain(args.top))
    if args.out:
        print(f"\nevery plan (ranked, pruned, failed) written to {args.out}")
    return 0
