"""clustersim's exports run as ASTRA-sim runs them (clustersim.interop.astra_view) on the
matched ring of benchmarks/astra_sim_check.py (``--matched``), no ASTRA-sim needed here.

The checker's run of ASTRA-sim 7e526fb's analytical backend beside it (docs/interop.md): the
shipped data-parallel sample 329.0070 ms in both; the synthetic model at 64 ranks 364.0630 /
364.0631 ms; a 2-layer GPT-1.3B at 8 and 64 ranks 74.6594 / 74.6594 and 78.1028 / 78.1030 ms;
the shipped pp 4 × dp 2 sample 95.5110 ms in both; the quickstart (TP 2 × PP 4 × DP 2)
914.8023 / 914.8186 ms — every one within 0.002 %. Here: the data-parallel sample takes the
α-β closed form of its ops to 1e-9 (ASTRA-sim's time is the same closed form, in whole ns),
and the view keeps the chain and compute times ASTRA-sim runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.interop.astra_view import astra_seconds, astra_view
from clustersim.interop.chakra_attrs import attr, attrs_of
from clustersim.interop.chakra_file import read_trace, write_trace
from clustersim.interop.chakra_import import import_chakra, rank_files
from clustersim.interop.chakra_schema import GlobalMetadata, Node

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "tests" / "data" / "chakra"
_spec = importlib.util.spec_from_file_location("astra_sim_check", ROOT / "benchmarks/astra_sim_check.py")
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

B, L = check.RING_GBPS * check.GIB, check.RING_NS * 1e-9  # the matched ring's links


def test_the_dp8_sample_takes_the_closed_form_on_the_matched_ring(tmp_path):
    """Each rank: its compute one after another, then the ring all-reduce of the gradients —
    2(n − 1) steps of S/n over one link — then the optimizer; the sample's numbers read from
    its files."""
    folder = SAMPLES / "synthetic-dp8"
    n = len(rank_files(folder))
    _, nodes = read_trace(rank_files(folder)[0])
    compute = sum(node.duration_micros * 1e-6 for node in nodes if node.type == 4)
    (size,) = [attrs_of(node)["comm_size"] for node in nodes if node.type == 7]
    closed = compute + 2 * (n - 1) * (L + size / n / B)
    res = cs.simulate(check.ring_trace_scenario(astra_view(folder, tmp_path / "view"), n), progress=False)
    assert res.summary["iteration_time_s"] == pytest.approx(closed, rel=1e-9)


def test_the_view_keeps_astra_sims_communication_chain(tmp_path):
    """Every edge the export lists in ``clustersim.serial`` is a dependency in the view and
    none in clustersim's own import (which keeps the Program's concurrency)."""
    folder = SAMPLES / "synthetic-pp4-dp2"
    chain = []
    for path in rank_files(folder):
        _, nodes = read_trace(path)
        chain += [(node.id, d) for node in nodes for d in attrs_of(node).get("clustersim.serial", [])]
    assert chain  # the sample has a chain to keep
    own, view = import_chakra(folder), import_chakra(astra_view(folder, tmp_path / "view"))
    assert [op.name for op in own.ops] == [op.name for op in view.ops]
    for node, before in chain:
        assert before in view.ops[node].deps and before not in own.ops[node].deps


def test_the_view_runs_compute_for_astra_sims_whole_microseconds(tmp_path):
    """ASTRA-sim replays ``duration_micros`` microseconds, 1 ns for 0 (Workload.cc
    issue_replay), whatever exact seconds clustersim's own attribute holds."""
    nodes = []
    for i, (micros, exact) in enumerate([(0, 0.3e-6), (3, 3.4e-6), (1000, 1000.2e-6)]):
        node = Node(id=i, name=f"c{i}", type=4, duration_micros=micros, data_deps=[i - 1] if i else [])
        node.attr.extend([attr("is_cpu_op", False), attr("clustersim.duration_s", exact)])
        nodes.append(node)
    write_trace(tmp_path / "src" / "t.0.et", GlobalMetadata(version="0.0.4"), nodes)
    own = import_chakra(tmp_path / "src")
    view = import_chakra(astra_view(tmp_path / "src", tmp_path / "view"))
    assert [op.duration for op in own.ops] == [0.3e-6, 3.4e-6, 1000.2e-6]
    assert [op.duration for op in view.ops] == [1e-9, 3e-6, 1e-3]
    assert astra_seconds(0) == 1e-9 and astra_seconds(7) == pytest.approx(7e-6, rel=1e-15)
