"""Chakra ET export and import (clustersim.interop, docs/interop.md).

The exported files are read back by :func:`_decode` — a protobuf wire decoder written here
from et_def.proto's field numbers, independent of the protobuf package and of the code under
test — and compared with the Program; export → import → simulate must give the very same
spans; malformed traces are refused naming the file and the node.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import yaml

import clustersim as cs
from clustersim.interop.chakra_export import export_chakra
from clustersim.interop.chakra_file import varint
from clustersim.program import COLLECTIVE, COMPUTE, RECV, SEND

ROOT = Path(__file__).resolve().parents[1]

# -- an independent reader of the wire format (protobuf encoding spec, et_def.proto numbers) --


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def _fields(buf: bytes) -> list[tuple[int, int, object]]:
    """(field number, wire type, raw value) of every field of one message."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise AssertionError(f"wire type {wire}")
        out.append((number, wire, value))
    return out


def _ids(wire: int, value) -> list[int]:
    """A repeated uint64 field's values: packed (wire 2) or one per field (wire 0)."""
    if wire == 0:
        return [value]
    out, pos = [], 0
    while pos < len(value):
        v, pos = _varint(value, pos)
        out.append(v)
    return out


def _attribute(buf: bytes) -> tuple[str, object]:
    name, value = "", None
    for number, _wire, raw in _fields(buf):
        if number == 1:
            name = raw.decode()
        elif number in (7, 9):  # int32_val, int64_val (two's complement varint)
            value = raw - (1 << 64) if raw >= 1 << 63 else raw
        elif number == 3:  # double_val
            value = struct.unpack("<d", raw)[0]
        elif number == 27:  # bool_val
            value = bool(raw)
        elif number == 29:  # string_val
            value = raw.decode()
        elif number == 10:  # int64_list: Int64List.values = 1
            value = [v for n, w, r in _fields(raw) for v in _ids(w, r)]
    return name, value


def _decode(path: Path) -> tuple[dict, list[dict]]:
    """(metadata attributes, nodes) of an ET file: length-delimited GlobalMetadata, then Nodes
    (proto3 leaves out a field at its default: an id 0, an empty name)."""
    data, pos, messages = path.read_bytes(), 0, []
    while pos < len(data):
        n, pos = _varint(data, pos)
        messages.append(data[pos : pos + n])
        pos += n
    meta = dict(_attribute(raw) for number, _, raw in _fields(messages[0]) if number == 2)
    nodes = []
    for body in messages[1:]:
        node = {
            "id": 0,
            "name": "",
            "type": 0,
            "data_deps": [],
            "ctrl_deps": [],
            "attr": {},
            "duration_micros": 0,
        }
        for number, wire, raw in _fields(body):
            if number == 1:
                node["id"] = raw
            elif number == 2:
                node["name"] = raw.decode()
            elif number == 3:
                node["type"] = raw
            elif number == 4:
                node["ctrl_deps"] += _ids(wire, raw)
            elif number == 5:
                node["data_deps"] += _ids(wire, raw)
            elif number == 7:
                node["duration_micros"] = raw
            elif number == 10:
                key, value = _attribute(raw)
                node["attr"][key] = value
        nodes.append(node)
    return meta, nodes


# et_def.proto: NodeType and CollectiveCommType numbers
TYPE = {COMPUTE: 4, SEND: 5, RECV: 6, COLLECTIVE: 7}
COMM_TYPE = {"all_reduce": 0, "all_gather": 2, "reduce_scatter": 7, "all_to_all": 6}

SCENARIOS = ["synthetic-4stage-1f1b", "quickstart", "pipedream-vgg16-16xV100-10GbE", "hap-mixed-a100-v100"]


