"""Energy and power (docs/energy.md): the power model's closed forms, an idle cluster,
totals as the sum of per-device states, and a published training-power check row."""

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import clustersim as cs
from clustersim.energy import EnergySettings, PowerTrace, energy_summary, energy_table, gpu_power, gpu_traces
from clustersim.energy.timeline import HOST_OPS
from clustersim.errors import ScenarioError
from clustersim.metrics import gpu_spans, iteration_window

CHECKS = Path(cs.__file__).parent / "data" / "training_power_checks.csv"
GEMM_CHECKS = Path(cs.__file__).parent / "data" / "gemm_power_measurements.csv"


@pytest.fixture(scope="module")
def quick():
    return cs.simulate(
        cs.load_scenario("scenarios/quickstart.yaml").with_overrides({"energy": {"pue": 1.25}})
    )


def one_op(lane, start, end, flops=0.0, nbytes=0, name="op", device="gpu0"):
    return {
        "device": device,
        "lane": lane,
        "name": name,
        "start_s": start,
        "end_s": end,
        "flops": flops,
        "bytes": nbytes,
    }


def test_power_model_closed_forms():
    """A GEMM at the best GEMM rate draws the TDP; a memory-bound op idle + P_mem; a
    transfer at half the HBM rate idle + P_mem / 2 × 2 (twice its bytes); together they
    are capped at the TDP; host time adds nothing."""
    gp = gpu_power("H100-SXM5-80GB", "dram")
    window = (0.0, 4.0)
    spans = pd.DataFrame(
        [
            one_op("compute", 0.0, 1.0, flops=gp.gemm_flops),  # 1 s at the GEMM maximum
            one_op("compute", 1.0, 2.0, flops=0.0),  # a memory-bound kernel
            one_op("comm", 2.0, 3.0, nbytes=int(gp.hbm_bandwidth / 4)),  # streams half the HBM rate
            one_op("comm", 0.5, 1.0, nbytes=int(gp.hbm_bandwidth)),  # beside the GEMM: capped
            one_op("compute", 3.0, 4.0, name="launch B3"),  # host time
        ]
    )
    tr = PowerTrace.of_spans(spans, gp, window)
    watts = tr.binned(0.0, 4.0, 8)
    assert watts == pytest.approx(
        [
            gp.tdp_w,
            gp.tdp_w,
            gp.idle_w + gp.mem_w,
            gp.idle_w + gp.mem_w,
            gp.idle_w + gp.mem_w / 2,
            gp.idle_w + gp.mem_w / 2,
            gp.idle_w,
            gp.idle_w,
        ],
        rel=1e-12,
    )
    assert tr.energy_j() == pytest.approx(
        gp.tdp_w + gp.idle_w + gp.mem_w + gp.idle_w + gp.mem_w / 2 + gp.idle_w
    )
    assert gpu_power("H100-SXM5-80GB").mem_w == gp.dynamic_w  # the 'limit' bracket
    assert gp.mem_w == pytest.approx(3.9e-12 * 8 * 3.35e12)


def test_idle_cluster_energy_is_idle_power_times_time(quick):
    """No op runs: every GPU draws its idle power; NICs and switches their constant power."""
    empty = quick.spans.iloc[0:0]
    window = (0.0, 2.5)
    table = energy_table(gpu_traces(empty, quick.devices, window), quick.devices)
    idle = gpu_power("A100-SXM4-80GB").idle_w
    assert table["energy_j"].to_numpy() == pytest.approx(np.full(16, idle * 2.5), rel=1e-15)
    units = {"nic": 16, "switch": 11}
    s = EnergySettings(pue=1.4, nic_w=25.0, switch_w=640.0)
    out = energy_summary(table, 2.5, units, {"iteration_time_s": 2.5, "tokens_per_s": 0.0}, s)
    it = 16 * idle * 2.5 + 16 * 25.0 * 2.5 + 11 * 640.0 * 2.5
    assert out["it_energy_j"] == pytest.approx(it, rel=1e-15)
    assert out["energy_per_step_j"] == pytest.approx(1.4 * it, rel=1e-15)
    assert out["energy_per_token_j"] is None


