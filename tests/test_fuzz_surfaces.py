"""Fuzzing every input surface beside the scenario file (issue 39, item 6): an HF config.json,
a ``model.profile`` CSV, a Kineto trace, a Chakra ET trace, a sweep file, a queue file and
its arrival trace (docs/scheduler.md) and a saved result bundle, each mutated at a random place to an odd value (hypothesis). Every case must be
accepted — and then its summary holds only finite figures ≥ 0 — or refused with
clustersim's own error, which names what it refuses; never a traceback, a hang (30 s) or a
memory blow-up (2 GiB). The default run is derandomized and small; ``pytest -m slow`` runs
200 cases per surface (hypothesis prints the failing case and the blob that reproduces it, `@reproduce_failure`).
(tests/test_fuzz_scenarios.py fuzzes the scenario files themselves.)"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.experiments.runner import time_limit
from clustersim.interop.chakra_attrs import attr, attrs_of
from clustersim.interop.chakra_file import read_trace, write_trace
from tests.test_fuzz_scenarios import ODD_VALUES, _parent, _paths, memory_limit

ROOT = Path(__file__).resolve().parents[1]
CASE_S = 30.0
CASE_BYTES = 2 << 30
FAST = settings(max_examples=4, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=200, deadline=None, print_blob=True, suppress_health_check=list(HealthCheck))

SMALL = {
    "name": "fuzzed",
    "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu": "A100-SXM4-80GB"},
    "model": {"kind": "transformer", "layers": 2, "hidden": 256, "heads": 4, "vocab": 1000, "seq_len": 128},
    "training": {"global_batch": 4, "micro_batch": 2},
    "parallel": {"tp": 2},
}
HF = {
    "model_type": "mixtral",
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "max_position_embeddings": 128,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}
PROFILE = "op,phase,m,n,k,time_us\nqkv,F,,,,12\nfc1,B,,,,30\n"


def _figures_hold(summary: dict) -> None:
    """Every number of a summary is finite and ≥ 0."""
    for key, value in summary.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        assert math.isfinite(value) and value >= 0, (key, value)


def _outcome(run) -> None:
    """Run ``run()`` under the case limits: a summary it returns holds; an error is ours and
    names what it refuses."""
    with memory_limit(CASE_BYTES), time_limit(CASE_S):
        try:
            summary = run()
        except cs.ClusterSimError as exc:
            text = str(exc)
            assert ": " in text and "Traceback" not in text, text  # "field: value is invalid; …"
            return
    if summary is not None:
        _figures_hold(summary)


def _odd(draw) -> object:
    value = draw(ODD_VALUES)
    return (
        value if not isinstance(value, float) or math.isfinite(value) or draw(st.booleans()) else str(value)
    )


# -- each surface: a mutation drawn, and its consumer ------------------------------------------------


@st.composite
def hf_cases(draw):
    cfg = dict(HF)
    key = draw(st.sampled_from([*HF, "sliding_window", "head_dim", "rope_theta", "unknown_key"]))
    # a model of 100,000 valid layers or experts is a real run of minutes, not a fuzz case:
    # counts of repeated parts up to 4,096, every other value anything
    big = 4096 if key in ("num_hidden_layers", "num_local_experts") else 10**7
    value = draw(st.one_of(ODD_VALUES, st.integers(-10, big)))
    cfg[key] = (
        min(value, big) if isinstance(value, int) and not isinstance(value, bool) and value > big else value
    )
    return cfg


def _hf(tmp: Path, cfg: dict) -> dict | None:
    path = tmp / "config.json"
    path.write_text(json.dumps(cfg, allow_nan=True))
    return cs.simulate({**SMALL, "model": {"hf_config": str(path)}}, progress=False).summary


@st.composite
def profile_cases(draw):
    rows = list(csv.reader(io.StringIO(PROFILE)))
    r = draw(st.integers(0, len(rows) - 1))
    c = draw(st.integers(0, len(rows[0]) - 1))
    rows[r][c] = str(draw(ODD_VALUES))
    if draw(st.booleans()):  # a row added or a cell too many
        rows.append(rows[1] + ([str(draw(ODD_VALUES))] if draw(st.booleans()) else []))
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


def _profile(tmp: Path, text: str) -> dict | None:
    path = tmp / "profile.csv"
    path.write_text(text)
    raw = {**SMALL, "model": {**SMALL["model"], "profile": str(path)}}
    return cs.simulate(raw, progress=False).summary


KINETO = ROOT / "tests" / "data" / "kineto_sample.json"


@st.composite
def kineto_cases(draw):
    doc = json.loads(KINETO.read_text())
    events = doc["traceEvents"]
    event = events[draw(st.integers(0, len(events) - 1))]
    where = (
        event["args"]
        if "args" in event and draw(st.booleans()) and isinstance(event["args"], dict)
        else event
    )
    keys = sorted(where) or ["name"]
    where[draw(st.sampled_from(keys))] = draw(ODD_VALUES)
    return doc


def _kineto(tmp: Path, doc: dict) -> None:
    from clustersim.cli import main

    path = tmp / "trace.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["calibrate", str(path)])
    # 0 read, 2 refused with one error line; 1 would be an internal error (a bug)
    assert code in (0, 2) and "Traceback" not in err.getvalue(), (code, err.getvalue())
    assert code == 0 or err.getvalue().startswith("error: ")


@st.composite
def chakra_cases(draw):
    rank = draw(st.integers(0, 3))
    node_index = draw(st.integers(0, 400))
    name = draw(st.sampled_from(["", "?"]))  # "" keeps an attribute the node has; "?" a new one
    value = draw(
        st.one_of(ODD_VALUES.filter(lambda v: isinstance(v, bool | int | float | str)), st.integers())
    )
    return rank, node_index, name, value, draw(st.integers(0, 50))


def _chakra(tmp: Path, case) -> dict | None:
    rank, node_index, name, value, pick = case
    folder = tmp / "et"
    cs.export_chakra(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml", folder)
    path = folder / f"clustersim.{rank}.et"
    meta, nodes = read_trace(path)
    node = nodes[node_index % len(nodes)]
    names = sorted(attrs_of(node)) or ["x"]
    name = names[pick % len(names)] if name == "" else "clustersim.fuzzed"
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        value = str(value)  # the wire holds 64-bit integers
    kept = [a for a in node.attr if a.name != name]
    del node.attr[:]
    node.attr.extend([*kept, attr(name, value)])
    write_trace(path, meta, nodes)
    raw = {
        "name": "t",
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": "A100-SXM4-80GB"},
        "model": {"kind": "trace", "chakra": str(folder)},
        "training": {"global_batch": 4},
    }
    return cs.simulate(raw, progress=False).summary


@st.composite
def sweep_cases(draw):
    grid = {"parallel.schedule": ["1f1b", "gpipe"], "training.global_batch": [8]}
    key = draw(st.sampled_from([*grid, "parallel.pp", "cluster.nodes", "nope.field", "training"]))
    grid[key] = draw(st.one_of(ODD_VALUES, st.lists(ODD_VALUES, max_size=3)))
    return {"sweep": {"base": str(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml"), "grid": grid}}


def _sweep(tmp: Path, doc: dict) -> None:
    from clustersim.experiments.sweeper import sweep

    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    df = sweep(path, workers=1, progress=False)
    for row in df.to_dict("records"):
        # NaN in the table: a figure the run reports as None (a synthetic model has no tokens)
        if row.get("status") == "ok":
            _figures_hold(
                {
                    k: v
                    for k, v in row.items()
                    if k.split(".")[0] not in ("parallel", "training")
                    and not (isinstance(v, float) and math.isnan(v))
                }
            )


_QUEUE_JOB = {
    "model": {"kind": "synthetic", "layers": 2, "forward": "1 ms", "backward": "2 ms", "params": "1 MiB"},
    "training": {"global_batch": 2, "micro_batch": 1},
    "parallel": {"dp": 2},
    "placement": {"policy": "spread"},
    "iterations": 3,
}
QUEUE = {
    "name": "queue",
    "cluster": {"nodes": 2, "gpus_per_node": 2, "gpu": "A100-SXM4-80GB"},
    "scheduler": {"policy": "priority", "preemption": True},
    "jobs": [
        {"name": "a", **_QUEUE_JOB, "arrival": 0.0},
        {"name": "b", **_QUEUE_JOB, "arrival": 0.001, "priority": 1, "parallel": {"dp": 4}},
    ],
}
#: the places a queue file adds to a multi-job scenario's (their sections are fuzzed there)
QUEUE_KEYS = ("scheduler", "iterations", "priority", "arrival", "placement", "name")


@st.composite
def queue_cases(draw):
    raw = json.loads(json.dumps(QUEUE))
    places = [p for p in _paths(raw) if any(k in QUEUE_KEYS for k in p)]
    places += [("scheduler", "arrivals"), ("scheduler", "arrivals", "mean_interarrival"), ("jobs", 0, "x")]
    path = draw(st.sampled_from(places))
    if path[:2] == ("scheduler", "arrivals") and len(path) == 3:
        raw["scheduler"]["arrivals"] = {"process": "poisson"}
        for job in raw["jobs"]:
            del job["arrival"]
    _parent(raw, path)[path[-1]] = _odd(draw)
    return raw


def _queue(tmp: Path, raw: dict) -> dict:
    from clustersim.scheduler import schedule

    return schedule(raw).summary


@st.composite
def trace_cases(draw):
    rows = [["job", "arrival_s"], ["a", "0"], ["b", "0.5"]]
    rows[draw(st.integers(0, 2))][draw(st.integers(0, 1))] = str(draw(ODD_VALUES))
    if draw(st.booleans()):  # a row added or a cell too many
        rows.append(rows[1] + ([str(draw(ODD_VALUES))] if draw(st.booleans()) else []))
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


def _trace(tmp: Path, text: str) -> dict:
    path = tmp / "arrivals.csv"
    path.write_text(text)
    raw = json.loads(json.dumps(QUEUE))
    raw["scheduler"]["arrivals"] = {"trace": str(path)}
    for job in raw["jobs"]:
        del job["arrival"]
    return _queue(tmp, raw)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "b"
    cs.simulate(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml", progress=False).save(out, plots=False)
    return out


@st.composite
def bundle_cases(draw):
    which = draw(
        st.sampled_from(["summary.json", "devices.csv", "spans", "memory", "scenario.resolved.yaml"])
    )
    return which, draw(ODD_VALUES), draw(st.integers(0, 10**6))


def _bundle(tmp: Path, original: Path, case) -> dict:
    import pandas as pd

    which, value, pick = case
    out = tmp / "b"
    out.mkdir()
    for f in original.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    if which == "summary.json":
        doc = json.loads((out / which).read_text())
        doc[sorted(doc)[pick % len(doc)]] = value
        (out / which).write_text(json.dumps(doc, allow_nan=True, default=str))
    elif which == "scenario.resolved.yaml":
        doc = yaml.safe_load((out / which).read_text())
        doc[sorted(doc)[pick % len(doc)]] = value if not isinstance(value, float) else str(value)
        (out / which).write_text(yaml.safe_dump(doc))
    else:
        name = which if which.endswith(".csv") else next(f.name for f in out.iterdir() if f.stem == which)
        read, write = (
            (pd.read_csv, lambda df, p: df.to_csv(p, index=False))
            if name.endswith(".csv")
            else (pd.read_parquet, lambda df, p: df.to_parquet(p, index=False))
        )
        df = read(out / name)
        col = df.columns[pick % len(df.columns)]
        df[col] = df[col].astype(object)
        df.loc[pick % len(df), col] = value if not isinstance(value, list | dict) else str(value)
        with contextlib.suppress(Exception):  # a value the format itself cannot hold is not a case
            write(df, out / name)
    return cs.load_result(out).summary


SURFACES = {
    "hf_config": (hf_cases(), _hf),
    "profile": (profile_cases(), _profile),
    "kineto": (kineto_cases(), _kineto),
    "chakra": (chakra_cases(), _chakra),
    "sweep": (sweep_cases(), _sweep),
    "queue": (queue_cases(), _queue),
    "arrival_trace": (trace_cases(), _trace),
}


def _fuzz(profile, strategy, consume, tmp_path_factory, name: str) -> None:
    """Run ``consume(folder, case)`` under the case limits (:func:`_outcome`) for the cases
    of ``strategy`` that ``profile`` (:data:`FAST` or :data:`SLOW`) draws, each in a fresh folder."""

    @profile
    @given(case=strategy)
    def check(case):
        tmp = tmp_path_factory.mktemp(name)
        _outcome(lambda: consume(tmp, case))

    check()


@pytest.mark.parametrize("surface", SURFACES)
def test_every_surface_refuses_or_answers_soundly(tmp_path_factory, surface):
    _fuzz(FAST, *SURFACES[surface], tmp_path_factory, surface)


@pytest.mark.slow
@pytest.mark.parametrize("surface", SURFACES)
def test_every_surface_refuses_or_answers_soundly_at_length(tmp_path_factory, surface):
    _fuzz(SLOW, *SURFACES[surface], tmp_path_factory, surface)


def test_a_damaged_bundle_is_refused_or_read_soundly(tmp_path_factory, bundle):
    _fuzz(FAST, bundle_cases(), lambda tmp, case: _bundle(tmp, bundle, case), tmp_path_factory, "bundle")


@pytest.mark.slow
def test_a_damaged_bundle_is_refused_or_read_soundly_at_length(tmp_path_factory, bundle):
    _fuzz(SLOW, bundle_cases(), lambda tmp, case: _bundle(tmp, bundle, case), tmp_path_factory, "bundle")
