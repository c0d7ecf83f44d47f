"""Korthikanti et al. 2022: one 22B layer's times (Table 4) and per-GPU memory (Figs. 1, 7).

:func:`layer_times` runs one layer's forward and backward segments — compute kernels from
the cost model, TP collectives on the DGX-A100 preset's NVSwitch fabric through
:func:`clustersim.collectives.run_collective` — back to back, as one CUDA stream runs them;
under SP the backward's re-gather of the column-parallel inputs beside the dgrad GEMM
(:mod:`clustersim.workload.sp_regather`): the GEMM slowed by NCCL's CTAs, the collective by
the GEMM (:mod:`clustersim.hardware.comm_contention`), each at its rate alone once the other
has ended.
:func:`memory_check` evaluates the memory model for the configurations of Korthikanti's
Table 3 (t = 8; 22B p = 1, b = 4; 175B p = 8, 530B p = 35, 1T p = 64, b = 1; the
interleaved schedule with v = 3 for 175B and 530B — the ratio of their published
activation bars to the 1F1B formula is exactly 1 + (p − 1)/(p·v) with v = 3).
"""

from __future__ import annotations

from dataclasses import replace

import simpy

from ..collectives import Tuning, run_collective
from ..engine.network_setup import build_network
from ..hardware.comm_contention import beside_rate, pair_seconds
from ..hardware.interference import beside_factor, nccl_ctas
from ..record import Recorder
from ..resolve import resolve
from ..scenario import load_scenario
from ..schedules import SCHEDULES
from ..workload.cost_model import CostModel
from ..workload.memory_model import in_flight, static_bytes
from ..workload.model_presets import TRANSFORMER_PRESETS
from ..workload.segments import backward_items, forward_items
from ..workload.sp_regather import with_regather
from ..workload.transformer_ops import layer_ops
from .data import read_table

GIB = 2**30
#: Korthikanti Table 4 setting: 22B model, t = 8, b = 4, s = 2048 (h = 6144, a = 64)
TABLE4 = {"preset": "gpt-22b", "tp": 8, "micro_batch": 4}
#: Korthikanti Table 3: (preset, pipeline stages, micro-batch, interleaving chunks v)
TABLE3 = {
    "22B": ("gpt-22b", 1, 4, 1),
    "175B": ("gpt3-175b", 8, 1, 3),
    "530B": ("gpt-529.6b", 35, 1, 3),
    "1T": ("gpt-1t", 64, 1, 1),
}


def _fabric(tp: int):
    sc = load_scenario(
        {
            "cluster": {"preset": "dgx_a100", "nodes": 1},
            "model": {"kind": "synthetic", "layers": 1, "forward": 0, "backward": 0},
            "training": {"global_batch": 8},
            "parallel": {"pp": 1, "dp": 8},
            "simulation": {"network": "packet"},
        }
    )
    env, job = simpy.Environment(), resolve(sc)
    fabric = build_network(job, env, Recorder())
    return env, fabric, [f"gpu{i}" for i in range(tp)], job.cluster


def _beside_s(item: tuple) -> float:
    """Seconds of a kernel item beside a NCCL collective: its SM-limited time where the cost
    model priced it so (:mod:`clustersim.workload.comm_interference`). The kernels run beside
    one here are GEMMs, whose memory-bound share is 0, so the collective's HBM rate (unknown
    before it runs) does not enter."""
    carried = item[6] if len(item) > 6 else ()
    return item[1] * beside_factor(carried, item[1], 0.0) if carried and item[1] else item[1]


