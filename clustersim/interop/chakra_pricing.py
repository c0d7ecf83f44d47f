"""Seconds of a trace node that records none: the kernel tables, the roofline, or a count.

A PyTorch-converted trace holds GPU kernels whose ``duration_micros`` is 0 (the converter
writes ``int()`` of the measured µs, so a sub-µs kernel is 0; a trace without its device
half has none at all) and nodes that give ``num_ops`` and ``tensor_size`` for a roofline
(ASTRA-sim's ``Workload::issue_comp``) instead of a time. Such a node is priced on the
scenario's GPU (:class:`~clustersim.workload.cost_model.CostModel`), each way counted
(:data:`WAYS`, reported as ``trace_nodes_<way>`` in the summary):

* ``measured``: the node's own duration (> 0 µs, or ``clustersim.duration_s``);
* ``kernel_model``: a GEMM or fused attention that its name — or, for a GPU kernel, the
  name of the host op that launched it — and its input shapes identify, priced as the cost
  model prices that kernel in a compiled model (GEMM: ``aten::mm`` [[M, K], [K, N]],
  ``aten::addmm`` [bias, [M, K], [K, N]], ``aten::bmm``/``aten::baddbmm`` [B, M, K] × [B, K, N],
  ``aten::matmul`` [..., M, K] × [..., K, N], ``aten::linear`` [..., K] × weight [N, K];
  attention: ``scaled_dot_product`` ops, query/key [B, H, S, D], ``is_causal`` from the
  arguments, a ``backward`` 2.5 × the forward's FLOPs as FlashAttention's);
* ``roofline``: any other GPU node with FLOPs (``num_ops``) or bytes (``tensor_size``, else
  the bytes of the tensors in its inputs and outputs): ``max(FLOPs / (peak × matmul_max),
  bytes at the achieved HBM bandwidth) + launch``; a MEM_LOAD/MEM_STORE node's bytes at the
  achieved HBM bandwidth;
* ``unpriced``: nothing to price it by — a host op without a duration (the host's time is
  not modelled), or a GPU node with no FLOPs, bytes or shapes, or no GPU given. It runs as
  0 s, and the import warns, naming how many and the first.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from functools import cached_property

from ..workload.attention import FLASH_BACKWARD_FACTOR
from ..workload.cost_model import CostModel
from ..workload.ops import AttentionShape, Work
from .chakra_pytorch import Fail, argument, io_field, tensor_bytes

MEASURED, KERNEL, ROOFLINE, UNPRICED = "measured", "kernel_model", "roofline", "unpriced"
#: the ways a compute or memory node is priced, in the order the summary lists them
WAYS = (MEASURED, KERNEL, ROOFLINE, UNPRICED)
#: position of the two GEMM operands among an ATen matrix product's input shapes
_GEMM_OPERANDS = {
    "aten::mm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::bmm": (0, 1),
    "aten::baddbmm": (1, 2),
    "aten::matmul": (0, 1),
    "aten::linear": (0, 1),
}


class Pricer:
    """Prices the nodes of one import on the GPU of the CostModel ``cost()`` makes — on first
    need, so a trace that gives every time builds none (None: no GPU, nothing modelled) —
    and counts the ways (:data:`WAYS`); ``unpriced`` names the first node left at 0 s."""

    def __init__(self, cost: Callable[[], CostModel] | None):
        self._make = cost
        self.counts: Counter = Counter({way: 0 for way in WAYS})
        self.unpriced: str = ""

    @cached_property
    def cost(self) -> CostModel | None:
        """The cost model, made on first use."""
        return None if self._make is None else self._make()

    def _count(self, way: str, where: str = "") -> str:
        self.counts[way] += 1
        if way == UNPRICED and not self.unpriced:
            self.unpriced = where
        return way

    def measured(self) -> None:
        """Count a node whose duration the trace gives."""
        self._count(MEASURED)

    def compute(self, fail: Fail, node, attrs: dict, cpu: bool, launcher=None) -> tuple[float, float]:
        """(seconds, FLOPs) of a compute node without a duration; ``launcher``: the host node
        that launched it (its name and arguments identify a GPU kernel's op)."""
        flops = attrs.get("num_ops", 0)
        where = f"node {node.id} ({node.name!r})"
        if cpu or self.cost is None:
            why = "a host op without duration_micros" if cpu else "no GPU to price it on"
            self._count(UNPRICED, f"{where}: {why}")
            return 0.0, flops
        work = _kernel(fail, node) or (launcher is not None and _kernel(fail, launcher))
        if work:
            self._count(KERNEL)
            return self.cost.time(work), work.flops
        nbytes = attrs.get("tensor_size") or _io_bytes(fail, node)
        if not (flops or nbytes):
            self._count(UNPRICED, f"{where}: no duration_micros, num_ops, tensor_size or tensor inputs")
            return 0.0, flops
        self._count(ROOFLINE)
        peak = self.cost.gpu.peak_flops * self.cost.eff.matmul_max
        return max(flops / peak, self.cost.memory_seconds(nbytes)) + self.cost.eff.launch_s, flops

    def memory(self, fail: Fail, node, attrs: dict) -> float:
        """Seconds of a MEM_LOAD/MEM_STORE node without a duration: its bytes at the GPU's
        achieved HBM bandwidth."""
        nbytes = attrs.get("tensor_size") or _io_bytes(fail, node)
        if self.cost is None or not nbytes:
            why = "no GPU to price it on" if nbytes else "no duration_micros, tensor_size or tensor inputs"
            self._count(UNPRICED, f"node {node.id} ({node.name!r}): {why}")
            return 0.0
        self._count(ROOFLINE)
        return self.cost.memory_seconds(nbytes)


def _io_bytes(fail: Fail, node) -> int:
    return tensor_bytes(io_field(fail, node, "inputs", "values")) + tensor_bytes(
        io_field(fail, node, "outputs", "values")
    )


def _kernel(fail: Fail, node) -> Work | None:
    """The Work of the GEMM or attention kernel ``node``'s name and input shapes identify
    (None where they identify none)."""
    name = node.name
    if name not in _GEMM_OPERANDS and "scaled_dot_product" not in name:
        return None
    shapes = io_field(fail, node, "inputs", "shapes")
    values = io_field(fail, node, "inputs", "values")
    if name in _GEMM_OPERANDS:
        return _gemm(name, shapes, _itemsize(values))
    causal = argument(_schema(node), values, "is_causal", False) is True
    return _attention(name, shapes, _itemsize(values), causal)


def _schema(node) -> str:
    return next((a.string_val for a in node.attr if a.name == "op_schema"), "")


def _itemsize(values) -> int:
    """Bytes per element of the first tensor in ``values`` (2 if none says)."""
    if isinstance(values, list):
        if len(values) == 6 and isinstance(values[5], str) and isinstance(values[4], int):
            return values[4]
        for v in values:
            size = _itemsize(v)
            if size:
                return size
    return 0


def _dims(shape) -> list[int] | None:
    ok = isinstance(shape, list) and shape and all(isinstance(d, int) and d > 0 for d in shape)
    return shape if ok else None


def _gemm(name: str, shapes: list, itemsize: int) -> Work | None:
    """A matrix product's Work from its operand shapes (module doc); None where they do not fit."""
    i, j = _GEMM_OPERANDS[name]
    if len(shapes) <= j:
        return None
    a, b = _dims(shapes[i]), _dims(shapes[j])
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return None
    if name == "aten::linear":  # x [..., K] · weightᵀ, weight [N, K]
        batch, m, k, n, k2 = 1, math.prod(a[:-1]), a[-1], b[0], b[1]
    else:
        batch, m, k, k2, n = math.prod(a[:-2]), a[-2], a[-1], b[-2], b[-1]
    if k != k2:
        return None
    e = itemsize or 2
    return Work(2.0 * batch * m * n * k, e * batch * (m * k + k * n + m * n), gemm=(m, n, k))


def _attention(name: str, shapes: list, itemsize: int, causal: bool) -> Work | None:
    """A fused attention's Work: query and key [B, H, S, D] (after the output gradient in a
    backward), FLOPs ``4·B·H·D·Sq·Skv`` (halved when causal) × 2.5 in a backward."""
    backward = "backward" in name
    four = [s for s in shapes if _dims(s) is not None and len(s) == 4]
    first = 1 if backward else 0
    if len(four) < first + 2:
        return None
    (b, h, sq, d), (_, hkv, skv, _) = four[first], four[first + 1]
    e = itemsize or 2
    pairs = sq * skv * (0.5 if causal else 1.0)
    flops = 4.0 * b * h * d * pairs * (FLASH_BACKWARD_FACTOR if backward else 1.0)
    q, kv = b * h * sq * d, b * hkv * skv * d
    moved = e * (4 * q + 4 * kv if backward else 2 * q + 2 * kv)  # + dO, dQ, dK, dV backward
    impl = "cudnn" if "cudnn" in name else "fa2"
    return Work(flops, moved, attention=AttentionShape(d, skv, causal, backward, impl))
