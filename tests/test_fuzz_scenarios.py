"""Fuzzing the input boundary (issue 18, item 6): hypothesis mutates the shipped scenarios
— typos, type swaps, extreme numbers, unicode, duplicate keys, aliases, deep nesting,
damaged bytes — and every case must load (and, for the cheap scenarios, simulate within
a time limit and a memory limit) or raise clustersim's own error naming a field. Never a
traceback, never a hang, never a case that eats the machine's memory. The default run is
derandomized and takes ~20 s; ``pytest -m slow`` runs 2,000 random cases."""

from __future__ import annotations

import contextlib
import math
import resource
from pathlib import Path

import psutil
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.experiments.runner import RunTimeout, time_limit
from clustersim.reader import MAX_DEPTH
from tests.test_input_boundary import BOMB

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = {
    p.relative_to(ROOT / "scenarios").as_posix(): p.read_text()
    for p in sorted((ROOT / "scenarios").rglob("*.yaml"))
    if "sweeps" not in p.parts
}
#: scenarios cheap enough to simulate after a mutation (the rest are only loaded)
CHEAP = {"synthetic-4stage-1f1b.yaml", "edgepipe-vit-large-4xT4-1GbE.yaml", "ps-edge-16workers-20mbit.yaml"}
SIMULATE_S = 3.0
#: loading takes well under a second; the limit only tells a hang from a loaded machine
LOAD_S = 20.0
#: address space a case may add to the test process before allocating fails (MemoryError:
#: a failure of the case, not an out-of-memory kill of the suite)
CASE_BYTES = 1 << 30