@pytest.mark.parametrize("name", ["synthetic-4stage-1f1b", "quickstart", "ps-edge-16workers-20mbit"])
def test_exported_files_match_the_program(name, tmp_path):
    prog = cs.compile_scenario(cs.load_scenario(ROOT / "scenarios" / f"{name}.yaml"))
    files = cs.export_chakra(prog, tmp_path)
    assert [f.name for f in files] == [f"trace.{r}.et" for r in range(prog.num_devices)]
    groups = json.loads((tmp_path / "comm_group.json").read_text())
    lanes = prog.lanes()
    for rank, path in enumerate(files):
        meta, nodes = _decode(path)
        assert meta["clustersim.rank"] == rank and meta["clustersim.device"] == prog.device_names[rank]
        ops = [op for op in prog.ops if op.device == rank]
        assert len(nodes) == len(ops)
        for node, op in zip(nodes, ops):
            assert (node["id"], node["name"], node["type"]) == (op.id, op.name, TYPE[op.kind])
            assert node["data_deps"] == list(op.deps)  # (no Program here depends across devices)
            lane = lanes[op.device, op.lane]
            k = lane.index(op)
            a = node["attr"]
            serial = a.get("clustersim.serial", [])  # ASTRA-sim's one comm at a time (chakra_serial)
            assert node["ctrl_deps"] == ([lane[k - 1].id] if k else []) + serial
            assert not serial or (
                op.kind in (SEND, COLLECTIVE) and prog.ops[serial[0]].kind in (SEND, COLLECTIVE)
            )
            assert a["clustersim.lane"] == op.lane and a["is_cpu_op"] is False
            if op.kind == COMPUTE:
                assert node["duration_micros"] == round(op.duration * 1e6)
                assert a["clustersim.duration_s"] == op.duration
            else:  # ASTRA-sim's meaning (Ring.cc): an all-gather's comm_size is one rank's part
                per_rank = op.kind == COLLECTIVE and op.collective == "all_gather"
                want = op.nbytes / len(op.group) if per_rank else op.nbytes
                assert a["comm_size"] == round(want)
                assert (
                    a.get("clustersim.nbytes", a["comm_size"] * (len(op.group) if per_rank else 1))
                    == op.nbytes
                )
            if op.kind in (SEND, RECV):
                peer = prog.ops[op.peer]
                send, recv = (op, peer) if op.kind == SEND else (peer, op)
                assert (a["comm_src"], a["comm_dst"], a["comm_tag"]) == (send.device, recv.device, send.id)
            if op.kind == COLLECTIVE:
                assert a["comm_type"] == COMM_TYPE[op.collective]
                assert groups[a["pg_name"]] == list(op.group)


def _as_trace(name: str, folder: Path, **simulation) -> dict:
    """Scenario ``name`` with its model replaced by the Chakra traces in ``folder``."""
    raw = yaml.safe_load((ROOT / "scenarios" / f"{name}.yaml").read_text())
    raw.pop("parallel", None)
    raw["model"] = {"kind": "trace", "chakra": str(folder)}
    gpus = cs.compile_scenario(cs.load_scenario(ROOT / "scenarios" / f"{name}.yaml")).num_devices
    raw["training"] = {"global_batch": gpus, "micro_batch": 1}
    raw["simulation"] = {**{k: v for k, v in raw.get("simulation", {}).items() if k != "fold"}, **simulation}
    return raw


@pytest.mark.parametrize("name", SCENARIOS)
def test_round_trip_gives_identical_spans(name, tmp_path):
    original = cs.simulate(ROOT / "scenarios" / f"{name}.yaml", progress=False)
    cs.export_chakra(ROOT / "scenarios" / f"{name}.yaml", tmp_path)
    replay = cs.simulate(_as_trace(name, tmp_path), progress=False)
    assert replay.summary["schedule"] == "trace"
    assert replay.spans.reset_index(drop=True).equals(original.spans.reset_index(drop=True))
    assert replay.summary["iteration_time_s"] == original.summary["iteration_time_s"]
    assert replay.summary["peak_memory_gib"] == original.summary["peak_memory_gib"]


