"""DeepSpeed ZeRO-3 at scale: the table of docs/data_parallel.md's "DeepSpeed ZeRO-3" section.

    python benchmarks/zero3_at_scale.py                 # 384, 768, 1,536 GPUs, both coordinators
    python benchmarks/zero3_at_scale.py --gpus 1536

GPT-3 175B, ZeRO-3 under the ``deepspeed`` profile, DGX A100 nodes on a fat tree, one
micro-batch of 2,048 tokens per GPU (global batch = GPUs), full recompute, ``fidelity: fast``.
Per GPU count and coordinator (``v0.6``: DeepSpeed v0.6–v0.9; ``v0.3``: 2021's): the
iteration time, the first GPU's compute-lane busy time, and its all-gathers and
reduce-scatters (count, summed seconds). A few seconds per run.
"""

from __future__ import annotations

import argparse

import clustersim as cs


def scenario(gpus: int, coordinator: str) -> dict:
    """The ZeRO-3 run of the module doc on ``gpus`` A100s."""
    return {
        "name": f"zero3-175b-{gpus}-{coordinator}",
        "cluster": {"preset": "dgx_a100", "nodes": gpus // 8, "topology": {"kind": "fat_tree"}},
        "model": {"preset": "gpt3-175b"},
        "training": {
            "global_batch": gpus,
            "micro_batch": 1,
            "recompute": "full",
            "framework": "deepspeed",
            "precision": "bf16",
        },
        "parallel": {
            "dp": gpus,
            "zero": 3,
            "data_parallel": {"deepspeed_zero3": {"coordinator": coordinator}},
        },
        "simulation": {"fidelity": "fast"},
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="384,768,1536", help="comma-separated GPU counts")
    args = ap.parse_args(argv)
    print("| GPUs | coordinator | iteration | compute busy | all-gathers | reduce-scatters |")
    print("|---|---|---|---|---|---|")
    for gpus in (int(g) for g in args.gpus.split(",")):
        for coordinator in ("v0.6", "v0.3"):
            res = cs.simulate(scenario(gpus, coordinator), progress=False)
            sp = res.spans
            mine = sp[(sp["device"] == sp["device"].min()) & (sp["kind"] == "collective")]
            busy = sp[
                (sp["device"] == sp["device"].min()) & (sp["lane"] == "compute") & (sp["kind"] == "compute")
            ]
            ag = mine[mine["name"].str.startswith("zero3 all-gather")]
            rs = mine[mine["name"].str.startswith("zero3 reduce-scatter")]
            print(
                f"| {gpus:,} | {coordinator} | {res.summary['iteration_time_s']:.2f} s "
                f"| {(busy['end_s'] - busy['start_s']).sum():.2f} s "
                f"| {len(ag):,}, {(ag['end_s'] - ag['start_s']).sum():.2f} s "
                f"| {len(rs):,}, {(rs['end_s'] - rs['start_s']).sum():.2f} s |"
            )


if __name__ == "__main__":
    main()
