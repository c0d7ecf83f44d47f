"""Memory by byte kind: one vocabulary from the cost model to the result columns.

A GPU holds, for the whole run, its model chunks' **weights**, **grads** (the gradient
buffers), **optimizer** state and **buffers** (point-to-point send/recv buffers, the
recompute working set or the loss's, whichever is larger) — the cost model prices each per chunk
(:class:`clustersim.workload.stage_cost.StageCost`), a compiler sums them per device into
``Program.static_memory`` — plus **stashed** weight versions a schedule keeps beyond the
one it trains (PipeDream-2BW's second copy for the whole run; PipeDream's one per
micro-batch in flight, allocated by the ops), and **activations** (allocated by a forward,
freed by its backward). A leaf module: the workload and the Program both import it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class StaticMemory:
    """Bytes held for the whole run, by kind (see the module docstring)."""

    weights: int = 0
    grads: int = 0
    optimizer: int = 0
    buffers: int = 0
    stashed: int = 0

    @property
    def total(self) -> int:
        """All static bytes: what the memory ledger starts from."""
        return self.weights + self.grads + self.optimizer + self.buffers + self.stashed

    def __add__(self, other: StaticMemory) -> StaticMemory:
        return StaticMemory(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @staticmethod
    def sum(parts) -> StaticMemory:
        """The kind-wise sum of ``parts`` (an empty sum holds nothing)."""
        out = StaticMemory()
        for p in parts:
            out = out + p
        return out
