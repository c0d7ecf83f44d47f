"""Chakra traces as PyTorch makes them (clustersim.interop.chakra_pytorch / chakra_pricing,
docs/interop.md): the two converted traces shipped in tests/data/chakra_pytorch/ import and
simulate with every node priced one counted way, CPU and GPU ops overlap as independent
host and device work do, nodes without a duration are priced by the kernel tables or the
roofline, and every refusal names the node and the field."""

from __future__ import annotations

import gzip
import json
import math
import warnings
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.errors import ScenarioWarning
from clustersim.interop.chakra_attrs import attr, attrs_of
from clustersim.interop.chakra_file import read_trace, write_trace
from clustersim.interop.chakra_import import read_chakra
from clustersim.interop.chakra_pytorch import tensor_bytes
from clustersim.interop.chakra_schema import GlobalMetadata, Node
from clustersim.workload.cost_model import CostModel

DATA = Path(__file__).resolve().parent / "data" / "chakra_pytorch"
GPU = "A100-SXM4-80GB"
COMP, COLL, SEND, RECV, META, MEM_LOAD = 4, 7, 5, 6, 1, 2


def _unpack(name: str, folder: Path) -> Path:
    folder.mkdir()
    (folder / name).write_bytes(gzip.decompress((DATA / f"{name}.gz").read_bytes()))
    return folder


def _scenario(folder: Path, gpus: int) -> dict:
    return {
        "name": f"pytorch-{folder.name}",
        "cluster": {
            "nodes": 1,
            "gpus_per_node": gpus,
            "gpu": GPU,
            "intra_node": {"kind": "nvswitch", "bandwidth": "300 GB/s", "latency": "2 us"},
        },
        "model": {"kind": "trace", "chakra": str(folder)},
        "training": {"global_batch": 8, "micro_batch": 1},
    }


def _cost() -> CostModel:
    return CostModel.for_gpu(GPU)


def _values(node, side: str = "inputs") -> list:
    import ast

    text = getattr(node, side).values
    return ast.literal_eval(text) if text else []


def test_chakras_feeder_trace_imports_and_simulates_each_node_priced_one_counted_way(tmp_path):
    folder = _unpack("feeder_tests.chakra.0.et", tmp_path / "feeder")
    _, nodes = read_trace(folder / "feeder_tests.chakra.0.et")
    cpu = [n for n in nodes if attrs_of(n).get("is_cpu_op")]
    gpu_comp = [n for n in nodes if n.type == COMP and not attrs_of(n).get("is_cpu_op")]
    timed = [n for n in cpu + gpu_comp if n.duration_micros > 0]
    untimed = [n for n in gpu_comp if n.duration_micros == 0]
    assert len(untimed) == 157 and all(tensor_bytes(_values(n)) > 0 for n in untimed)
    res = cs.simulate(_scenario(folder, 1), progress=False)
    s = res.summary
    assert (s["trace_nodes_measured"], s["trace_nodes_roofline"]) == (len(timed), len(untimed))
    assert (s["trace_nodes_kernel_model"], s["trace_nodes_unpriced"]) == (0, 0)
    spans = res.spans[res.spans.kind != "link"]
    assert (spans.lane == "host").sum() == len(cpu)  # host-side c10d calls too
    gpu_colls = [n for n in nodes if n.type == COLL and not attrs_of(n).get("is_cpu_op")]
    assert (spans.kind == "collective").sum() == len(gpu_colls) == 7
    # a 0 µs memcpy is its tensors' bytes at the achieved HBM bandwidth, plus a launch
    cm = _cost()

    def priced(n) -> float:
        nbytes = tensor_bytes(_values(n)) + tensor_bytes(_values(n, "outputs"))
        return cm.memory_seconds(nbytes) + cm.eff.launch_s

    name = untimed[0].name
    expected = [priced(n) for n in untimed] + [n.duration_micros * 1e-6 for n in timed if n.name == name]
    got = spans[spans.name == name]
    assert sorted(got.end_s - got.start_s) == pytest.approx(sorted(expected), rel=1e-9)
    assert s["iteration_time_s"] >= sum(n.duration_micros for n in timed if n in gpu_comp) * 1e-6


def test_the_converters_host_only_trace_reads_its_process_groups_and_counts_what_it_cannot_price(tmp_path):
    folder = _unpack("pt-1.0.2-host-only.0.et", tmp_path / "host")
    _, nodes = read_trace(folder / "pt-1.0.2-host-only.0.et")
    meta = next(n for n in nodes if n.type == META)
    assert json.loads(_values(meta)[0])[0]["ranks"] == []  # ranks [] = every rank
    with pytest.warns(ScenarioWarning, match=r"holds 261 node\(s\) with no duration .* the first: node 2"):
        res = cs.simulate(_scenario(folder, 1), progress=False)
    assert res.summary["trace_nodes_unpriced"] == len(nodes) - 1 == 261  # all but the metadata node
    assert res.summary["trace_nodes_measured"] == 0


