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
from ..output import open_atomic
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


def _no_overlap(
    slices: list[dict], track: np.ndarray, names: dict[tuple[int, int], str], meta: list[dict]
) -> None:
    """Move slices that overlap the previous one of their track to an overflow track.

    ``track``: a code per slice for its (pid, tid). A lane's spans never overlap, so first
    the check is made for every track at once (by start, then duration, each slice against
    the end of the one before it); only a track where some slice fails it — or holds a NaN
    time — is walked slice by slice, placing each on the first of its tracks free by then."""
    ts = np.fromiter((e["ts"] for e in slices), float, len(slices))
    dur = np.fromiter((e["dur"] for e in slices), float, len(slices))
    order = np.lexsort((dur, ts, track))
    t, s, d = track[order], ts[order], dur[order]
    prev_end = np.r_[-1.0, np.where(t[1:] == t[:-1], s[:-1] + d[:-1], -1.0)]
    walk = set(t[~(s >= prev_end - 1e-6) | np.isnan(d)].tolist())
    if not walk:
        return
    by_track: dict[tuple[int, int], list[dict]] = {}
    for e in slices:
        by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    next_tid = {pid: max(t for p, t in by_track if p == pid) + 1 for pid, _ in by_track}
    for code, ((pid, tid), evs) in enumerate(by_track.items()):
        if code not in walk:
            continue
        evs.sort(key=lambda e: (e["ts"], e["dur"]))
        ends: list[tuple[float, int]] = [(-1.0, tid)]  # (end, tid) of each track of this lane
        for e in evs:
            slot = next((k for k, (end, _) in enumerate(ends) if e["ts"] >= end - 1e-6), None)
            if slot is None:
                new = next_tid[pid]
                next_tid[pid] += 1
                meta.append(_meta("thread_name", pid, new, f"{names[(pid, tid)]} +{len(ends)}"))
                ends.append((-1.0, new))
                slot = len(ends) - 1
            e["tid"] = ends[slot][1]
            ends[slot] = (e["ts"] + e["dur"], ends[slot][1])


def _flows(spans: pd.DataFrame, devices: pd.DataFrame | None, slices: list[dict]) -> list[dict]:
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
            s, r = slices[j], slices[i]
            fid = len(flows) // 2 + 1
            flows.append(
                {
                    "ph": "s",
                    "id": fid,
                    "name": "activation",
                    "cat": "flow",
                    "pid": s["pid"],
                    "tid": s["tid"],
                    "ts": s["ts"] + s["dur"] / 2,
                }
            )
            flows.append(
                {
                    "ph": "f",
                    "bp": "e",
                    "id": fid,
                    "name": "activation",
                    "cat": "flow",
                    "pid": r["pid"],
                    "tid": r["tid"],
                    "ts": r["ts"] + r["dur"] / 2,
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


def chrome_events(
    spans: pd.DataFrame,
    devices: pd.DataFrame | None = None,
    memory: pd.DataFrame | None = None,
    counter_bins: int = 200,
) -> list[dict]:
    """All trace events: metadata, one ``X`` slice per span (in ``spans`` order), flow
    arrows and counters."""
    procs, tracks, meta = _tracks(spans, devices)
    acts = activities(spans)
    cname = {act: cname_of(act) for act in set(acts)}
    # the columns as Python objects of the JSON types, converted in C (.astype, .tolist)
    # rather than one float()/int()/str() call per cell; the same values, so the same bytes
    cols = [spans[c].astype(_JSON_TYPE[c]).to_numpy().tolist() for c in SPAN_FIELDS]
    start, end = (spans[c].to_numpy(dtype="float64") for c in ("start_s", "end_s"))
    span = end - start
    # µs in one array pass: the same IEEE products (and max(·, 0.0)'s NaN) as per slice
    ts, dur = (start * US).tolist(), (np.where(0.0 > span, 0.0, span) * US).tolist()
    slices = []
    for (d, ln, k, name, st, mb, _, _, nb, fl, ph, it), act, t, du in zip(zip(*cols), acts.tolist(), ts, dur):
        pid, tid = tracks[(d, ln)]
        slices.append(
            {
                "ph": "X",
                "name": name,
                "cat": act,
                "cname": cname[act],
                "pid": pid,
                "tid": tid,
                "ts": t,
                "dur": du,
                "args": {
                    "stage": st,
                    "microbatch": mb,
                    "bytes": nb,
                    "flops": fl,
                    "phase": ph,
                    "iteration": it,
                    "kind": k,
                    "device": d,
                    "lane": ln,
                },
            }
        )
    names = {v: (k[0] if k[1] == "link" else f"{k[0]} {k[1]}") for k, v in tracks.items()}
    # each slice's track as a code in order of first appearance (the order tracks are walked)
    track = pd.factorize(spans["device"].astype(str) + "\t" + spans["lane"].astype(str))[0]
    _no_overlap(slices, track, names, meta)
    return (
        meta
        + slices
        + _flows(spans, devices, slices)
        + _counters(spans, memory, devices, procs, counter_bins)
    )


@collector_paused()  # a dict per event, millions in a large run: none in a cycle (engine/collector.py)
def write_chrome_trace(
    spans: pd.DataFrame, path: Path, devices: pd.DataFrame | None = None, memory: pd.DataFrame | None = None
) -> Path:
    """Write ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` to ``path`` and return it."""
    path = Path(path)
    events = chrome_events(spans, devices, memory)
    # dumps, not dump: dumps runs the C encoder (json.dump streams through the pure-Python
    # one), 2–3× faster for the same bytes
    with open_atomic(path) as fh:
        fh.write(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, separators=(",", ":")))
    return path
