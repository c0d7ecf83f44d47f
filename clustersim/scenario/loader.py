"""Scenario I/O: load YAML or a dict, apply dotted overrides, turn pydantic errors into ours.

A validation failure becomes one :class:`ScenarioError` whose message names the field
path (``parallel.schedule``), the bad value and what is accepted — one line per problem.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import ClusterSimError, ScenarioError, short_repr
from ..reader import check_text, check_value, parse_yaml, read_yaml_file
from .adapt import adapt_fidelity
from .frameworks import apply_framework
from .schema import ScenarioSpec, _models_in
from .unit_hints import warn_unit_hints

# Pydantic appends the branch of a union it tried (e.g. 'int', "literal['auto']") to an
# error's location; users know fields, not branches, so those parts are dropped.
_BRANCH_TAGS = ("int", "float", "str", "bool", "none", "function-", "constrained-", "literal[", "union[")


def _is_branch(part: object) -> bool:
    return (
        isinstance(part, str)
        and part.startswith(_BRANCH_TAGS)
        and not part.isidentifier()
        or part in ("int", "float", "str", "bool", "none")
    )


def _fields_at(loc: tuple, root: type[BaseModel] = ScenarioSpec) -> list[str]:
    """Field names accepted at the model that location ``loc`` points into, from ``root``
    (list indices pass into the list's items; an optional or annotated model counts)."""
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int):
            continue
        if part not in model.model_fields:
            break
        # a sub-model, an optional one (``Spec | None``) or a list of one; a union of
        # several models has no one list of fields
        inner = _models_in(model.model_fields[part].annotation)
        if len(inner) != 1:
            model = None
            break
        model = inner[0][0]
    return sorted(model.model_fields) if model is not None else []


def _to_scenario_error(exc: ValidationError, root: type[BaseModel] = ScenarioSpec) -> ScenarioError:
    """The first problems of a failed validation of ``root`` as one ScenarioError."""
    lines, first = [], None
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not _is_branch(p))
        path = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown field; accepted fields here: {', '.join(_fields_at(loc[:-1], root))}"
        elif err["type"] == "missing":
            msg = "this field is required"
        value = None if err["type"] == "missing" else err.get("input")
        line = (
            f"{path}: {msg}" if err["type"] == "missing" else f"{path}: {short_repr(value)} is invalid; {msg}"
        )
        if line not in lines:
            lines.append(line)
            first = first or (path, value, msg)
    out = ScenarioError(*first)
    out.args = ("\n".join(lines),)
    return out


def validate_spec(raw: dict[str, Any]) -> ScenarioSpec:
    """Validate a raw scenario dict field by field; raise ScenarioError on the first problems."""
    if not isinstance(raw, dict):
        raise ScenarioError("scenario", raw, "expected a mapping with sections cluster, model, training, …")
    if "sweep" in raw:  # a sweep file handed to run/plan: say which command reads it
        raise ScenarioError(
            "sweep",
            raw["sweep"],
            "this is a sweep file, not a scenario; run it with `clustersim sweep FILE` "
            "(or cs.sweep in Python); a scenario has sections cluster, model, training, …",
        )
    check_value(raw)
    try:
        spec = ScenarioSpec.model_validate(apply_framework(adapt_fidelity(raw)))
    except ValidationError as exc:
        raise _to_scenario_error(exc) from None
    warn_unit_hints(raw)
    return spec


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a scenario file through the input boundary (:mod:`.reader`): a missing, huge,
    non-UTF-8 or bad YAML file is a ScenarioError naming the file."""
    return read_yaml_file(path, "scenario")


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``["parallel.pp=4", …]`` (the CLI's ``--set``) as ``{"parallel.pp": "4", …}`` for
    :func:`apply_overrides`; an item without ``=`` is a ClusterSimError naming it."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClusterSimError(f"--set {item!r}: expected key=value, e.g. --set parallel.pp=4")
        out[key.strip()] = value
    return out


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``raw`` with dotted keys (``"parallel.pp"``) set to new values; a
    part made of digits indexes a list (``"jobs.1.start"``: the second job's start).

    String values are read as YAML (bounded, :mod:`.reader`), so ``"4"`` becomes 4 and
    ``"true"`` True, as they arrive from the command line; bad YAML names the key.
    """
    out = copy.deepcopy(raw)
    for key, value in overrides.items():
        if isinstance(value, str) and value.strip():
            value = _read_value(value, key) if len(value) <= 64 else parse_yaml(check_text(value, key), key)
            if not isinstance(value, str | int | float | bool | None):  # the cache's own stays as read
                value = copy.deepcopy(value)
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            node = _child(node, part, key, value, parts[-1])
        if isinstance(node, list):
            node[_index(node, parts[-1], key, value)] = value
        else:
            node[parts[-1]] = value
    return out


@lru_cache(maxsize=1024)
def _read_value(text: str, key: str) -> Any:
    """A short override's text read as YAML (bounded): a search's plans set the same few
    values over and over, each a full YAML parse otherwise."""
    return parse_yaml(check_text(text, key), key)


def _child(node: dict | list, part: str, key: str, value: Any, last: str) -> dict | list:
    """The section ``part`` of ``node`` on the way to ``key``'s field (a missing section
    of a dict is made)."""
    if isinstance(node, list):
        nxt = node[_index(node, part, key, value)]
    else:
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
    if not isinstance(nxt, dict | list):
        raise ScenarioError(key, value, f"{part!r} is not a section, so it has no field {last!r}")
    return nxt


def _index(node: list, part: str, key: str, value: Any) -> int:
    """``part`` as an index of the list ``node`` (0 to len − 1)."""
    if not part.isdigit() or int(part) >= len(node):
        raise ScenarioError(
            key, value, f"{part!r} is not an entry of a list of {len(node)}: an index 0 to {len(node) - 1}"
        )
    return int(part)
