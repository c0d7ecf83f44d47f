"""The input boundary: every file and text a user hands clustersim is read here, bounded.

Scenario and sweep files, ``--set`` values, ``model.hf_config`` JSON and ``model.profile``
CSV files all pass through these functions, which refuse — with a :class:`ScenarioError`
naming the field — what would otherwise hang, exhaust memory or crash deep inside:

* a file larger than its cap (:data:`MAX_BYTES`), checked before it is read;
* bytes that are not UTF-8 (the message gives the byte offset and line);
* YAML nested deeper than :data:`MAX_DEPTH` levels, or holding more than
  :data:`MAX_NODES` values once its aliases (``*name``) are expanded — anchors and aliases
  are accepted within that budget, so a "billion laughs" bomb is refused while it is still
  a few lines of text, and an alias that contains itself is refused too;
* a mapping that gives the same key twice (both line numbers are named; YAML itself keeps
  the last one silently). The merge key ``<<`` may be overridden, as YAML intends.

docs/limits.md lists the caps for users.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .errors import ScenarioError

MiB = 2**20
#: size caps per kind of input, in bytes (a ``--set`` value: its UTF-8 encoding)
MAX_BYTES = {
    "scenario": 1 * MiB,
    "model.hf_config": 1 * MiB,
    "model.profile": 16 * MiB,
    "model.chakra": 256 * MiB,
    "kineto trace": 256 * MiB,
    "generation.trace": 64 * MiB,
    "scheduler.arrivals.trace": 16 * MiB,
    "availability": 1 * MiB,
    "--set": 64 * 2**10,
}
#: deepest nesting of YAML/JSON collections (shipped scenarios use at most 5)
MAX_DEPTH = 64
#: most YAML values (scalars and collections) with every alias expanded
MAX_NODES = 100_000


def read_text(path: str | Path, field: str, kind: str | None = None) -> str:
    """The UTF-8 text of file ``path``, refused (naming ``field``) when missing, larger
    than ``MAX_BYTES[kind or field]`` or not UTF-8."""
    return decode(read_bytes(path, field, kind), field, str(path))


def read_bytes(path: str | Path, field: str, kind: str | None = None) -> bytes:
    """The bytes of file ``path``, refused (naming ``field``) when missing or larger than
    ``MAX_BYTES[kind or field]``."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(field, str(path), "expected the path of an existing file")
    cap = MAX_BYTES[kind or field]
    size = p.stat().st_size
    if size > cap:
        raise ScenarioError(field, str(path), f"the file is {size:,} bytes; at most {cap:,} are read")
    with p.open("rb") as fh:
        data = fh.read(cap + 1)  # the file may have grown since stat
    if len(data) > cap:
        raise ScenarioError(field, str(path), f"the file is over {cap:,} bytes; at most {cap:,} are read")
    return data


