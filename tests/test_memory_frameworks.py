"""Per-GPU memory against what frameworks report and what NCCL measures: torchtitan's
FSDP2 Llama 3.1 8B runs (docs/performance.md) and the CUDA context + NCCL reserve."""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.experiments.memory import estimate_peak_memory, tightest_fit
from clustersim.parallel.plan import Plan
from clustersim.resolve import resolve
from clustersim.validation.data import read_table
from clustersim.workload.runtime_memory import runtime_reserve

GIB = 2**30
MIB, MB, GB = 2**20, 1e6, 1e9


def _torchtitan(row: dict[str, str]) -> cs.Scenario:
    """A torchtitan row as a scenario: FSDP2 over fsdp × cp H100s (Llama 3.1 8B has Llama 3
    8B's shapes and 8.03B parameters; only its RoPE scaling differs)."""
    gpus, cp = int(row["gpus"]), int(row["cp"])
    return cs.load_scenario(
        {
            "name": f"torchtitan-table{row['table']}",
            "cluster": {"preset": "dgx_h100", "nodes": gpus // 8},
            "model": {"hf_config": "llama-3-8b", "seq_len": int(row["seq_len"])},
            "training": {
                "framework": "fsdp2",
                "global_batch": int(row["fsdp"]) * int(row["local_batch"]),
                "micro_batch": int(row["local_batch"]),
                "precision": "bf16",
                "recompute": row["activation_checkpointing"],
            },
            "parallel": {"tp": 1, "pp": 1, "dp": int(row["fsdp"]), "cp": cp},
            "simulation": {"network": "analytical"},
        }
    )


def _rows(table: str, techniques: str) -> list[dict[str, str]]:
    return [
        r
        for r in read_table("torchtitan_llama31_memory")
        if r["table"] == table and r["techniques"] == techniques
    ]


def test_fsdp2_model_states_shrink_from_8_to_128_gpus_as_torchtitan_measured():
    # Tables 1 and 3: the same run (local batch 2, selective AC) on 8 and on 128 GPUs. The
    # activations and the gathered units are the same; only the sharded model states differ.
    # torchtitan reads max reserved, which keeps the optimizer step's foreach temporary (4
    # bytes per local parameter) cached besides the 16 of fp32 parameters, gradients and
    # Adam's moments: the measurement sits between 16 and 20 bytes per parameter, hence 10 %
    (eight,), (many,) = _rows("1", "FSDP"), _rows("3", "FSDP")
    held = []
    for row in (eight, many):
        s = resolve(_torchtitan(row)).chunk_costs[0].static
        held.append(s.weights + s.grads + s.optimizer)
    measured = (float(eight["memory_gib"]) - float(many["memory_gib"])) * GIB
    assert held[0] - held[1] == pytest.approx(measured, rel=0.10)


def test_context_parallelism_keeps_the_memory_of_32k_tokens_per_gpu_as_torchtitan_measured():
    # Table 2: FSDP × CP = 8 and 32K tokens per GPU in every row (sequence 32K · cp): each CP
    # rank holds s/cp tokens' activations and the model states shard over fsdp × cp, so the
    # peak stays where it is — measured within 0.7 % across cp = 1, 2, 4, 8. Compared as
    # ratios to the cp = 1 row: torchtitan's absolute reading (max reserved, Float8 and
    # torch.compile) is not what this checks (docs/memory.md)
    rows = _rows("2", "FSDP + CP + torch.compile + Float8")
    assert [int(r["cp"]) for r in rows] == [1, 2, 4, 8]
    peaks = [estimate_peak_memory(_torchtitan(r)) for r in rows]
    for row, peak in zip(rows, peaks):
        measured = float(row["memory_gib"]) / float(rows[0]["memory_gib"])
        assert peak / peaks[0] == pytest.approx(measured, abs=0.02)


def test_the_runtime_reserve_is_the_process_and_one_communicator_per_group():
    # gpu_runtime_memory.csv: 484 MiB for the process (CUDA context, NCCL init), 544 MB per
    # two-rank communicator, 688 MB per larger one, 3.28 GB for an all-to-all one
    process, pair, ring, a2a = 484 * MIB, 544 * MB, 688 * MB, 3.28 * GB
    assert runtime_reserve(Plan(tp=1, pp=1, dp=1, gpus_per_node=8)) == int(process)
    # TP 8, CP 2, PP 4, DP 2: the TP group, the CP pair, DP × CP = 4, the pipeline group
    plan = Plan(tp=8, pp=4, dp=2, gpus_per_node=8, cp=2)
    assert runtime_reserve(plan) == int(process + ring + pair + ring + ring)
    # EP 8 inside DP 8: the all-to-all group and no expert-data-parallel group (edp = 1)
    moe = Plan(tp=1, pp=1, dp=8, gpus_per_node=8, ep=8)
    assert runtime_reserve(moe) == int(process + ring + a2a)


def test_every_gpu_holds_the_runtime_reserve_in_its_buffers():
    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"simulation.network": "analytical", "simulation.granularity": "stage"}
    )
    costs = resolve(sc).chunk_costs
    d = cs.simulate(sc, progress=False).devices
    model = d["stage"].map(lambda s: costs[s].static.buffers)
    assert ((d["buffers_bytes"] - model) == runtime_reserve(Plan.of(sc))).all()


