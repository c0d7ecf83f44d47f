"""Numbers the README and the scenario headers quote are the numbers the scenarios print.

A scenario header states them on ``# Prints: key value, key value`` lines (optionally
``# Prints (--set k=v ...): …`` for a variant); the README puts an HTML comment
``<!-- prints: scenarios/X.yaml key value … -->`` after the paragraph that quotes them, and
each value must appear in that paragraph. A quoted value holds to the digits written.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import clustersim as cs

ROOT = Path(__file__).resolve().parents[1]
HEADER = re.compile(r"^# Prints(?: \(([^)]*)\))?: (.+)$", re.M)
README = re.compile(r"<!-- prints: (\S+) (.+?) -->")
PAIR = re.compile(r"(\w+) (-?\d+(?:\.\d+)?)")


def _quotes():
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        for sets, pairs in HEADER.findall(path.read_text()):
            yield path.name, sets, PAIR.findall(pairs)
    text = (ROOT / "README.md").read_text()
    for m in README.finditer(text):
        paragraph = text[: m.start()].rsplit("\n\n", 1)[-1]
        pairs = PAIR.findall(m.group(2))
        for key, value in pairs:
            assert f"{key} {value}" in paragraph, f"README quotes {key} {value} only in its comment"
        yield m.group(1), "", pairs


QUOTES = list(_quotes())
_RUNS: dict = {}
#: scenarios whose run takes over ~20 s: their quotes run with the slow tests
SLOW = {"deepseek-v3-2048xh800-dualpipe.yaml"}


def _summary(scenario: str, sets: str) -> dict:
    if (scenario, sets) not in _RUNS:
        path = ROOT / "scenarios" / Path(scenario).name
        over = dict(item.split("=", 1) for item in re.findall(r"--set (\S+)", sets))
        sc = cs.load_scenario(str(path)).with_overrides({k: yaml.safe_load(v) for k, v in over.items()})
        _RUNS[scenario, sets] = cs.simulate(sc, progress=False).summary
    return _RUNS[scenario, sets]


def test_something_is_quoted():
    assert {q[0] for q in QUOTES} >= {"quickstart.yaml", "synthetic-4stage-1f1b.yaml"}


@pytest.mark.parametrize(
    "scenario,sets,pairs",
    [pytest.param(*q, marks=[pytest.mark.slow] if q[0] in SLOW else []) for q in QUOTES],
    ids=[f"{q[0]}{q[1]}" for q in QUOTES],
)
def test_quoted_numbers_are_printed(scenario, sets, pairs):
    summary = _summary(scenario, sets)
    for key, value in pairs:
        decimals = len(value.partition(".")[2])
        assert abs(summary[key] - float(value)) <= 0.5 * 10**-decimals * (1 + 1e-9), (
            key,
            summary[key],
            value,
        )
