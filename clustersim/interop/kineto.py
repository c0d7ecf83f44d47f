"""PyTorch profiler (Kineto) traces → measured kernel times by op and shape.

``torch.profiler`` exports a Chrome-trace JSON whose ``traceEvents`` hold, among others,
``cpu_op`` events (an ATen op: ``name`` such as ``aten::mm``, ``args["Input Dims"]`` its
operand shapes, ``args["Input type"]`` their dtypes, ``args["External id"]``),
``cuda_runtime`` events (the launch, ``args["correlation"]``) and ``kernel`` events (the
GPU kernel: ``dur`` in µs, the launch's ``args["correlation"]``). A kernel is charged to
the op that launched it: kernel → runtime call by correlation id → op by the runtime's
External id, or, where the runtime event has none, the innermost op on its thread whose
span holds the call. Each op instance's time is the sum of its kernels; an (op, input
dims, dtypes) key gets the mean over its instances.

GEMM shapes are read as PyTorch lays them out: ``aten::mm`` [[M, K], [K, N]],
``aten::addmm`` [bias, [M, K], [K, N]], ``aten::bmm`` [[B, M, K], [B, K, N]] — (M, N, K) as
clustersim's cost model keys them (:class:`clustersim.workload.ops.Work`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..errors import ScenarioError, short_repr
from ..reader import read_json_file

FIELD = "kineto trace"
#: bytes per element of the dtypes Kineto names in ``Input type``
DTYPE_BYTES = {
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "float": 4,
    "double": 8,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}


@dataclass(frozen=True)
class Measured:
    """One ATen op at one set of input shapes: its mean GPU time per call.

    ``gemm``: its (M, N, K) when it is a matrix product (``batch`` of them), else None;
    ``element_bytes``: of its first input (2 for bf16/fp16, 0 when the trace does not say)."""

    op: str
    dims: tuple
    gemm: tuple[int, int, int] | None
    batch: int
    element_bytes: int
    calls: int
    time_s: float

    @property
    def label(self) -> str:
        """``aten::mm [M×N×K]`` (a batch as ``B× ``), else the op and its input dims."""
        shape = "×".join(map(str, self.gemm)) if self.gemm else ",".join(str(list(d)) for d in self.dims)
        batch = f"{self.batch}× " if self.batch > 1 else ""
        return f"{self.op} [{batch}{shape}]"


def gemm_shape(op: str, dims) -> tuple[tuple[int, int, int], int] | None:
    """((M, N, K), batch) of a matrix-product op with input ``dims``, else None."""
    try:
        if op == "aten::mm" and len(dims[0]) == 2:
            (m, k), (_, n) = dims[0], dims[1]
            return (m, n, k), 1
        if op == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return (m, n, k), 1
        if op == "aten::bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return (m, n, k), b
    except (TypeError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True)
class KinetoTrace:
    """A profiler trace read: the measured ops, the device the trace names, and how many
    kernels could not be charged to an op (no runtime call or op links to them)."""

    ops: list[Measured]
    device: str
    unattributed: int


def read_kineto(path: str | Path) -> KinetoTrace:
    """The measured ops of PyTorch profiler trace ``path`` (module docstring)."""
    doc = read_json_file(path, FIELD)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise ScenarioError(FIELD, str(path), "expected a Chrome-trace JSON object with a traceEvents list")
    events = [
        _checked(e, k, path) for k, e in enumerate(events) if isinstance(e, dict) and e.get("ph", "X") == "X"
    ]
    ops = {}  # External id → cpu_op event
    by_thread = defaultdict(list)
    runtime = {}  # correlation → runtime event
    kernels = []
    for e in events:
        cat, args = e.get("cat"), e.get("args") or {}
        if cat == "cpu_op":
            if "External id" in args:
                ops[args["External id"]] = e
            by_thread[e.get("pid"), e.get("tid")].append(e)
        elif cat == "cuda_runtime" and "correlation" in args:
            runtime[args["correlation"]] = e
        elif cat == "kernel":
            kernels.append(e)
    per_instance: dict[int, float] = defaultdict(float)  # id(op event) → its kernels' µs
    owner: dict[int, dict] = {}
    unattributed = 0
    for k in kernels:
        op = _launcher(runtime.get((k.get("args") or {}).get("correlation")), ops, by_thread)
        if op is None:
            unattributed += 1
            continue
        per_instance[id(op)] += _number(k, "dur", path)
        owner[id(op)] = op
    groups: dict[tuple, list[float]] = defaultdict(list)
    for key, us in per_instance.items():
        op = owner[key]
        args = op.get("args") or {}
        dims = _frozen(args.get("Input Dims", []))
        types = tuple(args.get("Input type", ()))
        groups[op["name"], dims, types[:1]].append(us)
    measured = []
    for (name, dims, types), times in groups.items():
        shape = gemm_shape(name, dims)
        measured.append(
            Measured(
                name,
                dims,
                shape[0] if shape else None,
                shape[1] if shape else 1,
                DTYPE_BYTES.get(types[0], 0) if types else 0,
                len(times),
                math.fsum(times) / len(times) * 1e-6,
            )
        )
    device = _device(doc.get("deviceProperties"), path)
    return KinetoTrace(sorted(measured, key=lambda m: -m.time_s * m.calls), device, unattributed)


def _launcher(rt: dict | None, ops: dict, by_thread: dict) -> dict | None:
    """The cpu_op that made runtime call ``rt``: by External id, else the innermost op on
    its thread whose span holds it."""
    if rt is None:
        return None
    ext = (rt.get("args") or {}).get("External id")
    if ext in ops:
        return ops[ext]
    ts = rt.get("ts", 0)
    holding = [
        o
        for o in by_thread.get((rt.get("pid"), rt.get("tid")), ())
        if o["ts"] <= ts <= o["ts"] + o.get("dur", 0)
    ]
    return max(holding, key=lambda o: o["ts"]) if holding else None


#: per event category: the ``args`` keys read, each an id (a whole number)
_ID_ARGS = {
    "cpu_op": ("External id",),
    "cuda_runtime": ("correlation", "External id"),
    "kernel": ("correlation",),
}


def _checked(event: dict, k: int, path) -> dict:
    """``event`` (``traceEvents[k]``) when the fields read from it have the types a
    profiler writes: ``args`` an object, ids whole numbers, ``ts``/``dur`` times in µs, a
    ``cpu_op``'s name a string, its ``Input Dims`` lists of whole numbers and its
    ``Input type`` strings; else a ScenarioError naming the file, the event and the field."""
    cat = event.get("cat")
    if cat is not None and not isinstance(cat, str):
        raise ScenarioError(
            FIELD,
            str(path),
            f"traceEvents[{k}] ({short_repr(event.get('name'), 60)}): cat = {short_repr(cat, 60)} is invalid; "
            "accepted: the event's category, a string",
        )
    if cat not in _ID_ARGS:
        return event

    def fail(field: str, value, expected: str):
        raise ScenarioError(
            FIELD,
            str(path),
            f"traceEvents[{k}] ({short_repr(event.get('name'), 60)}, cat {cat}): {field} = "
            f"{short_repr(value, 60)} is invalid; accepted: {expected}",
        )

    args = event.get("args") or {}
    if not isinstance(args, dict):
        fail("args", args, "an object of the op's arguments")
    for key in _ID_ARGS[cat]:
        if key in args and not _whole(args[key]):
            fail(f"args[{key!r}]", args[key], "a whole-number id")
    for key in ("pid", "tid"):
        if not isinstance(event.get(key, 0), (int, str)):
            fail(key, event[key], "a process or thread id (a number or a name)")
    if ("ts" in event or cat == "cpu_op") and not _time(event.get("ts")):
        fail("ts", event["ts"], "a finite time in µs")
    if "dur" in event and not (_time(event["dur"]) and event["dur"] >= 0):
        fail("dur", event["dur"], "a time ≥ 0 in µs")
    if cat == "cpu_op":
        if not isinstance(event.get("name"), str):
            fail("name", event.get("name"), "the ATen op's name, a string")
        dims = args.get("Input Dims", [])
        if not _shapes(dims):
            fail("args['Input Dims']", dims, "a list of shapes, each a (nested) list of whole numbers")
        types = args.get("Input type", [])
        if not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
            fail("args['Input type']", types, "a list of dtype names (strings)")
    return event


def _shapes(value) -> bool:
    """Whether ``value`` is a list of shapes (a tensor list's entry being a list of shapes)."""
    return isinstance(value, list) and all(_shape(x) for x in value)


def _shape(value) -> bool:
    return isinstance(value, list) and all(_whole(x) or _shape(x) for x in value)


def _frozen(value):
    """``value`` with every list a tuple (a hashable key of shapes)."""
    return tuple(map(_frozen, value)) if isinstance(value, list) else value


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _time(value) -> bool:
    """Whether ``value`` is a finite number a float holds (an int past int64 is not: JSON reads
    any length of digits, and ``math.isfinite`` of such an int raises)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) < 2**63 if isinstance(value, int) else math.isfinite(value)


def _device(props, path) -> str:
    """The name of the trace's first device (``deviceProperties[0].name``; "" when absent)."""
    if props is None or props == []:
        return ""
    first = props[0] if isinstance(props, list) else None
    if not isinstance(first, dict) or not isinstance(first.get("name", ""), str):
        raise ScenarioError(
            FIELD,
            str(path),
            f"deviceProperties = {short_repr(props, 60)} is invalid; accepted: a list of objects "
            'whose "name" is the device\'s name (a string)',
        )
    return first.get("name", "")


def _number(event: dict, key: str, path) -> float:
    value = event.get(key)
    if not _time(value) or value < 0:
        raise ScenarioError(
            FIELD,
            str(path),
            f"event {event.get('name')!r}: {key} {short_repr(value)} is not a time ≥ 0 in µs",
        )
    return float(value)
