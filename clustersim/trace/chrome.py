"""Chrome / Perfetto trace export (JSON trace-event format; open in ui.perfetto.dev).

Layout: one process per node (``node 0`` …, from ``res.devices``; GPUs of unknown node
get ``gpus``) with one thread per GPU lane (``gpu3 compute``, ``gpu3 send`` …), and one
process ``links`` with a thread per link, all named and sorted naturally. Every span is
an ``X`` slice (``ts``/``dur`` in µs) whose ``args`` carry stage, micro-batch, bytes,
FLOPs, phase and iteration and whose ``cat`` is its activity (see
:mod:`clustersim.viz.colors`; ``cname`` gives chrome://tracing the same colour family,
Perfetto colours by name with digits stripped). A flow arrow joins every send to its recv
(``"send F3 s0->s1"`` ↔ ``"recv F3 s0->s1"`` of the same iteration and data-/tensor-parallel
replica). Counter tracks show each GPU's allocated memory (GiB) and the busy fraction of
the busiest links per time bin.

Slices of one track never overlap (Perfetto would hide them); a lane's spans never do,
and any that would (a foreign span source) move to an overflow track ``<lane> +1``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..engine.collector import collector_paused
from ..output import Staging, open_atomic
from ..record import SPAN_FIELDS
from ..viz.binning import busy_fraction_over_time, default_window
from ..viz.colors import activities, cname_of
from ..viz.rows import LANE_ORDER, busiest_links, natural_key

US = 1e6
#: the Python type each span column is written as
_JSON_TYPE = {
    **dict.fromkeys(("device", "lane", "kind", "name", "phase"), str),
    **dict.fromkeys(("stage", "microbatch", "bytes", "iteration"), "int64"),
    **dict.fromkeys(("start_s", "end_s", "flops"), "float64"),
}
GIB = 2**30
LINK_COUNTERS = 64


def _meta(kind: str, pid: int, tid: int, value) -> dict:
    return {
        "ph": "M",
        "name": kind,
        "pid": pid,
        "tid": tid,
        "args": {"name" if kind.endswith("name") else "sort_index": value},
    }


def _tracks(spans: pd.DataFrame, devices: pd.DataFrame | None) -> tuple[np.ndarray, list[dict], dict]:
    """Assign (pid, tid) to every span; returns (track index per span, metadata, tracks)."""
    node = {}
    if devices is not None and len(devices) and "node" in devices.columns:
        node = dict(zip(devices["device"], devices["node"].astype(int)))
    dev = spans["device"].astype(str).to_numpy()
    lane = spans["lane"].astype(str).to_numpy()
    pairs = sorted(
        set(zip(dev, lane)),
        key=lambda p: (p[1] == "link", natural_key(p[0]), LANE_ORDER.get(p[1], 9), natural_key(p[1])),
    )
    procs: dict[str, int] = {}
    tracks: dict[tuple[str, str], tuple[int, int]] = {}
    per_proc: dict[int, int] = {}  # tracks so far in each process
    meta: list[dict] = []
    for d, ln in pairs:
        proc = "links" if ln == "link" else (f"node {node[d]}" if d in node else "gpus")
        if proc not in procs:
            procs[proc] = pid = len(procs) + 1
            meta += [_meta("process_name", pid, 0, proc), _meta("process_sort_index", pid, 0, pid)]
        pid = procs[proc]
        tid = per_proc[pid] = per_proc.get(pid, 0) + 1
        tracks[(d, ln)] = (pid, tid)
        meta += [
            _meta("thread_name", pid, tid, d if ln == "link" else f"{d} {ln}"),
            _meta("thread_sort_index", pid, tid, tid),
        ]
    return procs, tracks, meta


def _no_overlap(sl: _Slices, track: np.ndarray, names: dict[tuple[int, int], str], meta: list[dict]) -> None:
    """Move slices that overlap the previous one of their track to an overflow track.

    ``track``: a code per slice for its (pid, tid). A lane's spans never overlap, so first
    the check is made for every track at once (by start, then duration, each slice against
    the end of the one before it); only a track where some slice fails it — or holds a NaN
    time — is walked slice by slice, placing each on the first of its tracks free by then."""
    ts, dur = np.array(sl.ts, float), np.array(sl.dur, float)
    order = np.lexsort((dur, ts, track))
    t, s, d = track[order], ts[order], dur[order]
    prev_end = np.r_[-1.0, np.where(t[1:] == t[:-1], s[:-1] + d[:-1], -1.0)]
    walk = set(t[~(s >= prev_end - 1e-6) | np.isnan(d)].tolist())
    if not walk:
        return
    by_track: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(sl.pid, sl.tid)):
        by_track.setdefault(key, []).append(i)
    next_tid = {pid: max(t for p, t in by_track if p == pid) + 1 for pid, _ in by_track}
    for code, ((pid, tid), rows) in enumerate(by_track.items()):
        if code not in walk:
            continue
        rows.sort(key=lambda i: (sl.ts[i], sl.dur[i]))
        ends: list[tuple[float, int]] = [(-1.0, tid)]  # (end, tid) of each track of this lane
        for i in rows:
            slot = next((k for k, (end, _) in enumerate(ends) if sl.ts[i] >= end - 1e-6), None)
            if slot is None:
                new = next_tid[pid]
                next_tid[pid] += 1
                meta.append(_meta("thread_name", pid, new, f"{names[(pid, tid)]} +{len(ends)}"))
                ends.append((-1.0, new))
                slot = len(ends) - 1
            sl.tid[i] = ends[slot][1]
            ends[slot] = (sl.ts[i] + sl.dur[i], ends[slot][1])


def _flows(spans: pd.DataFrame, devices: pd.DataFrame | None, sl: _Slices) -> list[dict]:
    """Flow arrows for matched send/recv pairs. Both ends sit at the middle of their slice,
    never on a boundary that touches a neighbour, so each binds to the right slice."""
    coord = {}
    if devices is not None and {"dp_rank", "tp_rank"} <= set(devices.columns):
        coord = {
            d: (int(r), int(t)) for d, r, t in zip(devices["device"], devices["dp_rank"], devices["tp_rank"])
        }
    pending: dict[tuple, list[int]] = {}
    names = spans["name"].astype(str).to_numpy()
    kinds = spans["kind"].to_numpy()
    iters, devs = spans["iteration"].to_numpy(), spans["device"].to_numpy()
    order = np.argsort(spans["start_s"].to_numpy(), kind="stable")
    for i in order:
        if kinds[i] == "send" and names[i].startswith("send "):
            key = (names[i][5:], int(iters[i]), coord.get(devs[i]))
            pending.setdefault(key, []).append(i)
    flows = []
    for i in order:
        if kinds[i] == "recv" and names[i].startswith("recv "):
            key = (names[i][5:], int(iters[i]), coord.get(devs[i]))
            queue = pending.get(key)
            if not queue:
                continue
            j = queue.pop(0)
            fid = len(flows) // 2 + 1
            flows.append(
                {
                    "ph": "s",
                    "id": fid,
                    "name": "activation",
                    "cat": "flow",
                    "pid": sl.pid[j],
                    "tid": sl.tid[j],
                    "ts": sl.ts[j] + sl.dur[j] / 2,
                }
            )
            flows.append(
                {
                    "ph": "f",
                    "bp": "e",
                    "id": fid,
                    "name": "activation",
                    "cat": "flow",
                    "pid": sl.pid[i],
                    "tid": sl.tid[i],
                    "ts": sl.ts[i] + sl.dur[i] / 2,
                }
            )
    return flows


def _counters(spans: pd.DataFrame, memory: pd.DataFrame | None, devices, procs, bins: int) -> list[dict]:
    """Memory (GiB) per GPU in its node's process; busy fraction of the busiest links."""
    out = []
    node = {}
    if devices is not None and "node" in devices.columns:
        node = dict(zip(devices["device"], devices["node"].astype(int)))
    if memory is not None and len(memory):
        for (dev, t), b in memory.groupby(["device", "time_s"], sort=True)["allocated_bytes"].last().items():
            pid = procs.get(f"node {node[dev]}" if dev in node else "gpus", 1)
            out.append(
                {
                    "ph": "C",
                    "name": f"memory {dev}",
                    "pid": pid,
                    "ts": float(t) * US,
                    "args": {"GiB": float(b) / GIB},
                }
            )
    links = busiest_links(spans, LINK_COUNTERS)
    if links:
        t0, t1 = default_window(spans, None)
        sub = spans[spans["lane"] == "link"]
        frac = busy_fraction_over_time(sub, links, sub["device"], (t0, t1), bins)
        edges = t0 + np.arange(bins + 1) * (t1 - t0) / bins
        for name, row in zip(links, frac):
            vals = np.append(row, 0.0)
            keep = np.r_[True, vals[1:] != vals[:-1]]
            for t, v in zip(edges[keep], vals[keep]):
                out.append(
                    {
                        "ph": "C",
                        "name": f"util {name}",
                        "pid": procs["links"],
                        "ts": float(t) * US,
                        "args": {"busy": round(float(v), 4)},
                    }
                )
    return out


