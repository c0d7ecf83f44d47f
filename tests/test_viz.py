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
from clustersim.viz.colors import (  # noqa: E402
    COMM_LIGHTEN,
    IDLE_COLOR,
    activity,
    collective_key,
    color_of,
    lane_color,
)
from clustersim.viz.gantt import plot_gantt  # noqa: E402
from clustersim.viz.rows import row_height  # noqa: E402
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
    for act, lane, n in (
        ("F", "compute", (gpu["phase"] == "F").sum()),
        ("B", "compute", (gpu["phase"] == "B").sum()),
        ("send", "send", (gpu["kind"] == "send").sum()),
        ("dp all-reduce", "comm", (gpu["kind"] == "collective").sum()),
    ):
        assert bars[tuple(np.round(lane_color(act, lane), 4))] == n, act
    # communication bars are the activity's colour blended COMM_LIGHTEN of the way to white
    np.testing.assert_allclose(
        lane_color("send", "send"), np.array(to_rgb(color_of("send"))) * (1 - COMM_LIGHTEN) + COMM_LIGHTEN
    )
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
    # image rows per stage: compute twice (it is twice as tall), then comm
    np.testing.assert_allclose(img[0, col, :3], to_rgb(color_of("F")), atol=1e-6)
    np.testing.assert_array_equal(img[1], img[0])
    assert np.allclose(img[3, col, :3], img[3, col, 0])  # stage 1: idle grey


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


def _row_ink(fig, ax, t1, colors):
    """Per y-tick row: (label, ink) — ink is the mean over the pixel line through the row's
    centre of how far each pixel is from the idle grey towards the row's bar colour
    (``colors``, one per row; 1 = solid bar), so an anti-aliased sub-pixel bar counts its share."""
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(float) / 255
    idle = np.array(to_rgb(IDLE_COLOR))
    (x0, _), (x1, _) = ax.transData.transform([(0, 0), (t1, 0)])
    out = []
    for y, tick, color in zip(ax.get_yticks(), ax.get_yticklabels(), colors):
        py = int(round(img.shape[0] - ax.transData.transform([(0, y)])[0, 1]))
        line = img[py, int(np.ceil(x0)) + 2 : int(x1) - 1]  # inside the axes' frame
        ink = np.clip(np.abs(line - idle).sum(axis=1) / np.abs(np.array(color) - idle).sum(), 0, 1)
        out.append((tick.get_text(), float(ink.mean())))
    return out


def test_ink_follows_busy_fraction_not_span_count():
    # one GPU: compute busy 69 % in 23 wide forward spans (no micro-batch numbers on them); send busy 2 % in 200 spans of a
    # tenth of a pixel each (the shape of a full-iteration view of per-layer transfers),
    # tp busy 5 % in 50 spans of a pixel each. Before, a 3-pixel minimum width and white
    # bar edges drew the send lane ~60 % inked — a solid band beside a pale compute row.
    t1 = 1.0
    rows = [
        ("gpu0", "compute", "compute", "F", 0, -1, 0.03 * j, 0.03 * j + 0.03, 0, 1.0, "F", 0)
        for j in range(23)
    ]
    rows += [
        ("gpu0", "send", "send", "send", 0, j, 0.005 * j, 0.005 * j + 1e-4, 8, 0.0, "", 0) for j in range(200)
    ]
    rows += [
        ("gpu0", "tp", "collective", "tp all-reduce", 0, j, 0.02 * j, 0.02 * j + 1e-3, 8, 0.0, "", 0)
        for j in range(50)
    ]
    spans = pd.DataFrame(rows, columns=list(SPAN_FIELDS))
    fig = plot_gantt(spans, window=(0.0, t1))
    ax = fig.axes[0]
    colors = [lane_color("F", "compute"), lane_color("tp all-reduce", "tp"), lane_color("send", "send")]
    ink = {label.split()[-1]: v for label, v in _row_ink(fig, ax, t1, colors)}
    busy = {"compute": 0.69, "tp": 0.05, "send": 0.02}
    for lane, b in busy.items():
        assert ink[lane] == pytest.approx(b, abs=0.012), lane
    # drawn area: compute rows twice as tall, so compute outweighs send 2 · 0.69 / 0.02 = 69 : 1
    h = {lane: row_height(lane) for lane in busy}
    assert h["compute"] == 2 * h["send"] == 2 * h["tp"]
    assert ink["compute"] * h["compute"] / (ink["send"] * h["send"]) == pytest.approx(69, rel=0.35)
    # the bars' own widths are the spans' durations (no minimum width), heights by lane
    for coll in ax.collections[1 + 3 :]:  # after the white frame and the 3 idle row backgrounds
        widths = [p.get_extents().width for p in coll.get_paths()]
        assert max(widths) <= 0.03 + 1e-12
    widths = sorted(p.get_extents().width for c in ax.collections[4:] for p in c.get_paths())
    np.testing.assert_allclose(widths[:200], 1e-4, rtol=1e-9)


