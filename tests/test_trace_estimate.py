"""The estimate of a trace run (issue 38): each op one event, a send its message's events
too (one on the analytical network), a collective its algorithm's messages — summed op by
op in three floats, which must give what the rule gives."""

from __future__ import annotations

from pathlib import Path

import clustersim as cs
from clustersim.compilers import mode_of
from clustersim.resolve.estimate import estimate

ROOT = Path(__file__).resolve().parents[1]


def test_a_pipeline_trace_costs_an_event_an_op_and_one_more_a_send(tmp_path):
    cs.export_chakra(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml", tmp_path)
    job = cs.resolve_scenario(
        {
            "name": "pp-trace",
            "cluster": {
                "nodes": 1,
                "gpus_per_node": 4,
                "gpu": "A100-SXM4-80GB",
                "intra_node": {"kind": "nvswitch", "bandwidth": "300 GB/s", "latency": "2 us"},
            },
            "model": {"kind": "trace", "chakra": str(tmp_path)},
            "training": {"global_batch": 4, "micro_batch": 1},
            "simulation": {"network": "analytical"},
        }
    )
    kinds = [op.kind for op in job.trace.ops]
    assert "collective" not in kinds and "send" in kinds
    est = estimate(job, mode_name=mode_of(job).name)
    assert est.ops == len(kinds)
    assert est.events == len(kinds) + kinds.count("send")
