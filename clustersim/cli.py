"""Command line: ``clustersim run SCENARIO [--out DIR [--plots]] [--set key=value ...] [--quiet]
[--chakra DIR]``, ``clustersim plot DIR`` (re-draw a saved bundle's pictures), ``clustersim export-chakra
SCENARIO DIR`` (Chakra ET files), ``clustersim calibrate TRACE`` (a PyTorch profiler trace
against the cost model), ``clustersim schedule QUEUE`` (a queue of arriving jobs,
docs/scheduler.md) and ``clustersim list``.

The contract (:data:`CONTRACT`, shown by ``--help``): a user error — a bad scenario or
override, a deadlocked program, a file that cannot be read or written — prints one
``error:`` line and exits 2; anything else is a bug in clustersim: a short message asking
for a report, exit 1, and the traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import traceback
import warnings

from .errors import ClusterSimError, OutputError, ScenarioWarning, shorten
from .progress import Reporter
from .progress import mode as progress_mode

CONTRACT = (
    "Exit status: 0 done; 2 a user error (bad scenario, --set value or file; one 'error:' line "
    "on stderr); 1 an internal error (a bug: a short message asking for a report; --debug adds "
    "the traceback); 3 `validate`: a table outside its stated tolerance (its FAIL line, and one "
    "'validation failed:' line on stderr each); 130 interrupted."
)
#: ``clustersim validate``'s exit status when a table fails its tolerance
VALIDATION_FAILED = 3
REPORT = (
    "this is a bug in clustersim, not in your input: please report it with the command line "
    "and the scenario file (rerun with --debug for the traceback)"
)


def _format_value(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def summary_table(summary: dict) -> str:
    """The summary as an aligned two-column table."""
    width = max(len(k) for k in summary)
    return "\n".join(f"{k:<{width}}  {_format_value(v)}" for k, v in summary.items())


SCHEDULE_HELP = "run a queue of arriving jobs on one cluster (FIFO, EASY backfill, priority)"
SCHEDULE = (
    "Run a queue scenario (scheduler + jobs with iterations and arrivals): each set of jobs that overlap is "
    "simulated on the shared fabric; prints per job its start, end, queueing delay and slowdowns, then the "
    "cluster's summary. docs/scheduler.md."
)
#: the per-job columns ``clustersim schedule`` prints
SCHEDULE_SHOWN = (
    "job",
    "gpus",
    "arrival_s",
    "start_s",
    "end_s",
    "queueing_delay_s",
    "sharing_slowdown",
    "slowdown",
)


def cmd_schedule(args) -> int:
    """Run a queue file, print the jobs and the summary, save to ``--out`` if given."""
    from .scheduler import schedule

    out = schedule(args.queue)
    print(out.jobs[list(SCHEDULE_SHOWN)].to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    print(summary_table(out.summary))
    if args.out:
        out.save(args.out)
    return 0


def cmd_run(args) -> int:
    from .scenario import load_scenario, parse_overrides
    from .simulate import simulate

    if args.plots and not args.out:
        raise OutputError("--plots: the pictures are drawn into the --out folder; add --out DIR")
    sc = load_scenario(args.scenario, parse_overrides(args.set))
    progress = progress_arg(args.quiet)
    res = simulate(sc, progress=progress)
    print(summary_table(res.summary))
    if args.chakra:
        from .simulate import export_chakra

        files = export_chakra(sc, args.chakra)
        print(f"\nChakra ET written to {args.chakra}/ ({len(files)} rank files, comm_group.json)")
    if args.out:
        how = progress_mode(progress)
        report = Reporter(sc.name, bar=how == "bar") if how else None
        with report.phase("saving") if report else contextlib.nullcontext():
            out = res.save(args.out, plots=args.plots)
        if args.plots:
            print(f"\nresult written to {out}/ (gantt.png, trace.json for ui.perfetto.dev, …)")
        else:
            print(
                f"\nresult written to {out}/ (summary, spans, trace.json for ui.perfetto.dev, …); "
                f"pictures: clustersim plot {out}, or run with --plots"
            )
    return 0


def cmd_export_chakra(args) -> int:
    from .scenario import load_scenario, parse_overrides
    from .simulate import export_chakra

    sc = load_scenario(args.scenario, parse_overrides(args.set))
    files = export_chakra(sc, args.folder, layers=args.layers)
    print(
        f"{len(files)} rank files ({files[0].name} … {files[-1].name}) and comm_group.json in {args.folder}/"
    )
    return 0


def cmd_calibrate(args) -> int:
    from .errors import ScenarioError
    from .interop.calibrate import compare, gpu_of, scenario_profile, table, write_profile
    from .interop.kineto import read_kineto

    trace = read_kineto(args.trace)
    sc = None
    if args.scenario:
        from .scenario import load_scenario

        sc = load_scenario(args.scenario)
    elif args.profile:
        raise ScenarioError(
            "--profile", args.profile, "the op names of a model.profile table come from --scenario"
        )
    gpu = args.gpu or (sc.cluster.gpu if sc else gpu_of(trace.device))
    if gpu is None:
        raise ScenarioError(
            "--gpu", None, f"the trace's device {trace.device!r} is not a catalog GPU; name one"
        )
    print(f"{args.trace}: {trace.device or 'device not named'}; predictions for {gpu}")
    if trace.unattributed:
        print(f"({trace.unattributed} kernels not charged to an op: no launch or op links to them)")
    print(table(compare(trace, gpu)))
    if sc is not None:
        profile, rows = scenario_profile(trace, sc)
        print(f"\n{sc.name}: its layer's GEMMs the trace measured ({len(rows)} of them)")
        print(table(rows) if rows else "none: no GEMM of the trace has a shape of this model's layer")
        if args.profile:
            print(f"\nmodel.profile table written to {write_profile(profile, args.profile)}")
    return 0


def progress_arg(quiet: bool) -> bool | str:
    """``simulate``'s ``progress`` for a command: nothing with ``--quiet``, a bar on a
    terminal, else log lines (a pipe or a batch log still hears from a long run)."""
    if quiet:
        return False
    return "auto" if getattr(sys.stderr, "isatty", lambda: False)() else "log"


def cmd_plot(args) -> int:
    from .trace.bundle import load_result, redraw

    res = load_result(args.bundle)
    out = args.out or args.bundle
    from pathlib import Path

    files = redraw(res, out)
    if args.trace:
        files.append(res.to_chrome_trace(Path(out) / "trace.json"))
    print("\n".join(str(f) for f in files))
    return 0


def cmd_plan(args) -> int:
    from .planner import plan_scenario
    from .scenario import load_scenario, parse_overrides

    sc = load_scenario(args.scenario, parse_overrides(args.set))
    print(plan_scenario(sc).table())
    return 0


def cmd_validate(args) -> int:
    from .validation.report import run_validation

    rows = [int(x) for x in args.rows.split(",")] if args.rows else None
    md, results, verdicts = run_validation(
        rows,
        progress=lambda r: print(
            f"  {r['model']:<12} predicted {r['predicted']:6.1f} published {r['published']:5.0f} TFLOP/s "
            f"({r['error']:+.1%}, {r['wall_s']:.0f} s)",
            flush=True,
        ),
    )
    print(md)
    if args.out:
        from .output import write_text

        write_text(args.out, md + "\n")
        print(f"\nwritten to {args.out}")
    failed = [v for v in verdicts if not v.passed]
    for v in failed:
        print(f"validation failed: {v.table}: {v.detail}", file=sys.stderr)
    return VALIDATION_FAILED if failed else 0


#: the parallelism fields beyond tp/pp/dp, as ``clustersim list`` shows them (docs/moe.md,
#: docs/context_parallel.md); ``clustersim search`` searches ep and cp where they apply
PARALLEL_OPTIONS = [
    ("ep", "expert parallelism: a MoE model's routed experts over ep GPUs of each stage"),
    ("etp", "expert-tensor-parallel size (unset: tp)"),
    ("moe_token_dispatcher", "alltoall | allgather | flex (DeepEP)"),
    ("moe_shared_expert_overlap", "the shared expert beside the dispatch all-to-alls"),
    ("moe_permute_fusion", "Transformer Engine's fused permute / unpermute kernels"),
    ("moe_expert_mlp", "sequential | te_grouped | grouped (the experts' GEMM launches)"),
    ("moe_host_sync", "the host waits for the device before each MoE dispatch"),
    ("cp", "context parallelism: each sequence split over cp GPUs (flash attention)"),
    ("cp_comm_type", "p2p (ring attention) | a2a (Ulysses)"),
    ("virtual_stages", "model chunks per stage (interleaved; zb_v, dualpipe_v: 2)"),
]


def _preset_line(p: dict) -> str:
    """A cluster preset in one line: the GPUs of a node (an NVLink domain), the scale-up
    bandwidth per GPU per direction, the NICs."""
    from .topology.servers import nics_per_node

    intra, nic, gpn = p["intra_node"], p["nic"], p["gpus_per_node"]
    link = "NVLink" if intra["kind"] == "nvswitch" else "PCIe"
    return (
        f"{gpn}× {p['gpu']} per node, {link} {intra['bandwidth'] / 1e9:.0f} GB/s per GPU per direction, "
        f"{nics_per_node(nic.get('per_node'), gpn)}× {nic['bandwidth'] * 8 / 1e9:.0f} Gbit/s NICs"
    )


def cmd_list(args) -> int:
    from .collectives import ALGORITHMS
    from .compilers import MODES
    from .hardware.gpus import GPUS
    from .hardware.presets import CLUSTER_PRESETS
    from .network.factory import DIRECT_DESCRIPTION, NETWORK_MODELS
    from .schedules import SCHEDULES
    from .topology import TOPOLOGIES
    from .workload.calibration import calibration_status
    from .workload.hf_config import hf_config_table
    from .workload.model_presets import model_preset_table

    sections = {
        # each GPU says whether its kernel efficiencies are its own or borrowed (a transfer)
        "GPUs": [(name, f"{line}; {calibration_status(name)}") for name, line in GPUS.table()],
        "schedules": SCHEDULES.table(),
        "network models": [*NETWORK_MODELS.table(), ("direct", DIRECT_DESCRIPTION)],
        "topologies": TOPOLOGIES.table(),
        "collective algorithms": ALGORITHMS.table(),
        "training modes": MODES.table(),
        "parallel options (parallel.*)": PARALLEL_OPTIONS,
        "model presets": model_preset_table(),
        "HF model configs (model.hf_config)": hf_config_table(),
        "cluster presets": [(name, _preset_line(p)) for name, p in CLUSTER_PRESETS.items()],
    }
    for title, items in sections.items():
        print(f"{title}:")
        for name, desc in items:
            print(f"  {name:<18} {desc}".rstrip())
    return 0


def _scenario_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """A command's SCENARIO argument and its repeatable ``--set KEY=VALUE`` overrides."""
    p.add_argument("scenario", help=what)
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario field"
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,  # (so a subcommand does not reset a --debug given before it)
        help="show the traceback of an internal error",
    )
    parser = argparse.ArgumentParser(
        prog="clustersim",
        description="Simulate distributed DNN training clusters.",
        epilog=CONTRACT,
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", parents=[common], epilog=CONTRACT, help="simulate a scenario and print its summary"
    )
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument(
        "--out", help="directory for the result bundle (summary, spans, trace; pictures with --plots)"
    )
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set parallel.pp=4 (repeatable)",
    )
    run.add_argument(
        "--quiet", action="store_true", help="no estimate, progress bar or progress lines on stderr"
    )
    run.add_argument(
        "--chakra",
        metavar="DIR",
        help="also write the run's Program as Chakra ET files, one per rank (docs/interop.md)",
    )
    run.add_argument(
        "--plots",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="with --out, also draw the pictures (gantt, utilization, memory, breakdown): seconds "
        "more; off by default, `clustersim plot DIR` draws them later",
    )
    run.set_defaults(func=cmd_run)
    exp = sub.add_parser(
        "export-chakra",
        parents=[common],
        epilog=CONTRACT,
        help="write a scenario's Program as Chakra ET files (ASTRA-sim's input), one per rank",
        description="Write the Program SCENARIO compiles to as Chakra execution traces: DIR/trace.<rank>.et "
        "(a GlobalMetadata message, then one Node per op; ASTRA-sim: --workload-configuration=DIR/trace) and "
        "DIR/comm_group.json (each collective's ranks by pg_name). model: {kind: trace, chakra: DIR} reads "
        "them back into the same Program. Fields mapped and what is not carried: docs/interop.md.",
    )
    _scenario_arguments(exp, "scenario YAML file")
    exp.add_argument("folder", help="directory for the rank files (created; earlier rank files replaced)")
    exp.add_argument(
        "--layers",
        action="store_true",
        help="compile each pass layer by layer and label every op with its model layer "
        "(clustersim.layer; a transformer at granularity: layer): what model.replay_pp needs to split stages",
    )
    exp.set_defaults(func=cmd_export_chakra)
    cal = sub.add_parser(
        "calibrate",
        parents=[common],
        epilog=CONTRACT,
        help="compare a PyTorch profiler trace's kernel times with the cost model's predictions",
        description="Read a torch.profiler Chrome-trace JSON (kernels charged to the ATen op that launched "
        "them via correlation ids) and print per op and shape: calls, measured µs, the cost model's "
        "predicted µs (matrix products) and measured / predicted. With --scenario, the same for each GEMM "
        "of the scenario's transformer layer the trace measured; --profile writes those as a "
        "model.profile table (op,phase,m,n,k,time_us). docs/interop.md.",
    )
    cal.add_argument("trace", help="PyTorch profiler trace (Chrome-trace JSON with traceEvents)")
    cal.add_argument(
        "--gpu", help="GPU catalog name to predict for (default: the scenario's, else the trace's device)"
    )
    cal.add_argument(
        "--scenario", help="a transformer scenario whose layer ops the trace's GEMMs are mapped onto"
    )
    cal.add_argument(
        "--profile", metavar="CSV", help="write the mapped times as a model.profile table (needs --scenario)"
    )
    cal.set_defaults(func=cmd_calibrate)
    plot = sub.add_parser(
        "plot", parents=[common], epilog=CONTRACT, help="re-draw the pictures of a saved result bundle"
    )
    plot.add_argument("bundle", help="directory written by `clustersim run --out DIR` or res.save(DIR)")
    plot.add_argument("--out", help="directory for the pictures (default: the bundle itself)")
    plot.add_argument("--trace", action="store_true", help="also rewrite trace.json")
    plot.set_defaults(func=cmd_plot)
    pln = sub.add_parser(
        "plan",
        parents=[common],
        epilog=CONTRACT,
        help="PipeDream's planner: partition and replicate the model's layers",
    )
    _scenario_arguments(pln, "scenario YAML file (its model, cluster and GPU count are used)")
    pln.set_defaults(func=cmd_plan)
    val = sub.add_parser(
        "validate",
        parents=[common],
        epilog=CONTRACT,
        help="compare predictions with published Megatron-LM / Korthikanti numbers",
    )
    val.add_argument(
        "--rows", help="comma-separated Table 1 row indices (default: all; big rows take minutes)"
    )
    val.add_argument("--out", help="write the Markdown report here (e.g. docs/validation.md)")
    val.set_defaults(func=cmd_validate)
    lst = sub.add_parser(
        "list", parents=[common], epilog=CONTRACT, help="list GPUs, schedules, network models, topologies, …"
    )
    lst.set_defaults(func=cmd_list)
    from .experiments.cli import add_commands as add_experiment_commands  # sweep, search

    add_experiment_commands(sub, [common], CONTRACT)
    sch = sub.add_parser(
        "schedule", parents=[common], epilog=CONTRACT, help=SCHEDULE_HELP, description=SCHEDULE
    )
    sch.add_argument("queue", help="queue scenario YAML file")
    sch.add_argument(
        "--out", help="folder for jobs.csv, timeline.csv, events.csv, summary.json, schedule.png"
    )
    sch.set_defaults(func=cmd_schedule)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A :class:`ScenarioWarning` as one ``warning:`` line (others as Python prints them)."""
    if issubclass(category, ScenarioWarning):
        print(f"warning: {message}", file=file or sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv``; returns the exit status of :data:`CONTRACT`."""
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():  # restores the caller's showwarning afterwards
            warnings.showwarning = _show_warning
            return args.func(args)
    except (ClusterSimError, OSError) as exc:  # the input's fault, or the machine's (disk full)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(f"internal error: {type(exc).__name__}: {shorten(str(exc), 200)}\n{REPORT}", file=sys.stderr)
        return 1


def console() -> None:
    """The ``clustersim`` command in a process of its own (the console script and ``python -m
    clustersim.cli``): :func:`main` on ``sys.argv``, then exit with its status."""
    status = main()
    # The process ends next, and Python's exit runs a full collection over every object
    # still alive — the whole run's: 0.1 s of the quickstart's `run --out` — only to free
    # what the exit frees anyway. Frozen objects are skipped (every file is closed by now).
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    console()