def test_stage_replicas_hold_their_own_groups_communicators():
    # parallel.stage_replicas [15, 1] on 16 GPUs: stage 0's GPUs reduce over 15 replicas,
    # stage 1's GPU over none; both send over the pipeline pair
    sc = cs.load_scenario("scenarios/pipedream-vgg16-16xV100-10GbE-15-1.yaml")
    job = resolve(sc)
    prog = cs.compile_scenario(sc)
    process, pair, ring = 484 * MIB, 544 * MB, 688 * MB
    for dev, stage in ((0, 0), (14, 0), (15, 1)):
        held = prog.static_memory[dev].buffers - job.chunk_costs[stage].static.buffers
        assert held == int(process + pair + (ring if stage == 0 else 0))


def test_torchtitan_op_level_selective_checkpointing_keeps_its_closed_form():
    # torchtitan's op policy on a Llama 3 8B block: the block input, every other matmul's
    # output (wq, wv, w1, w2 of wq wk wv wo w1 w3 w2), SDPA's output and its fp32 log-sum-exp;
    # after the 32 blocks the final norm's and the output layer's inputs and the fp32 softmax
    h, a, kv, d, f, vocab, layers, e = 4096, 32, 8, 128, 14336, 128256, 32, 2
    (row,) = _rows("1", "FSDP")
    tokens = int(row["local_batch"]) * int(row["seq_len"])
    block = e * (h + a * d + kv * d + f + h) + e * a * d + 4 * a
    head = 2 * h * e + 4 * vocab
    kept = resolve(_torchtitan(row)).chunk_costs[0].activation_memory
    assert kept == int(tokens * (layers * block + head))


@pytest.mark.parametrize(
    "row",
    _rows("1", "FSDP") + _rows("3", "FSDP") + _rows("2", "FSDP + CP + torch.compile + Float8"),
    ids=lambda r: f"table{r['table']}-cp{r['cp']}",
)
def test_fsdp2_peak_is_within_torchtitans_max_reserved(row):
    # torchtitan reports the caching allocator's max reserved, which is at least what is
    # allocated; the allocator's cache beyond it is not modelled (no public measurement
    # separates it), so the prediction lies below the reading, within 15 %. Tables 1 and 3
    # (op-level SAC, local batch 2 at 8K): 74.4 of 82.4 GiB, 60.4 of 67.0 (before op-level
    # SAC and the loss's working set: 95.4 and 81.4, over the reading); Table 2 (full AC,
    # 32K tokens a GPU, cp 1-8; its Float8 linears and compiled blocks keep the same block
    # inputs under full AC): 75.1-75.8 of 83.9-84.5 (before the loss's working set: 47.7-48.3)
    peak = estimate_peak_memory(_torchtitan(row)) / GIB
    measured = float(row["memory_gib"])
    assert 0.85 * measured <= peak <= measured


@pytest.mark.parametrize("table, techniques", [("1", "FSDP"), ("2", "FSDP + CP + torch.compile + Float8")])
def test_the_estimate_holds_fsdp2s_gathered_buffers_as_the_run_does(table, techniques):
    # FSDP2's gathers run ahead by the streams' waits: the next unit's copy-in may start
    # before compute ops added ahead of it free their buffers; the replay without simulating
    # counts it from there, so it reaches the simulated peak
    sc = _torchtitan(_rows(table, techniques)[0]).with_overrides({"simulation.fidelity": "fast"})
    simulated = cs.simulate(sc, progress=False).devices["peak_memory_bytes"].max()
    assert estimate_peak_memory(sc) == simulated


def test_op_level_selective_checkpointing_refuses_the_blocks_it_is_not_modelled_for():
    sc = _torchtitan(_rows("1", "FSDP")[0]).with_overrides({"model.hf_config": "qwen3-30b-a3b"})
    with pytest.raises(cs.ScenarioError, match="op-level selective"):
        resolve(sc)


def _partition(text: str):
    """A row's ``partition``: a word, Megatron's ``account_for_*`` flags, or ``layout:…``."""
    if text.startswith("layout:"):
        return {"layout": text.removeprefix("layout:")}
    return {flag: True for flag in text.split()} if text.startswith("account_for") else text


