"""Chrome / Perfetto trace export: pid per device or link, tid per lane, µs timestamps."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def chrome_events(spans: pd.DataFrame) -> list[dict]:
    """Trace events ("X" slices plus process/thread names) for ``spans``."""
    events: list[dict] = []
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    for dev, lane in sorted({(d, lane) for d, lane in zip(spans["device"], spans["lane"])}):
        pid = pids.setdefault(dev, len(pids) + 1)
        tid = tids.setdefault((dev, lane), len([k for k in tids if k[0] == dev]) + 1)
        if tid == 1:
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": dev}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": lane}})
    for r in spans.itertuples(index=False):
        events.append({
            "ph": "X", "name": r.name, "cat": r.kind, "pid": pids[r.device], "tid": tids[(r.device, r.lane)],
            "ts": r.start_s * 1e6, "dur": (r.end_s - r.start_s) * 1e6,
            "args": {"stage": int(r.stage), "microbatch": int(r.microbatch), "bytes": int(r.bytes),
                     "flops": float(r.flops), "phase": r.phase, "iteration": int(r.iteration)},
        })
    return events


def write_chrome_trace(spans: pd.DataFrame, path: Path) -> Path:
    """Write ``{"traceEvents": [...]}`` to ``path`` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": chrome_events(spans), "displayTimeUnit": "ms"}))
    return path
