"""How fast the packet fabric simulates: chunk-hops per second vs a bare SimPy loop.

Run: ``python benchmarks/fabric_speed.py``. Prints chunk-hops/s (one chunk served by one
link) for

(a) one large message over a chain of 4 links, and
(b) all 128 GPUs of a 16-node fat-tree each sending 64 MiB to a partner on another leaf
    at once (4 switched hops per chunk, shared spines),

and the ratio of each to the events/s of a bare SimPy ``yield env.timeout(1)`` loop timed
in the same process (the bar in DESIGN.md §5: within 2×), and case (b) also against 512
concurrent bare loops, whose event heap is as full as (b)'s. Best of several repeats,
CPU time (``time.process_time``) so other load on the machine disturbs less.
"""

from __future__ import annotations

import sys
import time
from itertools import pairwise
from pathlib import Path

import simpy

from clustersim.network.packet import PacketFabric
from clustersim.record import Recorder
from clustersim.topology import build_topology

sys.path.insert(0, str(Path(__file__).parent))
from baseline import bare_simpy_rate  # noqa: E402

MiB = 1 << 20
REPEATS = 3


def chain_case(message_bytes: int = 16 * 1024 * MiB) -> tuple[float, int]:
    """(a): one message gpu0 → h over 4 links; returns (chunk-hops/s, chunk-hops)."""
    names = ["gpu0", "s0", "s1", "s2", "h"]
    cluster = {
        "nodes": 1,
        "gpus_per_node": 1,
        "topology": {
            "kind": "custom",
            "nodes": [{"name": n, "kind": "switch"} for n in names[1:]],
            "links": [{"src": a, "dst": b, "bandwidth": 25e9, "latency": 1e-6} for a, b in pairwise(names)],
        },
    }
    graph = build_topology(cluster)
    env = simpy.Environment()
    fabric = PacketFabric(env, Recorder(), graph)
    fabric.transfer("gpu0", "h", message_bytes)
    t0 = time.process_time()
    env.run()
    return fabric.chunk_hops / (time.process_time() - t0), fabric.chunk_hops


def fat_tree_case(nbytes: int = 64 * MiB) -> tuple[float, int]:
    """(b): 128 GPUs each send ``nbytes`` to GPU ``(i + 64) mod 128`` at once."""
    cluster = {
        "nodes": 16,
        "gpus_per_node": 8,
        "intra_node": {"kind": "nvswitch", "bandwidth": 3e11, "latency": 1e-6, "efficiency": 1.0},
        "nic": {"bandwidth": 2.5e10, "latency": 1e-6, "per_node": 8, "efficiency": 1.0},
        "pcie": None,
        "topology": {"kind": "fat_tree"},
    }
    graph = build_topology(cluster)
    env = simpy.Environment()
    fabric = PacketFabric(env, Recorder(), graph)
    for i in range(128):  # routes are built outside the timed part
        fabric.route(f"gpu{i}", f"gpu{(i + 64) % 128}")
    for i in range(128):
        fabric.transfer(f"gpu{i}", f"gpu{(i + 64) % 128}", nbytes)
    t0 = time.process_time()
    env.run()
    return fabric.chunk_hops / (time.process_time() - t0), fabric.chunk_hops


def main() -> None:
    bare = max(bare_simpy_rate() for _ in range(REPEATS))
    a_rate, a_hops = max(chain_case() for _ in range(REPEATS))
    b_rate, b_hops = max(fat_tree_case() for _ in range(REPEATS))
    par = max(bare_simpy_rate(512 * 200, processes=512) for _ in range(REPEATS))  # a heap as full as case b's
    print(f"bare SimPy timeout loop      : {bare:12,.0f} events/s")
    print(
        f"(a) 1 message, 4 hops        : {a_rate:12,.0f} chunk-hops/s  ({a_hops:,} chunk-hops)  ratio {a_rate / bare:.2f}"
    )
    print(
        f"(b) 128-GPU fat-tree, 64 MiB : {b_rate:12,.0f} chunk-hops/s  ({b_hops:,} chunk-hops)  ratio {b_rate / bare:.2f}"
    )
    print(f"    vs 512 concurrent bare loops ({par:,.0f} events/s): ratio {b_rate / par:.2f}")


if __name__ == "__main__":
    main()
