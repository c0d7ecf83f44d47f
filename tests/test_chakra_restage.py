"""A Chakra trace replayed at fewer pipeline stages (``model.replay_pp``,
clustersim.interop.chakra_restage, docs/interop.md): a pp 4 export of a GPT at ``granularity:
layer`` replayed at 2 and 1 stages gives the iteration time of the same workload compiled
natively there, and its collectives; what cannot be re-staged is refused with the reason."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.interop.chakra_restage import replay_at_pp
from clustersim.resolve.job import flush_orders
from clustersim.simulate import compile_scenario


def _scenario(
    pp: int, dp: int = 2, schedule: str = "1f1b", trace: Path | None = None, replay: int = 0
) -> dict:
    """An 8-layer GPT-1.3B on one DGX A100 node, ``pp`` stages × ``dp`` replicas, 8
    micro-batches per replica; or a trace replayed on ``replay`` stages × ``dp`` replicas."""
    raw = {
        "name": f"pp{pp}",
        "cluster": {"preset": "dgx_a100", "nodes": 1},
        "model": {"preset": "gpt-1.3b", "layers": 8},
        "training": {"global_batch": 8 * dp, "micro_batch": 1},
        "parallel": {"pp": pp, "dp": dp, "gpus": pp * dp, "schedule": schedule},
        "simulation": {"fidelity": "fast", "granularity": "layer"},
    }
    if trace is not None:
        raw["model"] = {"kind": "trace", "chakra": str(trace), "replay_pp": replay}
        raw["parallel"] = {"gpus": replay * dp}
    return raw


@pytest.fixture(scope="module")
def pp4_trace(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pp4") / "et"
    cs.export_chakra(_scenario(4), folder)
    return folder


def _collective_bytes(prog) -> Counter:
    """Bytes each rank moves per collective type and group (a merged stage keeps one
    gradient all-reduce per traced stage where the native compile has one of their sum)."""
    out = Counter()
    for op in prog.ops:
        if op.kind == "collective":
            out[op.device, op.collective, op.group] += op.nbytes
    return out


@pytest.mark.parametrize(("schedule", "stages"), [("1f1b", 2), ("1f1b", 1), ("gpipe", 2)])
def test_a_pp4_trace_replayed_at_fewer_stages_is_the_workload_compiled_there(tmp_path, schedule, stages):
    trace = tmp_path / "et"
    cs.export_chakra(_scenario(4, schedule=schedule), trace)
    native_sc = cs.load_scenario(_scenario(stages, schedule=schedule))
    replay_sc = cs.load_scenario(_scenario(4, trace=trace, replay=stages))
    assert _collective_bytes(compile_scenario(replay_sc)) == _collective_bytes(compile_scenario(native_sc))
    native = cs.simulate(native_sc, progress=False).summary["iteration_time_s"]
    replay = cs.simulate(replay_sc, progress=False).summary["iteration_time_s"]
    assert replay == pytest.approx(native, rel=0.02)


def test_a_merged_stage_runs_its_traced_stages_passes_one_after_another(pp4_trace):
    prog = cs.import_chakra(pp4_trace, 8)
    merged = replay_at_pp(prog, 2, flush_orders())

    def pass_ops(p, device, phase, mb):
        return [
            (op.name, op.duration, op.mem_alloc, op.mem_free)
            for op in p.ops
            if op.device == device and op.kind == "compute" and op.phase == phase and op.microbatch == mb
        ]

    # stage-major: traced rank = stage × 2 + replica; replayed rank = new stage × 2 + replica
    for new, (a, b) in enumerate([(0, 2), (4, 6)]):
        for mb in range(8):
            assert pass_ops(merged, new * 2, "F", mb) == pass_ops(prog, a, "F", mb) + pass_ops(
                prog, b, "F", mb
            )
            assert pass_ops(merged, new * 2, "B", mb) == pass_ops(prog, b, "B", mb) + pass_ops(
                prog, a, "B", mb
            )
    assert not any(op.kind in ("send", "recv") and op.device == op.peer for op in merged.ops)
    sends = [op for op in merged.ops if op.kind == "send"]
    assert len(sends) == len([op for op in prog.ops if op.kind == "send"]) // 3  # 1 of 3 boundaries left
    assert merged.static_memory[0] == prog.static_memory[0] + prog.static_memory[2]


def test_what_cannot_be_restaged_is_refused_with_the_reason(pp4_trace, tmp_path):
    interleaved = _scenario(4, dp=1, schedule="interleaved")
    interleaved["parallel"]["virtual_stages"] = 2
    cs.export_chakra(interleaved, tmp_path / "il")
    with pytest.raises(
        cs.ScenarioError, match=r"rank 0's passes run in the order \[\('F', 0\), \('F', 1\).* none of"
    ):
        replay_at_pp(cs.import_chakra(tmp_path / "il", 4), 2, flush_orders())
    prog = cs.import_chakra(pp4_trace, 8)
    with pytest.raises(
        cs.ScenarioError,
        match=r"model.replay_pp: 8 .* splitting a stage needs its layers, and the trace.s ops carry no clustersim.layer",
    ):
        replay_at_pp(prog, 8, flush_orders())
    with pytest.raises(
        cs.ScenarioError, match=r"model.replay_pp: 3 .* accepted: a divisor or a multiple of 4"
    ):
        replay_at_pp(prog, 3, flush_orders())
    with pytest.raises(
        cs.ScenarioError, match=r"rank 0's passes run in the order .* none of the schedules \['gpipe'\]"
    ):
        replay_at_pp(prog, 2, {"gpipe": flush_orders()["gpipe"]})
    prog.ops[5].stage = 3
    with pytest.raises(cs.ScenarioError, match=r"rank 0 holds stages \[0, 3\] \(an interleaved"):
        replay_at_pp(prog, 2, flush_orders())
    for op in prog.ops:
        op.stage = -1  # as a foreign trace: no clustersim.stage labels
    with pytest.raises(
        cs.ScenarioError, match=r"carries no clustersim.stage label, so the trace's pipeline stages"
    ):
        replay_at_pp(prog, 2, flush_orders())
    with pytest.raises(
        cs.ScenarioError,
        match=r"model.replay_pp: 2 .* replayed at 2 stages of 2 rank\(s\) runs on 4 GPUs; the job has 8",
    ):
        bad = _scenario(4, trace=pp4_trace, replay=2)
        bad["parallel"] = {"gpus": 8}
        cs.simulate(bad, progress=False)
