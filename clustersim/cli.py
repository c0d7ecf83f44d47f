"""Command line: ``clustersim run SCENARIO [--out DIR] [--set key=value ...]`` and ``clustersim list``.

User errors (a bad scenario, a deadlocked program) print one clear message and exit 2 —
never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from .errors import ClusterSimError


def _parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClusterSimError(f"--set {item!r}: expected key=value, e.g. --set parallel.pp=4")
        out[key.strip()] = value
    return out


def _format_value(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def summary_table(summary: dict) -> str:
    """The summary as an aligned two-column table."""
    width = max(len(k) for k in summary)
    return "\n".join(f"{k:<{width}}  {_format_value(v)}" for k, v in summary.items())


def cmd_run(args) -> int:
    from .scenario import load_scenario
    from .simulate import simulate

    sc = load_scenario(args.scenario)
    if args.set:
        sc = sc.with_overrides(_parse_sets(args.set))
    res = simulate(sc)
    print(summary_table(res.summary))
    if args.out:
        out = res.save(args.out)
        print(f"\nresult written to {out}/ (gantt.png, trace.json for ui.perfetto.dev, …)")
    return 0


def cmd_list(args) -> int:
    from .engine.network_setup import NETWORK_MODEL_NAMES
    from .hardware.gpus import GPUS
    from .schedules import SCHEDULES

    sections = {
        "GPUs": [(name, "") for name in sorted(GPUS)],
        "schedules": [(s.name, s.description) for s in SCHEDULES.values()],
        "network models": [(n, "") for n in NETWORK_MODEL_NAMES],
    }
    for extra in _optional_registries():
        sections.update(extra)
    for title, items in sections.items():
        print(f"{title}:")
        for name, desc in items:
            print(f"  {name:<18} {desc}".rstrip())
    return 0


def _optional_registries():
    """Registries of modules that may be absent in a partial install, listed when present."""
    try:
        from .topology import TOPOLOGIES

        yield {"topologies": [(n, "") for n in TOPOLOGIES]}
    except ImportError:
        pass
    try:
        from .collectives import ALGORITHMS
        from .hardware.presets import CLUSTER_PRESETS

        yield {"collective algorithms": [(n, "") for n in ALGORITHMS],
               "cluster presets": [(n, "") for n in CLUSTER_PRESETS]}
    except ImportError:
        pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clustersim", description="Simulate distributed DNN training clusters.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="simulate a scenario and print its summary")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--out", help="directory for the result bundle (summary, spans, gantt, trace)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario field, e.g. --set parallel.pp=4 (repeatable)")
    run.set_defaults(func=cmd_run)
    lst = sub.add_parser("list", help="list GPUs, schedules, network models, topologies, …")
    lst.set_defaults(func=cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ClusterSimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
