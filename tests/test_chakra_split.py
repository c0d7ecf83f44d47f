"""A Chakra trace replayed at more pipeline stages (``model.replay_pp`` a multiple of the
trace's; clustersim.interop.chakra_split, docs/interop.md): an export with layer labels of an
8-layer GPT at pp 2 and pp 1 replayed at 4 and 2 stages gives the iteration time of the same
workload compiled natively there (within 2 %, as the merge tests hold it), with and without
tensor parallelism; the labelled compile leaves the iteration as it was; what cannot be
split is refused with the reason."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.interop.chakra_restage import replay_at_pp
from clustersim.resolve.job import flush_orders
from clustersim.simulate import compile_scenario
from clustersim.workload.stage_cost import even_partition

LAYERS = 8


def _scenario(
    pp: int, dp: int = 2, tp: int = 1, schedule: str = "1f1b", trace: Path | None = None, replay: int = 0
) -> dict:
    """An 8-layer GPT-1.3B on one DGX A100 node, ``pp`` stages × ``dp`` replicas × ``tp``,
    8 micro-batches per replica; or a trace replayed on ``replay`` stages."""
    raw = {
        "name": f"pp{pp}",
        "cluster": {"preset": "dgx_a100", "nodes": 1},
        "model": {"preset": "gpt-1.3b", "layers": LAYERS},
        "training": {"global_batch": 8 * dp, "micro_batch": 1},
        "parallel": {"pp": pp, "dp": dp, "tp": tp, "gpus": pp * dp * tp, "schedule": schedule},
        "simulation": {"fidelity": "fast", "granularity": "layer"},
    }
    if trace is not None:
        raw["model"] = {"kind": "trace", "chakra": str(trace), "replay_pp": replay}
        raw["parallel"] = {"gpus": replay * dp * tp}
    return raw


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Labelled exports, made once per (pp, dp, tp, schedule)."""
    made = {}

    def get(pp: int, dp: int = 2, tp: int = 1, schedule: str = "1f1b") -> Path:
        key = (pp, dp, tp, schedule)
        if key not in made:
            made[key] = tmp_path_factory.mktemp(f"pp{pp}dp{dp}tp{tp}{schedule}") / "et"
            cs.export_chakra(_scenario(pp, dp, tp, schedule), made[key], layers=True)
        return made[key]

    return get


def _time(raw: dict) -> float:
    return cs.simulate(raw, progress=False).summary["iteration_time_s"]


