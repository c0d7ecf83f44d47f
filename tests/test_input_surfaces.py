"""Issue 39's input surfaces: each value a Chakra trace, a Kineto trace, a ``model.profile``
table, an HF config or a plan search can carry that used to run silently or crash is
refused with one error naming the file, the node/attribute/field, the value and what is
accepted (docs/limits.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.cli import main
from clustersim.interop.chakra_attrs import OWN, attr
from clustersim.interop.chakra_file import read_trace, write_trace
from clustersim.interop.chakra_values import MAX_BYTES, MEMORY_KINDS

ROOT = Path(__file__).resolve().parents[1]

# -- Chakra ET (case 5, 9, 12) -------------------------------------------------------------------


def _four_ranks(folder: Path) -> list[Path]:
    return cs.export_chakra(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml", folder)


def _set_attr(path: Path, kind: int, name: str, value, which: str | None = None) -> str:
    """Give the first node of type ``kind`` in ``path`` attribute ``name`` = ``value``;
    returns the node's name."""
    meta, nodes = read_trace(path)
    node = next(n for n in nodes if n.type == kind)
    kept = [a for a in node.attr if a.name != name]
    del node.attr[:]
    node.attr.extend([*kept, attr(name, value, which)])
    write_trace(path, meta, nodes)
    return node.name


def _refusal(folder: Path, gpus: int = 4) -> str:
    with pytest.raises(cs.ScenarioError) as err:
        cs.import_chakra(folder, gpus)
    return str(err.value)


@pytest.mark.parametrize(
    "name,value,accepted",
    [
        (OWN + "duration_s", -1.0, "seconds from 0 to 1,000,000"),
        (OWN + "duration_s", math.nan, "seconds from 0 to 1,000,000"),
        (OWN + "duration_s", math.inf, "seconds from 0 to 1,000,000"),
        ("num_ops", -(2**62), "FLOPs from 0 to 1e+24"),
    ],
)
def test_chakra_compute_values_out_of_range_are_refused(tmp_path, name, value, accepted):
    files = _four_ranks(tmp_path)
    _remove_attr(files[1], OWN + "flops")  # num_ops is read where clustersim's own FLOPs are absent
    node = _set_attr(files[1], 4, name, value)
    msg = _refusal(tmp_path)
    assert "model.chakra" in msg and "trace.1.et" in msg and f"({node!r})" in msg
    assert f"attribute {name} = {value!r}" in msg and accepted in msg


def _remove_attr(path: Path, name: str) -> None:
    meta, nodes = read_trace(path)
    for node in nodes:
        kept = [a for a in node.attr if a.name != name]
        del node.attr[:]
        node.attr.extend(kept)
    write_trace(path, meta, nodes)


def _set_static_memory(path: Path, value) -> None:
    meta, nodes = read_trace(path)
    kept = [a for a in meta.attr if a.name != OWN + "static_memory"]
    del meta.attr[:]
    meta.attr.extend([*kept, attr(OWN + "static_memory", value)])
    write_trace(path, meta, nodes)


@pytest.mark.parametrize(
    "value,words",
    [
        ([1, 2, 3], f"a list of {len(MEMORY_KINDS)} byte counts"),
        ([1] * 7, f"a list of {len(MEMORY_KINDS)} byte counts"),
        (
            [2**62] * 5,
            f"static_memory[0] (weights) = {2**62} is invalid; accepted: bytes from 0 to {MAX_BYTES:,}",
        ),
        ([0, -4, 0, 0, 0], "static_memory[1] (grads) = -4 is invalid"),
    ],
)
def test_chakra_static_memory_of_the_wrong_shape_or_size_is_refused(tmp_path, value, words):
    files = _four_ranks(tmp_path)
    _set_static_memory(files[2], value)
    msg = _refusal(tmp_path)
    assert "trace.2.et" in msg and "global metadata" in msg and words in msg


def test_chakra_byte_counts_past_a_pebibyte_are_refused(tmp_path):
    files = _four_ranks(tmp_path)
    node = _set_attr(files[0], 5, "comm_size", 2**62)  # a send
    msg = _refusal(tmp_path)
    assert f"({node!r})" in msg and f"attribute comm_size = {2**62}" in msg and f"{MAX_BYTES:,}" in msg


