"""The Chakra import's speed-ups read what the message-by-message read does (issue 38): a
file's nodes parsed in one call as a ``NodeList`` are the nodes parsed one by one, a damaged
file still falls back to the read that names where it breaks, attributes and number checks
are the plain rules'."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.errors import ScenarioError
from clustersim.interop import chakra_file, chakra_values
from clustersim.interop.chakra_attrs import attr, attrs_of
from clustersim.interop.chakra_file import _read_at_once, _read_varint, read_trace
from clustersim.interop.chakra_schema import ATTRIBUTE_KINDS, GlobalMetadata, Node

DATA = Path(__file__).parent / "data"


def _one_by_one(data: bytes) -> list:
    """The messages of an ET file's bytes, parsed one at a time (the format's definition)."""
    out, pos = [], 0
    while pos < len(data):
        size, pos = _read_varint(data, pos, "x", "x")
        if pos + size > len(data):
            raise ValueError("truncated")
        out.append((Node if out else GlobalMetadata).FromString(data[pos : pos + size]))
        pos += size
    return out


def _files() -> list[bytes]:
    paths = sorted(DATA.glob("chakra/*/*.et")) + sorted(DATA.glob("astra_sim_microbenchmarks/*/*.et"))
    out = [p.read_bytes() for p in paths]
    out += [gzip.decompress(p.read_bytes()) for p in sorted(DATA.glob("chakra_pytorch/*.et.gz"))]
    assert len(out) > 40
    return out


def test_one_parse_reads_every_shipped_file_as_the_messages_one_by_one():
    """Every shipped ET file (clustersim's, ASTRA-sim's microbenchmarks, Chakra's PyTorch
    converter's): the same metadata and nodes, byte for byte, in order."""
    for data in _files():
        meta, nodes = _read_at_once(data)
        want = _one_by_one(data)
        got = [meta, *nodes]
        assert [m.SerializeToString() for m in got] == [m.SerializeToString() for m in want]
        assert [type(m) for m in got] == [type(m) for m in want]


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_a_damaged_file_falls_back_to_the_read_that_names_where(tmp_path_factory, data):
    """A file cut anywhere, or a byte overwritten anywhere: the one-call read declines or
    reads what the message-by-message read reads; read_trace refuses it with that read's
    error, or returns its messages."""
    whole = data.draw(st.sampled_from(_files()[:12]))
    cut = data.draw(st.integers(0, len(whole)))
    damaged = bytearray(whole[:cut])
    if damaged and data.draw(st.booleans()):
        damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path_factory.mktemp("et") / "trace.0.et"
    path.write_bytes(bytes(damaged))
    try:
        want = _one_by_one(bytes(damaged))
        if not want:
            raise ValueError("empty")
    except Exception:  # the per-message read refuses it: so must read_trace, naming the file
        assert _read_at_once(bytes(damaged)) is None
        with pytest.raises(ScenarioError, match="trace.0.et"):
            read_trace(path)
        return
    meta, nodes = read_trace(path)
    assert [m.SerializeToString() for m in (meta, *nodes)] == [m.SerializeToString() for m in want]


def test_the_tag_is_field_one_length_delimited():
    assert chakra_file._TAG == bytes([(1 << 3) | 2])


def _plain_attrs(node) -> dict:
    """attrs_of's rule as first written: a ``*_list`` field gives a list."""
    out = {}
    for a in node.attr:
        which = a.WhichOneof("value")
        if which is None:
            continue
        value = getattr(a, which)
        out[a.name] = list(value.values) if which.endswith("_list") else value
    return out


_VALUES = {
    "double": st.floats(allow_nan=False),
    "float": st.floats(width=32, allow_nan=False),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint32": st.integers(0, 2**32 - 1),
    "uint64": st.integers(0, 2**64 - 1),
    "sint32": st.integers(-(2**31), 2**31 - 1),
    "sint64": st.integers(-(2**63), 2**63 - 1),
    "fixed32": st.integers(0, 2**32 - 1),
    "fixed64": st.integers(0, 2**64 - 1),
    "sfixed32": st.integers(-(2**31), 2**31 - 1),
    "sfixed64": st.integers(-(2**63), 2**63 - 1),
    "bool": st.booleans(),
    "string": st.text(max_size=8),
    "bytes": st.binary(max_size=8),
}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from([k for k, _, _ in ATTRIBUTE_KINDS]).flatmap(
            lambda k: st.tuples(st.just(k), st.booleans(), st.lists(_VALUES[k], max_size=3))
        ),
        max_size=8,
    )
)
def test_attributes_of_every_kind_read_as_the_plain_rule(items):
    """Single values and lists of every AttributeProto kind, and an attribute without one."""
    node = Node(id=1, name="n")
    for i, (kind, as_list, vals) in enumerate(items):
        if as_list:
            a = node.attr.add(name=f"a{i}")
            getattr(a, f"{kind}_list").values.extend(vals)
        elif vals:
            node.attr.append(attr(f"a{i}", vals[0], kind))
        else:
            node.attr.add(name=f"a{i}")  # no value
    assert attrs_of(node) == _plain_attrs(node)


