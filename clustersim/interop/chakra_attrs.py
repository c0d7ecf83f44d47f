"""Chakra node attributes: the names ASTRA-sim reads, clustersim's own, and typed access.

A Chakra node keeps everything past its id, name, type, dependencies and duration in
``attr``, a list of named values (``AttributeProto``, one ``oneof`` of typed fields). The
names ASTRA-sim's ET feeder reads are Chakra's (``comm_type``, ``comm_size``, ``comm_src``,
``comm_dst``, ``comm_tag``, ``pg_name``, ``num_ops``, ``is_cpu_op``, written with the
types its generators use); what only clustersim needs to rebuild a Program exactly — its
lane, pipeline coordinates, exact seconds and bytes, memory moves — goes under names that
start with :data:`OWN` (docs/interop.md lists both), which another reader skips.
"""

from __future__ import annotations

from .chakra_schema import AttributeProto

#: prefix of the attributes only clustersim writes and reads
OWN = "clustersim."
#: the ``value`` fields of an AttributeProto that hold a list (their ``values``)
_LISTS = frozenset(f.name for f in AttributeProto.DESCRIPTOR.oneofs_by_name["value"].fields if f.message_type)


def attr(name: str, value, kind: str | None = None):
    """An AttributeProto ``name`` = ``value``; ``kind`` (``int32``, ``uint64`` …) picks the
    field, else the Python type does: bool, int (int64), float (double), str, list of ints."""
    if kind is None:
        if isinstance(value, bool):
            kind = "bool"
        elif isinstance(value, int):
            kind = "int64"
        elif isinstance(value, float):
            kind = "double"
        elif isinstance(value, str):
            kind = "string"
        else:
            return AttributeProto(name=name, int64_list={"values": list(value)})
    return AttributeProto(name=name, **{f"{kind}_val": value})


def attrs_of(node) -> dict:
    """``{name: value}`` of a node's (or GlobalMetadata's) attributes, whatever field each
    value sits in (a list field gives a list); an attribute without a value is left out."""
    return read_attrs(node.attr)


def read_attrs(items) -> dict:
    """:func:`attrs_of` of a list of AttributeProto messages ``items``."""
    out = {}
    for a in items:
        which = a.WhichOneof("value")
        if which in _LISTS:
            out[a.name] = list(getattr(a, which).values)
        elif which is not None:
            out[a.name] = getattr(a, which)
    return out
