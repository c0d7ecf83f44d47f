"""Sweep grids: axes of scenario overrides, expanded into one override dict per run.

A grid is a mapping ``{"parallel.pp": [1, 2, 4], "parallel.schedule": ["1f1b", "gpipe"]}``
whose axes are crossed (Cartesian product, first axis slowest); ``zip`` axes all have the
same length and advance together as ONE more axis of the product. Each run is keyed by
:func:`run_id`, a stable hash of its overrides, which is what makes a sweep resumable.

Every axis value is checked against the base scenario's schema *before* any run starts
(:func:`check_axes`): an unknown key, a value of the wrong type or an empty axis is a
:class:`ScenarioError` naming the key and the value. A combination that breaks a
cross-field rule (``tp × pp`` not dividing the GPUs) is not an error of the grid: its row
records the reason with ``status = "invalid"``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ScenarioError
from ..reader import check_text, parse_yaml, read_yaml_file
from ..scenario.loader import apply_overrides, validate_spec
from ..scenario.presets import expand_cluster_preset

Grid = Mapping[str, Sequence[Any]]


def canonical(obj: Any) -> str:
    """Compact JSON with sorted keys: the text hashed into ids (stable across runs and machines)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def run_id(overrides: Mapping[str, Any]) -> str:
    """A stable 16-hex-digit id of one run's overrides (the resume key)."""
    return hashlib.sha256(canonical(dict(overrides)).encode()).hexdigest()[:16]


def base_id(raw: Mapping[str, Any]) -> str:
    """A stable id of a base scenario (its raw dict), so a results file is not resumed
    against a different base."""
    return hashlib.sha256(canonical(dict(raw)).encode()).hexdigest()[:16]


def parse_axis(text: str, option: str = "--grid") -> tuple[str, list[Any]]:
    """``"parallel.pp=1,2,4"`` → ``("parallel.pp", [1, 2, 4])``; values read as YAML scalars."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ScenarioError(option, text, "expected KEY=V1,V2,…, e.g. parallel.pp=1,2,4")
    items = [v.strip() for v in values.split(",")] if values.strip() else []
    parsed = []
    for item in items:
        if not item:
            raise ScenarioError(
                key, values, f"{option} has an empty value; expected V1,V2,… with no blank item"
            )
        parsed.append(_yaml_or_text(item, key))
    return key, parsed


def _yaml_or_text(text: str, key: str) -> Any:
    """The YAML value of ``text`` (read through the bounded reader), or ``text`` itself
    when it is no YAML clustersim accepts (the schema then names what is wrong with it)."""
    try:
        return parse_yaml(check_text(text, key), key)
    except ScenarioError:
        return text


def parse_axes(items: Sequence[str], option: str = "--grid") -> dict[str, list[Any]]:
    """Several ``KEY=V1,V2`` texts → a grid dict (a key given twice is an error)."""
    out: dict[str, list[Any]] = {}
    for text in items:
        key, values = parse_axis(text, option)
        if key in out:
            raise ScenarioError(key, text, f"{option} names this key twice; give all its values once")
        out[key] = values
    return out


def as_axes(grid: Grid | None, what: str) -> dict[str, list[Any]]:
    if grid is None:
        return {}
    if not isinstance(grid, Mapping):
        raise ScenarioError(what, grid, "expected a mapping of dotted keys to lists of values")
    out = {}
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise ScenarioError(key, values, f"{what} axis must be a list of values, e.g. [1, 2, 4]")
        if len(values) == 0:
            raise ScenarioError(key, list(values), f"{what} axis is empty; give at least one value")
        out[str(key)] = [_scalar(v) for v in values]
    return out


def _scalar(value: Any) -> Any:
    # Strings are read as YAML scalars, as ``apply_overrides`` and ``--set`` read them, so
    # "4" from a command line and 4 from Python are the same run (and the same run id).
    return _yaml_or_text(value, "grid") if isinstance(value, str) and value.strip() else value


def check_axes(base_raw: Mapping[str, Any], grid: Grid | None, zip_axes: Grid | None = None) -> None:
    """Raise ScenarioError for the first bad axis: empty, a key twice, zipped lengths that
    differ, or a value the schema rejects (unknown key, wrong type, out of range)."""
    axes, zipped = as_axes(grid, "grid"), as_axes(zip_axes, "zip")
    both = sorted(set(axes) & set(zipped))
    if both:
        raise ScenarioError(both[0], axes[both[0]], "is both a grid axis and a zip axis; use one")
    lengths = {k: len(v) for k, v in zipped.items()}
    if len(set(lengths.values())) > 1:
        key = max(lengths, key=lambda k: (lengths[k], k))
        raise ScenarioError(key, zipped[key], f"zip axes must have equal lengths; got {lengths}")
    for key, values in {**axes, **zipped}.items():
        for value in values:
            _check_value(base_raw, key, value)


def _check_value(base_raw: Mapping[str, Any], key: str, value: Any) -> None:
    try:
        validate_spec(expand_cluster_preset(apply_overrides(dict(base_raw), {key: value})))
    except ScenarioError as exc:
        detail = exc.expected if exc.field == key else str(exc)
        raise ScenarioError(key, value, f"grid value rejected: {detail}") from None


#: the most runs a sweep expands unless the caller raises it (``max_runs``, ``--max-runs``):
#: its override dicts alone are ~1 KiB each, and even at ~1 s a run it is days of CPU
MAX_RUNS = 100_000


def count(grid: Grid | None, zip_axes: Grid | None = None) -> int:
    """How many runs :func:`expand` makes, without making them: the grid axes' lengths
    multiplied, times the zip axes' common length."""
    axes, zipped = as_axes(grid, "grid"), as_axes(zip_axes, "zip")
    n = math.prod(len(v) for v in axes.values())
    return n * len(next(iter(zipped.values()))) if zipped else n