def _plain_number(value, top):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= top


class _Int(int):
    pass


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.integers(-(2**70), 2**70),
        st.floats(),
        st.booleans(),
        st.integers(-5, 5).map(_Int),
        st.none(),
        st.text(max_size=2),
    ),
    st.sampled_from([1e6, 1e24, 2**50]),
)
def test_number_checks_accept_what_the_plain_rule_does(value, top):
    """The exact-int/float fast path and the general rule agree: NaN, ±inf, bools, int
    subclasses, out-of-range and non-numbers included."""
    failed = []
    chakra_values.number(failed.append, "x", value, top, "unit")
    assert (not failed) == _plain_number(value, top)
    if isinstance(value, float) and math.isnan(value):
        assert failed


def _heap_merge(ranks) -> list:
    """The merge as defined: the next node from the rank whose next node has the smallest (id, rank)."""
    import heapq

    heads = [(rk.order[0].id, rk.rank, 0) for rk in ranks if rk.order]
    heapq.heapify(heads)
    out = []
    while heads:
        _, r, k = heapq.heappop(heads)
        out.append((ranks[r], ranks[r].order[k]))
        if k + 1 < len(ranks[r].order):
            heapq.heappush(heads, (ranks[r].order[k + 1].id, r, k + 1))
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 40), max_size=12, unique=True), min_size=1, max_size=5), st.booleans()
)
def test_the_merge_of_rising_ranks_by_sorting_is_the_heap_merge(orders, rising):
    """Ranks whose ids rise (clustersim's own files: sorted) and ranks in any order (another
    producer's dependency order): the same sequence as the heap merge."""
    from types import SimpleNamespace

    from clustersim.interop.chakra_import import _merge

    ranks = [
        SimpleNamespace(rank=r, order=[SimpleNamespace(id=i) for i in (sorted(o) if rising else o)])
        for r, o in enumerate(orders)
    ]
    got = [(rk.rank, node.id) for rk, node in _merge(ranks)]
    assert got == [(rk.rank, node.id) for rk, node in _heap_merge(ranks)]


def test_the_view_read_is_the_full_read_on_every_shipped_file(tmp_path):
    """Each shipped file read as NodeViews: every node, re-encoded, is the node the
    message-by-message read gives, and its attribute dict is attrs_of's; nodes with the same
    attribute bytes share one dict (read once)."""
    from clustersim.interop.chakra_file import read_view

    known: dict = {}
    for k, data in enumerate(_files()):
        path = tmp_path / f"f{k}.0.et"
        path.write_bytes(data)
        meta, nodes, attrs = read_view(path, known)
        want = _one_by_one(data)
        assert meta.SerializeToString() == want[0].SerializeToString()
        assert [Node.FromString(n.SerializeToString()) for n in nodes] == want[1:]
        assert attrs == [attrs_of(n) for n in want[1:]]
        by_bytes = {tuple(n.attr): id(a) for n, a in zip(nodes, attrs)}
        assert all(by_bytes[tuple(n.attr)] == id(a) for n, a in zip(nodes, attrs))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_damaged_file_read_as_views_declines_or_reads_the_same(tmp_path_factory, data):
    """A file cut or overwritten anywhere: the view read declines (the import then reads
    message by message, which names where it breaks) or gives what that read gives."""
    from clustersim.interop.chakra_file import read_view

    whole = data.draw(st.sampled_from(_files()[:12]))
    damaged = bytearray(whole[: data.draw(st.integers(0, len(whole)))])
    if damaged:
        damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path_factory.mktemp("et") / "trace.0.et"
    path.write_bytes(bytes(damaged))
    got = read_view(path, {})
    if got is None:
        return
    want = _one_by_one(bytes(damaged))
    assert [Node.FromString(n.SerializeToString()) for n in got[1]] == want[1:]
    assert got[2] == [attrs_of(n) for n in want[1:]]


