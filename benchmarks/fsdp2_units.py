"""FSDP2 against idealised FSDP units: the table of docs/data_parallel.md's "FSDP2" section.

    python benchmarks/fsdp2_units.py

LLaMA-3-8B, s = 8,192, micro-batch 1 (global batch = GPUs), 64 H100 in 8 nodes, the ``fsdp2``
profile, ``fidelity: fast``; FSDP over all 64 GPUs and HSDP (``shard_group_size`` 8), each
with ``parallel.data_parallel.fsdp2`` off (idealised units) and on (FSDP2's runtime). Per
run: the iteration time, MFU, peak memory, and the first GPU's FSDP2 copy kernels (count,
summed seconds). A few seconds per run.
"""

from __future__ import annotations

import clustersim as cs


def scenario(fsdp2: bool, shard_group: int | None) -> dict:
    """The run of the module doc."""
    hsdp = {"shard_group_size": shard_group} if shard_group else {}
    return {
        "name": f"llama3-8b-64xh100-fsdp2-{fsdp2}",
        "cluster": {"nodes": 8, "gpus_per_node": 8, "gpu": "H100-SXM5-80GB"},
        "model": {"preset": "llama3-8b", "seq_len": 8192},
        "training": {"global_batch": 64, "micro_batch": 1, "precision": "bf16", "framework": "fsdp2"},
        "parallel": {"dp": 64, "data_parallel": {"fsdp2": fsdp2, **hsdp}},
        "simulation": {"fidelity": "fast"},
    }


def main() -> None:
    print("| | fsdp2 | iteration s | MFU | peak GiB | copy kernels (count, s) |")
    print("|---|---|---|---|---|---|")
    for shard_group in (None, 8):
        for fsdp2 in (False, True):
            res = cs.simulate(scenario(fsdp2, shard_group), progress=False)
            s, sp = res.summary, res.spans
            copies = sp[
                (sp["device"] == sp["device"].min()) & sp["name"].str.contains("fsdp2 .* copy-", regex=True)
            ]
            busy = float((copies["end_s"] - copies["start_s"]).sum())
            what = f"HSDP {shard_group}" if shard_group else "FSDP 64"
            print(
                f"| {what} | {fsdp2} | {s['iteration_time_s']:.3f} | {100 * s['mfu']:.1f} % "
                f"| {s['peak_memory_gib']:.1f} | {len(copies)}, {busy:.3f} |"
            )


if __name__ == "__main__":
    main()
