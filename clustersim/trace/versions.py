"""Weight versions in a compiled Program: which version each pass used, how stale updates are.

The compiler labels every pass op with the weight version of its forward and every
optimizer op with the version it creates (see :mod:`.compiler`). From those labels:

* the staleness of an update = the versions the stage created between the oldest
  version its accumulated gradients were computed on and the version it updates
  (0 for flushing schedules, p − s − 1 on stage s for PipeDream, 1 for 2BW);
* the weight versions alive on a device at a point of its compute lane = the distinct
  versions of its in-flight micro-batches plus the current one.
"""

from __future__ import annotations

import pandas as pd

from ..program import Program


def update_staleness(prog: Program) -> pd.DataFrame:
    """One row per optimizer step per device: device, stage, iteration, version, staleness."""
    rows = []
    for (dev, lane), ops in prog.lanes().items():
        if lane != "compute":
            continue
        oldest = None
        for op in ops:
            if op.phase in ("B", "W"):
                oldest = op.version if oldest is None else min(oldest, op.version)
            elif op.phase == "O":
                before = op.version - 1
                rows.append(
                    (dev, op.stage, op.iteration, op.version, before - (before if oldest is None else oldest))
                )
                oldest = None
    return pd.DataFrame(rows, columns=["device", "stage", "iteration", "version", "staleness"])


def max_versions_alive(prog: Program) -> dict[int, int]:
    """Per device: the most weight versions its compute lane ever needs at once."""
    out = {}
    for (dev, lane), ops in prog.lanes().items():
        if lane != "compute":
            continue
        in_flight: dict[tuple, int] = {}
        current, peak = 0, 1
        for op in ops:
            key = (op.microbatch, op.iteration, op.name[1:])
            if op.phase == "F":
                in_flight[key] = op.version
            elif op.phase == "B":
                in_flight.pop(key, None)
            elif op.phase == "O":
                current = op.version
            peak = max(peak, len(set(in_flight.values()) | {current}))
        out[dev] = peak
    return out