def test_the_labelled_compile_runs_the_same_iteration_with_every_pass_op_on_its_layer(traces):
    trace = traces(2)
    assert _time(_scenario(2, trace=trace, replay=2)) == pytest.approx(_time(_scenario(2)), rel=1e-12)
    prog = cs.import_chakra(trace, 4)
    per = even_partition(LAYERS, 2)[0]
    labelled = [op for op in prog.ops if op.layer >= 0]
    assert {op.layer for op in labelled} == set(range(LAYERS))
    assert all(op.layer // per == op.stage for op in labelled)  # stage s holds layers s·4 … s·4 + 3
    # in a pass, the ops without a layer are the framework's per-pass work, leading it
    lead = {
        op.name.split()[0] for op in prog.ops if op.layer < 0 and op.kind == "compute" and op.microbatch >= 0
    }
    assert lead == {"framework"}
    native = compile_scenario(cs.load_scenario(_scenario(2)))
    assert sum(op.duration for op in labelled) == pytest.approx(
        sum(op.duration for op in native.ops if op.kind == "compute" and op.microbatch >= 0)
        - sum(op.duration for op in prog.ops if op.layer < 0 and op.kind == "compute" and op.microbatch >= 0),
        rel=1e-12,
    )


CASES = [  # (traced pp, replayed pp, dp, tp, schedule)
    (2, 4, 2, 1, "1f1b"),
    (1, 2, 2, 1, "1f1b"),
    pytest.param(1, 4, 2, 1, "1f1b", marks=pytest.mark.slow),
    pytest.param(2, 4, 2, 1, "gpipe", marks=pytest.mark.slow),
    pytest.param(2, 4, 2, 1, "zb_h1", marks=pytest.mark.slow),
    (2, 4, 1, 2, "1f1b"),
    pytest.param(1, 2, 1, 2, "1f1b", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("pp", "new", "dp", "tp", "schedule"), CASES)
def test_a_split_trace_runs_as_the_workload_compiled_at_more_stages(traces, pp, new, dp, tp, schedule):
    trace = traces(pp, dp, tp, schedule)
    native_sc = _scenario(new, dp, tp, schedule)
    replay_sc = _scenario(pp, dp, tp, schedule, trace=trace, replay=new)
    native, replay = (compile_scenario(cs.load_scenario(raw)) for raw in (native_sc, replay_sc))
    # the same pipeline transfers, and per rank the same collectives within a byte per layer
    assert _transfers(replay) == _transfers(native)
    # (a trace of one GPU per replica holds no gradient-norm reduction to copy — its group was
    # that GPU — where the native compile's stages sum their norms: 4 bytes, left out)
    scalars = pp == 1 and tp == 1
    mine, theirs = _collectives(replay), _collectives(native, scalars)
    assert mine.keys() == theirs.keys()
    assert all(abs(mine[key] - theirs[key]) <= LAYERS for key in theirs)
    assert _time(replay_sc) == pytest.approx(_time(native_sc), rel=0.02)


def _transfers(prog) -> Counter:
    """(sender, receiver, bytes, phase) of the pipeline's sends, counted."""
    return Counter(
        (op.device, prog.ops[op.peer].device, op.nbytes, op.phase)
        for op in prog.ops
        if op.kind == "send" and op.lane == "send"
    )


def _collectives(prog, scalars: bool = False) -> Counter:
    """Bytes each rank moves per collective type and group (``scalars``: leaving out the
    4-byte reductions of the gradient norm)."""
    out = Counter()
    for op in prog.ops:
        if op.kind == "collective" and not (scalars and op.nbytes == 4):
            out[op.device, op.collective, tuple(sorted(op.group))] += op.nbytes
    return out


def test_a_split_stage_runs_its_layers_passes_with_the_traced_times(traces):
    trace = traces(2)
    prog = cs.import_chakra(trace, 4)
    split = replay_at_pp(prog, 4, flush_orders(), _table(trace))
    # stage-major: traced rank = stage × 2 + replica; new rank = new stage × 2 + replica
    for new in range(4):
        for mb in range(8):
            for phase in "FB":
                mine = [
                    (op.name, op.duration, op.layer)
                    for op in split.ops
                    if op.device == new * 2 and op.microbatch == mb and op.phase == phase and op.layer >= 0
                ]
                theirs = [
                    (op.name, op.duration, op.layer)
                    for op in prog.ops
                    if op.device == new // 2 * 2
                    and op.microbatch == mb
                    and op.phase == phase
                    and op.layer in range(new * 2, new * 2 + 2)
                ]
                assert mine == theirs and mine
    # each pass of a micro-batch crosses 3 boundaries each way, once per replica
    assert len([op for op in split.ops if op.kind == "send" and op.lane == "send"]) == 3 * 2 * 8 * 2
    assert sum(m.weights for m in split.static_memory) == pytest.approx(
        sum(m.weights for m in prog.static_memory), abs=8
    )


def _table(trace: Path) -> dict:
    from clustersim.interop.chakra_layers import read_table

    return read_table(trace)


def test_what_cannot_be_split_is_refused_with_the_reason(traces, tmp_path):
    trace = traces(2)
    prog = cs.import_chakra(trace, 4)
    with pytest.raises(
        cs.ScenarioError, match=r"model.replay_pp: 3 .* accepted: a divisor or a multiple of 2"
    ):
        replay_at_pp(prog, 3, flush_orders(), _table(trace))
    with pytest.raises(
        cs.ScenarioError, match=r"model.replay_pp: 16 .* whole number of the model's 8 layers"
    ):
        replay_at_pp(prog, 16, flush_orders(), _table(trace))
    cs.export_chakra(_scenario(2), tmp_path / "plain")  # without layer labels
    plain = cs.import_chakra(tmp_path / "plain", 4)
    with pytest.raises(cs.ScenarioError, match=r"model.replay_pp: 4 .* carry no clustersim.layer label"):
        replay_at_pp(plain, 4, flush_orders(), _table(tmp_path / "plain"))
    moved = next(op for op in prog.ops if op.layer == 0)
    moved.layer = 7  # an op of the last layer on the first stage
    with pytest.raises(cs.ScenarioError, match=r"of layer 7 sits on traced stage 0, not where an even split"):
        replay_at_pp(prog, 4, flush_orders(), _table(trace))
    synthetic = {
        **_scenario(2),
        "model": {"kind": "synthetic", "layers": 8, "forward": "1 ms", "backward": "2 ms"},
    }
    for raw, field in (
        (synthetic, "model.kind: 'synthetic'"),
        ({**_scenario(2), "simulation": {"fidelity": "fast"}}, "simulation.granularity: 'stage'"),
    ):
        with pytest.raises(cs.ScenarioError, match=rf"{field} .* layer labels are a transformer's passes"):
            cs.export_chakra(raw, tmp_path / "refused", layers=True)


def test_the_labels_are_plain_chakra_attributes(traces):
    """The labelled export read back by tests/test_chakra.py's wire decoder (independent of
    the protobuf package): each rank's metadata holds the layer table, and every compute node
    of a pass but its leading framework work carries ``clustersim.layer``."""
    spec = importlib.util.spec_from_file_location("chakra_wire", Path(__file__).with_name("test_chakra.py"))
    wire = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wire)
    trace = traces(2)
    table = _table(trace)
    for path in sorted(trace.glob("*.et")):
        meta, nodes = wire._decode(path)
        assert meta["clustersim.layer_grads"] == table["grads"] and len(table["grads"]) == LAYERS
        assert meta["clustersim.layer_send"] == table["send"] > 0
        passes = [n for n in nodes if n["type"] == 4 and n["attr"].get("clustersim.microbatch", -1) >= 0]
        bare = [n["name"] for n in passes if "clustersim.layer" not in n["attr"]]
        assert bare and all(name.startswith("framework ") for name in bare)
