"""Replicated evaluation: an unfolded contention-free run evaluated once per stage.

Where folding is exact (:attr:`clustersim.resolve.Job.foldable`: the tp × dp twins of a
stage are twins) and the DAG evaluator is (:func:`~clustersim.resolve.replication.contention_free`:
no op's time depends on what else is in flight), every twin's ops take the times of its
stage representative's, to the bit — on these fabrics a send's time depends only on the
kinds of links it crosses (which the fold check compares) and a collective's on its
group. So an unfolded run is evaluated on the folded Program (one GPU per stage) and its
records are expanded to every GPU as the unfolded run makes them, in array passes:

* spans: each representative op once per twin, device ``rep + r·tp + t`` (replica r, TP
  rank t), in the unfolded Program's op order — its compiler emits, for each replica,
  each block of a stage's ops (its passes, then its sends, then its recvs) once per TP
  rank, so the unfolded id of twin (r, t) of a folded op is (r, block, t, position in the
  block) — then sorted as :func:`clustersim.trace.result.spans_frame` sorts;
* memory: every GPU's samples are its representative's, in the same order; across GPUs,
  the samples of one time and device run are repeated per twin, twins in device order
  (the order the unfolded run appends them in where twins run one after another; where
  the unfolded engine interleaves twins' lanes differently at one time — interleaved and
  bidirectional schedules, after a collective over the replicas (its copies end TP rank
  by TP rank) — only that cross-device order at equal times differs);
* peaks, capacity and OOM per GPU: its representative's;
* ``events``: what the unfolded run counts (tp·dp per held op; 3 per collective, each
  folded collective standing for tp·dp·arrivals / group size copies).

tests/test_replicas.py compares the Result with the real unfolded run's on many cases.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from ...program import COLLECTIVE
from ...record import SPAN_FIELDS


class ReplicatedRun:
    """A finished DAG run of a folded Program, read as the unfolded run of ``plan``: the
    evaluator interface :func:`clustersim.trace.assemble.assemble_result` reads
    (``program``, ``recorder``, ``memory``, ``events``) plus the unfolded ``spans`` and
    ``memory_frame`` DataFrames, and, for tables per GPU computed once per stage and
    copied to its twins (whose spans are its representative's to the bit),
    ``representative`` (per device), ``on_representative`` (per row of ``spans``) and
    ``first_seen`` (the devices in the order ``spans`` first shows them)."""

    def __init__(self, engine, plan):
        self.program, self.recorder, self.memory = engine.program, engine.recorder, engine.memory
        self.plan = plan
        self.twins = plan.tp * plan.dp
        prog = self.program
        stage_of = np.array([plan.coords(d)[0] for d in range(prog.num_devices)])
        self.representative = plan.representatives(stage_of)  # per device
        self.events = self._events(engine.events)
        for d, r in enumerate(self.representative.tolist()):  # every GPU shows its representative's peak
            self.memory.peak[d] = self.memory.peak[r]
        self.spans, self.on_representative, self.first_seen = self._spans()
        self.memory_frame = self._memory()

    def finished_count(self) -> int:
        """How many (unfolded) ops ended."""
        return len(self.recorder.ops) * self.twins

    def waits(self, folded: pd.DataFrame) -> pd.DataFrame:
        """The unfolded run's waits from the folded run's (:mod:`clustersim.trace.waits`):
        each row once per twin (replica r, TP rank t), both GPUs remapped, sorted as the
        waits table is. A rendezvous row names the collective's last member; in the
        unfolded run that is, of the tied twins in the copy of the collective that twin
        (r, t) joins, the first in op order: replica 0 where the group spans replicas, TP
        rank 0 where it spans TP ranks, else (r, t) itself. A data row waiting for a folded
        TP ring send names its source, TP rank t′ of replica 0: twin (r, t)'s is (r, t + t′)."""
        index = {name: d for d, name in enumerate(self.program.device_names)}
        names = np.array(self.program.device_names, dtype=object)
        tp = self.plan.tp
        rows = np.repeat(np.arange(len(folded)), self.twins)
        k = np.tile(np.arange(self.twins), len(folded))
        spans = self._spanned()  # collective name → (spans replicas, spans TP ranks)
        keep = np.array(
            [
                (1, 1) if why == "data" else tuple(0 if x else 1 for x in spans[op])
                for why, op in zip(folded["reason"], folded["waited_for_op"])
            ],
            dtype=np.int64,
        ).reshape(-1, 2)[rows]
        last = (k // tp) * keep[:, 0] * tp + (k % tp) * keep[:, 1]
        out = folded.iloc[rows].reset_index(drop=True)
        for col, twin in (("device", k), ("waited_for_device", last)):
            dev = np.array([index[n] for n in folded[col]], dtype=np.int64)
            rep = self.representative[dev][rows]
            shift = (dev[rows] - rep) % tp  # a TP ring send's source: the TP rank before (r, t)'s
            out[col] = names[rep + twin // tp * tp + (twin % tp + shift) % tp]
        return out.sort_values(["start_s", "device"], kind="stable").reset_index(drop=True)

    def _spanned(self) -> dict[str, tuple[bool, bool]]:
        """Per collective name, whether its group spans replicas and TP ranks (its members'
        offsets from their stage's representative)."""
        tp, out = self.plan.tp, {}
        for op in self.program.ops:
            if op.kind is COLLECTIVE:
                offsets = [d - self.representative[d] for d in op.group]
                spans = (any(o >= tp for o in offsets), any(o % tp for o in offsets))
                if out.setdefault(op.name, spans) != spans:  # the waits name ops, not collectives
                    raise RuntimeError(f"collectives named {op.name!r} span different groups")
        return out

    def _events(self, folded: int) -> int:
        """The SimPy events the unfolded run processes (module docstring)."""
        tags: Counter = Counter()
        size = {}
        for op in self.program.ops:
            if op.kind is COLLECTIVE:
                tags[op.tag] += 1
                size[op.tag] = len(op.group)
        held = folded - 3 * len(tags)
        copies = sum(self.twins * n // size[t] for t, n in tags.items())
        return self.twins * held + 3 * copies

    def _order(self) -> tuple[np.ndarray, np.ndarray]:
        """(folded op, twin k = r·tp + t) of every unfolded op, in unfolded op-id order."""
        ops = self.program.ops
        devices = np.fromiter((op.device for op in ops), np.int64, len(ops))
        starts = np.flatnonzero(np.r_[True, devices[1:] != devices[:-1]])  # the blocks
        lengths = np.diff(np.r_[starts, len(ops)])
        tp, dp = self.plan.tp, self.plan.dp
        # one replica's sequence: each block once per TP rank
        block = np.repeat(np.arange(len(starts)), lengths * tp)
        first = np.repeat(np.cumsum(lengths * tp) - lengths * tp, lengths * tp)
        within = np.arange(len(block)) - first
        op = starts[block] + within % lengths[block]
        t = within // lengths[block]
        k = (np.arange(dp)[:, None] * tp + t[None, :]).ravel()
        return np.tile(op, dp), k

    def _spans(self) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
        """The unfolded spans (module docstring); per row, whether it is a representative's;
        and the devices in the order the rows first show them."""
        prog, rec = self.program, self.recorder
        ops = prog.ops
        if len(rec.ops) != len(ops) or rec.spans:
            raise RuntimeError("a replicated run needs every op ended and no link spans")
        op, k = self._order()
        device = self.representative[[o.device for o in ops]][op] + k
        _, start, end = (np.array(c) for c in zip(*rec.ops)) if ops else ([], np.array([]), np.array([]))
        cols = {}
        names = prog.device_names
        lanes, lane_code = _codes([o.lane for o in ops])
        # sorted as spans_frame sorts: by start, device name, lane name, then op id (stable),
        # on one integer key (the starts ranked among the folded run's few distinct ones)
        starts, start_rank = np.unique(start, return_inverse=True)
        key = (start_rank[op] * len(names) + _rank(prog.device_names)[device]) * len(lanes)
        order = np.argsort(key + _rank(lanes)[lane_code[op]], kind="stable")
        op, device = op[order], device[order]
        cols["device"] = _strings(prog.device_names).take(device)
        cols["lane"] = _strings(lanes).take(lane_code[op])
        for field in ("kind", "name", "phase"):
            values, code = _codes([getattr(o, field) for o in ops])
            cols[field] = _strings(values).take(code[op])
        for field, attr in (("stage", "stage"), ("microbatch", "microbatch"), ("iteration", "iteration")):
            cols[field] = np.array([getattr(o, attr) for o in ops], dtype=np.int64)[op]
        cols["start_s"], cols["end_s"] = start[op], end[op]
        cols["bytes"] = np.array([o.nbytes for o in ops], dtype=np.int64)[op]
        cols["flops"] = np.array([o.flops for o in ops], dtype=np.float64)[op]
        first = np.full(prog.num_devices, len(device))  # each device's first row
        np.minimum.at(first, device, np.arange(len(device)))
        shown = np.flatnonzero(first < len(device))
        return (
            pd.DataFrame({f: cols[f] for f in SPAN_FIELDS}, copy=False),  # (not stacked into blocks)
            self.representative[device] == device,
            shown[np.argsort(first[shown])],
        )

    def _memory(self) -> pd.DataFrame:
        """The memory timeline (module docstring): the first sample of every device (its
        static bytes at 0), then each (time, device) run of samples once per twin."""
        samples = self.recorder.memory
        n = self.program.num_devices
        dev = np.array([s[0] for s in samples], dtype=np.int64)
        time = np.array([s[1] for s in samples], dtype=np.float64)
        held = np.array([s[2] for s in samples], dtype=np.int64)
        d, t, b = dev[n:], time[n:], held[n:]
        starts = np.flatnonzero(np.r_[True, (d[1:] != d[:-1]) | (t[1:] != t[:-1])])
        lengths = np.diff(np.r_[starts, len(d)])
        size = lengths * self.twins
        run = np.repeat(np.arange(len(starts)), size)
        within = np.arange(len(run)) - np.repeat(np.cumsum(size) - size, size)
        src = starts[run] + within % lengths[run]
        twin = within // lengths[run]
        names = np.array(self.program.device_names, dtype=object)
        return pd.DataFrame(
            {
                "device": names[np.r_[dev[:n], d[src] + twin]],
                "time_s": np.r_[time[:n], t[src]],
                "allocated_bytes": np.r_[held[:n], b[src]],
            }
        )


def _codes(values: list) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values as an object array, each value's index in it)."""
    index: dict = {}
    code = np.fromiter((index.setdefault(v, len(index)) for v in values), np.int64, len(values))
    return np.array(list(index), dtype=object), code


def _strings(values):
    """``values`` (strings) as the array pandas makes of a column of them (its string dtype
    where it has one), so that taking rows from it needs no per-row check."""
    return pd.Series(list(values)).array


def _rank(values) -> np.ndarray:
    """Each value's rank in sorted order (strings compare as ``sort_values`` compares them)."""
    rank = np.empty(len(values), dtype=np.int64)
    rank[sorted(range(len(values)), key=list(values).__getitem__)] = np.arange(len(values))
    return rank
