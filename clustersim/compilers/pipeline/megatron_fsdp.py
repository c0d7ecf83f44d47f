"""Megatron-FSDP on one GPU: how far its unit all-gathers run ahead, and its reduce queue.

With ``parallel.data_parallel.megatron_fsdp`` (the ``megatron_core`` profile's ZeRO-3) the
FSDP units of :class:`~.data_parallel.StageSync` follow Megatron-FSDP's rules
(:mod:`clustersim.parallel.megatron_fsdp`) in place of a fixed ``prefetch``: a unit's hook
all-gathers the next units of its pass while fewer than C // 2 elements are taken (each
gather starting once the unit before the hook's has run), and before a unit's
reduce-scatter the compute stream waits for the oldest queued ones while they hold more
than C elements. Its gathers land in the units' buckets, so no copy kernels run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...parallel.megatron_fsdp import MegatronFsdp, queue_waits


@dataclass
class MegatronFsdpSync:
    """Megatron-FSDP's rules over one GPU's units: ``sizes[step]``, each unit's elements in
    the step's order, ``passes[step]`` the pass each belongs to; ``capacity`` C."""

    rules: MegatronFsdp
    sizes: list
    passes: list
    capacity: int
    queue: list = field(default_factory=list)  # (reduce-scatter op, elements) not yet waited for

    @classmethod
    def of(cls, rules: MegatronFsdp, plan_units: list, elements, layer_units: list[int]) -> MegatronFsdpSync:
        """The rules over ``plan_units`` (per step, the keys (phase, j, chunk, first layer) of
        the units that gather), ``elements(key)`` a unit's elements; ``layer_units``: the
        elements of every unit of the model on this GPU (for C's default)."""
        sizes = [[elements(key) for key in step] for step in plan_units]
        passes = [[key[:3] for key in step] for step in plan_units]
        return cls(rules, sizes, passes, rules.communication_unit(layer_units))

    def _pass(self, step: int, i: int) -> range:
        """The indices of unit i's pass within the step."""
        keys = self.passes[step]
        a = i
        while a > 0 and keys[a - 1] == keys[i]:
            a -= 1
        b = i
        while b + 1 < len(keys) and keys[b + 1] == keys[i]:
            b += 1
        return range(a, b + 1)

    def reach(self, step: int, i: int) -> int:
        """The last unit of the step whose all-gather unit i's hook issues."""
        span = self._pass(step, i)
        sizes = self.sizes[step][span.start : span.stop]
        return span.start + self.rules.reach(sizes, i - span.start, self.capacity // 2)

    def issuer(self, step: int, x: int) -> int:
        """The unit whose hook issues unit x's all-gather."""
        return next(i for i in self._pass(step, x) if self.reach(step, i) >= x)

    def wait(self, elements: int):
        """Before a reduce-scatter of ``elements``: the oldest queued one the compute stream
        waits for (None: none), those waited for leaving the queue; then this one joins."""
        n = queue_waits([e for _, e in self.queue], self.capacity)
        waited = self.queue[n - 1][0] if n else None
        del self.queue[:n]
        return waited

    def queued(self, op, elements: int) -> None:
        """A reduce-scatter issued: it joins the queue."""
        self.queue.append((op, elements))

    def reset(self) -> None:
        """The optimizer step waited for every reduction."""
        self.queue = []
