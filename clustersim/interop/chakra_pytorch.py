"""What Chakra's PyTorch converter writes, read for the import (:mod:`.chakra_import`).

Chakra's ``src/converter/pytorch_converter.py`` (astra-sim/chakra @bf222b2) turns a PyTorch
host execution trace joined with its Kineto device trace into ET nodes that carry more than
ASTRA-sim's generators write:

* ``METADATA_NODE`` (``## process_group:init ##``): its ``inputs.values`` is Python's
  ``str()`` of a one-element list holding a JSON list of process groups
  ``{"pg_name", "ranks", "group_size", …}`` — ``ranks`` empty meaning every rank (ASTRA-sim's
  ``Workload::issue_pytorch_pg_metadata``). It is no work: its groups name the ranks of the
  collectives and sends that give a ``pg_name``, and a dependency on it is a dependency on
  what it depends on;
* ``is_cpu_op`` (true: an op the host ran — ``aten::*`` calls, ``c10d::*`` calls, their
  ``record_param_comms``): such a node's duration is host time, run on the rank's
  :data:`HOST_LANE` beside its GPU lanes, as the host and the GPU streams run side by side;
* ``inputs``/``outputs`` (``IOInfo``): ``str()`` of the op's argument values, shapes and
  types; a tensor's value is ``[tensor id, storage id, offset, elements, bytes per element,
  device]``, which gives the bytes a kernel reads and writes (:func:`tensor_bytes`);
* send and recv nodes with a ``pg_name`` and no ``comm_src``/``comm_dst`` (NCCL's P2P
  kernels): a group of two ranks defines the other end (:func:`peer`).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable

from ..errors import short_repr

#: the lane of a rank's host (CPU) ops
HOST_LANE = "host"
#: the lane of a rank's MEM_LOAD_NODE / MEM_STORE_NODE moves (a copy engine beside the SMs)
MEMORY_LANE = "memory"

Fail = Callable[[str], None]


def is_cpu_op(attrs: dict) -> bool:
    """Whether a node ran on the host (Chakra's ``is_cpu_op``; absent: a GPU node, as
    ASTRA-sim's feeder defaults it)."""
    return bool(attrs.get("is_cpu_op", False))


def io_field(fail: Fail, node, side: str, part: str) -> list:
    """``node.<side>.<part>`` (``inputs``/``outputs``, ``values``/``shapes``/``types``) read
    back from the ``str()`` of a Python list the converter wrote; empty when absent."""
    text = getattr(getattr(node, side), part)
    if not text:
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        fail(f"{side}.{part} = {short_repr(text)} is not a Python list as Chakra's converter writes it")
    if not isinstance(value, list):
        fail(f"{side}.{part} = {short_repr(text)} is not a list")
    return value


def process_groups(fail: Fail, node, ranks: int) -> dict[str, tuple[int, ...]]:
    """A METADATA_NODE's process groups, ``{pg_name: ranks}`` (``ranks`` empty: every one of
    the trace's ``ranks``), each checked."""
    values = io_field(fail, node, "inputs", "values")
    if not values:
        return {}
    if len(values) != 1 or not isinstance(values[0], str):
        fail(f"inputs.values = {short_repr(values)}; accepted: one JSON string of process groups")
    try:
        groups = json.loads(values[0])
    except ValueError as exc:
        fail(f"inputs.values holds no JSON list of process groups ({exc})")
    out = {}
    for g in groups if isinstance(groups, list) else [groups]:
        name = g.get("pg_name") if isinstance(g, dict) else None
        members = g.get("ranks") if isinstance(g, dict) else None
        if not isinstance(name, str) or not isinstance(members, list):
            fail(f"inputs.values: process group {short_repr(g)}; accepted: {{pg_name: str, ranks: [int]}}")
        if not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < ranks for r in members):
            fail(
                f"inputs.values: process group {name!r} ranks {short_repr(members)}; accepted: ranks 0..{ranks - 1}"
            )
        out[name] = tuple(members) if members else tuple(range(ranks))
    return out


def tensor_bytes(values) -> int:
    """Bytes of every tensor in a converter's ``values`` list (nested lists searched): a
    tensor is ``[id, storage id, offset, elements, bytes per element, device string]``."""
    if not isinstance(values, list):
        return 0
    if len(values) == 6 and isinstance(values[5], str) and all(isinstance(v, int) for v in values[:5]):
        return values[3] * values[4]
    return sum(tensor_bytes(v) for v in values)


def argument(schema: str, values: list, name: str, default=None):
    """The value of argument ``name`` of an ATen call: its position in ``op_schema``
    (``aten::f(Tensor query, …, bool is_causal=False, *, float? scale=None) -> Tensor``;
    the keyword-only marker ``*`` holds no position) indexes ``values``."""
    head, _, rest = schema.partition("(")
    names = [arg.split("=")[0].split()[-1] for arg in rest.rsplit(")", 1)[0].split(", ") if arg.strip()]
    names = [n for n in names if n != "*"]
    if name in names and names.index(name) < len(values):
        return values[names.index(name)]
    return default


def peer(fail: Fail, rank: int, group: tuple[int, ...], field: str, pg: str) -> int:
    """The other end of a send or recv without ``field`` (``comm_dst``/``comm_src``): the
    one other rank of its two-rank process group ``pg``."""
    others = [r for r in group if r != rank]
    if rank not in group or len(others) != 1:
        fail(
            f"has no {field}, and its process group {pg!r} {list(group)} does not define it; "
            f"accepted: {field}, or a pg_name of two ranks that holds this one"
        )
    return others[0]