@contextlib.contextmanager
def memory_limit(extra: int):
    """Cap this process's address space (RLIMIT_AS) at its current size + ``extra`` bytes
    while the block runs, and lift the cap after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = psutil.Process().memory_info().vms + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


ODD_VALUES = st.one_of(
    st.sampled_from(
        [0, -1, 1, 2**64 + 1, 10**400, 1e308, -1e308, 1e-320, math.inf, -math.inf, math.nan, True, None]
        + ["", "x", "1e-400 s", "9999999 TB", "-3 ms", "ü", "\u202e", "🙂", "a\x00b", "auto", "1f1b"]
        + [[], {}, [1, 2], ["x"], {"a": 1}, {"kind": ["x"]}]
    ),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
)


def _paths(node, prefix=()) -> list[tuple]:
    """Every place in a parsed scenario a value sits (dict keys and list indices)."""
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((*prefix, key))
        out += _paths(value, (*prefix, key))
    return out


def _parent(raw, path):
    for part in path[:-1]:
        raw = raw[part]
    return raw


@st.composite
def value_mutation(draw, raw: dict) -> str:
    """Set one value anywhere to an odd one (a type swap, an extreme number, unicode)."""
    paths = _paths(raw)
    leaves = [p for p in paths if not isinstance(_parent(raw, p)[p[-1]], (dict, list))]
    path = draw(st.sampled_from(leaves if leaves and draw(st.integers(0, 4)) else paths))  # mostly leaves
    _parent(raw, path)[path[-1]] = draw(ODD_VALUES)
    return yaml.safe_dump(raw, allow_unicode=True)


@st.composite
def typo_mutation(draw, raw: dict) -> str:
    """Misspell one key: a character dropped, doubled or replaced."""
    keyed = [p for p in _paths(raw) if isinstance(p[-1], str)]
    path = draw(st.sampled_from(keyed))
    parent, key = _parent(raw, path), path[-1]
    i = draw(st.integers(0, len(key) - 1))
    new = draw(
        st.sampled_from(
            [key[:i] + key[i + 1 :], key[:i] + key[i] * 2 + key[i + 1 :], key[:i] + "é" + key[i + 1 :]]
        )
    )
    if new and new not in parent:
        parent[new] = parent.pop(key)
    return yaml.safe_dump(raw, allow_unicode=True)


@st.composite
def text_mutation(draw, text: str) -> bytes:
    """Damage the file itself: a key line given twice, an alias bomb or an alias, deep
    nesting in place of a value, a stray byte, or the file cut short."""
    lines = text.splitlines(keepends=True)
    keyed = [i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("#")]
    kind = draw(st.sampled_from(["duplicate", "bomb", "alias", "deep", "byte", "cut"]))
    if kind == "duplicate":
        i = draw(st.sampled_from(keyed))
        lines.insert(i + 1, lines[i])
    elif kind == "bomb":
        lines[:0] = [BOMB]
    elif kind == "alias":
        i = draw(st.sampled_from(keyed))
        lines[i] = lines[i].replace(":", ": &anchor", 1) if lines[i].rstrip().endswith(":") else lines[i]
        lines.append("name: *anchor\n")
    elif kind == "deep":
        i, depth = (
            draw(st.sampled_from(keyed)),
            draw(st.sampled_from([MAX_DEPTH - 5, MAX_DEPTH + 1, 1000, 20_000])),
        )
        key = lines[i].split(":")[0]
        lines[i] = f"{key}: {'[' * depth}{']' * depth}\n"
    data = "".join(lines).encode()
    if kind == "byte":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at:]
    elif kind == "cut":
        data = data[: draw(st.integers(0, len(data)))]
    return data


@st.composite
def mutated_scenario(draw) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(CHEAP) if draw(st.booleans()) else sorted(SHIPPED)))
    text = SHIPPED[name]
    how = draw(st.sampled_from(["value", "value", "typo", "text"]))
    if how == "text":
        return name, draw(text_mutation(text))
    strategy = value_mutation if how == "value" else typo_mutation
    return name, draw(strategy(yaml.safe_load(text))).encode()


def _names_a_field(exc: cs.ScenarioError) -> None:
    message = str(exc)
    assert isinstance(exc.field, str) and exc.field, message
    assert message.startswith(f"{exc.field}: "), message
    assert len(message) < 4000, "messages stay bounded"


def check_case(name: str, data: bytes, folder: Path) -> str:
    """Load (and for a cheap scenario simulate) one mutated file; the outcome's name."""
    path = folder / name.replace("/", "_")
    path.write_bytes(data)
    try:
        with time_limit(LOAD_S), memory_limit(CASE_BYTES):  # loading is fast and small
            sc = cs.load_scenario(path)
    except cs.ScenarioError as exc:
        _names_a_field(exc)
        return "refused"
    except RunTimeout:
        pytest.fail(f"loading {name} hung:\n{data[:2000]!r}")
    except MemoryError:
        pytest.fail(f"loading {name} took over {CASE_BYTES >> 20} MiB:\n{data[:2000]!r}")
    if name not in CHEAP:
        return "loaded"
    try:
        with time_limit(SIMULATE_S), memory_limit(CASE_BYTES):
            cs.simulate(sc, progress=False)
    except cs.ScenarioError as exc:
        _names_a_field(exc)
        return "refused when simulated"
    except cs.ClusterSimError:
        return "stalled"  # e.g. a link down for ever: a named SimulationStall
    except RunTimeout:
        return "expensive"  # valid, only slow (work past the budget is refused above)
    except MemoryError:
        pytest.fail(f"simulating {name} took over {CASE_BYTES >> 20} MiB:\n{data[:2000]!r}")
    return "simulated"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


COMMON = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@settings(max_examples=160, derandomize=True, **COMMON)
@given(case=mutated_scenario())
def test_mutated_scenarios_load_or_name_a_field(folder, case):
    event(check_case(*case, folder))  # (pytest --hypothesis-show-statistics counts the outcomes)


@pytest.mark.slow
@settings(max_examples=2000, **COMMON)
@given(case=mutated_scenario())
def test_mutated_scenarios_load_or_name_a_field_at_length(folder, case):
    event(check_case(*case, folder))


def test_a_case_that_balloons_is_a_memory_error_not_an_oom():
    with pytest.raises(MemoryError), memory_limit(CASE_BYTES):
        bytearray(2 * CASE_BYTES)
    bytearray(2 * CASE_BYTES)  # the limit is lifted after the case


def test_the_mutations_reach_every_outcome(folder):
    """The fuzzer is not vacuous: a refused case, a loaded one and a simulated one."""
    quick = SHIPPED["synthetic-4stage-1f1b.yaml"]
    assert check_case("synthetic-4stage-1f1b.yaml", quick.encode(), folder) == "simulated"
    assert check_case("quickstart.yaml", SHIPPED["quickstart.yaml"].encode(), folder) == "loaded"
    assert (
        check_case("quickstart.yaml", SHIPPED["quickstart.yaml"].replace("pp: 4", "pp: [4]").encode(), folder)
        == "refused"
    )
