"""The yardstick every speed benchmark reports against: a bare SimPy timeout loop."""

from __future__ import annotations

import time

import simpy


def bare_simpy_rate(n: int = 200_000) -> float:
    """Events per second (CPU time) of one SimPy process doing ``n`` timeouts."""
    env = simpy.Environment()

    def loop():
        for _ in range(n):
            yield env.timeout(1.0)

    env.process(loop())
    t0 = time.process_time()
    env.run()
    return n / (time.process_time() - t0)
