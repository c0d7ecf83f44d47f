"""A Chakra trace replayed at another data-parallel degree (``model.replay_dp``,
clustersim.interop.chakra_rescale, docs/interop.md): the export of a DP-4 scenario replayed
at 8 and 16 ranks gives the collectives — their bytes and times — and the iteration time of
the same workload compiled natively at that scale; what has no such meaning is refused with
the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

import clustersim as cs
from clustersim.interop.chakra_rescale import replay_at_dp
from clustersim.simulate import compile_scenario


def _scenario(gpus: int, trace: Path | None = None, pp: int = 1, replay: int | None = None) -> dict:
    """A 2-layer GPT-1.3B over ``gpus`` A100s (8 per DGX node), ``pp`` stages, 2 micro-batches
    per replica and stage: the global batch grows with the replicas; or a trace replayed on them
    at ``replay`` replicas."""
    raw = {
        "name": f"dp{gpus}",
        "cluster": {"preset": "dgx_a100", "nodes": max(1, gpus // 8)},
        "model": {"preset": "gpt-1.3b", "layers": 2},
        "training": {"global_batch": 2 * gpus // pp, "micro_batch": 1},
        "parallel": {"pp": pp, "dp": gpus // pp, "gpus": gpus},
        "simulation": {"fidelity": "fast"},
    }
    if trace is not None:
        raw["model"] = {"kind": "trace", "chakra": str(trace), "replay_dp": replay or gpus}
        raw["parallel"] = {"gpus": gpus}
    return raw


@pytest.fixture(scope="module")
def dp4_trace(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dp4") / "et"
    cs.export_chakra(_scenario(4), folder)
    return folder


def _collectives(res) -> list[tuple]:
    spans = res.spans[res.spans.kind == "collective"].sort_values(["device", "start_s"])
    return list(zip(spans.device, spans.name, spans.end_s - spans.start_s))


def _same_workload(native_sc, replay_sc) -> None:
    """The replayed scenario has the native one's collectives (ranks, names, groups, bytes),
    each as long within 2 %, and its iteration time within 2 %."""
    native, replay = compile_scenario(native_sc), compile_scenario(replay_sc)

    def sizes(prog):
        return sorted(
            (op.device, op.name, op.collective, op.group, op.nbytes)
            for op in prog.ops
            if op.kind == "collective"
        )

    assert sizes(native) == sizes(replay)
    a, b = cs.simulate(native_sc, progress=False), cs.simulate(replay_sc, progress=False)
    times_a, times_b = _collectives(a), _collectives(b)
    assert [t[:2] for t in times_a] == [t[:2] for t in times_b]
    for (_, _, ta), (_, _, tb) in zip(times_a, times_b):
        assert tb == pytest.approx(ta, rel=0.02)
    assert b.summary["iteration_time_s"] == pytest.approx(a.summary["iteration_time_s"], rel=0.02)


@pytest.mark.parametrize("gpus", [8, 16])
def test_a_dp4_trace_replayed_at_8_and_16_ranks_is_the_workload_compiled_there(dp4_trace, gpus):
    replay_sc = cs.load_scenario(_scenario(gpus, dp4_trace))
    _same_workload(cs.load_scenario(_scenario(gpus)), replay_sc)
    groups = {op.group for op in compile_scenario(replay_sc).ops if op.kind == "collective"}
    assert groups == {tuple(range(gpus))}


def test_a_pipeline_trace_replayed_at_more_replicas_keeps_its_stages(tmp_path):
    folder = tmp_path / "pp2dp2"
    cs.export_chakra(_scenario(4, pp=2), folder)
    _same_workload(cs.load_scenario(_scenario(8, pp=2)), cs.load_scenario(_scenario(8, folder, replay=4)))


def test_each_replayed_rank_runs_its_traced_ranks_ops(dp4_trace):
    prog = cs.import_chakra(dp4_trace, 4)
    big = replay_at_dp(prog, 10)
    for r in range(10):
        mine = [(op.lane, op.kind, op.name, op.duration, op.nbytes) for op in big.ops if op.device == r]
        assert mine == [
            (op.lane, op.kind, op.name, op.duration, op.nbytes) for op in prog.ops if op.device == r % 4
        ]
    assert big.static_memory == [prog.static_memory[r % 4] for r in range(10)]


def test_what_cannot_be_replayed_at_another_degree_is_refused_with_the_reason(tmp_path, dp4_trace):
    tp = tmp_path / "tp2"
    raw = _scenario(4)
    raw["parallel"] = {"tp": 2, "dp": 2, "gpus": 4}
    cs.export_chakra(raw, tp)
    with pytest.raises(
        cs.ScenarioError, match=r"model.replay_dp: 8 .* spans ranks \[0, 1\], neither .* a tensor-"
    ):
        replay_at_dp(cs.import_chakra(tp, 4), 8)
    pipeline = tmp_path / "pp2"
    cs.export_chakra(_scenario(4, pp=2), pipeline)
    prog = cs.import_chakra(pipeline, 4)
    for op in prog.ops:
        op.stage = -1  # as a foreign trace: no clustersim.stage labels
    with pytest.raises(
        cs.ScenarioError, match=r"sends between ranks but rank 0's ops carry no clustersim.stage"
    ):
        replay_at_dp(prog, 4)
    with pytest.raises(cs.ScenarioError, match=r"model.replay_dp: 3 .* a multiple of that many GPUs"):
        cs.load_scenario(_scenario(16, dp4_trace, replay=3))
    with pytest.raises(
        cs.ScenarioError, match=r"replayed at 8 replicas of 1 rank\(s\) runs on 8 GPUs; the job has 16"
    ):
        cs.simulate(_scenario(16, dp4_trace, replay=8), progress=False)