@pytest.mark.parametrize(
    "text,words",
    [
        ("[[1e999]]", "1e999 is not a finite number"),
        ("[[NaN]]", "NaN is not a number"),
        ("[[0, 99]]", "device indices 0..3, 2 per list"),
        ("[[0]]", "2 per list"),
        ("not json", "is not a JSON list of lists"),
        ("[1, 2]", "accepted: a JSON list of lists"),
    ],
)
def test_chakra_shadows_of_a_send_are_checked_at_import(tmp_path, text, words):
    files = _four_ranks(tmp_path)
    node = _set_attr(files[0], 5, OWN + "shadows", text)
    msg = _refusal(tmp_path)
    assert "trace.0.et" in msg and f"({node!r})" in msg and OWN + "shadows" in msg and words in msg


def test_chakra_rank_count_is_the_first_error(tmp_path):
    """A 4-rank trace on 8 GPUs with a batch that fits the trace: the rank count is named,
    not the global batch (which would fit once the cluster is right)."""
    _four_ranks(tmp_path)
    raw = {
        "name": "t",
        "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu": "A100-SXM4-80GB"},
        "model": {"kind": "trace", "chakra": str(tmp_path)},
        "training": {"global_batch": 4},
    }
    with pytest.raises(cs.ScenarioError) as err:
        cs.load_scenario(raw)
    assert err.value.field == "model.chakra"
    assert "the trace has 4 GPU ranks" in str(err.value) and "the cluster has 8 GPUs" in str(err.value)
    raw["cluster"]["gpus_per_node"] = 4
    assert cs.load_scenario(raw).num_gpus == 4


# -- Kineto JSON (case 11) -----------------------------------------------------------------------

KINETO = ROOT / "tests" / "data" / "kineto_sample.json"


def _first(events: list, cat: str, linked: bool = False) -> dict:
    """The first event of ``cat`` (with ``linked``, the first cpu_op a launch names)."""
    if linked:
        launched = {e["args"].get("External id") for e in events if e["cat"] == "cuda_runtime"}
        return next(e for e in events if e["cat"] == cat and e["args"]["External id"] in launched)
    return next(e for e in events if e.get("cat") == cat)


def _break_args(key):
    return lambda doc: _first(doc["traceEvents"], "cpu_op")["args"].__setitem__(key, [1, 2])


