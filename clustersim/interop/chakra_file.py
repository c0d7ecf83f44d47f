"""Reading and writing one Chakra ET file: a GlobalMetadata message, then Node messages.

Each message is length-delimited — a base-128 varint byte count, then that many bytes —
as Chakra's ``protolib.encodeMessage`` writes and ASTRA-sim's feeder reads. The framing is
done here by hand (a few lines) so that a damaged file is refused with where it broke: the
file, the node's position and, once parsed, its id.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf.message import DecodeError

from ..errors import ScenarioError
from ..output import Staging, atomic_path
from ..reader import MAX_BYTES, read_bytes
from .chakra_attrs import read_attrs
from .chakra_schema import AttributeProto, GlobalMetadata, Node, NodeList, NodeViewList

#: the scenario field trace files are named under in errors
FIELD = "model.chakra"
#: a varint longer than this many bytes is not a 64-bit length
_MAX_VARINT = 10
#: the tag of :data:`~.chakra_schema.NodeList`'s field 1 (length-delimited)
_TAG = b"\x0a"


def varint(n: int) -> bytes:
    """``n`` ≥ 0 as a protobuf base-128 varint (seven bits a byte, low first)."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def write_trace(path: str | Path, metadata, nodes, stage: Staging | None = None) -> Path:
    """Write ``metadata`` (a GlobalMetadata) and ``nodes`` (Node messages) to ``path`` (with
    ``stage``: when it commits, :mod:`clustersim.output`)."""
    with atomic_path(path, stage) as tmp, tmp.open("wb") as fh:
        for msg in (metadata, *nodes):
            body = msg.SerializeToString()
            fh.write(varint(len(body)))
            fh.write(body)
    return Path(path)


def read_trace(path: str | Path) -> tuple:
    """``(metadata, nodes)`` of the ET file ``path``; a ScenarioError names the file and the
    node (its position from 0, and its id once known) where the bytes stop making sense."""
    data = read_bytes(path, FIELD)
    whole = _read_at_once(data)
    if whole is not None:
        return whole
    messages, pos = [], 0
    while pos < len(data):
        what = "the global metadata" if not messages else f"node #{len(messages) - 1} (from 0)"
        size, pos = _read_varint(data, pos, path, what)
        if pos + size > len(data):
            raise ScenarioError(
                FIELD, str(path), f"{what} is truncated: {size} bytes announced, {len(data) - pos} left"
            )
        messages.append(_parse(Node if messages else GlobalMetadata, data[pos : pos + size], path, what))
        pos += size
    if not messages:
        raise ScenarioError(FIELD, str(path), "the file is empty; expected a GlobalMetadata message first")
    return messages[0], messages[1:]


def read_view(path: str | Path, known: dict) -> tuple | None:
    """``(metadata, nodes, attrs)`` of the ET file ``path`` as an import reads it: the nodes
    parsed in one call as :data:`~.chakra_schema.NodeViewList`'s ``NodeView`` (Node's fields,
    each attribute's bytes unparsed) and ``attrs[i]`` node i's ``{name: value}``
    (:func:`.chakra_attrs.attrs_of`), parsed once per distinct list of attribute bytes: one
    dict for every node with that list, kept in ``known`` (shared across files; read-only).
    None where any framing or message is off — :func:`read_trace` then says where."""
    whole = _read_at_once(read_bytes(path, FIELD), NodeViewList)
    if whole is None:
        return None
    meta, nodes = whole
    attrs = []
    try:
        for node in nodes:
            key = tuple(node.attr)
            got = known.get(key)
            if got is None:
                got = known[key] = read_attrs([AttributeProto.FromString(b) for b in key])
            attrs.append(got)
    except DecodeError:
        return None
    return meta, nodes, attrs


def _read_at_once(data: bytes, listed=NodeList) -> tuple | None:
    """:func:`read_trace`'s ``(metadata, nodes)`` with the nodes parsed in one call, as a
    :data:`~.chakra_schema.NodeList` (each node's length prefix after field 1's tag byte;
    ``listed``: another message of the same encoding); None where any framing or message
    is off — the message-by-message read then says where."""
    end, pieces, meta = len(data), [], None
    pos = 0
    while pos < end:
        size, shift, at = 0, 0, pos
        while True:  # the varint length prefix
            if at >= end or at - pos == _MAX_VARINT:
                return None
            byte = data[at]
            size |= (byte & 0x7F) << shift
            shift, at = shift + 7, at + 1
            if not byte & 0x80:
                break
        if at + size > end:
            return None
        if meta is None:
            meta = data[at : at + size]
        else:
            pieces += (_TAG, data[pos : at + size])
        pos = at + size
    if meta is None:
        return None
    try:
        return GlobalMetadata.FromString(meta), list(listed.FromString(b"".join(pieces)).node)
    except DecodeError:
        return None


def read_metadata(path: str | Path):
    """The GlobalMetadata of the ET file ``path`` alone (its first message), read without
    the nodes that follow: what a rank-count check at load needs."""
    p = Path(path)
    with p.open("rb") as fh:
        head = fh.read(_MAX_VARINT)
        if not head:
            raise ScenarioError(
                FIELD, str(path), "the file is empty; expected a GlobalMetadata message first"
            )
        size, pos = _read_varint(head, 0, path, "the global metadata")
        if size > MAX_BYTES[FIELD]:
            raise ScenarioError(FIELD, str(path), f"the global metadata announces {size:,} bytes")
        fh.seek(pos)
        body = fh.read(size)
    if len(body) < size:
        raise ScenarioError(
            FIELD, str(path), f"the global metadata is truncated: {size} bytes announced, {len(body)} left"
        )
    return _parse(GlobalMetadata, body, path, "the global metadata")


def _parse(cls, body: bytes, path, what: str):
    """Message ``cls`` from ``body``; a ScenarioError names ``what`` when it is not one."""
    try:
        return cls.FromString(body)
    except DecodeError as exc:
        raise ScenarioError(FIELD, str(path), f"{what} is not a Chakra {cls.__name__}: {exc}") from None


def _read_varint(data: bytes, pos: int, path, what: str) -> tuple[int, int]:
    """The varint at ``data[pos:]`` and the position after it."""
    value = 0
    for i in range(_MAX_VARINT):
        if pos + i >= len(data):
            raise ScenarioError(FIELD, str(path), f"{what}: truncated varint length prefix at byte {pos}")
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos + i + 1
    raise ScenarioError(
        FIELD, str(path), f"{what}: the length prefix at byte {pos} is over {_MAX_VARINT} bytes"
    )