class _Slices:
    """The ``X`` slices as columns, one entry per span in ``spans`` order: the span fields
    as Python values of their JSON types (:data:`_JSON_TYPE`), each slice's activity and
    its colour, track (``pid``, ``tid``) and µs (``ts``, ``dur``). :meth:`events` makes the
    slice dicts, :meth:`json_text` writes the same slices as ``json.dumps`` would."""

    def __init__(self, spans: pd.DataFrame, tracks: dict[tuple[str, str], tuple[int, int]]):
        # the columns as Python objects of the JSON types, converted in C (.astype, .tolist)
        # rather than one float()/int()/str() call per cell; the same values, so the same bytes
        self.cols = {c: spans[c].astype(_JSON_TYPE[c]).to_numpy().tolist() for c in SPAN_FIELDS}
        self.acts = activities(spans).tolist()
        self.cname = {act: cname_of(act) for act in set(self.acts)}
        pid_tid = [tracks[k] for k in zip(self.cols["device"], self.cols["lane"])]
        self.pid, self.tid = (list(c) for c in zip(*pid_tid)) if pid_tid else ([], [])
        start, end = (spans[c].to_numpy(dtype="float64") for c in ("start_s", "end_s"))
        span = end - start
        # µs in one array pass: the same IEEE products (and max(·, 0.0)'s NaN) as per slice
        self.ts, self.dur = (start * US).tolist(), (np.where(0.0 > span, 0.0, span) * US).tolist()

    def _fields(self):
        """Per slice: name, cat, cname, pid, tid, ts, dur, then the args in their order."""
        c = self.cols
        cnames = [self.cname[a] for a in self.acts]
        args = (c[k] for k in _ARGS)
        return (c["name"], self.acts, cnames, self.pid, self.tid, self.ts, self.dur, *args)

    def events(self) -> list[dict]:
        """The slices as trace-event dicts."""
        return [
            {
                "ph": "X",
                "name": name,
                "cat": cat,
                "cname": cn,
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": dict(zip(_ARGS, args)),
            }
            for name, cat, cn, pid, tid, ts, dur, *args in zip(*self._fields())
        ]

    def json_text(self) -> str:
        """The slices' JSON, comma-separated: the bytes ``json.dumps`` (compact separators)
        writes for :meth:`events`, made a column at a time — each distinct value of a
        column encoded once, by the encoder json.dumps uses for its type — and joined into
        one template per slice (a quarter of the time of building the dicts and encoding them)."""
        return ",".join(_SLICE_JSON % row for row in zip(*(_json_column(f) for f in self._fields())))


