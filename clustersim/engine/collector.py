"""Python's cyclic garbage collector paused while a job is resolved, compiled and run.

Compiling and running a Program allocate millions of small containers (ops, plan tuples,
memory samples) that live until the run ends, and almost no reference cycles (reference
counting frees the rest). The collector cannot know that: it traverses the young objects
every few hundred allocations and all of them in each full collection, which a large
Program triggers again and again as it grows. On the unfolded GPT-3 175B run at m = 24
(241,664 ops, SimPy engine) that was 3.9 s of a 14 s compile and 0.55 s of a 2.8 s run;
with the collector paused the whole ``simulate()`` takes 20.5 → 16.5 s CPU, and the
collection after it finds 8 objects in cycles (docs/performance.md). Resolving and the
estimate are the same: a 16,384-GPU job's topology graph is 212k dicts of names and
numbers, kept for the run, and building it woke the collector for two full collections.
So ``simulate()`` keeps it off from resolving to the Result: the folded LLaMA-3-405B-like
run (benchmarks/scale.py) takes 0.86 → 0.60 s CPU in a fresh process (medians of 5).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector off, and turn it back on after
    (also when the block raises). A collector the caller had turned off stays off; cycles
    made inside wait for the collector's first pass after the block."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
