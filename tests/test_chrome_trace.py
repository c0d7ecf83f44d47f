"""Chrome/Perfetto trace: format rules checked by a small validator, and content vs spans."""

import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import clustersim as cs
from clustersim.record import SPAN_FIELDS
from clustersim.trace.chrome import chrome_events, write_chrome_trace
from tests.conftest import synthetic

META = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def validate_trace(doc: dict) -> dict:
    """Check the trace-event rules Perfetto relies on; return slices grouped by track.

    Required fields per phase, numeric µs ``ts``/``dur`` ≥ 0, named processes and threads,
    no two slices of one track overlapping (touching and zero-length are fine), every flow
    id with exactly one start and one end, each bound inside a slice of its track."""
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    names, procs, tracks, flows = set(), set(), {}, {}
    for e in events:
        ph = e["ph"]
        if ph == "M":
            assert e["name"] in META and "args" in e
            if e["name"] == "process_name":
                procs.add(e["pid"])
            elif e["name"] == "thread_name":
                names.add((e["pid"], e["tid"]))
        elif ph == "X":
            for field in ("name", "cat", "pid", "tid", "ts", "dur", "args"):
                assert field in e, (field, e)
            assert isinstance(e["ts"], float | int) and isinstance(e["dur"], float | int)
            assert e["ts"] >= 0 and e["dur"] >= 0
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        elif ph in ("s", "f"):
            assert {"id", "pid", "tid", "ts", "name", "cat"} <= set(e)
            flows.setdefault(e["id"], []).append(e)
        elif ph == "C":
            assert {"name", "pid", "ts", "args"} <= set(e)
            assert all(isinstance(v, float | int) for v in e["args"].values())
        else:
            raise AssertionError(f"unexpected phase {ph!r}")
    for track, iv in tracks.items():
        assert track in names, f"unnamed track {track}"
        assert track[0] in procs, f"unnamed process {track[0]}"
        iv.sort()
        for a, b in zip(iv, iv[1:]):
            assert b[0] >= a[1] - 1e-6, f"overlapping slices on {track}: {a} {b}"
    for fid, pair in flows.items():
        assert sorted(e["ph"] for e in pair) == ["f", "s"], f"flow {fid} lacks an end: {pair}"
        for e in pair:
            iv = tracks.get((e["pid"], e["tid"]), [])
            assert any(a - 1e-6 <= e["ts"] <= b + 1e-6 for a, b in iv), f"flow {fid} end outside any slice"
    return tracks


@pytest.fixture(scope="module")
def result():
    sc = synthetic(4, 6, 1e-3, 2e-3, latency=1e-5, activation=2**22, params=2**22, dp=2, network="packet")
    sc["cluster"].update(nodes=2, gpus_per_node=4)
    return cs.simulate(sc)


@pytest.fixture(scope="module")
def trace(result, tmp_path_factory):
    path = result.to_chrome_trace(tmp_path_factory.mktemp("t") / "trace.json")
    return json.loads(path.read_text())


def test_trace_passes_validator(trace):
    validate_trace(trace)


def test_slice_count_per_kind_equals_spans(result, trace):
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert Counter(e["args"]["kind"] for e in slices) == Counter(result.spans["kind"])
    assert {"compute", "send", "recv", "collective", "link"} <= set(result.spans["kind"])


def test_microseconds(result, trace):
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert max(e["ts"] + e["dur"] for e in slices) == pytest.approx(result.spans["end_s"].max() * 1e6)
    longest = (result.spans["end_s"] - result.spans["start_s"]).max()
    assert max(e["dur"] for e in slices) == pytest.approx(longest * 1e6)