def test_totals_are_the_sum_of_device_states(quick):
    """The summary's GPU energy is the sum over GPUs; each GPU's is idle × T plus each op's
    dynamic power × its time (the lower bracket never reaches the cap here)."""
    window = iteration_window(quick.spans)
    traces = gpu_traces(quick.spans, quick.devices, window, memory="dram")
    table = energy_table(traces, quick.devices)
    assert (table["peak_w"] < 400).all()  # no cap: the states add
    g = gpu_spans(quick.spans)
    for dev, ops in g.groupby("device"):
        gp = gpu_power("A100-SXM4-80GB", "dram")
        dur = (ops["end_s"] - ops["start_s"]).to_numpy()
        dyn = np.where(
            ops["lane"].eq("compute"),
            gp.compute_w(ops["flops"].to_numpy(), dur),
            gp.transfer_w(ops["bytes"].to_numpy(), dur),
        )
        dyn[ops["name"].astype(str).str.startswith(HOST_OPS).to_numpy()] = 0.0
        expected = gp.idle_w * (window[1] - window[0]) + float(np.sum(dyn * dur))
        assert traces[dev].energy_j() == pytest.approx(expected, rel=1e-9)
    s = quick.summary
    limit = energy_table(gpu_traces(quick.spans, quick.devices, window), quick.devices)
    assert s["gpu_energy_j"] == pytest.approx(limit["energy_j"].sum(), rel=1e-12)
    assert s["gpu_energy_dram_j"] == pytest.approx(table["energy_j"].sum(), rel=1e-12)
    assert s["gpu_energy_dram_j"] < s["gpu_energy_j"]
    tokens = s["tokens_per_s"] * s["iteration_time_s"]
    assert s["energy_per_token_j"] == pytest.approx(1.25 * s["it_energy_j"] / tokens, rel=1e-12)


def test_training_power_check_row():
    """The published check (data/training_power_checks.csv, never fitted): a Megatron GPT
    training step on DGX-A100 — its GPUs' peak power (100 ms bins) within the row's
    tolerance of the TDP."""
    with open(CHECKS, newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["check"] == "patel2024_llm_training_peak")
    sc = cs.load_scenario("scenarios/validation/megatron-2021-gpt-1.7b.yaml").with_overrides(
        {"energy": {}, "cluster.gpu": row["gpu"]}
    )
    res = cs.simulate(sc)
    tdp = float(row["tdp_w"])
    assert gpu_power(row["gpu"]).tdp_w == tdp
    assert abs(res.summary[row["statistic"]] / tdp - 1) <= float(row["tolerance"])


def test_gemm_power_check_row():
    """The kernel-level check (data/gemm_power_measurements.csv, never fitted): a large
    randn GEMM on A100 holds the GPU at its power limit. Our GEMM of that shape runs within
    the row's tolerance of the measured rate, and its power — idle + the compute power of
    its FLOP/s — is within the tolerance of the measured watts under both memory brackets
    (the lower one prices it from its tensor activity alone: a_sm of our rate)."""
    from clustersim.workload.calibration import gemm_seconds
    from clustersim.workload.cost_model import efficiency_for

    with open(GEMM_CHECKS, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows
    for row in rows:
        m, n, k = (int(row[d]) for d in "mnk")
        tol = float(row["tolerance"])
        seconds = gemm_seconds(row["gpu"], efficiency_for(row["gpu"]), m, n, k, row["dtype"])
        flops = 2.0 * m * n * k
        assert abs(flops / seconds / 1e12 / float(row["measured_tflops"]) - 1) <= tol
        for memory in ("limit", "dram"):
            gp = gpu_power(row["gpu"], memory)
            watts = gp.idle_w + float(gp.compute_w(flops, seconds))
            assert abs(watts / float(row["power_w"]) - 1) <= tol, (memory, watts)


def test_costs_per_million_tokens(quick):
    s = quick.summary
    res = cs.simulate(
        cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
            {"energy": {"pue": 1.25, "price_per_kwh": 0.1, "price_per_gpu_hour": 2.0}}
        )
    )
    tokens = s["tokens_per_s"] * s["iteration_time_s"]
    r = res.summary
    assert r["energy_cost_per_mtok"] == pytest.approx(r["energy_per_step_j"] / 3.6e6 * 0.1 / tokens * 1e6)
    assert r["gpu_hour_cost_per_mtok"] == pytest.approx(
        16 * s["iteration_time_s"] / 3600 * 2.0 / tokens * 1e6
    )


