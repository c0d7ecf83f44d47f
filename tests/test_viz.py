"""Pictures: what they draw agrees with the spans (bars, bins, lines), at small and large scale."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

import clustersim as cs  # noqa: E402
from clustersim.metrics import COMM_KINDS, device_breakdown  # noqa: E402
from clustersim.record import SPAN_FIELDS  # noqa: E402
from clustersim.viz.binning import bin_busy  # noqa: E402
from clustersim.viz.colors import activity, collective_key, color_of  # noqa: E402
from clustersim.viz.gantt import plot_gantt  # noqa: E402
from tests.conftest import synthetic  # noqa: E402


@pytest.fixture(scope="module")
def result():
    sc = synthetic(
        4, 8, 1e-3, 2e-3, latency=1e-5, activation=2**24, params=2**24, optimizer=5e-4, dp=2, network="packet"
    )
    return cs.simulate(sc)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.floats(-1, 11), st.floats(0, 6)), max_size=30),
    st.integers(1, 17),
)
def test_bin_busy_is_exact(spans, bins):
    rows = np.array([r for r, _, _ in spans], dtype=int)
    starts = np.array([s for _, s, _ in spans])
    ends = starts + np.array([d for _, _, d in spans])
    got = bin_busy(rows, starts, ends, 3, (0.0, 10.0), bins)
    edges = np.linspace(0.0, 10.0, bins + 1)
    want = np.zeros((3, bins))
    for r, s, e in zip(rows, starts, ends):
        want[r] += np.clip(np.minimum(e, edges[1:]) - np.maximum(s, edges[:-1]), 0, None)
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_activity_keys():
    assert collective_key("dp all-reduce s0") == "dp all-reduce"
    assert collective_key("tp all_reduce") == "tp all-reduce"
    assert collective_key("tp reduce_scatter") == "tp reduce-scatter"
    assert collective_key("ep all-to-all s2") == "all-to-all"
    assert collective_key("barrier") == "collective"
    assert activity("compute", "W") == "W" and activity("send", "") == "send"
    assert color_of("mystery op") == color_of("mystery op")  # stable for unknown keys


def _bar_colors(ax):
    """(rgb, number of bars) of every broken_barh collection except the grey row backgrounds."""
    out = {}
    for coll in ax.collections:
        rgb = tuple(np.round(coll.get_facecolor()[0][:3], 4))
        out[rgb] = out.get(rgb, 0) + len(coll.get_paths())
    return out


def test_gantt_rows_bars_and_legend(result):
    fig = result.plot_gantt()
    ax = fig.axes[0]
    gpu = result.spans[result.spans["lane"] != "link"]
    assert len(ax.get_yticks()) == len(set(zip(gpu["device"], gpu["lane"])))
    bars = _bar_colors(ax)
    for act, n in (
        ("F", (gpu["phase"] == "F").sum()),
        ("B", (gpu["phase"] == "B").sum()),
        ("send", (gpu["kind"] == "send").sum()),
        ("dp all-reduce", (gpu["kind"] == "collective").sum()),
    ):
        assert bars[tuple(np.round(to_rgb(color_of(act)), 4))] == n, act
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:2] == ["forward", "backward"] and "dp all-reduce" in legend and legend[-1] == "idle"
    labels = {t.get_text() for t in ax.texts}
    assert labels <= {str(j) for j in range(8)} and labels  # micro-batch numbers on wide bars


def test_gantt_zoom_and_subset(result):
    fig = result.plot_gantt(devices=[0, "gpu1"], window=(0.0, 0.01), links=True)
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_yticklabels()]
    s1 = result.devices.set_index("device").at["gpu1", "stage"]
    assert names[0].startswith("gpu0 s0") and any(n.startswith(f"gpu1 s{s1}") for n in names)
    assert not any("gpu2" in n.split("->")[0] and "->" not in n for n in names)
    assert any("->" in n for n in names)  # link rows
    assert ax.get_xlim() == (0.0, 0.01)


def _synthetic_spans(n_dev: int, stages: int, m: int = 4, f: float = 1.0) -> pd.DataFrame:
    """A hand-built GPipe-like timeline: stage s runs F j at (s + j)·f, then B in reverse."""
    rows = []
    per = n_dev // stages
    for d in range(n_dev):
        s = d // per
        for j in range(m):
            rows.append(
                (f"gpu{d}", "compute", "compute", f"F{j}", s, j, (s + j) * f, (s + j + 1) * f, 0, 1.0, "F", 0)
            )
        t = (m + stages - 1) * f
        for j in range(m):
            b0 = t + (stages - 1 - s + j) * f
            rows.append((f"gpu{d}", "compute", "compute", f"B{j}", s, j, b0, b0 + f, 0, 1.0, "B", 0))
    return pd.DataFrame(rows, columns=list(SPAN_FIELDS))


def test_gantt_aggregates_large_clusters():
    spans = _synthetic_spans(256, 4)
    fig = plot_gantt(spans)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0].startswith("stage 0 (64 GPUs)") and len(labels) == 8
    img = ax.images[0].get_array()
    t_end = spans["end_s"].max()
    col = int(0.5 / t_end * img.shape[1])  # t = 0.5: stage 0 all forward, stage 1 idle
    np.testing.assert_allclose(img[0, col, :3], to_rgb(color_of("F")), atol=1e-6)
    assert np.allclose(img[2, col, :3], img[2, col, 0])  # idle grey


def test_heatmap_matches_utilization(result):
    fig = result.plot_heatmap(bins=50)
    frac = fig.axes[0].images[0].get_array()
    util = result.utilization().set_index(["device", "lane"])["busy_fraction"]
    devs = sorted(
        result.devices["device"],
        key=lambda d: (result.devices.set_index("device").at[d, "stage"], int(d[3:])),
    )
    for i, dev in enumerate(devs):
        assert frac[i].mean() == pytest.approx(util[(dev, "compute")], abs=1e-9)


def test_utilization_over_time_matches_totals(result):
    fig = result.plot_utilization(bins=40)
    lines = fig.axes[0].get_lines()
    util = result.utilization().set_index(["device", "lane"])["busy_fraction"]
    assert len(lines) == len(result.devices)  # one line per GPU, so the loop below checks them all
    for line in lines:
        dev = line.get_label()
        assert np.mean(line.get_ydata()) == pytest.approx(util[(dev, "compute")], abs=1e-9)
    assert len(fig.axes) >= 3  # links over time and the top-k bars


def test_memory_plot_peak_and_capacity():
    res = cs.simulate(synthetic(2, 4, params="60 GiB", activation="8 GiB"))
    fig = res.plot_memory()
    ax = fig.axes[0]
    peak = max(max(line.get_ydata()) for line in ax.get_lines() if line.get_linestyle() == "-")
    assert peak == pytest.approx(res.devices["peak_memory_bytes"].max() / 2**30)
    caps = [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert caps == [pytest.approx(res.devices["memory_capacity_bytes"].iloc[0] / 2**30)]


def test_breakdown_sums_and_matches_bubble(result):
    table = result.breakdown()
    np.testing.assert_allclose(table.sum(axis=1), 1.0, atol=1e-9)
    per_dev = device_breakdown(result.spans).set_index("device")
    dev = result.devices.set_index("device")
    waiting = per_dev["bubble"] + per_dev["idle"]  # compute and communication both idle
    np.testing.assert_allclose(waiting.reindex(dev.index), dev["bubble_fraction"], atol=1e-9)
    kinds = per_dev[[f"exposed_{k}" for k in COMM_KINDS]].sum(axis=1)
    np.testing.assert_allclose(kinds, per_dev["exposed_comm"], atol=1e-12)
    fig = result.plot_breakdown()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [f"stage {s}" for s in range(4)]