def check_count(runs: int, max_runs: int = MAX_RUNS) -> None:
    """Refuse a sweep of more than ``max_runs`` runs before it expands (docs/limits.md)."""
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise ScenarioError("max_runs", max_runs, "a whole number of runs ≥ 1")
    if runs > max_runs:
        raise ScenarioError(
            "sweep.grid",
            f"{runs:,} runs",
            f"at most {max_runs:,} runs (the axes' lengths multiplied); narrow the axes, or raise "
            "the limit (max_runs=, --max-runs)",
        )


def expand(grid: Grid | None, zip_axes: Grid | None = None) -> list[dict[str, Any]]:
    """One override dict per run: the grid axes crossed, the zip axes as one more axis."""
    axes, zipped = as_axes(grid, "grid"), as_axes(zip_axes, "zip")
    keys = list(axes)
    dims: list[list[dict[str, Any]]] = [[{k: v} for v in axes[k]] for k in keys]
    if zipped:
        n = len(next(iter(zipped.values())))
        dims.append([{k: zipped[k][i] for k in zipped} for i in range(n)])
    runs = []
    for combo in itertools.product(*dims):
        merged: dict[str, Any] = {}
        for part in combo:
            merged.update(part)
        runs.append(merged)
    return runs


def load_sweep_file(path) -> tuple[str, dict[str, list[Any]], dict[str, list[Any]]]:
    """Read a sweep file (``sweep: {base: ../x.yaml, grid: {...}, zip: {...}}``).

    Returns (base scenario path resolved against the sweep file's folder, grid, zip).
    """
    from pathlib import Path

    p = Path(path)
    data = read_yaml_file(p, "sweep")
    spec = data.get("sweep") if isinstance(data, dict) else None
    if not isinstance(spec, dict) or "base" not in spec:
        raise ScenarioError(
            "sweep.base", str(path), "a sweep file needs `sweep: {base: SCENARIO.yaml, grid: {...}}`"
        )
    unknown = sorted(set(spec) - {"base", "grid", "zip"})
    if unknown:
        raise ScenarioError(
            f"sweep.{unknown[0]}", spec[unknown[0]], "unknown field; accepted: base, grid, zip"
        )
    base = (p.parent / spec["base"]).resolve()
    return str(base), as_axes(spec.get("grid") or {}, "grid"), as_axes(spec.get("zip") or {}, "zip")


def is_sweep_file(path) -> bool:
    """True when ``path`` is a YAML file whose top level is a ``sweep:`` section."""
    try:
        data = read_yaml_file(path, "sweep")
    except (OSError, ScenarioError):
        return False
    return isinstance(data, dict) and "sweep" in data and "cluster" not in data