def _published(run: str) -> cs.Scenario:
    """A published run's configuration (``published_run_configs.csv``) as a megatron_core
    scenario on its system."""
    (row,) = [r for r in read_table("published_run_configs") if r["run"] == run]
    pp, vp, gpus, gpn = int(row["pp"]), int(row["vp"]), int(row["gpus"]), int(row["gpus_per_node"])
    shape = dict(kv.split("=") for kv in row["model_shape"].split())
    model = {k: v == "true" if v in ("true", "false") else int(v) for k, v in shape.items()} or {
        "hf_config": row["model"]
    }
    moments = row["optimizer_moments"]
    aware = {"exp_avg_dtype": moments, "exp_avg_sq_dtype": moments} if moments else None
    return cs.load_scenario(
        {
            "name": run,
            "cluster": {
                "preset": row["system"],
                "nodes": gpus // gpn,
                "gpus_per_node": gpn,
                "gpu": row["gpu"],
            },
            "model": {**model, "seq_len": int(row["seq_len"]), "attention": row["attention"]},
            "training": {
                "framework": "megatron_core",
                "global_batch": int(row["global_batch"]),
                "micro_batch": int(row["micro_batch"]),
                "precision": row["precision"],
                "recompute": row["recompute"],
                "recompute_modules": row["recompute_modules"].split() or None,
                "precision_aware_optimizer": aware,
            },
            "parallel": {
                "tp": int(row["tp"]),
                "pp": pp,
                "ep": int(row["ep"]),
                "partition": _partition(row["partition"]),
                "sequence_parallel": row["sequence_parallel"] == "true",
                **({"schedule": "interleaved", "virtual_stages": vp} if vp > 1 else {}),
            },
            "simulation": {"network": "analytical"},
        }
    )


def test_nemos_gpt3_20b_h100_configuration_fits_as_it_ran():
    # TP 4 × DP 128, micro-batch 4 at 2K, sequence parallel, selective recompute, the
    # distributed optimizer: 40.1 GiB of the H100's 79.6. Without the selective recompute
    # (the s² scores kept) it is 80.6, and without sequence parallelism too 96.2 — where the
    # issue's 93 GiB 20B run sits: that run is not the published configuration
    peak, capacity = tightest_fit(_published("gpt3-20b-h100-bf16"))
    assert peak <= capacity


def test_megatron_bridges_deepseek_v3_b200_configuration_fits_as_it_ran():
    # PP 16 × EP 8 on 256 B200, bf16, recompute_modules [mla_up_proj]: stage 1 holds 15
    # micro-batches of 4 MoE layers; recomputing MLA's up projections drops the Q, K, V its
    # attention kernel keeps (1.9 GiB a micro-batch); with the recipe's precision-aware
    # optimizer (BF16 moments) the fullest GPU holds 122.0 GiB of its 179.1 (149.6 without
    # the MLA recompute)
    sc = _published("deepseek-v3-b200-bf16")
    peak, capacity = tightest_fit(sc)
    assert peak <= capacity


def test_mla_up_projection_recompute_drops_the_attention_kernels_q_k_v():
    # DeepSeek-V3's MLA under TP 1: the flash kernel keeps Q, K and V at the mean head dim
    # (192 + 128) / 2 = 160 for its 128 heads — 3 · 160 · 128 bf16 values a token, a layer
    sc = _published("deepseek-v3-b200-bf16")
    kept = resolve(sc).chunk_costs[1].activation_memory
    core = resolve(sc.with_overrides({"training.recompute_modules": ["core_attn"]})).chunk_costs[1]
    assert core.activation_memory - kept == 4 * 4096 * 3 * 160 * 128 * 2


@pytest.mark.parametrize(
    "changes",
    [
        {"training.recompute": "none"},
        {"model.hf_config": "llama-3-8b", "parallel.ep": 1},
        {"model.hf_config": "llama-3-8b", "parallel.ep": 1, "training.recompute_modules": ["moe_act"]},
    ],
)
def test_recompute_modules_are_refused_where_they_cannot_apply(changes):
    with pytest.raises(cs.ScenarioError, match="recompute_modules"):
        resolve(_published("deepseek-v3-b200-bf16").with_overrides(changes))


def test_torchtitan_op_level_selective_checkpointing_reruns_wk_wo_and_w3():
    # the backward re-runs, per block, the matmuls whose outputs the policy did not keep:
    # wk (h → kv·d), wo (a·d → h) and w3 (h → f), 2·tokens·k·n FLOPs each
    h, kvd, f, layers = 4096, 8 * 128, 14336, 32
    (row,) = _rows("1", "FSDP")
    tokens = int(row["local_batch"]) * int(row["seq_len"])
    sc = _torchtitan(row)
    op = resolve(sc).chunk_costs[0].backward_flops
    none = resolve(sc.with_overrides({"training.recompute": "none"})).chunk_costs[0].backward_flops
    assert op - none == pytest.approx(layers * 2 * tokens * h * (kvd + h + f), rel=1e-12)


def test_moe_activation_recompute_drops_the_routed_experts_down_projection_inputs():
    # PP 16 × EP 8, 4 MoE layers a stage: each EP rank's 32 experts take 4,096 tokens × top-8
    # / 8 ranks × 8 ranks' tokens = 32,768 token copies, whose 2,048-wide activation outputs
    # (bf16) the down projections would keep
    sc = _published("deepseek-v3-b200-bf16")
    kept = resolve(sc).chunk_costs[1].activation_memory
    both = {"training.recompute_modules": ["mla_up_proj", "moe_act"]}
    assert kept - resolve(sc.with_overrides(both)).chunk_costs[1].activation_memory == 4 * 4096 * 8 * 2048 * 2