@pytest.mark.parametrize(
    "damage,words",
    [
        (_break_args("External id"), "args['External id'] = [1, 2] is invalid; accepted: a whole-number id"),
        (
            lambda doc: _first(doc["traceEvents"], "kernel")["args"].__setitem__("correlation", [3]),
            "cat kernel): args['correlation'] = [3] is invalid; accepted: a whole-number id",
        ),
        (
            lambda doc: _first(doc["traceEvents"], "cpu_op").__setitem__("args", "mm"),
            "args = 'mm' is invalid; accepted: an object of the op's arguments",
        ),
        (
            lambda doc: _first(doc["traceEvents"], "cpu_op", linked=True).pop("name"),
            "name = None is invalid; accepted: the ATen op's name, a string",
        ),
        (lambda doc: doc.__setitem__("deviceProperties", 7), "deviceProperties = 7 is invalid"),
        (
            lambda doc: doc["deviceProperties"][0].__setitem__("name", 100),
            "deviceProperties = [{",
        ),
        (
            lambda doc: _first(doc["traceEvents"], "cpu_op").__setitem__("ts", "100"),
            "ts = '100' is invalid; accepted: a finite time in µs",
        ),
    ],
)
def test_kineto_fields_of_the_wrong_type_are_named(tmp_path, capsys, damage, words):
    doc = json.loads(KINETO.read_text())
    damage(doc)
    bad = tmp_path / "trace.json"
    bad.write_text(json.dumps(doc))
    assert main(["calibrate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: kineto trace: '{bad}' is invalid; ") and err.count("\n") == 1
    assert words in err and "Traceback" not in err
    if not words.startswith("deviceProperties"):
        assert "traceEvents[" in err  # the event, by its index and name


def test_kineto_tensor_list_shapes_are_read(tmp_path):
    """A tensor-list argument (``aten::cat``'s) has a list of shapes as its Input Dims entry:
    read, not refused, and kept as a hashable key."""
    from clustersim.interop.kineto import read_kineto

    doc = json.loads(KINETO.read_text())
    op = _first(doc["traceEvents"], "cpu_op", linked=True)
    op["name"], op["args"]["Input Dims"] = "aten::cat", [[[2, 3], [2, 3]], []]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert any(m.op == "aten::cat" and m.dims == (((2, 3), (2, 3)), ()) for m in read_kineto(path).ops)


# -- model.profile (case 6) ----------------------------------------------------------------------

SMALL = {
    "name": "profiled",
    "cluster": {"nodes": 1, "gpus_per_node": 1, "gpu": "A100-SXM4-80GB"},
    "model": {"kind": "transformer", "layers": 2, "hidden": 256, "heads": 4, "vocab": 1000, "seq_len": 128},
    "training": {"global_batch": 2, "micro_batch": 2},
}
#: a row the model matches (its qkv GEMM's forward, any shape)
GOOD = "qkv,F,,,,12"


@pytest.mark.parametrize(
    "row,line,column,words",
    [
        ("qvk,F,,,,12", 3, None, "op 'qvk', phase F matches no kernel of this model"),
        ("qkv,X,,,,12", 3, "phase", "accepted: F, B, W"),
        ("qkv,F,-256,768,256,12", 3, "m", "all whole numbers from 1 to 2,147,483,647, or all blank"),
        ("qkv,F,256,768," + "1" + "0" * 400 + ",12", 3, "k", "all whole numbers from 1 to"),
        (GOOD, 3, "op", "the same op, phase and shape are on line 2; give each once"),
        ("qkv,F,3,3,3,12", 3, None, "op 'qkv', phase F at m,n,k = 3,3,3 matches no kernel"),
        ("qkv,F,,,,1e999", 3, "time_us", "accepted: a time in µs from 0 to 1e+12"),
    ],
)
def test_profile_rows_that_match_nothing_are_refused(tmp_path, row, line, column, words):
    path = tmp_path / "p.csv"
    path.write_text(f"op,phase,m,n,k,time_us\n{GOOD}\n{row}\n")
    raw = {**SMALL, "model": {**SMALL["model"], "profile": str(path)}}
    with pytest.raises(cs.ScenarioError) as err:
        cs.simulate(raw, progress=False)
    msg = str(err.value)
    assert msg.startswith(f"model.profile: '{path}' is invalid; line {line}") and words in msg
    if column:
        assert f"line {line}, column {column}: " in msg


def test_a_profile_whose_rows_all_match_changes_the_run(tmp_path):
    path = tmp_path / "p.csv"
    # 500 µs: longer than the host's lag on this host-bound model (a few µs would hide in it)
    path.write_text("op,phase,m,n,k,time_us\nqkv,F,,,,500\n")
    plain = cs.simulate(SMALL, progress=False).summary["iteration_time_s"]
    raw = {**SMALL, "model": {**SMALL["model"], "profile": str(path)}}
    assert cs.simulate(raw, progress=False).summary["iteration_time_s"] != plain


# -- HF config.json (case 7) and vocabulary vs TP (case 17) -------------------------------------


def _hf(tmp_path: Path, **keys) -> str:
    cfg = {
        "model_type": "mixtral",
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 128,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        **keys,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize(
    "key,value,field,accepted",
    [
        ("num_local_experts", 1_000_000, "model.experts", "from 1 to 100,000"),
        ("vocab_size", 10**8, "model.vocab", "from 1 to 10,000,000"),
        ("num_experts_per_tok", 5000, "model.experts_per_token", "from 1 to 1,000"),
    ],
)
def test_hf_config_keys_are_held_to_their_fields_ranges(tmp_path, key, value, field, accepted):
    raw = {**SMALL, "model": {"hf_config": _hf(tmp_path, **{key: value})}}
    with pytest.raises(cs.ScenarioError) as err:
        cs.load_scenario(raw)
    assert err.value.field == "model.hf_config"
    assert f"{key} = {value:,} sets {field}; accepted: {accepted}" in str(err.value)


def test_every_shipped_hf_config_is_within_the_ranges():
    from clustersim.scenario.model_files import check_hf_ranges
    from clustersim.workload.hf_config import DATA_HF

    for path in sorted(DATA_HF.glob("*.json")):
        check_hf_ranges(path.stem)


def test_a_vocabulary_smaller_than_tp_is_refused_at_load():
    raw = {
        **SMALL,
        "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu": "A100-SXM4-80GB"},
        "model": {**SMALL["model"], "heads": 8, "vocab": 2},
        "training": {"global_batch": 1},
        "parallel": {"tp": 8},
    }
    with pytest.raises(cs.ScenarioError) as err:
        cs.load_scenario(raw)
    assert "model.vocab = 2 has fewer rows than tp ranks; accepted: tp ≤ 2" in str(err.value)
    raw["model"]["vocab"] = 8  # one row per TP rank runs
    assert cs.simulate(raw, progress=False).summary["iteration_time_s"] > 0


# -- --set reaches every field, before validation (case 10, item 2) ---------------------------------

TWO_JOBS = ROOT / "scenarios" / "two-jobs-oversubscribed-fat-tree.yaml"


def test_set_addresses_a_job_of_a_multi_job_scenario_by_index():
    # the two jobs share the oversubscribed tree when they start together; started 5 s
    # apart, each runs alone and faster
    together = cs.simulate(cs.load_scenario(TWO_JOBS)).summary
    apart = cs.simulate(cs.load_scenario(TWO_JOBS, {"jobs.1.start": "5 s"})).summary
    assert apart["job_b.iteration_time_s"] < together["job_b.iteration_time_s"]
    assert apart["job_b.iteration_time_s"] == pytest.approx(apart["job_a.iteration_time_s"], rel=1e-12)


def test_set_on_the_command_line_reaches_a_job(capsys):
    assert main(["run", str(TWO_JOBS), "--set", "jobs.1.start=5s", "--quiet"]) == 0
    assert main(["run", str(TWO_JOBS), "--set", "jobs.2.start=5s", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "jobs.2.start" in err and "an index 0 to 1" in err


def test_an_override_mends_a_file_before_validation():
    raw = {
        "cluster": {"nodes": 1, "gpus_per_node": 4},
        "model": {"kind": "synthetic", "layers": 4, "forward": 1e-3, "backward": 2e-3},
        "training": {"global_batch": 4},
        "parallel": {"pp": 3},  # 3 stages do not divide 4 GPUs: refused alone
    }
    with pytest.raises(cs.ScenarioError):
        cs.load_scenario(raw)
    assert cs.load_scenario(raw, {"parallel.pp": "4"}).spec.parallel.pp == 4


def test_an_override_undoes_what_a_profile_fills():
    # megatron_core fills flash attention where the file does not state it; --set wins
    quick = ROOT / "scenarios" / "quickstart.yaml"
    assert cs.load_scenario(quick, {"training.framework": "megatron_core"}).spec.model.attention == "flash"
    mine = cs.load_scenario(quick, {"training.framework": "megatron_core", "model.attention": "standard"})
    assert mine.spec.model.attention == "standard"


def test_a_job_named_by_digits_alone_is_refused():
    raw = read_yaml_dict(TWO_JOBS)
    raw["jobs"][0]["name"] = "7"
    with pytest.raises(cs.ScenarioError, match=r"jobs\[0\]\.name.*digits alone"):
        cs.load_scenario(raw)


def read_yaml_dict(path: Path) -> dict:
    from clustersim.scenario import read_yaml

    return read_yaml(path)


# -- a sweep counts its grid before expanding it (case 16, item 5) -----------------------------------


def test_a_sweep_of_millions_of_runs_is_refused_before_it_expands(monkeypatch):
    from clustersim.experiments import grid as grids
    from clustersim.experiments.sweeper import sweep

    def never(*_):
        raise AssertionError("the grid was expanded")

    monkeypatch.setattr(grids, "expand", never)
    axes = {"training.global_batch": list(range(8, 8 * 2001, 8)), "parallel.pp": [1, 2, 4] * 334}
    with pytest.raises(cs.ScenarioError, match=r"sweep\.grid.*2,004,000 runs.*at most 100,000"):
        sweep(ROOT / "scenarios" / "quickstart.yaml", axes)
    assert grids.count(axes) == 2000 * 1002
    assert grids.count({"a": [1, 2]}, {"b": [1, 2, 3], "c": [4, 5, 6]}) == 6


def test_a_sweep_prints_its_count_and_the_base_estimate_first(tmp_path, capsys):
    quick = ROOT / "scenarios" / "quickstart.yaml"
    assert main(["sweep", str(quick), "--grid", "parallel.schedule=1f1b,gpipe", "--workers", "1"]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("sweep: 2 runs; the base run is estimated at ~") and "events" in first
    assert main(["sweep", str(quick), "--grid", "parallel.schedule=1f1b,gpipe", "--max-runs", "1"]) == 2
    assert "at most 1 runs" in capsys.readouterr().err