#: time bins of the trace's counter tracks
COUNTER_BINS = 200
#: the ``args`` of an X slice, in their order
_ARGS = ("stage", "microbatch", "bytes", "flops", "phase", "iteration", "kind", "device", "lane")
#: an X slice's JSON with compact separators, one ``%s`` per field of ``_Slices._fields``
_SLICE_JSON = (
    '{"ph":"X","name":%s,"cat":%s,"cname":%s,"pid":%s,"tid":%s,"ts":%s,"dur":%s,"args":{'
    + ",".join(f'"{a}":%s' for a in _ARGS)
    + "}}"
)


def _json_column(values: list) -> list[str]:
    """Each value's JSON text as json.dumps writes it (strings escaped to ASCII, ints and
    finite floats by their repr, others as NaN/Infinity), each distinct value encoded
    once. The values are of one type (a column of :class:`_Slices`)."""
    if values and isinstance(values[0], float):
        # distinct by bit pattern: 0.0 and -0.0 are equal but written apart
        codes, bits = pd.factorize(np.array(values, dtype=np.float64).view(np.int64))
        # the floats encoded in one call: a float's JSON holds no comma
        texts = _encode(bits.view(np.float64).tolist())[1:-1].split(",")
        return np.array(texts, dtype=object)[codes].tolist()
    text = {v: _encode(v) for v in set(values)}
    return [text[v] for v in values]