def decode(data: bytes, field: str, source: str) -> str:
    """``data`` as UTF-8 text; a bad byte is refused with its offset and line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ScenarioError(
            field,
            source,
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line})",
        ) from None


def check_text(text: str, field: str, kind: str = "--set") -> str:
    """``text`` itself if its UTF-8 encoding is within ``MAX_BYTES[kind]``."""
    cap = MAX_BYTES[kind]
    if len(text) > cap or len(text.encode("utf-8", "surrogatepass")) > cap:
        raise ScenarioError(field, text, f"the value is longer than {cap:,} bytes")
    return text


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a nesting bound while composing (the composer recurses,
    so ~500 levels would raise RecursionError)."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels (line {mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Refused(Exception):
    """A reason to refuse a YAML document, raised while it is composed or checked."""


def parse_yaml(text: str, field: str, source: str | None = None) -> Any:
    """The value of YAML ``text`` (safe tags only) within the bounds of this module;
    anything else is a ScenarioError naming ``field`` (and ``source``, the file or text)."""
    shown = text if source is None else source
    loader = None
    try:
        loader = _BoundedLoader(text)  # (its reader already refuses control characters)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_tree(node)
        return loader.construct_document(node)
    except _Refused as exc:
        raise ScenarioError(field, shown, str(exc)) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(field, shown, f"not valid YAML: {_one_line(exc)}") from None
    except ValueError as exc:  # a scalar Python cannot hold: a 5000-digit int, 2026-13-45
        raise ScenarioError(field, shown, f"not a value clustersim can read: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _one_line(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: what is wrong and where (PyYAML's own text spans lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context = getattr(exc, "context", None)
    return where + problem + (f" ({context})" if context else "")


def _check_tree(root: yaml.Node) -> None:
    """Refuse a composed document that is too deep or too large with its aliases expanded,
    or that has a mapping with a key twice. Aliased nodes are shared, so each is measured
    once — its (values, levels) memoized — and counted at every place it is used."""
    memo: dict[int, tuple[int, int]] = {}

    def measure(node: yaml.Node, depth: int, path: str) -> tuple[int, int]:
        """(values, levels) of ``node`` expanded, met ``depth`` levels below the top."""
        where = _shown(path)
        known = memo.get(id(node))
        if depth > MAX_DEPTH or (known is not None and depth + known[1] > MAX_DEPTH):
            # (an alias inside its own anchor nests for ever and ends here too)
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels (with aliases expanded) at {where}")
        if known is not None:
            return known
        values, levels = 1, 0
        if isinstance(node, yaml.MappingNode):
            _no_duplicates(node, path)
            children = [(k, path) for k, _ in node.value] + [(v, _join(path, k)) for k, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            children = [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        else:
            children = []
        for child, child_path in children:
            n, h = measure(child, depth + 1, child_path)
            values, levels = values + n, max(levels, h + 1)
            if values > MAX_NODES:
                raise _Refused(
                    f"more than {MAX_NODES:,} values with its aliases expanded (at {where}); "
                    "write repeated parts out or use fewer aliases"
                )
        memo[id(node)] = (values, levels)
        return values, levels

    measure(root, 0, "")


def _join(path: str, key: yaml.Node) -> str:
    name = key.value if isinstance(key, yaml.ScalarNode) else "?"
    return f"{path}.{name}" if path else str(name)


def _shown(path: str, limit: int = 80) -> str:
    """A document path for a message: the top level named, a long path cut in the middle."""
    if not path:
        return "the top level"
    return path if len(path) <= limit else f"{path[: limit // 2]}…{path[-limit // 2 :]}"


def _no_duplicates(node: yaml.MappingNode, path: str) -> None:
    seen: dict[tuple[str, str], int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        line, ident = key.start_mark.line + 1, (key.tag, key.value)
        if ident in seen:
            lines = f"twice on line {line}" if seen[ident] == line else f"on lines {seen[ident]} and {line}"
            raise _Refused(f"{_shown(_join(path, key))} is given {lines}; YAML would keep only the last")
        seen[ident] = line


def check_value(value: Any, field: str = "scenario") -> Any:
    """``value`` itself if it is within :data:`MAX_DEPTH` levels and :data:`MAX_NODES`
    values with shared parts counted where they are used — the bounds YAML input gets, for
    dicts built in Python (``load_scenario(dict)``), whose lists may share one object many
    times over."""
    memo: dict[int, tuple[int, int]] = {}

    def measure(node: Any, depth: int) -> tuple[int, int]:
        known = memo.get(id(node))
        if depth > MAX_DEPTH or (known is not None and depth + known[1] > MAX_DEPTH):
            raise ScenarioError(field, "…", f"nested deeper than {MAX_DEPTH} levels")
        if known is not None:
            return known
        children = (
            [*node.keys(), *node.values()]
            if isinstance(node, dict)
            else node
            if isinstance(node, (list, tuple))
            else ()
        )
        values, levels = 1, 0
        for child in children:
            n, h = measure(child, depth + 1)
            values, levels = values + n, max(levels, h + 1)
            if values > MAX_NODES:
                raise ScenarioError(
                    field, "…", f"more than {MAX_NODES:,} values (shared parts counted where used)"
                )
        if children:  # (scalars are not memoized: equal small ints share an id)
            memo[id(node)] = (values, levels)
        return values, levels

    measure(value, 0)
    return value


def read_yaml_file(path: str | Path, field: str = "scenario") -> Any:
    """The YAML value of file ``path`` (capped as a scenario), read through :func:`parse_yaml`."""
    return parse_yaml(read_text(path, field, "scenario"), field, str(path))


def read_json_file(path: str | Path, field: str) -> Any:
    """The JSON value of file ``path`` (capped by ``MAX_BYTES[field]``), as a ScenarioError
    naming ``field`` when it is not JSON or nests deeper than Python's JSON reader can."""
    text = read_text(path, field)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(field, str(path), f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ScenarioError(field, str(path), "not valid JSON: nested too deeply") from None
