"""Collective-level validation: the published nccl-tests rows are well formed, the simulated
busbw of every ``check`` row stays within its size band's stated tolerance, and
docs/validation.md holds the generated tables."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import pytest

from clustersim.collectives import KINDS
from clustersim.collectives.bench import busbw_factor
from clustersim.hardware.presets import CLUSTER_PRESETS
from clustersim.validation.collectives import (
    BANDS,
    TOLERANCE,
    cluster_of,
    collective_tables,
    error,
    predicted,
    rows,
)

CHECKS = [r for r in rows() if r.role == "check"]


def test_rows_are_well_formed():
    assert {r.role for r in rows()} == {"check", "context"}
    for r in rows():
        assert r.collective in KINDS and r.busbw > 0 and r.nbytes > 0 and r.source
        if r.cluster:
            cluster = cluster_of(r.cluster, r.nodes)
            assert cluster["gpus_per_node"] * r.nodes == r.ranks, r
    # every check row is simulated on a preset: nothing asserted on goes unpredicted
    assert all(r.cluster.split()[0] in CLUSTER_PRESETS and predicted(r) is not None for r in CHECKS)


def test_cluster_overrides_apply_to_the_preset():
    base, four = cluster_of("dgx_a100", 2), cluster_of("dgx_a100 nic.per_node=4", 2)
    assert four["nic"]["per_node"] == 4 and isinstance(four["nic"]["per_node"], int)
    assert {k: v for k, v in four.items() if k != "nic"} == {k: v for k, v in base.items() if k != "nic"}


def test_prediction_is_the_nccl_tests_busbw_of_the_simulated_time():
    r = next(r for r in CHECKS if r.nodes == 2)
    p = predicted(r)
    assert p.busbw == pytest.approx(r.nbytes / p.time_s * busbw_factor(r.collective, r.ranks), rel=1e-12)


@pytest.mark.parametrize("band", [name for _, name in BANDS])
def test_check_rows_stay_within_the_band_tolerance(band):
    errs = [error(r) for r in CHECKS if r.band == band]
    assert errs, band
    assert max(abs(e) for e in errs) <= TOLERANCE[band]


def test_large_messages_are_reproduced_on_every_checked_preset():
    # the bandwidth rule per link technology, unfitted: rms per preset well inside the bound
    per_preset = defaultdict(list)
    for r in CHECKS:
        if r.band == "large":
            per_preset[r.cluster.split()[0]].append(error(r))
    assert set(per_preset) == {"dgx_a100", "dgx_h100"}
    for errs in per_preset.values():
        assert math.sqrt(sum(e * e for e in errs) / len(errs)) <= 0.08


def test_the_protocol_ramp_follows_the_a100_curve_without_a_bias():
    # NCCL's per-size protocol choice (LL → LL128 → Simple) reproduces the ramp below the
    # plateau: on one A100 node no size band is off by more than its bound, errors change
    # sign along the curve (Simple-alone was +30 % … +410 %, every size too fast), and
    # nccl-tests' half-plateau size (16–32 MiB) is where the model's is
    curve = sorted((r for r in CHECKS if r.nodes == 1 and r.band != "large"), key=lambda r: r.nbytes)
    errs = [error(r) for r in curve]
    assert len(errs) == 18 and max(abs(e) for e in errs) <= 0.15
    assert min(errs) < 0 < max(errs)
    plateau = predicted(max(CHECKS, key=lambda r: (r.nodes == 1, r.nbytes))).busbw
    half = next(r.nbytes for r in curve if predicted(r).busbw >= plateau / 2)
    assert 16 * 2**20 <= half <= 32 * 2**20


def test_each_protocol_wins_where_nccl_runs_it():
    # the tuner's least-time choice on one A100 node: LL for latency-bound sizes, LL128 in
    # between, Simple on the plateau (the order NCCL_PROTO lists them)
    import simpy

    from clustersim.collectives.group import Group
    from clustersim.collectives.registry import plan
    from clustersim.network.factory import build_fabric
    from clustersim.record import Recorder
    from clustersim.topology import build_topology
    from clustersim.topology.graph import gpu_names

    cluster = cluster_of("dgx_a100", 1)
    env = simpy.Environment()
    graph = build_topology(cluster)
    fabric = build_fabric("analytical", env, Recorder(), graph)
    group = Group(
        env, fabric, gpu_names(graph), cluster["collective_alpha"], protocols=cluster["collective_protocols"]
    )
    chosen = [plan(group, "all_reduce", 2**k)[1].name for k in (10, 19, 24, 30)]
    assert chosen == ["ll", "ll", "ll128", "simple"]


def test_nvls_rows_show_the_unmodelled_in_switch_reduction():
    # NVLS (NVLink SHARP) reaches ~480 GB/s busbw on 8 H100/H200; the ring/direct model
    # stays at the NVLink-bound ~370: 20-25 % low on the plateau, kept as context
    nvls = [
        error(r) for r in rows() if r.nccl_algorithm == "nvls" and r.band == "large" and r.nbytes >= 2**30
    ]
    assert nvls and all(-0.25 < e < -0.19 for e in nvls if e is not None)


def test_docs_hold_the_generated_collective_tables():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "validation.md").read_text()
    assert collective_tables() in doc
