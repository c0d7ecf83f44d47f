"""The new systems and model configs load and simulate at ``fidelity: fast`` on their
published parallel layouts (issue 32): Megatron-Bridge's performance summary (NeMo 25.09 and
25.11 containers, docs/performance-summary.md: DGX-GB300, DGX-GB200, DGX-B200 tables) and the
Nemotron-4 papers. Folded, one iteration, so each is a second or so. Each runs with its
recipe's memory settings (Megatron-Bridge scripts/performance; the B200 and GB200 rows are
sourced in ``clustersim/data/published_run_configs.csv``) and fits its GPUs' memory, as the
published run did (issue 37)."""

from __future__ import annotations

import pytest

import clustersim as cs

#: Megatron-Bridge's performance scripts turn on Megatron-Core's precision-aware optimizer for
#: every BF16 run (scripts/performance/run_script.py @v0.1.0rc4, utils/helpers.py @v0.2.2)
AWARE = {"precision_aware_optimizer": {}}
#: GPT-OSS 120B's GB200 / B200 recipe (gpt_oss/workload_base_configs.py @v0.2.2)
GPT_OSS = {**AWARE, "recompute": "selective", "recompute_modules": ["layernorm", "moe_act"]}
#: the embedding and the loss counted as layers in the split (qwen3_235b_a22b.py @v0.1.0rc4)
ACCOUNTED = {"account_for_embedding": True, "account_for_loss": True}
#: DeepSeek-V3's PP 4 × VP 4 layout (deepseek_v3.py map_pp_vp_to_layout @v0.1.0rc4)
DSV3_PP4_VP4 = "Et*4|(t*4|)*14tmL"

# (name, preset, nodes, gpus per NVLink domain in the job, config, global batch, micro batch,
#  parallel, training) — Megatron-Bridge runs 64 GPUs (16 of 18 trays) per NVL72 rack
LAYOUTS = [
    # GB200 / GB300: GPT-OSS 120B, 64 GPUs, GBS 512, MBS 4, TP 1, PP 1, EP 64 (BF16)
    ("gpt-oss GB200", "gb200_nvl72", 1, 64, "gpt-oss-120b", 512, 4, {"ep": 64}, GPT_OSS),
    ("gpt-oss GB300", "gb300_nvl72", 1, 64, "gpt-oss-120b", 512, 4, {"ep": 64}, AWARE),
    # B200: GPT-OSS 120B, 64 GPUs, GBS 512, MBS 4, TP 1, PP 1, EP 8
    # (the table's EP 8; the release's recipe says 64)
    ("gpt-oss B200", "dgx_b200", 8, None, "gpt-oss-120b", 512, 4, {"ep": 8}, GPT_OSS),
    # GB200 / GB300: Qwen3-235B-A22B, 64 GPUs, GBS 1024, MBS 1, TP 2, PP 1, EP 64 (expert TP 1)
    (
        "qwen3-235b GB200",
        "gb200_nvl72",
        1,
        64,
        "qwen3-235b-a22b",
        1024,
        1,
        {"tp": 2, "ep": 64, "etp": 1, "sequence_parallel": True, "tp_comm_overlap": False},
        AWARE,
    ),
    (
        "qwen3-235b GB300",
        "gb300_nvl72",
        1,
        64,
        "qwen3-235b-a22b",
        1024,
        1,
        {"tp": 2, "ep": 64, "etp": 1, "sequence_parallel": True, "tp_comm_overlap": False},
        AWARE,
    ),
    # B200: Qwen3-235B-A22B, 64 GPUs, GBS 1024, MBS 1, TP 1, PP 8, VP 2, EP 8, no recompute
    (
        "qwen3-235b B200",
        "dgx_b200",
        8,
        None,
        "qwen3-235b-a22b",
        1024,
        1,
        {"pp": 8, "ep": 8, "schedule": "interleaved", "virtual_stages": 2, "partition": ACCOUNTED},
        AWARE,
    ),
    # GB200: DeepSeek-V3 (with its MTP module), 256 GPUs, GBS 2048, MBS 1, TP 1, PP 4, VP 4, EP 64
    (
        "deepseek-v3 GB200",
        "gb200_nvl72",
        4,
        64,
        "deepseek-v3",
        2048,
        1,
        {
            "pp": 4,
            "ep": 64,
            "schedule": "interleaved",
            "virtual_stages": 4,
            "partition": {"layout": DSV3_PP4_VP4},
        },
        # its recipe: recompute_modules [mla_up_proj], Adam's moments in BF16
        {
            "recompute": "selective",
            "recompute_modules": ["mla_up_proj"],
            "precision_aware_optimizer": {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
        },
    ),
    # Nemotron-4 15B (arXiv:2402.16819 §2): 96 DGX H100, TP 8, DP 96, GBS 384 (first ramp stage)
    (
        "nemotron-4-15b H100",
        "dgx_h100",
        96,
        None,
        "nemotron-4-15b",
        384,
        1,
        {"tp": 8, "sequence_parallel": True, "tp_comm_overlap": False},
        {},
    ),
    # Nemotron-4 340B (arXiv:2406.11704 §2.3): 192 DGX H100, TP 8, PP 12 interleaved, DP 16, GBS 768
    (
        "nemotron-4-340b H100",
        "dgx_h100",
        192,
        None,
        "nemotron-4-340b",
        768,
        1,
        {
            "tp": 8,
            "pp": 12,
            "schedule": "interleaved",
            "virtual_stages": 8,
            "sequence_parallel": True,
            "tp_comm_overlap": False,
        },
        {},
    ),
]


@pytest.mark.parametrize(
    "name,preset,nodes,gpn,hf,gbs,mbs,parallel,training", LAYOUTS, ids=[c[0] for c in LAYOUTS]
)
def test_published_layout_simulates_at_fast_and_fits(
    name, preset, nodes, gpn, hf, gbs, mbs, parallel, training
):
    cluster = {"preset": preset, "nodes": nodes, **({"gpus_per_node": gpn} if gpn else {})}
    res = cs.simulate(
        {
            "name": name,
            "cluster": cluster,
            # an even expert load, which folding needs (megatron_core's default, auto, is
            # uneven for softmax routers: workload/moe_routing.py)
            "model": {"hf_config": hf, "seq_len": 4096, "attention": "flash", "expert_load": "uniform"},
            "training": {"framework": "megatron_core", "global_batch": gbs, "micro_batch": mbs, **training},
            "parallel": parallel,
            "simulation": {"fidelity": "fast", "fold": True},
        },
        progress=False,
    )
    s = res.summary
    assert s["num_gpus"] == nodes * (gpn or 8)
    assert s["folded"].startswith("yes")
    assert s["iteration_time_s"] > 0 and 0 < s["mfu"] < 1
    devices = res.devices
    assert (devices["peak_memory_bytes"] <= devices["memory_capacity_bytes"]).all()
