"""FSDP2 and Megatron-FSDP against idealised FSDP units: the table of docs/data_parallel.md's
"FSDP2" section.

    python benchmarks/fsdp2_units.py

LLaMA-3-8B, s = 8,192, micro-batch 1 (global batch = GPUs), 64 H100 in 8 nodes,
``fidelity: fast``: the ``fsdp2`` profile over all 64 GPUs and with HSDP (``shard_group_size``
8), each with ``parallel.data_parallel.fsdp2`` off (idealised units) and on (FSDP2's runtime);
the ``megatron_core`` profile with ``zero: 3``, ``megatron_fsdp`` off (idealised units), on
(Megatron-LM's defaults) and with ``double_buffer``. Per run: the iteration time, MFU, peak
memory, and the first GPU's FSDP2 copy kernels (count, summed seconds). Seconds per run.
"""

from __future__ import annotations

import clustersim as cs


def scenario(framework: str, data_parallel: dict) -> dict:
    """The run of the module doc under ``framework`` with ``data_parallel`` stated."""
    return {
        "name": f"llama3-8b-64xh100-{framework}",
        "cluster": {"nodes": 8, "gpus_per_node": 8, "gpu": "H100-SXM5-80GB"},
        "model": {"preset": "llama3-8b", "seq_len": 8192},
        "training": {"global_batch": 64, "micro_batch": 1, "precision": "bf16", "framework": framework},
        "parallel": {"dp": 64, "zero": 3, "data_parallel": data_parallel},
        "simulation": {"fidelity": "fast"},
    }


RUNS = (
    ("fsdp2", "FSDP 64, idealised units", {"fsdp2": False}),
    ("fsdp2", "FSDP 64, fsdp2", {"fsdp2": True}),
    ("fsdp2", "HSDP 8, idealised units", {"fsdp2": False, "shard_group_size": 8}),
    ("fsdp2", "HSDP 8, fsdp2", {"fsdp2": True, "shard_group_size": 8}),
    ("megatron_core", "FSDP 64, idealised units", {"megatron_fsdp": None}),
    ("megatron_core", "FSDP 64, megatron_fsdp", {}),
    ("megatron_core", "FSDP 64, megatron_fsdp double_buffer", {"megatron_fsdp": {"double_buffer": True}}),
)


def main() -> None:
    print("| profile | run | iteration s | MFU | peak GiB | copy kernels (count, s) |")
    print("|---|---|---|---|---|---|")
    for framework, label, data_parallel in RUNS:
        res = cs.simulate(scenario(framework, data_parallel), progress=False)
        s, sp = res.summary, res.spans
        mine = sp[
            (sp["device"] == sp["device"].min()) & sp["name"].str.contains("fsdp2 .* copy-", regex=True)
        ]
        busy = float((mine["end_s"] - mine["start_s"]).sum())
        print(
            f"| `{framework}` | {label} | {s['iteration_time_s']:.3f} | {100 * s['mfu']:.1f} % "
            f"| {s['peak_memory_gib']:.1f} | {len(mine)}, {busy:.3f} |"
        )


if __name__ == "__main__":
    main()