def test_no_energy_section_no_energy_fields():
    res = cs.simulate("scenarios/synthetic-4stage-1f1b.yaml")
    assert not any("energy" in k or "power" in k for k in res.summary)


@pytest.mark.parametrize(
    "energy, field",
    [({"pue": 0.5}, "energy.pue"), ({"nic_power": -1}, "energy.nic_power"), ({"watts": 3}, "energy")],
)
def test_bad_energy_section_is_refused(energy, field):
    with pytest.raises(ScenarioError) as err:
        cs.load_scenario("scenarios/quickstart.yaml").with_overrides({"energy": energy})
    assert str(err.value).startswith(field)


@pytest.mark.filterwarnings("ignore::clustersim.errors.CalibrationTransfer")
def test_gpu_without_a_power_row_is_refused():
    sc = cs.load_scenario("scenarios/pipedream-vgg16-16xV100-10GbE.yaml").with_overrides({"energy": {}})
    with pytest.raises(ScenarioError, match="cluster.gpu"):
        cs.simulate(sc)


def test_power_plot(quick):
    fig = quick.plot_power(bins=30)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) >= 4
    p = quick.power(bins=30)
    assert len(p) == 30 * 16 and (p["watts"] >= gpu_power("A100-SXM4-80GB").idle_w - 1e-9).all()


NETWORK_ROWS = Path(cs.__file__).parent / "data" / "network_power.csv"


def network_row(kind: str, gbps: float) -> dict:
    with open(NETWORK_ROWS, newline="") as fh:
        return next(r for r in csv.DictReader(fh) if r["kind"] == kind and float(r["port_gbps"]) == gbps)


def test_network_power_defaults_are_the_datasheet_rows(quick):
    """Unset nic_power / switch_power: each NIC draws the datasheet row of its line rate
    (DGX A100's 200 Gb/s: the NDR200 ConnectX-7's 16.7 W; no 200 Gb/s switch row: none);
    on 400 Gb/s NICs the ConnectX-7's 24.9 W and every fabric switch (not the NVSwitches)
    the QM9700's 747 W; a number still means every switch, NVSwitches included."""
    from clustersim.topology import build_topology
    from clustersim.topology.inventory import unit_counts

    s, seconds = quick.summary, np.subtract(*iteration_window(quick.spans)[::-1])
    nic200 = network_row("nic", 200)
    assert s["nic_energy_j"] == pytest.approx(16 * float(nic200["typical_w"]) * seconds, rel=1e-12)
    assert s["switch_energy_j"] == 0.0 and s["network_power_rows"] == {"nic": nic200["model"], "switch": None}

    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"energy": {}, "cluster.nic.bandwidth": 400e9 / 8}
    )
    res = cs.simulate(sc)
    cluster = sc.resolved()["cluster"]
    units = unit_counts(cluster, build_topology(cluster))
    assert 0 < units["fabric_switch"] < units["switch"]  # the servers' NVSwitches are not in it
    r, t = res.summary, np.subtract(*iteration_window(res.spans)[::-1])
    nic, switch = network_row("nic", 400), network_row("switch", 400)
    assert r["nic_energy_j"] == pytest.approx(units["nic"] * float(nic["typical_w"]) * t, rel=1e-12)
    assert r["switch_energy_j"] == pytest.approx(
        units["fabric_switch"] * float(switch["typical_w"]) * t, rel=1e-12
    )
    assert r["network_power_rows"] == {"nic": nic["model"], "switch": switch["model"]}
    given = cs.simulate(sc.with_overrides({"energy": {"nic_power": 0, "switch_power": 100}})).summary
    assert given["nic_energy_j"] == 0.0
    assert given["switch_energy_j"] == pytest.approx(units["switch"] * 100 * t, rel=1e-12)
    assert given["network_power_rows"] == {"nic": "energy.nic_power", "switch": "energy.switch_power"}
