"""The ``clustersim schedule QUEUE [--out DIR]`` subcommand (added to the main CLI): run a
queue scenario (docs/scheduler.md), print one line per job and the summary."""

from __future__ import annotations

from collections.abc import Callable

#: the per-job columns printed
SHOWN = ("job", "gpus", "arrival_s", "start_s", "end_s", "queueing_delay_s", "sharing_slowdown", "slowdown")


def add_commands(sub, parents: list, contract: str, table: Callable[[dict], str]) -> None:
    """Add ``schedule`` to the subparsers ``sub``; ``table`` formats the summary (the CLI's
    :func:`clustersim.cli.summary_table`, handed in: the CLI ranks above)."""
    p = sub.add_parser(
        "schedule",
        parents=parents,
        epilog=contract,
        help="run a queue of arriving jobs on one cluster (FIFO, EASY backfill, priority)",
        description="Run a queue scenario (scheduler + jobs with iterations and arrivals): each set of jobs "
        "that overlap is simulated on the shared fabric; prints per job its start, end, queueing delay and "
        "slowdowns, then the cluster's summary. docs/scheduler.md.",
    )
    p.add_argument("queue", help="queue scenario YAML file")
    p.add_argument("--out", help="folder for jobs.csv, timeline.csv, events.csv, summary.json, schedule.png")
    p.set_defaults(func=lambda args: cmd_schedule(args, table))


def cmd_schedule(args, table: Callable[[dict], str]) -> int:
    """Run ``args.queue``, print the jobs and the summary, save to ``args.out`` if given."""
    from .run import schedule  # the simulator loads when the command runs, not at --help

    out = schedule(args.queue)
    print(out.jobs[list(SHOWN)].to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    print(table(out.summary))
    if args.out:
        out.save(args.out)
    return 0
