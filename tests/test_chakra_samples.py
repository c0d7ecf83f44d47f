"""The Chakra ET samples shipped under tests/data/chakra/ import and simulate.

They are what tests/data/make_chakra_samples.py writes (checked byte for byte, so they
cannot go stale), the clustersim-made one replays to the very spans of the scenario it was
exported from, and the foreign-style one (no clustersim attributes, no comm_group.json)
runs its ops in its dependency order."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

import clustersim as cs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "chakra"
_spec = importlib.util.spec_from_file_location(
    "make_chakra_samples", ROOT / "tests/data/make_chakra_samples.py"
)
samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(samples)


def _trace_scenario(folder: Path, gpus: int) -> dict:
    return {
        "name": f"replay-{folder.name}",
        "cluster": {
            "nodes": 1,
            "gpus_per_node": gpus,
            "gpu": "A100-SXM4-80GB",
            "intra_node": {"kind": "nvswitch", "bandwidth": "300 GB/s", "latency": "2 us"},
        },
        "model": {"kind": "trace", "chakra": str(folder)},
        "training": {"global_batch": 8, "micro_batch": 1},
    }


@pytest.mark.parametrize("name", ["synthetic-pp4-dp2", "synthetic-dp8", "foreign-4rank"])
def test_shipped_samples_are_what_the_generator_writes(tmp_path, name):
    samples.write_samples(tmp_path)
    shipped = sorted(p.name for p in (DATA / name).iterdir())
    assert shipped == sorted(p.name for p in (tmp_path / name).iterdir())
    for f in shipped:
        assert (DATA / name / f).read_bytes() == (tmp_path / name / f).read_bytes(), f


def test_the_clustersim_sample_replays_to_its_scenarios_spans():
    alone = cs.simulate(samples.synthetic_scenario(), progress=False)
    replay = cs.simulate(_trace_scenario(DATA / "synthetic-pp4-dp2", 8), progress=False)
    assert replay.summary["schedule"] == "trace"
    assert replay.summary["iteration_time_s"] == alone.summary["iteration_time_s"]
    cols = ["device", "lane", "name", "start_s", "end_s"]
    pd.testing.assert_frame_equal(
        replay.spans[cols].reset_index(drop=True), alone.spans[cols].reset_index(drop=True), check_exact=True
    )


def test_the_foreign_sample_runs_in_its_dependency_order():
    res = cs.simulate(_trace_scenario(DATA / "foreign-4rank", 4), progress=False)
    spans = res.spans[res.spans.kind != "link"]  # the GPUs' own ops, not the links they cross
    fwd = spans[spans.name == "fwd"]
    assert len(fwd) == 4 and (fwd.start_s == 0).all()
    assert fwd.end_s.tolist() == pytest.approx([samples.FOREIGN_COMPUTE_US * 1e-6] * 4, rel=1e-12)
    coll = spans[spans.name == "all-reduce"]
    assert (coll.start_s >= fwd.end_s.max() - 1e-15).all() and (coll.end_s > coll.start_s).all()
    p2p = spans[spans.name == "p2p"]
    assert len(p2p) == 2 and (p2p.start_s >= coll.end_s.min() - 1e-15).all()
    assert res.summary["iteration_time_s"] == pytest.approx(p2p.end_s.max(), rel=1e-12)