_FOLDED_TP_OVERLAP = {
    "name": "folded-tp-overlap",
    "cluster": {"preset": "dgx_h100", "nodes": 2},
    "model": {"preset": "gpt-1.3b", "seq_len": 1024, "layers": 4},
    "training": {"global_batch": 16, "micro_batch": 1},  # (a multiple of the trace's 16 ranks)
    "parallel": {"tp": 4, "pp": 2, "sequence_parallel": True, "tp_comm_overlap": True},
    "simulation": {"fidelity": "fast", "granularity": "layer", "fold": True},
}


def _folded_packet() -> dict:
    return {
        "name": "folded",
        "cluster": {
            "preset": "dgx_a100",
            "nodes": 2,
            "topology": {"kind": "fat_tree", "oversubscription": 2},
        },
        "model": {
            "kind": "synthetic",
            "layers": 4,
            "forward": "2 ms",
            "backward": "4 ms",
            "activation": "64 MiB",
            "params": "512 MiB",
        },
        "training": {"global_batch": 32},
        "parallel": {"pp": 2},
        "simulation": {"network": "packet", "fold": True, "max_chunks": 16},
    }


@pytest.mark.parametrize(
    "sc,replayed",
    [
        (_folded_packet(), {"network": "packet", "max_chunks": 16}),
        # TP overlap's folded ring sends: paired with their own recvs, leaving from ``source``
        (_FOLDED_TP_OVERLAP, {"fidelity": "fast", "granularity": "layer"}),
    ],
    ids=["packet", "tp-overlap"],
)
def test_round_trip_of_a_folded_program(sc, replayed, tmp_path):
    """A folded Program (one GPU per stage, the twins' traffic as shadows) survives too."""
    original = cs.simulate(sc, progress=False)
    prog = cs.compile_scenario(cs.load_scenario(sc))
    assert any(op.shadows for op in prog.ops)
    export_chakra(prog, tmp_path)
    back = cs.import_chakra(tmp_path, 16)
    fields = [s for s in prog.ops[0].__slots__]
    assert [[getattr(o, f) for f in fields] for o in back.ops] == [
        [getattr(o, f) for f in fields] for o in prog.ops
    ]
    raw = {
        **sc,
        "model": {"kind": "trace", "chakra": str(tmp_path)},
        "parallel": {},
        "simulation": replayed,
    }
    replay = cs.simulate(raw, progress=False)
    assert replay.spans.reset_index(drop=True).equals(original.spans.reset_index(drop=True))


# -- malformed traces: each error names the file and the node --------------------------------