#: json.dumps(·, separators=(",", ":")) without its per-call set-up
_encode = json.JSONEncoder(separators=(",", ":")).encode


def _parts(
    spans: pd.DataFrame, devices: pd.DataFrame | None, memory: pd.DataFrame | None, counter_bins: int
) -> tuple[list[dict], _Slices, list[dict], list[dict]]:
    """The trace in its four parts: metadata, the slices (one per span, in ``spans``
    order), flow arrows and counters."""
    procs, tracks, meta = _tracks(spans, devices)
    sl = _Slices(spans, tracks)
    names = {v: (k[0] if k[1] == "link" else f"{k[0]} {k[1]}") for k, v in tracks.items()}
    # each slice's track as a code in order of first appearance (the order tracks are walked)
    track = pd.factorize((np.array(sl.pid, np.int64) << 32) | np.array(sl.tid, np.int64))[0]
    _no_overlap(sl, track, names, meta)
    return meta, sl, _flows(spans, devices, sl), _counters(spans, memory, devices, procs, counter_bins)


def chrome_events(
    spans: pd.DataFrame,
    devices: pd.DataFrame | None = None,
    memory: pd.DataFrame | None = None,
    counter_bins: int = COUNTER_BINS,
) -> list[dict]:
    """All trace events: metadata, one ``X`` slice per span (in ``spans`` order), flow
    arrows and counters."""
    meta, sl, flows, counters = _parts(spans, devices, memory, counter_bins)
    return meta + sl.events() + flows + counters


@collector_paused()  # a list per column and a dict per flow or counter, none in a cycle (engine/collector.py)
def write_chrome_trace(
    spans: pd.DataFrame,
    path: Path,
    devices: pd.DataFrame | None = None,
    memory: pd.DataFrame | None = None,
    stage: Staging | None = None,
) -> Path:
    """Write ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` to ``path`` (with ``stage``:
    when it commits, :mod:`clustersim.output`) and return it:
    the bytes ``json.dumps`` (compact separators) writes for :func:`chrome_events`, the
    slices written from their columns (:meth:`_Slices.json_text`), the other events by
    the C encoder, in one write."""
    path = Path(path)
    meta, sl, flows, counters = _parts(spans, devices, memory, COUNTER_BINS)
    events = [_encode(meta)[1:-1], sl.json_text(), _encode(flows)[1:-1], _encode(counters)[1:-1]]
    with open_atomic(path, stage=stage) as fh:
        fh.write('{"traceEvents":[' + ",".join(e for e in events if e) + '],"displayTimeUnit":"ms"}')
    return path