def _pytorch_trace(folder: Path, per_rank: list[list]) -> Path:
    """A trace as Chakra's PyTorch converter writes one (its GlobalMetadata names the
    PyTorch ``schema``: ctrl deps are the call tree), one file per rank."""
    folder.mkdir()
    for rank, nodes in enumerate(per_rank):
        meta = GlobalMetadata(attr=[attr("schema", "1.0.2-chakra.0.0.4")])
        write_trace(folder / f"pt.{rank}.et", meta, nodes)
    return folder


def _node(id, name, type=COMP, micros=0, cpu=False, deps=(), ctrl=(), attrs=(), shapes=None, values=None):
    node = Node(
        id=id, name=name, type=type, duration_micros=micros, data_deps=list(deps), ctrl_deps=list(ctrl)
    )
    node.attr.extend([attr("is_cpu_op", cpu), *attrs])
    if shapes is not None:
        node.inputs.shapes = str(shapes)
    if values is not None:
        node.inputs.values = str(values)
    return node


def _dims(flags: list[bool]):
    from clustersim.interop.chakra_schema import AttributeProto

    return AttributeProto(name="involved_dim", bool_list={"values": flags})


def _groups(id, groups) -> Node:
    return _node(id, "## process_group:init ##", META, cpu=True, values=[json.dumps(groups)])


def _run(folder: Path, gpus: int = 1):
    return cs.simulate(_scenario(folder, gpus), progress=False)


@pytest.mark.parametrize("dependent", [False, True])
def test_a_cpu_op_and_a_gpu_op_overlap_unless_one_waits_for_the_other(tmp_path, dependent):
    nodes = [
        _node(1, "aten::foo", micros=10, cpu=True),
        _node(2, "kernel", micros=10, deps=[1] if dependent else []),
    ]
    res = _run(_pytorch_trace(tmp_path / "t", [nodes]))
    assert res.summary["iteration_time_s"] == pytest.approx((20 if dependent else 10) * 1e-6, rel=1e-12)
    lanes = res.spans[res.spans.kind != "link"].set_index("name").lane
    assert (lanes["aten::foo"], lanes["kernel"]) == ("host", "compute")


def _bf16(*shape) -> list:
    return [1, 1, 0, math.prod(shape), 2, "cuda:0"]


def test_gemm_and_attention_kernels_without_a_duration_are_priced_by_the_kernel_tables(tmp_path):
    m, n, k = 4096, 1024, 2048
    b, h, s, d = 2, 16, 2048, 128
    sdpa = (
        "aten::_scaled_dot_product_flash_attention(Tensor query, Tensor key, Tensor value, "
        "float dropout_p=0., bool is_causal=False, bool return_debug_mask=False, *, float? scale=None)"
    )
    nodes = [
        _node(1, "aten::mm", shapes=[[m, k], [k, n]], values=[_bf16(m, k), _bf16(k, n)]),
        # a GPU kernel named by cuBLAS, launched by (the call-tree child of) an aten::addmm
        _node(2, "aten::addmm", cpu=True, micros=5, shapes=[[n], [m, k], [k, n]], values=[_bf16(n)] * 3),
        _node(3, "sm80_xmma_gemm_bf16bf16", deps=[1], ctrl=[2], shapes=[[n], [m, k], [k, n]]),
        _node(
            4,
            "aten::_scaled_dot_product_flash_attention",
            deps=[3],
            shapes=[[b, h, s, d]] * 3 + [[], [], [], []],
            values=[_bf16(b, h, s, d)] * 3 + [0.0, True, False, "<None>"],
            attrs=[attr("op_schema", sdpa)],
        ),
    ]
    prog, counts = read_chakra(_pytorch_trace(tmp_path / "t", [nodes]), 1, _cost)
    assert counts == {
        "trace_nodes_measured": 1,
        "trace_nodes_kernel_model": 3,
        "trace_nodes_roofline": 0,
        "trace_nodes_unpriced": 0,
    }
    ops = {op.name: op for op in prog.ops}
    cm = _cost()
    from clustersim.workload.ops import AttentionShape, Work

    gemm = Work(2.0 * m * n * k, 2 * (m * k + k * n + m * n), gemm=(m, n, k))
    assert ops["aten::mm"].duration == cm.time(gemm) and ops["aten::mm"].flops == 2.0 * m * n * k
    assert ops["sm80_xmma_gemm_bf16bf16"].duration == cm.time(gemm)
    flops = 4.0 * b * h * d * s * s / 2  # causal: half the (query, key) pairs
    attention = ops["aten::_scaled_dot_product_flash_attention"]
    assert attention.flops == flops
    work = Work(flops, 2 * 4 * b * h * s * d, attention=AttentionShape(d, s, True, False, "fa2"))
    assert attention.duration == cm.time(work)