def _four_ranks(folder: Path) -> list[Path]:
    return cs.export_chakra(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml", folder)


def _rewrite(path: Path, change) -> None:
    """Rewrite ET file ``path`` with ``change(nodes)`` applied to its Node messages."""
    from clustersim.interop.chakra_file import read_trace, write_trace

    meta, nodes = read_trace(path)
    change(nodes)
    write_trace(path, meta, nodes)


def _error(folder: Path, gpus: int = 4) -> str:
    with pytest.raises(cs.ScenarioError) as err:
        cs.import_chakra(folder, gpus)
    return str(err.value)


def test_truncated_varint_and_message_are_named(tmp_path):
    files = _four_ranks(tmp_path)
    whole, nodes = files[1].read_bytes(), len(_decode(files[1])[1])
    files[1].write_bytes(whole + b"\x80")  # a length prefix that never ends
    msg = _error(tmp_path)
    assert "trace.1.et" in msg and "truncated varint" in msg and f"at byte {len(whole)}" in msg
    files[1].write_bytes(whole + varint(50) + b"\x08\x01")
    msg = _error(tmp_path)
    assert "trace.1.et" in msg and "truncated: 50 bytes announced, 2 left" in msg
    assert f"node #{nodes} (from 0) is truncated" in msg  # the one after the last whole node


def test_missing_dependency_names_file_and_node(tmp_path):
    files = _four_ranks(tmp_path)
    victim = {}

    def change(nodes):
        nodes[3].data_deps.append(987654)
        victim["id"], victim["name"] = nodes[3].id, nodes[3].name

    _rewrite(files[2], change)
    msg = _error(tmp_path)
    assert "trace.2.et" in msg and f"node {victim['id']} ({victim['name']!r})" in msg
    assert "depends on node 987654, which this file does not hold" in msg


@pytest.mark.parametrize("node_type,words", [(42, "node type 42 is unknown"), (8, "node type 8 is unknown")])
def test_node_types_clustersim_cannot_run(tmp_path, node_type, words):
    files = _four_ranks(tmp_path)
    _rewrite(files[0], lambda nodes: setattr(nodes[0], "type", node_type))
    msg = _error(tmp_path)
    assert "trace.0.et" in msg and "node 0 (" in msg and words in msg and "COMP_NODE" in msg


def test_rank_count_must_match_the_gpus(tmp_path):
    _four_ranks(tmp_path)
    msg = _error(tmp_path, gpus=8)
    assert "the trace has 4 GPU ranks" in msg and "the cluster has 8 GPUs" in msg
    raw = {
        "name": "t",
        "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu": "A100-SXM4-80GB"},
        "model": {"kind": "trace", "chakra": str(tmp_path)},
        "training": {"global_batch": 8},
    }
    with pytest.raises(cs.ScenarioError, match="model.chakra: .* the cluster has 8 GPUs"):
        cs.simulate(raw, progress=False)


def test_a_missing_rank_and_an_unmatched_send(tmp_path):
    from clustersim.interop.chakra_schema import AttributeProto

    files = _four_ranks(tmp_path)
    tags = {}

    def retag(nodes):  # rank 1's first recv now waits for a message nobody sends
        recv = next(n for n in nodes if n.type == 6)
        tag = next(a for a in recv.attr if a.name == "comm_tag")
        tags["was"] = tag.int32_val
        tag.CopyFrom(AttributeProto(name="comm_tag", int32_val=999999))

    _rewrite(files[1], retag)
    msg = _error(tmp_path)
    assert "trace.0.et" in msg and f"send of tag {tags['was']} has no matching recv on rank 1" in msg
    files[2].unlink()
    assert "ranks 0..3 expected; missing rank 2" in _error(tmp_path)


def test_unknown_group_and_cycle(tmp_path):
    prog_dir = tmp_path / "qs"
    files = cs.export_chakra(ROOT / "scenarios" / "quickstart.yaml", prog_dir)
    (prog_dir / "comm_group.json").write_text("{}")
    msg = _error(prog_dir, 16)
    assert "trace.0.et" in msg and "pg_name '1' is not in comm_group.json" in msg
    cyc = tmp_path / "cyc"
    files = _four_ranks(cyc)
    from clustersim.interop.chakra_file import read_trace, write_trace

    for path in files:  # a foreign trace (no clustersim metadata) whose first two nodes wait on each other
        meta, nodes = read_trace(path)
        del meta.attr[:]
        if path == files[3]:
            nodes[0].data_deps.append(nodes[1].id)
            nodes[1].data_deps.append(nodes[0].id)
        write_trace(path, meta, nodes)
    msg = _error(cyc)
    assert "trace.3.et" in msg and "its dependencies form a cycle" in msg


