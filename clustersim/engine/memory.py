"""Per-GPU memory ledger: static bytes plus allocations and frees made by ops.

It starts every device from the total of its Program's static bytes (by kind in
``Program.static_memory``) and counts what ops allocate and free as one total; the split
of a peak by kind is :meth:`clustersim.program.Program.memory_peaks`'s.

Every change appends ``(device, time_s, allocated_bytes)`` to the recorder, so the memory
timeline can be drawn; the peak and an out-of-memory flag are kept per device. Going over
capacity does not stop the run (the user wants to see by how much it does not fit).
"""

from __future__ import annotations

from ..memory_kinds import StaticMemory
from ..record import Recorder


class MemoryLedger:
    """Allocated bytes per device, their peak, and capacity."""

    __slots__ = ("current", "peak", "capacity", "_samples")

    def __init__(self, static: list[StaticMemory], capacity: list[int], recorder: Recorder):
        self.current = [m.total for m in static]
        self.peak = list(self.current)
        self.capacity = capacity
        self._samples = recorder.memory
        for dev, b in enumerate(self.current):
            self._samples.append((dev, 0.0, b))

    def change(self, device: int, delta: int, now: float) -> None:
        """Allocate (delta > 0) or free (delta < 0) bytes on ``device`` at time ``now``."""
        cur = self.current[device] + delta
        if cur < 0:
            raise RuntimeError(f"gpu{device} freed more memory than it held ({cur} bytes) — a Program bug")
        self.current[device] = cur
        if cur > self.peak[device]:
            self.peak[device] = cur
        self._samples.append((device, now, cur))

    def oom(self, device: int) -> bool:
        return self.peak[device] > self.capacity[device]
