"""The yardstick every speed benchmark reports against: a bare SimPy timeout loop."""

from __future__ import annotations

import time

import simpy


def bare_simpy_rate(n: int = 200_000, processes: int = 1) -> float:
    """Events per second (CPU time) of ``processes`` SimPy processes doing ``n`` timeouts in
    all. One process is the yardstick; with several (staggered so their timeouts never
    tie) SimPy's event heap holds one event per process, as it holds one per busy lane in
    a simulated pipeline, and each push and pop costs its comparisons."""
    env = simpy.Environment()

    def loop(count: int, delay: float):
        for _ in range(count):
            yield env.timeout(delay)

    for k in range(processes):
        env.process(loop(n // processes + (k < n % processes), 1.0 + k * 1e-3))
    t0 = time.process_time()
    env.run()
    return n / (time.process_time() - t0)