def _five_lane_spans(n_dev: int, stages: int) -> pd.DataFrame:
    """The GPipe-like timeline plus a tp, comm, send and recv span on every GPU: five lanes each."""
    spans = _synthetic_spans(n_dev, stages, m=1)
    per = n_dev // stages
    extra = [
        (f"gpu{d}", lane, kind, name, d // per, 0, 0.5, 0.6, 8, 0.0, "", 0)
        for d in range(n_dev)
        for lane, kind, name in (
            ("tp", "collective", "tp all-reduce"),
            ("comm", "collective", "dp all-reduce"),
            ("send", "send", "send"),
            ("recv", "recv", "recv"),
        )
    ]
    return pd.concat([spans, pd.DataFrame(extra, columns=list(SPAN_FIELDS))], ignore_index=True)


def _png_height(fig, dpi=110) -> int:
    """Pixel height of ``fig`` saved as a bundle saves it (110 dpi, tight bounding box)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return int.from_bytes(buf.getvalue()[20:24], "big")  # the PNG header's IHDR height


@pytest.mark.parametrize(
    ("n_dev", "stages", "rows", "title"),
    [
        (16, 4, 80, "timeline"),  # 16 GPUs × 5 lanes: one row each, within the cap
        (32, 4, 8, "one row pair per stage"),  # 32 × 5 lanes would be 21 in: per stage
        (1024, 128, 2 * 32, "one row pair per 4 stages"),  # 128 stages: 4 share a row pair
    ],
)
def test_gantt_height_is_bounded(n_dev, stages, rows, title):
    from clustersim.viz.aggregate import MAX_PAIRS
    from clustersim.viz.rows import MAX_HEIGHT_IN

    fig = plot_gantt(_five_lane_spans(n_dev, stages))
    ax = fig.axes[0]
    assert fig.get_figheight() <= MAX_HEIGHT_IN == 14.0
    assert _png_height(fig) <= 1600  # was 2,771 px at 16 GPUs and 5,411 px at 32
    assert len(ax.get_yticks()) == rows and title in ax.get_title()
    if n_dev == 1024:
        assert MAX_PAIRS == 38  # ⌈128 / 38⌉ = 4 stages per pair
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels[0].startswith("stages 0–3 (32 GPUs)") and labels[-2].startswith("stages 124–127")


def test_gantt_rows_name_the_gpu_type_on_mixed_clusters():
    res = cs.simulate(cs.load_scenario("scenarios/hap-mixed-a100-v100.yaml"), progress=False)
    dev = res.devices
    assert set(dev["gpu"]) == {"A100-SXM4-80GB", "V100-SXM2-32GB"}
    a100 = dev.loc[dev["gpu"] == "A100-SXM4-80GB", "device"].iloc[0]
    v100 = dev.loc[dev["gpu"] == "V100-SXM2-32GB", "device"].iloc[0]
    labels = [t.get_text() for t in res.plot_gantt(devices=[a100, v100]).axes[0].get_yticklabels()]
    heads = [lab for lab in labels if lab.endswith("  compute")]
    assert len(heads) == 2
    assert heads[0].startswith(a100) and "A100-SXM4-80GB" in heads[0]
    assert heads[1].startswith(v100) and "V100-SXM2-32GB" in heads[1]
    # the per-stage view names the types of each group's GPUs
    agg = [t.get_text() for t in res.plot_gantt().axes[0].get_yticklabels()]
    assert all("A100-SXM4-80GB/V100-SXM2-32GB" in lab for lab in agg[::2])


def test_homogeneous_rows_do_not_repeat_the_gpu_type(result):
    labels = [t.get_text() for t in result.plot_gantt().axes[0].get_yticklabels()]
    gpu = result.devices["gpu"].iloc[0]
    assert result.devices["gpu"].nunique() == 1 and not any(gpu in lab for lab in labels)


def test_what_fits_one_row_per_lane_is_as_documented():
    # docs/outputs.md: one row per lane up to 19 GPUs with five lanes each, 57 with compute only
    from clustersim.viz.rows import per_lane_fits

    assert per_lane_fits(_five_lane_spans(19, 1)) and not per_lane_fits(_five_lane_spans(20, 1))
    assert per_lane_fits(_synthetic_spans(57, 1, m=1)) and not per_lane_fits(_synthetic_spans(58, 1, m=1))