def _run(items: list[tuple], tp: int, rate: float = 1.0) -> float:
    """Seconds of ``items`` run back to back; a collective with a kernel beside it moves at
    ``rate`` of its rate alone while the kernel runs (:mod:`clustersim.hardware.comm_contention`)."""
    env, fabric, members, cluster = _fabric(tp)
    tuning = Tuning(cluster.collective_alpha, protocols=cluster.collective_protocols)

    def proc():
        for it, nxt in zip(items, items[1:] + [("c", 0.0)]):
            if it[0] == "c":
                yield env.timeout(it[1])
            elif it[0] == "p":  # ran beside the collective before it
                continue
            else:
                start = env.now
                yield env.process(run_collective(env, fabric, it[1], members, it[2], tuning=tuning))
                if nxt[0] == "p":
                    # a kernel marked to run beside it (the SP backward's dgrad beside the
                    # re-gather), slowed by NCCL's CTAs, and the collective slowed by it; each
                    # at its rate alone once the other has ended
                    alone = env.now - start
                    both = pair_seconds(nxt[1], _beside_s(nxt), alone, rate)
                    yield env.timeout(max(both - alone, 0.0))

    env.process(proc())
    env.run()
    return env.now


def layer_times(
    recompute: str = "none",
    sequence_parallel: bool = False,
    gpu: str = "A100-SXM4-80GB",
    preset: str = TABLE4["preset"],
    tp: int = TABLE4["tp"],
    micro_batch: int = TABLE4["micro_batch"],
    contention: bool = True,
) -> tuple[float, float]:
    """(forward, backward) seconds of one transformer layer with its TP collectives;
    ``contention``: a collective with a kernel beside it is slowed by it
    (:mod:`clustersim.hardware.comm_contention`; False: it keeps its rate alone)."""
    cfg = TRANSFORMER_PRESETS[preset][0]
    # the kernels beside a NCCL collective priced per kernel with the GPU's NCCL CTAs (its
    # NVSwitch default: comm_interference), as a scenario that overlaps them prices them
    cm = replace(CostModel.for_gpu(gpu), nccl_ctas=nccl_ctas(gpu) or 0)
    rate = beside_rate(gpu, cm.nccl_ctas, cm.eff.sms) if contention and cm.nccl_ctas else 1.0
    ops = layer_ops(cfg, micro_batch, tp, sequence_parallel, 2)
    # Megatron-LM's SP backward gathers the column-parallel inputs again, beside the dgrad GEMM
    ops = with_regather(ops) if sequence_parallel else ops
    f = forward_items(ops, cm)
    rec = {"none": [], "full": f, "selective": forward_items(ops, cm, core_only=True)}[recompute]
    return _run(f, tp, rate), _run(rec + backward_items(ops, cm), tp, rate)


def memory_check() -> list[dict]:
    """Predicted vs published per-GPU memory (GiB) for each Korthikanti figure row."""
    out = []
    for row in read_table("korthikanti_fig1_fig7_memory"):
        key = row["model"]
        if key not in TABLE3 or row["unit"] != "GiB":
            continue
        preset, p, b, v = TABLE3[key]
        cfg = TRANSFORMER_PRESETS[preset][0]
        q = row["quantity"]
        if q.startswith("params"):
            layer_params = sum(op.params for op in layer_ops(cfg, b, 8, False, 2) if hasattr(op, "params"))
            pred = sum(static_bytes(layer_params * cfg.layers / p, "bf16", "adam", 0, 1))
        else:
            sp = "seq-par" in q or q.endswith("seqsel")
            selective = "selective" in q or q.endswith("seqsel")
            ops = layer_ops(cfg, b, 8, sp, 2)
            acts = [
                op.activation
                for op in ops
                if hasattr(op, "activation") and not (selective and op.attention_core)
            ]
            # the first stage keeps, at its peak, as many chunk-micro-batches as the shipped
            # schedule's order holds in flight, each L/(p·v) layers (1F1B: p × L/p = L layers;
            # interleaved: L·(1 + (p − 1)/(p·v)), Korthikanti §4.2.3)
            order = (
                SCHEDULES["interleaved"].order(0, p, 4 * p, v=v)
                if v > 1
                else SCHEDULES["1f1b"].order(0, p, 4 * p)
            )
            pred = sum(acts) * cfg.layers / (p * v) * in_flight(order)
        pub = float(row["value"]) * GIB
        out.append(
            {
                "model": key,
                "quantity": q,
                "published_gib": pub / GIB,
                "predicted_gib": pred / GIB,
                "error": pred / pub - 1,
            }
        )
    return out
