"""The input boundary (clustersim.reader): every hostile or careless input of
issue 18 is refused with one ScenarioError naming the field — never a traceback or a hang."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

import clustersim as cs
from clustersim.errors import REPR_LIMIT, short_repr
from clustersim.reader import MAX_BYTES, MAX_DEPTH, MAX_NODES, parse_yaml
from clustersim.topology import TOPOLOGIES
from clustersim.workload.cost_model import ProfileTable
from clustersim.workload.hf_config import load_hf_config
from tests.conftest import synthetic

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = (ROOT / "scenarios" / "quickstart.yaml").read_text()
WAN = ROOT / "scenarios" / "fusionllm-gpt-1.3b-48gpu-3sites-wan.yaml"

#: "billion laughs": 9 levels of 9 aliases each, 9⁹ strings once expanded
BOMB = "".join(
    f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join([f'*{chr(96 + i)}'] * 9) if i else ', '.join(['lol'] * 9)}]\n"
    for i in range(9)
)


def _refused(text: str, path: Path) -> cs.ScenarioError:
    path.write_text(text)
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(path)
    return e.value


def test_duplicate_key_names_both_lines(tmp_path):
    text = QUICKSTART.replace("  pp: 4\n", "  pp: 4\n  virtual_stages: 1\n  pp: 2\n", 1)
    lines = text.splitlines()
    first, second = (i + 1 for i, line in enumerate(lines) if line.strip().startswith("pp:"))
    err = _refused(text, tmp_path / "s.yaml")
    assert f"parallel.pp is given on lines {first} and {second}" in str(err)
    assert err.field == "scenario"


def test_duplicate_key_in_flow_mapping(tmp_path):
    err = _refused("parallel: {pp: 4, pp: 2}\n", tmp_path / "s.yaml")
    assert "parallel.pp is given twice on line 1; YAML would keep only the last" in str(err)


def test_merge_key_may_be_overridden():
    assert parse_yaml("x: &b {p: 1, q: 3}\ny: {<<: *b, p: 2}\n", "f") == {
        "x": {"p": 1, "q": 3},
        "y": {"p": 2, "q": 3},
    }


def test_aliases_within_budget_are_read():
    assert parse_yaml("a: &x [1, 2]\nb: *x\n", "f") == {"a": [1, 2], "b": [1, 2]}


def test_alias_bomb_is_refused_fast(tmp_path):
    start = time.perf_counter()
    err = _refused(BOMB, tmp_path / "bomb.yaml")
    assert time.perf_counter() - start < 2.0
    assert f"more than {MAX_NODES:,} values with its aliases expanded" in str(err)


def test_alias_inside_itself_is_refused():
    with pytest.raises(cs.ScenarioError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_yaml("a: &a [*a]\n", "f")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
def test_deep_nesting_is_refused(tmp_path, depth):
    err = _refused("a: " + "[" * depth + "]" * depth + "\n", tmp_path / "deep.yaml")
    assert f"nested deeper than {MAX_DEPTH} levels (line 1)" in str(err)


def test_nesting_through_chained_aliases_is_refused():
    half = MAX_DEPTH // 2 + 1
    text = f"a: &a {'[' * half}{']' * half}\nb: {'[' * half}*a{']' * half}\n"
    with pytest.raises(cs.ScenarioError, match="with aliases expanded"):
        parse_yaml(text, "f")


def test_non_utf8_byte_gives_its_offset(tmp_path):
    data = QUICKSTART.encode().replace(b"name: quickstart", b"name: quick\xffstart", 1)
    path = tmp_path / "latin.yaml"
    path.write_bytes(data)
    offset = data.index(b"\xff")
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(path)
    line = data[:offset].count(b"\n") + 1
    assert f"not UTF-8 text: byte 0xff at offset {offset} (line {line})" in str(e.value)


def test_oversized_scenario_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.yaml"
    with path.open("wb") as fh:
        fh.truncate(MAX_BYTES["scenario"] + 1)  # sparse: nothing is written
    err = _refused_path(path)
    assert (
        f"the file is {MAX_BYTES['scenario'] + 1:,} bytes; at most {MAX_BYTES['scenario']:,} are read"
        in str(err)
    )


def _refused_path(path: Path) -> cs.ScenarioError:
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(path)
    return e.value


def test_bad_yaml_is_one_line(tmp_path):
    err = _refused("a: [1,\n b: }\n", tmp_path / "s.yaml")
    assert "\n" not in str(err)
    assert "not valid YAML: line 2, column 5: expected the node content, but found '}'" in str(err)


@pytest.mark.parametrize(
    "text,expected",
    [("a: " + "9" * 5000, "Exceeds the limit (4300 digits)"), ("a: 2026-13-45", "month must be in 1..12")],
)
def test_scalars_python_cannot_hold(text, expected):
    with pytest.raises(cs.ScenarioError, match="not a value clustersim can read") as e:
        parse_yaml(text, "f")
    assert expected in str(e.value)


def test_short_repr_is_bounded():
    assert short_repr("x") == "'x'" and short_repr(0.1) == "0.1"
    assert len(short_repr("a" * 10**6)) <= REPR_LIMIT
    assert short_repr(10**5000) == "<int>"
    nested: list = ["lol"] * 9
    for _ in range(9):
        nested = [nested] * 9
    start = time.perf_counter()
    assert len(short_repr(nested)) == REPR_LIMIT
    assert time.perf_counter() - start < 0.1


def test_error_message_of_a_huge_value_is_bounded():
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(synthetic(4, 8)).with_overrides({"parallel.schedule": "x" * 10**6})
    assert len(str(e.value)) < 400


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"model.preset": [1, 2]}, "model.preset"),
        ({"cluster.preset": [1, 2]}, "cluster.preset"),
        ({"model.kind": [1]}, "model.kind"),
        ({"parallel.schedule": ["1f1b"]}, "parallel.schedule"),
        ({"simulation.network": {"a": 1}}, "simulation.network"),
    ],
)
def test_a_list_where_a_name_is_expected(overrides, field):
    raw = yaml.safe_load(QUICKSTART)
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(raw).with_overrides(overrides)
    assert str(e.value).startswith(f"{field}: ")


def _simulate_error(raw: dict) -> str:
    with pytest.raises(cs.ScenarioError) as e:
        cs.simulate(cs.load_scenario(raw))
    return str(e.value)


def test_topology_kind_list():
    sc = cs.load_scenario(synthetic(4, 8, network="packet"))
    with pytest.raises(cs.ScenarioError) as e:  # refused at load, with the topology options
        sc.with_overrides({"cluster.topology": {"kind": ["x"]}})
    assert str(e.value) == f"cluster.topology.kind: ['x'] is invalid; known: auto, {', '.join(TOPOLOGIES)}"


def test_wan_site_topology_list():
    raw = cs.scenario.loader.read_yaml(WAN)
    raw["cluster"]["topology"]["sites"][1]["topology"] = [1, 2]
    assert _simulate_error(raw).startswith(
        "cluster.topology.sites[1].topology: [1, 2] is invalid; a mapping such as {kind: fat_tree}"
    )


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e400", "1e400 B"])
def test_chunk_size_must_be_finite(value):
    with pytest.raises(cs.ScenarioError, match="simulation.chunk_size: .* expected a finite number"):
        cs.load_scenario(synthetic(4, 8)).with_overrides({"simulation.chunk_size": value})


def test_underflow_to_zero_is_refused():
    with pytest.raises(
        cs.ScenarioError, match="model.forward: '1e-400 s' is invalid; too small to tell from 0"
    ):
        cs.load_scenario(synthetic(4, 8)).with_overrides({"model.forward": "1e-400 s"})


@pytest.mark.parametrize(
    "value,expected",
    [
        ("[1,", "parallel.pp: '[1,' is invalid; not valid YAML: line 1, column 4"),
        ("{a: 1, a: 2}", "parallel.pp: '{a: 1, a: 2}' is invalid; a is given twice on line 1"),
        ("x" * (MAX_BYTES["--set"] + 1), f"the value is longer than {MAX_BYTES['--set']:,} bytes"),
    ],
)
def test_bad_set_values(value, expected):
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(synthetic(4, 8)).with_overrides({"parallel.pp": value})
    assert expected in str(e.value)


def _hf(tmp_path, text: str, name: str = "cfg.json") -> str:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(cs.ScenarioError) as e:
        load_hf_config(str(path))
    return str(e.value)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("{", "not valid JSON: Expecting property name enclosed in double quotes"),
        ("[1, 2]", "expected a JSON object (a config.json)"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON: nested too deeply"),
        ('{"n_embd": "big", "n_layer": 2}', "n_embd is 'big'; expected a whole number ≥ 1"),
        ('{"n_embd": 8, "n_positions": 64, "n_layer": [2]}', "n_layer is [2]; expected a whole number ≥ 1"),
    ],
)
def test_malformed_hf_config(tmp_path, text, expected):
    message = _hf(tmp_path, text)
    assert message.startswith("model.hf_config: ") and expected in message


def test_hf_config_non_utf8(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_bytes(b'{"a": "\xc3"}')
    with pytest.raises(cs.ScenarioError, match="not UTF-8 text: byte 0xc3 at offset 7"):
        load_hf_config(str(path))


@pytest.mark.parametrize("field", ["model.hf_config", "model.profile"])
def test_oversized_model_files(tmp_path, field):
    path = tmp_path / "huge"
    with path.open("wb") as fh:
        fh.truncate(MAX_BYTES[field] + 1)
    with pytest.raises(cs.ScenarioError, match=f"{field}: .* at most {MAX_BYTES[field]:,} are read"):
        load_hf_config(str(path)) if field == "model.hf_config" else ProfileTable.read(path)


def test_profile_bad_cell_is_echoed_bounded(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("op,phase,m,n,k,time_us\nqkv,F,,,,12\nqkv,B,,,," + "x" * 10_000 + "\n")
    with pytest.raises(cs.ScenarioError) as e:
        ProfileTable.read(path)
    assert "row 3: expected op,phase,m,n,k,time_us (could not convert string to float: " in str(e.value)
    assert len(str(e.value)) < 400


def test_profile_reads_back(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("op,phase,m,n,k,time_us\nqkv,F,,,,12\nfc1,B,8,16,32,2.5\n")
    assert ProfileTable.read(path).times == {("qkv", "F", None): 12e-6, ("fc1", "B", (8, 16, 32)): 2.5 * 1e-6}


def test_shipped_scenarios_still_read():
    for path in sorted((ROOT / "scenarios").rglob("*.yaml")):
        assert cs.scenario.loader.read_yaml(path) == yaml.safe_load(path.read_text()), path


def test_control_character_is_a_yaml_error():
    with pytest.raises(cs.ScenarioError, match="not valid YAML: unacceptable character #x0000"):
        parse_yaml("\x00name: x", "f")


def test_a_python_dict_gets_the_same_bounds():
    """load_scenario(dict): 9 levels of a list shared 9 times (9⁹ values when expanded)
    and 5,000 levels of nesting are refused at once, as their YAML spelling is."""
    bomb: list = ["lol"] * 9
    for _ in range(8):
        bomb = [bomb] * 9
    raw = synthetic(4, 8)
    raw["cluster"]["topology"] = {"kind": "fat_tree", "x": bomb}
    start = time.perf_counter()
    with pytest.raises(cs.ScenarioError, match=f"more than {MAX_NODES:,} values"):
        cs.load_scenario(raw)
    assert time.perf_counter() - start < 2.0
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    raw["cluster"]["topology"] = {"kind": "fat_tree", "x": deep}
    with pytest.raises(cs.ScenarioError, match=f"nested deeper than {MAX_DEPTH} levels"):
        cs.load_scenario(raw)