def _folders(tmp_path: Path) -> list[Path]:
    """The shipped trace folders, the PyTorch samples unpacked, and clustersim's export of a
    pipeline scenario (sends, recvs, collectives, memory moves)."""
    import clustersim as cs

    out = sorted(p for p in DATA.glob("chakra/*") if p.is_dir())
    out += sorted(p for p in DATA.glob("astra_sim_microbenchmarks/*") if p.is_dir())
    for gz in sorted(DATA.glob("chakra_pytorch/*.et.gz")):
        folder = tmp_path / gz.name.split(".")[0]
        folder.mkdir()
        (folder / gz.name[:-3]).write_bytes(gzip.decompress(gz.read_bytes()))
        out.append(folder)
    scenario = Path(__file__).parents[1] / "scenarios" / "synthetic-4stage-1f1b.yaml"
    return [*out, cs.export_chakra(scenario, tmp_path / "pp")[0].parent, _repeated(tmp_path / "repeated")]


def _repeated(folder: Path) -> Path:
    """Two ranks of another producer's trace, three times the same compute, send (recv)
    and all-reduce nodes — alike but for their ids — so that ops stamped from the first
    must take their own peer, tag and dependencies."""
    from clustersim.interop.chakra_file import write_trace
    from clustersim.interop.chakra_schema import NODE_TYPES

    folder.mkdir()
    for rank in (0, 1):
        nodes, p2p = [], ("COMM_SEND_NODE", "comm_dst") if rank == 0 else ("COMM_RECV_NODE", "comm_src")
        for k in range(3):
            comp = Node(id=3 * k, name="gemm", type=NODE_TYPES["COMP_NODE"], duration_micros=10)
            comp.data_deps.extend([3 * k - 1] if k else [])
            send = Node(id=3 * k + 1, name="p2p", type=NODE_TYPES[p2p[0]], data_deps=[3 * k])
            send.attr.extend([attr(p2p[1], 1 - rank), attr("comm_size", 100), attr("comm_tag", 7)])
            coll = Node(id=3 * k + 2, name="ar", type=NODE_TYPES["COMM_COLL_NODE"], data_deps=[3 * k + 1])
            coll.attr.extend([attr("comm_type", 0), attr("comm_size", 1000)])
            nodes += [comp, send, coll]
        write_trace(folder / f"t.{rank}.et", GlobalMetadata(version="0.0.4"), nodes)
    return folder


def test_fields_read_once_per_alike_node_are_those_read_node_by_node(tmp_path):
    """The import reads a node's kind, lane and attribute-only fields once per distinct
    (attributes, type, duration) and stamps the ops after the first from its row: each
    trace imported again with one more attribute, different on every node (which the import
    does not read), so that no two nodes are alike, gives the same Program — every op field,
    static memory and pricing count — priced on a GPU and not."""
    from clustersim.interop.chakra_file import read_trace, write_trace
    from clustersim.interop.chakra_import import rank_files, read_chakra
    from clustersim.workload.cost_model import CostModel

    for folder in _folders(tmp_path):
        apart = tmp_path / f"apart-{folder.name}"
        apart.mkdir()
        for p in folder.iterdir():
            if p.suffix != ".et":
                (apart / p.name).write_bytes(p.read_bytes())
        for r, path in enumerate(rank_files(folder)):
            meta, nodes = read_trace(path)
            for k, node in enumerate(nodes):
                node.attr.append(attr("test.apart", r * 10**6 + k))
            write_trace(apart / path.name, meta, nodes)
        for cost in (None, lambda: CostModel.for_gpu("A100-SXM4-80GB")):
            (a, counts_a), (b, counts_b) = read_chakra(folder, None, cost), read_chakra(apart, None, cost)
            assert [op.row() for op in a.ops] == [op.row() for op in b.ops], folder.name
            assert a.static_memory == b.static_memory and counts_a == counts_b
