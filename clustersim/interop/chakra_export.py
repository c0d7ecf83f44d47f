"""Program → Chakra execution traces: one ET file per rank, as ASTRA-sim replays them.

Each device of the Program becomes rank ``d``'s file ``<prefix>.<d>.et`` (ASTRA-sim's
``{prefix}.{npu_id}.et`` naming), beside a ``comm_group.json`` that lists each
collective's ranks under its ``pg_name`` (ASTRA-sim's communicator-group file). A rank's
file holds a GlobalMetadata message, then one Node per op of the device in Program order:

* the node id is the op's Program id (unique over all files), its name the op's name;
* a compute op is a ``COMP_NODE`` with ``duration_micros`` and ``num_ops`` (FLOPs); a send or
  recv a ``COMM_SEND_NODE``/``COMM_RECV_NODE`` with ``comm_src``, ``comm_dst``, ``comm_size``
  and ``comm_tag`` (the send's op id, the same on both ends); a collective a
  ``COMM_COLL_NODE`` with ``comm_type``, ``comm_size`` (as ASTRA-sim reads it: an
  all-gather's is one rank's contribution, :func:`per_rank_factor`) and ``pg_name``;
* ``data_deps`` are the op's dependencies, ``ctrl_deps`` the op before it on its lane
  (clustersim runs a lane's ops in order; ASTRA-sim learns that order from this edge) and,
  with ``serial`` (the default), a send's or collective's predecessor in one order of the
  rank's communication that every rank agrees on (:mod:`.chakra_serial`: ASTRA-sim runs one
  communication node at a time per rank and deadlocks on crossed orders otherwise; listed
  in ``clustersim.serial``, which clustersim's import leaves out);
* attributes named ``clustersim.*`` (:mod:`.chakra_attrs`) keep what Chakra has no field
  for, so that :mod:`.chakra_import` rebuilds the same Program (docs/interop.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..output import folder as output_folder
from ..output import staged, write_text
from ..program import COLLECTIVE, COMPUTE, RECV, SEND, Op, Program
from .chakra_attrs import OWN, attr
from .chakra_file import write_trace
from .chakra_layers import table_attrs
from .chakra_schema import COLLECTIVE_TYPES, NODE_TYPES, GlobalMetadata, Node
from .chakra_serial import serial_chain

#: the Chakra schema version written in GlobalMetadata (the one ASTRA-sim's examples write)
VERSION = "0.0.4"
#: file-name prefix of the rank files (ASTRA-sim: ``--workload-configuration=DIR/trace``)
PREFIX = "trace"
#: ASTRA-sim's communicator-group file: ``{pg_name: [ranks]}``
COMM_GROUPS = "comm_group.json"
NODE_TYPE = {
    COMPUTE: NODE_TYPES["COMP_NODE"],
    SEND: NODE_TYPES["COMM_SEND_NODE"],
    RECV: NODE_TYPES["COMM_RECV_NODE"],
    COLLECTIVE: NODE_TYPES["COMM_COLL_NODE"],
}
#: clustersim collective kind → Chakra CollectiveCommType
COMM_TYPE = {
    "all_reduce": COLLECTIVE_TYPES["ALL_REDUCE"],
    "reduce": COLLECTIVE_TYPES["REDUCE"],
    "all_gather": COLLECTIVE_TYPES["ALL_GATHER"],
    "broadcast": COLLECTIVE_TYPES["BROADCAST"],
    "all_to_all": COLLECTIVE_TYPES["ALL_TO_ALL"],
    "reduce_scatter": COLLECTIVE_TYPES["REDUCE_SCATTER"],
    "barrier": COLLECTIVE_TYPES["BARRIER"],
}
#: largest ``num_ops`` / ``comm_size`` an int64 attribute holds (the exact value is also kept)
_INT64 = 2**63 - 1
#: Op fields kept as ``clustersim.<field>`` when they differ from their default
_OWN_FIELDS = {
    "stage": -1,
    "microbatch": -1,
    "phase": "",
    "iteration": 0,
    "version": -1,
    "mem_alloc": 0,
    "mem_free": 0,
    "stash_alloc": 0,
    "stash_free": 0,
    "tag": "",
    "algorithm": "auto",
    "arrivals": 0,
    "source": -1,
    "layer": -1,
}


def per_rank_factor(op: Op) -> int:
    """Chakra's ``comm_size`` × this = the op's ``nbytes``: the group size for an all-gather,
    whose ``comm_size`` is each rank's contribution, else 1.

    ASTRA-sim reads ``comm_size`` per collective type (its ring, astra-sim 7e526fb
    ``native_collectives/collective_algorithm/Ring.cc``): an ALL_GATHER's is what each rank
    contributes (``msg_size = data_size``, ``final_data_size = data_size × nodes``); an
    ALL_REDUCE's, REDUCE_SCATTER's and ALL_TO_ALL's is the whole buffer of a rank
    (``msg_size = data_size / nodes``). clustersim's ``nbytes`` is the whole buffer for
    every collective (an all-gather's output), so only the all-gather differs."""
    return len(op.group) if op.kind == COLLECTIVE and op.collective == "all_gather" else 1


def comm_size(op: Op) -> int:
    """The ``comm_size`` Chakra and ASTRA-sim read for a send, recv or collective
    (:func:`per_rank_factor`), in whole bytes."""
    return round(op.nbytes / per_rank_factor(op))


def rank_file(folder: str | Path, rank: int) -> Path:
    """The ET file of ``rank`` in ``folder``."""
    return Path(folder) / f"{PREFIX}.{rank}.et"


def export_chakra(
    program: Program, folder: str | Path, serial: bool = True, layers: dict | None = None
) -> list[Path]:
    """Write ``program`` to ``folder`` as Chakra ET files, one per device (module
    docstring), plus ``comm_group.json``; returns the rank files in rank order. ``layers``:
    the model's layer table (:func:`.chakra_split.layer_table`), written in every rank's
    metadata, for a Program whose ops carry layer labels. Rank files
    of an earlier, larger export in ``folder`` are removed, so the folder holds one trace.
    The files move into place together once all are written (:mod:`clustersim.output`)."""
    groups: dict[tuple[int, ...], str] = {}
    for op in program.ops:
        if op.kind == COLLECTIVE:
            groups.setdefault(op.group, str(len(groups) + 1))
    per_device: list[list[Op]] = [[] for _ in range(program.num_devices)]
    for op in program.ops:
        per_device[op.device].append(op)
    before = {b.id: a.id for ops in program.lanes().values() for a, b in zip(ops, ops[1:])}
    chained = serial_chain(program) if serial else {}
    paths = []
    out = output_folder(folder)
    with staged() as stage:
        for rank, ops in enumerate(per_device):
            nodes = [_node(op, program, before.get(op.id), groups, chained.get(op.id)) for op in ops]
            meta = _metadata(program, rank)
            if layers is not None:
                meta.attr.extend(table_attrs(layers))
            paths.append(write_trace(rank_file(out, rank), meta, nodes, stage))
        # a previous export's ranks past this one's
        stage.removals = [p for p in out.glob(f"{PREFIX}.*.et") if p not in paths]
        write_text(out / COMM_GROUPS, json.dumps({name: list(g) for g, name in groups.items()}) + "\n", stage)
    return paths


def _metadata(program: Program, rank: int):
    mem = program.static_memory[rank]
    return GlobalMetadata(
        version=VERSION,
        attr=[
            attr(OWN + "rank", rank),
            attr(OWN + "ranks", program.num_devices),
            attr(OWN + "device", program.device_names[rank]),
            attr(OWN + "static_memory", [mem.weights, mem.grads, mem.optimizer, mem.buffers, mem.stashed]),
        ],
    )


def _node(op: Op, program: Program, lane_before: int | None, groups: dict, serial_before: int | None):
    node = Node(id=op.id, name=op.name, type=NODE_TYPE[op.kind])
    local = [d for d in op.deps if program.ops[d].device == op.device]
    node.data_deps.extend(local)
    if lane_before is not None:
        node.ctrl_deps.append(lane_before)
    a = node.attr
    if serial_before is not None and serial_before != lane_before and serial_before not in local:
        node.ctrl_deps.append(serial_before)  # ASTRA-sim's one comm node at a time (chakra_serial)
        a.append(attr(OWN + "serial", [serial_before]))
    a.append(attr("is_cpu_op", False))
    if op.kind == COMPUTE:
        node.duration_micros = round(op.duration * 1e6)
        if op.flops <= _INT64:
            a.append(attr("num_ops", round(op.flops)))
        a.append(attr(OWN + "duration_s", float(op.duration)))
        if op.flops:
            a.append(attr(OWN + "flops", float(op.flops)))
    else:
        size = comm_size(op)
        a.append(attr("comm_size", min(size, _INT64)))
        if size * per_rank_factor(op) != op.nbytes:  # a byte count comm_size cannot say comes back as it was
            a.append(attr(OWN + "nbytes", float(op.nbytes)))
    if op.kind in (SEND, RECV):
        peer = program.ops[op.peer]
        src, dst = (op, peer) if op.kind == SEND else (peer, op)
        a.append(attr("comm_src", src.device, "int32"))
        a.append(attr("comm_dst", dst.device, "int32"))
        a.append(attr("comm_tag", src.id, "int32"))
    elif op.kind == COLLECTIVE:
        a.append(attr("comm_type", COMM_TYPE[op.collective]))
        a.append(attr("pg_name", groups[op.group]))
    a.append(attr(OWN + "lane", op.lane))
    for name, default in _OWN_FIELDS.items():
        value = getattr(op, name)
        if value != default:
            a.append(attr(OWN + name, value))
    remote = [x for d in op.deps if program.ops[d].device != op.device for x in (program.ops[d].device, d)]
    if remote:  # Chakra's deps stay within a rank: another rank's op as (rank, node id) pairs
        a.append(attr(OWN + "remote_deps", remote))
    if op.shadows:
        a.append(attr(OWN + "shadows", json.dumps([list(s) for s in op.shadows])))
    if op.split:
        a.append(attr(OWN + "split", json.dumps([list(row) for row in op.split])))
    return node