def _hand_made(folder: Path) -> Path:
    """A foreign-style trace, as ASTRA-sim's generators write one (no clustersim attributes,
    no comm_group.json): on each of 4 ranks a 1000 µs compute, then an all-reduce of 64 MiB
    over all ranks; rank 0 then sends 1 MiB to rank 1 (comm_tag 7)."""
    from clustersim.interop.chakra_attrs import attr
    from clustersim.interop.chakra_file import write_trace
    from clustersim.interop.chakra_schema import GlobalMetadata, Node

    folder.mkdir()
    for rank in range(4):
        nodes = [Node(id=1, name="fwd", type=4, duration_micros=1000, attr=[attr("is_cpu_op", False)])]
        coll = Node(id=2, name="all-reduce", type=7, data_deps=[1])
        coll.attr.extend([attr("is_cpu_op", False), attr("comm_type", 0), attr("comm_size", 64 * 2**20)])
        nodes.append(coll)
        if rank in (0, 1):
            p2p = Node(id=3, name="p2p", type=5 if rank == 0 else 6, data_deps=[2])
            p2p.attr.extend(
                [
                    attr("comm_src", 0, "int32"),
                    attr("comm_dst", 1, "int32"),
                    attr("comm_size", 2**20),
                    attr("comm_tag", 7, "int32"),
                ]
            )
            nodes.append(p2p)
        write_trace(folder / f"allreduce.{rank}.et", GlobalMetadata(version="0.0.4"), nodes)
    return folder


def test_a_foreign_trace_simulates_like_the_same_program_written_by_clustersim(tmp_path):
    foreign = cs.import_chakra(_hand_made(tmp_path / "foreign"), 4)
    assert [(op.device, op.lane, op.kind, op.name) for op in foreign.ops] == [
        (0, "compute", COMPUTE, "fwd"),
        (1, "compute", COMPUTE, "fwd"),
        (2, "compute", COMPUTE, "fwd"),
        (3, "compute", COMPUTE, "fwd"),
        (0, "comm", COLLECTIVE, "all-reduce"),
        (1, "comm", COLLECTIVE, "all-reduce"),
        (2, "comm", COLLECTIVE, "all-reduce"),
        (3, "comm", COLLECTIVE, "all-reduce"),
        (0, "send", SEND, "p2p"),
        (1, "recv", RECV, "p2p"),
    ]  # merged by (node id, rank)
    coll = foreign.ops[4]
    assert (coll.collective, coll.group, coll.nbytes, coll.tag) == (
        "all_reduce",
        (0, 1, 2, 3),
        64 * 2**20,
        "all#0",
    )
    assert foreign.ops[0].duration == 1000 * 1e-6 and foreign.ops[8].peer == 9 and foreign.ops[9].deps == (5,)
    export_chakra(foreign, tmp_path / "own")  # the same Program, now with clustersim's attributes
    cluster = {
        "nodes": 1,
        "gpus_per_node": 4,
        "gpu": "A100-SXM4-80GB",
        "intra_node": {"kind": "nvswitch", "bandwidth": "300 GB/s", "latency": "2 us"},
    }
    runs = [
        cs.simulate(
            {
                "name": "t",
                "cluster": cluster,
                "model": {"kind": "trace", "chakra": str(tmp_path / d)},
                "training": {"global_batch": 4},
            },
            progress=False,
        )
        for d in ("foreign", "own")
    ]
    assert runs[0].spans.reset_index(drop=True).equals(runs[1].spans.reset_index(drop=True))
    spans = runs[0].spans
    comp = spans[spans["kind"] == "compute"]
    assert list(comp["end_s"] - comp["start_s"]) == [1e-3] * 4
    ar = spans[spans["kind"] == "collective"]
    assert (ar["start_s"] >= 1e-3).all() and (ar["end_s"] > ar["start_s"]).all()


@pytest.mark.parametrize("node_type,value", [(5, 7), (4, 1)])
def test_a_send_source_must_be_a_rank_on_a_send(tmp_path, node_type, value):
    # clustersim.source (where a folded ring send's bytes leave from): a device index, on a send
    from clustersim.interop.chakra_attrs import attr

    files = _four_ranks(tmp_path)
    _rewrite(
        files[0],
        lambda nodes: next(n for n in nodes if n.type == node_type).attr.append(
            attr("clustersim.source", value)
        ),
    )
    msg = _error(tmp_path)
    assert (
        "trace.0.et" in msg
        and f"clustersim.source holds {value}" in msg
        and "on a send, a device index 0..3" in msg
    )
