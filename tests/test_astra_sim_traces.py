"""ASTRA-sim's own collective traces (tests/data/astra_sim_microbenchmarks/) on ASTRA-sim's
``Ring_8npus`` network, as benchmarks/astra_sim_check.py builds it: clustersim's time is the
α-β closed form of the configured algorithm, to 1e-9.

The checker's run of ASTRA-sim's analytical backend beside it (session 13's note): all-reduce,
all-gather and reduce-scatter within 0.05 % once ASTRA-sim charges no local-memory time for
its reductions (its ``local-mem-bw``), cuts no dataset splits and adds 1 ns a step (its
``endpoint-delay``, 10 ns in its examples); the all-to-all departs by
ASTRA-sim's congestion-unaware backend letting a rank's n − 1 concurrent messages each use its
whole link (4.44 µs against the 17.6 µs of n − 1 messages through one port)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

import clustersim as cs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "astra_sim_microbenchmarks"
_spec = importlib.util.spec_from_file_location("astra_sim_check", ROOT / "benchmarks/astra_sim_check.py")
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

N, S = 8, 1_048_576  # ranks, comm_size
B, L = check.GIB_50, 500e-9  # the ring's links: 50 GB/s as ASTRA-sim reads it (2^30 B), 500 ns
CLOSED_FORM = {
    # ring: 2(n − 1) steps of S/n; n − 1 of S/n; an all-gather's comm_size is one rank's part,
    # n − 1 steps of it (chakra_export.per_rank_factor)
    "all_reduce": 2 * (N - 1) * (L + S / N / B),
    "reduce_scatter": (N - 1) * (L + S / N / B),
    "all_gather": (N - 1) * (L + S / B),
    # direct (what auto picks): each rank's n − 1 messages of S/n one after another through its
    # port, the route's latency once (clustersim.collectives.direct.cost)
    "all_to_all": L + (N - 1) * S / (N * B),
}


@pytest.mark.parametrize("kind", sorted(CLOSED_FORM))
def test_astra_sims_traces_take_the_closed_form(kind, tmp_path):
    for f in (DATA / kind).glob("*.et"):
        shutil.copy(f, tmp_path / f.name)
    res = cs.simulate(check.ring_trace_scenario(tmp_path, N), progress=False)
    assert res.summary["iteration_time_s"] == pytest.approx(CLOSED_FORM[kind], rel=1e-9)