def test_processes_are_nodes_and_threads_named_sorted(result, trace):
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert sorted(procs.values()) == ["links", "node 0", "node 1"]
    threads = [(e["pid"], e["tid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"]
    node0 = [name for pid, tid, name in sorted(threads) if procs[pid] == "node 0"]
    assert node0[:3] == ["gpu0 compute", "gpu0 comm", "gpu0 send"]
    assert all(n.startswith(("gpu0 ", "gpu1 ", "gpu2 ", "gpu3 ")) for n in node0)


def test_every_send_has_a_flow_to_its_recv_in_the_same_replica(result, trace):
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    by_track = {}
    for e in slices:
        by_track.setdefault((e["pid"], e["tid"]), []).append(e)

    def enclosing(ev):
        """Slices of the event's track that contain its time (several when zero-length recvs
        coincide: the arrow then lands on the same point whichever it binds to)."""
        return [s for s in by_track[(ev["pid"], ev["tid"])] if s["ts"] <= ev["ts"] <= s["ts"] + s["dur"]]

    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == (result.spans["kind"] == "send").sum()
    dp = dict(zip(result.devices["device"], result.devices["dp_rank"]))
    stage = dict(zip(result.devices["device"], result.devices["stage"]))
    for fid, s in starts.items():
        sends, recvs = enclosing(s), enclosing(ends[fid])
        send = next(x for x in sends if x["args"]["kind"] == "send")
        recv = next(x for x in recvs if x["name"] == send["name"].replace("send ", "recv ", 1))
        a, b = send["args"]["device"], recv["args"]["device"]
        assert dp[a] == dp[b] and abs(stage[a] - stage[b]) == 1
        assert send["args"]["iteration"] == recv["args"]["iteration"]


def test_counters_for_memory_and_links(result, trace):
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    mem = [e for e in counters if e["name"].startswith("memory ")]
    assert {e["name"] for e in mem} == {f"memory {d}" for d in result.devices["device"]}
    peak = max(e["args"]["GiB"] for e in mem)
    assert peak == pytest.approx(result.devices["peak_memory_bytes"].max() / 2**30)
    util = [e for e in counters if e["name"].startswith("util ")]
    assert util and all(0 <= e["args"]["busy"] <= 1 for e in util)


def test_overlapping_spans_go_to_an_overflow_track():
    rows = [
        ("gpu0", "comm", "collective", f"c{i}", 0, -1, s, e, 8, 0.0, "", 0)
        for i, (s, e) in enumerate([(0.0, 2.0), (1.0, 3.0), (2.0, 2.5), (3.0, 3.0)])
    ]
    spans = pd.DataFrame(rows, columns=list(SPAN_FIELDS))
    doc = {"traceEvents": chrome_events(spans)}
    tracks = validate_trace(doc)
    assert sum(len(v) for v in tracks.values()) == 4 and len(tracks) == 2


def test_only_the_overlapping_lane_moves_and_its_overflow_is_named():
    clean = [("gpu0", "compute", "compute", f"F{i}", 0, i, i, i + 1.0, 0, 1.0, "fwd", 0) for i in range(3)]
    spans = pd.DataFrame(
        clean
        + [("gpu0", "comm", "collective", "c0", 0, -1, 0.0, 2.0, 8, 0.0, "", 0)]
        + [("gpu0", "comm", "collective", "c1", 0, -1, 1.0, 3.0, 8, 0.0, "", 0)],
        columns=list(SPAN_FIELDS),
    )
    events = chrome_events(spans)
    tid = {e["name"]: e["tid"] for e in events if e["ph"] == "X"}
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tid["F0"] == tid["F1"] == tid["F2"] and tid["c0"] != tid["c1"]
    assert names[tid["F0"]] == "gpu0 compute" and names[tid["c0"]] == "gpu0 comm"
    assert names[tid["c1"]] == "gpu0 comm +1" and tid["c1"] == 3  # after the two lanes' tracks


def test_trace_file_is_the_pure_python_encoders_bytes(result, tmp_path):
    # written with json.dumps (the C encoder) in one write; json.dump streams the same
    # document through the pure-Python encoder
    path = result.to_chrome_trace(tmp_path / "t.json")
    doc = {"traceEvents": chrome_events(result.spans, result.devices, result.memory), "displayTimeUnit": "ms"}
    slow = io.StringIO()
    json.dump(doc, slow, separators=(",", ":"))
    assert path.read_bytes() == slow.getvalue().encode()


def test_trace_file_is_json_dumps_of_the_events_for_awkward_values(tmp_path):
    # the slices are written from their columns (_Slices.json_text): each distinct value is
    # encoded once, floats told apart by bit pattern — -0.0 beside 0.0, NaN, infinities,
    # names to escape — and a lane whose overlapping spans move to an overflow track
    inf, nan = float("inf"), float("nan")
    rows = [
        ("gpu0", "compute", "compute", 'F0 "quoted", é ☃', 0, 0, 0.0, 1.0, 0, 1.5, "fwd", 0),
        ("gpu0", "compute", "compute", "F1\ttab\\", 0, 1, 1.0, 2.0, 0, -0.0, "fwd", 0),
        ("gpu0", "comm", "collective", "tp all-reduce", 0, -1, -0.0, 3.0, 2**40, nan, "", 0),
        ("gpu0", "comm", "collective", "tp all-reduce", 0, -1, 1.0, 2.0, 8, inf, "", 0),
        ("gpu1", "comm", "collective", "dp all-reduce", 1, -1, 0.5, nan, 8, -inf, "", 1),
        ("gpu1", "send", "send", "send F0 s0->s1", 1, 0, 0.1, 0.1 + 1e-9, 8, 0.0, "", 1),
        ("gpu0->gpu1", "link", "link", "gpu0->gpu1", -1, -1, 0.1, 0.3, 8, 0.0, "", 1),
    ]
    spans = pd.DataFrame(rows, columns=list(SPAN_FIELDS))
    path = write_chrome_trace(spans, tmp_path / "t.json")
    events = chrome_events(spans)
    assert any(e["name"] == "thread_name" and e["args"]["name"].endswith(" +1") for e in events)
    assert path.read_text() == json.dumps(
        {"traceEvents": events, "displayTimeUnit": "ms"}, separators=(",", ":")
    )


def test_writing_a_trace_loads_no_matplotlib(tmp_path):
    # the trace shares row order, colours and binning with the pictures (viz.rows, viz.colors,
    # viz.binning), none of which may pull in matplotlib
    code = (
        "import sys, clustersim as cs\n"
        f"res = cs.simulate({str(Path(__file__).parents[1] / 'scenarios' / 'quickstart.yaml')!r}, progress=False)\n"
        f"res.to_chrome_trace({str(tmp_path / 't.json')!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert (tmp_path / "t.json").stat().st_size > 0