def test_roofline_and_memory_nodes_are_priced_by_their_flops_and_bytes(tmp_path):
    flops, nbytes = 3e12, 2e9
    nodes = [
        _node(1, "fused", attrs=[attr("num_ops", int(flops)), attr("tensor_size", int(nbytes))]),
        _node(2, "offload", MEM_LOAD, attrs=[attr("tensor_size", int(nbytes))]),
    ]
    prog, counts = read_chakra(_pytorch_trace(tmp_path / "t", [nodes]), 1, _cost)
    assert counts["trace_nodes_roofline"] == 2
    cm = _cost()
    fused, offload = prog.ops
    peak = cm.gpu.peak_flops * cm.eff.matmul_max
    assert fused.duration == max(flops / peak, cm.memory_seconds(nbytes)) + cm.eff.launch_s
    assert (offload.lane, offload.duration) == ("memory", cm.memory_seconds(nbytes))


def test_a_node_with_nothing_to_price_it_by_is_counted_and_named(tmp_path):
    folder = _pytorch_trace(tmp_path / "t", [[_node(1, "mystery"), _node(2, "known", micros=3, deps=[1])]])
    with pytest.warns(ScenarioWarning, match=r"1 node\(s\) .* node 1 \('mystery'\): no duration_micros"):
        _, counts = read_chakra(folder, 1, _cost)
    assert (counts["trace_nodes_unpriced"], counts["trace_nodes_measured"]) == (1, 1)


def _two_ranks_p2p(folder: Path, group: list[int], ranks: int = 2) -> Path:
    per_rank = []
    for r in range(ranks):
        nodes = [_groups(1, [{"pg_name": "7", "ranks": group, "group_size": len(group)}])]
        nodes.append(_node(2, "aten::mul", micros=4, deps=[1]))
        coll = _node(3, "ncclKernel_AllReduce", COLL, micros=9, deps=[2], attrs=[attr("comm_type", 0)])
        coll.attr.extend([attr("comm_size", 2**20), _dims([True])])
        nodes.append(coll)
        if r < 2:
            kind = SEND if r == 0 else RECV
            nodes.append(
                _node(
                    4,
                    "ncclDevKernel_SendRecv",
                    kind,
                    deps=[3],
                    attrs=[attr("comm_size", 2**16), attr("pg_name", "7")],
                )
            )
        per_rank.append(nodes)
    return _pytorch_trace(folder, per_rank)


def test_process_groups_define_collectives_and_the_ends_of_sends(tmp_path):
    prog = cs.import_chakra(_two_ranks_p2p(tmp_path / "t", [0, 1]), 2)
    send = next(op for op in prog.ops if op.kind == "send")
    recv = prog.ops[send.peer]
    assert (send.device, recv.device, recv.peer) == (0, 1, send.id)
    coll = [op for op in prog.ops if op.kind == "collective"]
    assert [op.group for op in coll] == [(0, 1), (0, 1)]  # no pg_name: every rank
    # the metadata node is no op: the mul that depended on it starts at once
    assert [op.deps for op in prog.ops if op.name == "aten::mul"] == [(), ()]
    res = _run(_two_ranks_p2p(tmp_path / "u", [0, 1]), 2)
    assert res.summary["trace_nodes_measured"] == 2


def test_refusals_name_the_node_and_the_field(tmp_path):
    def message(folder, gpus=2) -> str:
        with pytest.raises(cs.ScenarioError) as err, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read_chakra(folder, gpus, _cost)
        return str(err.value)

    msg = message(_two_ranks_p2p(tmp_path / "three", [0, 1, 2], ranks=3), 3)
    assert "node 4 ('ncclDevKernel_SendRecv')" in msg and "has no comm_dst" in msg and "'7' [0, 1, 2]" in msg
    bad = [[_groups(1, {"ranks": [0]})]]
    msg = message(_pytorch_trace(tmp_path / "meta", bad), 1)
    assert "node 1 ('## process_group:init ##')" in msg and "inputs.values" in msg and "pg_name" in msg
    bad = [[_groups(1, [{"pg_name": "3", "ranks": [0, 5]}])]]
    assert "ranks 0..0" in message(_pytorch_trace(tmp_path / "range", bad), 1)
    coll = _node(1, "ncclKernel", COLL, micros=2, attrs=[attr("comm_type", 0), attr("comm_size", 64)])
    coll.attr.append(_dims([True, False]))
    msg = message(_pytorch_trace(tmp_path / "dims", [[coll]]), 1)
    assert "node 1 ('ncclKernel')" in msg and "involved_dim [True, False]" in msg
    coll = _node(1, "ncclKernel", COLL, micros=2, attrs=[attr("comm_type", 0), attr("pg_name", "9")])
    msg = message(_pytorch_trace(tmp_path / "pg", [[coll]]), 1)
    assert "node 1 ('ncclKernel')" in msg and "pg_name '9'" in msg
    lonely = _node(1, "ncclDevKernel_SendRecv", SEND, attrs=[attr("comm_size", 64)])
    msg = message(_pytorch_trace(tmp_path / "p2p", [[lonely]]), 1)
    assert "node 1 (" in msg and "neither comm_dst nor a pg_name" in msg
    garbled = _node(1, "aten::mm")
    garbled.inputs.shapes = "[[2, 3]"
    msg = message(_pytorch_trace(tmp_path / "io", [[garbled]]), 1)
    assert "node 1 ('aten::mm')" in msg and "inputs.shapes" in msg
