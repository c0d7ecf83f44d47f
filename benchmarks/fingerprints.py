"""Fingerprints of every shipped scenario and a set of variants, for refactors.

A refactor must leave what a simulation reports bit-identical. This script simulates every
scenario under ``scenarios/`` (validation ones folded and at stage granularity, to stay quick)
and a set of variants of the quickstart and the synthetic scenario that cover each schedule,
network model, granularity and training mode, and prints one SHA-256 per case over the spans,
the device table, the memory timeline and the summary (less ``wall_time_s`` and ``evaluator``,
which say how the run was computed, not what it computed) — floats
written with ``repr``, so a change in the last bit shows.

    python benchmarks/fingerprints.py > before.json      # on the old commit
    python benchmarks/fingerprints.py > after.json       # on the new one
    python benchmarks/fingerprints.py --compare before.json after.json

``--ignore KEY`` (repeatable) leaves a summary field out of the hash, for a change that
must move only that field (e.g. ``--ignore sim_events`` when the engine emits fewer events).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYNTH = ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml"
QUICK = ROOT / "scenarios" / "quickstart.yaml"

# (name, base scenario, overrides): each schedule, network, granularity and mode at least once.
VARIANTS = [
    *[
        (f"synthetic-{s}", SYNTH, {"parallel.schedule": s, "simulation.iterations": 3})
        for s in ("gpipe", "1f1b", "pipedream", "pipedream_2bw")
    ],
    ("synthetic-zb_h1-w", SYNTH, {"parallel.schedule": "zb_h1", "model.backward_weight": "1 ms"}),
    ("synthetic-zb_h2-w", SYNTH, {"parallel.schedule": "zb_h2", "model.backward_weight": "1 ms"}),
    ("synthetic-interleaved", SYNTH, {"parallel.schedule": "interleaved", "parallel.virtual_stages": 2}),
    ("synthetic-analytical", SYNTH, {"simulation.network": "analytical"}),
    ("synthetic-direct", SYNTH, {"simulation.network": "direct"}),
    ("quick-analytical", QUICK, {"simulation.network": "analytical"}),
    ("quick-stage", QUICK, {"simulation.granularity": "stage", "simulation.network": "analytical"}),
    ("quick-gpipe-zero1", QUICK, {"parallel.schedule": "gpipe", "parallel.zero": 1}),
    (
        "quick-interleaved",
        QUICK,
        {
            "parallel.schedule": "interleaved",
            "parallel.virtual_stages": 2,
            "simulation.network": "analytical",
        },
    ),
    ("quick-2bw", QUICK, {"parallel.schedule": "pipedream_2bw", "simulation.network": "analytical"}),
    (
        "quick-sp-selective",
        QUICK,
        {
            "parallel.sequence_parallel": True,
            "training.recompute": "selective",
            "simulation.network": "analytical",
        },
    ),
    ("quick-fold", QUICK, {"simulation.fold": True, "simulation.network": "analytical"}),
    ("quick-analytical-coll", QUICK, {"simulation.collective_model": "analytical"}),
]

FAST = {
    "simulation.fold": "auto",
    "simulation.granularity": "stage",
    "simulation.network": "analytical",
    "simulation.collective_model": "analytical",
}


def cases():
    """(name, path or scenario dict, overrides) of every case."""
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        yield path.stem, path, {}
    for path in sorted((ROOT / "scenarios" / "validation").glob("*.yaml")):
        yield f"validation/{path.stem}", path, FAST
    yield from VARIANTS
    # the speed targets' cases (benchmarks/scale.py): what the fast paths must not change
    sys.path.insert(0, str(Path(__file__).parent))
    import scale

    yield "scale/gpt3-175b-folded", scale.gpt3_175b(True), {}
    yield "scale/gpt3-175b-unfolded", scale.gpt3_175b(False), {}
    yield "scale/llama3-405b-16384-folded", scale.llama3_405b(), {}


def _frame_digest(h, df) -> None:
    if df is None:
        h.update(b"<none>")
        return
    h.update(repr(list(df.columns)).encode())
    for row in df.itertuples(index=False):
        h.update(repr(tuple(row)).encode())


def fingerprint(path: Path | dict, overrides: dict, ignore: frozenset[str] = frozenset()) -> str:
    """SHA-256 over one case's spans, devices, memory, requests and summary (less the
    summary fields in ``ignore``)."""
    import clustersim as cs

    sc = cs.load_scenario(path)
    if overrides:
        sc = sc.with_overrides(overrides)
    res = cs.simulate(sc, progress=False)
    h = hashlib.sha256()
    for df in (res.spans, res.devices, res.memory, res.requests, res.job):
        _frame_digest(h, df)
    summary = {k: v for k, v in res.summary.items() if k not in ("wall_time_s", "evaluator", *ignore)}
    h.update(repr(sorted(summary.items(), key=lambda kv: kv[0])).encode())
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--only", help="run only cases whose name contains this")
    ap.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="KEY",
        help="leave this summary field out of the hash",
    )
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        for k in diff:
            print(f"differs: {k}")
        print(
            f"{len(a.keys() & b.keys()) - len([k for k in diff if k in a and k in b])} identical, "
            f"{len(diff)} differ"
        )
        return 1 if diff else 0
    out = {}
    for name, path, ov in cases():
        if args.only and args.only not in name:
            continue
        try:
            out[name] = fingerprint(path, ov, frozenset(args.ignore))
        except Exception as exc:  # a case that fails is part of the fingerprint too
            out[name] = f"error: {type(exc).__name__}: {exc}"
        print(f"{name}: {out[name][:16]}", file=sys.stderr)
    print(json.dumps(out, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
