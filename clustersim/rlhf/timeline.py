"""The phases of many RLHF iterations on one timeline (docs/rlhf.md, "Timeline").

Colocated (one pool): every iteration runs, one after another, the weight transfer to the
generation layout (resharding in place), the training state's offload to the host, the
rollouts, its reload, the scoring forwards and the training steps.

Split pools with staleness s: generation pool runs batch k once it has finished batch
k − 1 and the weights of update k − 1 − s have landed (update −1: the initial weights);
the training pool scores and trains batch k once batch k is generated and its own previous
update (its weight broadcast included) is done, then broadcasts update k. With s = 0 the
pools take turns (synchronous); with s ≥ 1 the generation of batch k + 1 overlaps the
training of batch k.
"""

from __future__ import annotations

import pandas as pd

from ..record import SPAN_FIELDS

COLUMNS = ["iteration", "pool", "phase", "start_s", "end_s", "bytes"]


def colocated(n: int, phases: list[tuple[str, float, float]]) -> pd.DataFrame:
    """``n`` iterations of ``phases`` ((name, seconds, bytes), in order) back to back on the
    single pool ``all``."""
    rows, t = [], 0.0
    for k in range(n):
        for name, secs, nbytes in phases:
            rows.append((k, "all", name, t, t + secs, nbytes))
            t += secs
    return pd.DataFrame(rows, columns=COLUMNS)


def split(
    n: int, staleness: int, gen: tuple[str, float], train: list[tuple[str, float, float]]
) -> pd.DataFrame:
    """``n`` iterations on a ``generation`` pool running ``gen`` (name, seconds) and a
    ``training`` pool running ``train`` ((name, seconds, bytes), the last the broadcast)
    with ``staleness`` (module doc)."""
    rows = []
    gen_end, train_end, landed = 0.0, 0.0, []
    for k in range(n):
        v = k - 1 - staleness
        start = max(gen_end, landed[v] if v >= 0 else 0.0)
        gen_end = start + gen[1]
        rows.append((k, "generation", gen[0], start, gen_end, 0.0))
        t = max(gen_end, train_end)
        for name, secs, nbytes in train:
            rows.append((k, "training", name, t, t + secs, nbytes))
            t += secs
        train_end = t
        landed.append(t)
    return pd.DataFrame(rows, columns=COLUMNS)


def pool_usage(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per pool, its busy seconds (in phases), idle seconds and busy fraction over the run
    (t = 0 to the last phase's end)."""
    span = float(timeline["end_s"].max())
    busy = (timeline["end_s"] - timeline["start_s"]).groupby(timeline["pool"], sort=False).sum()
    out = pd.DataFrame({"pool": busy.index, "busy_s": busy.to_numpy()})
    out["idle_s"] = span - out["busy_s"]
    out["busy_fraction"] = out["busy_s"] / span if span else 0.0
    return out


def phase_spans(timeline: pd.DataFrame, gpus: dict[str, range]) -> pd.DataFrame:
    """The timeline as spans (:data:`clustersim.record.SPAN_FIELDS`): each phase on every
    GPU of its pool (``gpus``: pool → GPU indices), so ``res.plot_gantt()`` and the bundle
    show it; the weight transfer as communication, the rest as compute."""
    rows = []
    for r in timeline.itertuples():
        comm = r.phase == "weight_sync"
        lane, kind = ("comm", "collective") if comm else ("compute", "compute")
        for g in gpus[r.pool]:
            rows.append(
                (
                    f"gpu{g}",
                    lane,
                    kind,
                    r.phase,
                    0,
                    r.iteration,
                    r.start_s,
                    r.end_s,
                    r.bytes,
                    0.0,
                    r.phase,
                    r.iteration,
                )
            )
    return pd.DataFrame(rows, columns=list(SPAN_FIELDS))
