"""Engine support for symmetry folding: partial rendezvous (``arrivals``) and shadow traffic."""

import pytest
import simpy

import clustersim as cs
from clustersim.engine.interpreter import Engine
from clustersim.engine.network_setup import build_network
from clustersim.record import Recorder
from clustersim.resolve import resolve

MiB = 2**20


def _cluster_with_shared_nic():
    # 2 nodes × 2 GPUs and ONE NIC per node: gpu0→gpu2 and gpu1→gpu3 share both NIC links.
    return cs.load_scenario(
        {
            "cluster": {
                "nodes": 2,
                "gpus_per_node": 2,
                "nic": {"bandwidth": "100 Gbit/s", "per_node": 1, "latency": 0},
                "intra_node": {"latency": 0},
                "topology": {"kind": "fat_tree"},
            },
            "model": {"kind": "synthetic", "layers": 4, "forward": 1e-3, "backward": 1e-3},
            "training": {"global_batch": 1},
            "parallel": {"pp": 4},
            "simulation": {"network": "packet", "chunk_size": MiB},
        }
    )


def _send_time(shadows) -> float:
    sc = _cluster_with_shared_nic()
    prog = cs.Program(4)
    s = prog.add(0, "send", "send", "x", nbytes=64 * MiB, shadows=shadows)
    r = prog.add(2, "recv", "recv", "x", nbytes=64 * MiB, peer=s.id)
    s.peer = r.id
    prog.check()
    env, rec = simpy.Environment(), Recorder()
    Engine(prog, env, build_network(resolve(sc), env, rec), rec, [2**40] * 4).run()
    return {i: e for i, _, e in rec.ops}[r.id]


def test_shadow_send_shares_the_bottleneck():
    alone, shared = _send_time(()), _send_time(((1, 3),))
    B = 100e9 / 8
    assert alone == pytest.approx(64 * MiB / B, rel=0.05)
    assert shared == pytest.approx(2 * alone, rel=0.05)  # the twin's bytes take half the NIC


def test_partial_rendezvous_runs_with_the_representative_only():
    prog = cs.Program(4)
    prog.add(
        0,
        "comm",
        "collective",
        "ar",
        nbytes=2**24,
        group=(0, 1, 2, 3),
        collective="all_reduce",
        tag="ar",
        arrivals=1,
        algorithm="ring",
    )
    prog.check()
    env, rec = simpy.Environment(), Recorder()
    from clustersim.network import DirectFabric

    Engine(prog, env, DirectFabric(env, rec, 25e9, 0.0), rec, [2**40] * 4, alpha=0.0).run()
    ((i, start, end),) = rec.ops
    assert end == pytest.approx(2 * 3 / 4 * 2**24 / 25e9, rel=1e-9)  # ring: 2(n−1)/n · S/B


def test_analytical_collective_model_matches_fabric_on_idle_links():
    def run(model):
        prog = cs.Program(4)
        for d in range(4):
            prog.add(
                d,
                "comm",
                "collective",
                "ar",
                nbytes=2**28,
                group=(0, 1, 2, 3),
                collective="all_reduce",
                tag="ar",
                algorithm="ring",
            )
        env, rec = simpy.Environment(), Recorder()
        from clustersim.network import DirectFabric

        Engine(
            prog,
            env,
            DirectFabric(env, rec, 25e9, 1e-6),
            rec,
            [2**40] * 4,
            alpha=5e-6,
            collective_model=model,
        ).run()
        return rec.ops[0][2]

    expected = 2 * 3 * (5e-6 + 1e-6) + 2 * 3 / 4 * 2**28 / 25e9
    assert run("fabric") == pytest.approx(expected, rel=1e-9)
    assert run("analytical") == pytest.approx(expected, rel=1e-9)
