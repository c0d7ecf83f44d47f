"""Context parallelism (``parallel.cp``, docs/context_parallel.md): ring attention's exposed
time and Ulysses' all-to-alls against closed forms, the tp-cp-dp-pp layout, activation
memory divided by cp, and the refusals."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import simpy

import clustersim as cs
from clustersim.compilers import compile_job
from clustersim.compilers.pipeline.compile import compile_pipeline
from clustersim.compilers.pipeline.context import CompileContext
from clustersim.engine.interpreter import Engine
from clustersim.memory_kinds import StaticMemory
from clustersim.network import DirectFabric
from clustersim.parallel.plan import Plan
from clustersim.record import Recorder
from clustersim.resolve import resolve
from clustersim.schedules import SCHEDULES
from clustersim.workload import Segment, StageCost
from clustersim.workload.attention import flash_forward_flops
from clustersim.workload.context_parallel import CPComm, CPRing, ring_attention, ulysses_attention
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.stage_cost import chunk_costs
from clustersim.workload.transformer_ops import layer_ops

BW, LAT = 25e9, 2e-6
GPT = TRANSFORMER_PRESETS["gpt3-175b"][0]  # dropout, MHA
LLAMA = TRANSFORMER_PRESETS["llama2-70b"][0]  # GQA, 8 KV heads


def _ring_layer(steps_f, steps_b, fwd_bytes, bwd_bytes, pre=1e-4, post=2e-4) -> StageCost:
    """A synthetic layer: a kernel, ring attention of the given steps, a kernel."""

    def ring(steps, sent):
        return Segment("ring", sum(steps), 1.0, name="ring", steps=tuple(steps), step_bytes=tuple(sent))

    passes = {
        "F": (Segment("compute", pre), ring(steps_f, fwd_bytes), Segment("compute", post)),
        "B": (Segment("compute", post), ring(steps_b, bwd_bytes), Segment("compute", pre)),
    }
    f, b = pre + post + sum(steps_f), pre + post + sum(steps_b)
    return StageCost(f, b, 0.0, 0, 0, StaticMemory(), 0.0, passes=passes)


def _run(prog):
    env, rec = simpy.Environment(), Recorder()
    Engine(prog, env, DirectFabric(env, rec, BW, LAT), rec, [2**40] * prog.num_devices).run()
    return {i: (s, e) for i, s, e in rec.ops}


def _pass_span(prog, times, dev, phase):
    ops = [op for op in prog.ops if op.device == dev and op.phase == phase and op.kind == "compute"]
    return min(times[o.id][0] for o in ops), max(times[o.id][1] for o in ops)


@pytest.mark.parametrize("cp", [2, 3, 4])
@pytest.mark.parametrize("kv", [1e5, 2.5e6, 1e7])  # transfers shorter than, around and longer than chunks
def test_ring_exposed_time_is_the_sum_of_transfer_minus_chunk_per_step(cp, kv):
    steps_f = [1e-4 * (1 + (i % 3)) for i in range(cp)]  # unequal chunks: both signs of x − c occur
    steps_b = [2.5 * c for c in steps_f]
    fwd = [int(kv)] * (cp - 1) + [0]
    bwd = [int(kv)] + [int(2 * kv)] * (cp - 2) + [int(kv)]
    cost = _ring_layer(steps_f, steps_b, fwd, bwd)
    prog = compile_pipeline(CompileContext(SCHEDULES["1f1b"], Plan(1, 1, 1, 8, cp=cp), [cost], 1))
    prog.check()
    times = _run(prog)

    def exposed(steps, sent):
        return sum(max(0.0, (LAT + x / BW if x else 0.0) - c) for c, x in zip(steps, sent))

    for dev in range(cp):
        t0, t1 = _pass_span(prog, times, dev, "F")
        assert t1 - t0 == pytest.approx(cost.forward + exposed(steps_f, fwd), rel=1e-12)
        b0, b1 = _pass_span(prog, times, dev, "B")
        assert b1 - b0 == pytest.approx(cost.backward + exposed(steps_b, bwd), rel=1e-12)


def test_ring_sends_kv_forward_and_kv_plus_dkv_backward_to_the_next_cp_rank():
    cp, x = 4, 1000
    cost = _ring_layer([1e-4] * cp, [2e-4] * cp, [x] * 3 + [0], [x, 2 * x, 2 * x, x])
    plan = Plan(2, 1, 1, 8, cp=cp)
    prog = compile_pipeline(CompileContext(SCHEDULES["1f1b"], plan, [cost], 1))
    sends = [op for op in prog.ops if op.lane == "cp send"]
    for dev in range(plan.num_devices):
        mine = [op for op in sends if op.device == dev]
        assert [op.nbytes for op in mine if op.phase == "F"] == [x] * 3
        assert [op.nbytes for op in mine if op.phase == "B"] == [x, 2 * x, 2 * x, x]
        stage, r, t = plan.coords(dev)
        nxt = plan.device(stage, (r + 1) % cp, t)  # the same TP rank of the next CP rank
        assert {prog.ops[op.peer].device for op in mine} == {nxt}


def test_ring_attention_work_per_step_under_causal_load_balancing():
    """Each of the cp steps holds 2 of the rank's 4 chunk × chunk blocks of work, so a step is
    1/cp² of the whole causal attention and a rank does 1/cp of it; a step sends K and V of
    the rank's s/cp tokens, 2·b·(s/cp)·(kv_heads/tp)·d elements."""
    b, tp, cp, e = 2, 8, 4, 2
    s = LLAMA.seq_len
    local = replace(LLAMA, attention="flash", seq_len=s // cp)
    at, kvt, d = LLAMA.heads // tp, LLAMA.n_kv // tp, LLAMA.head_dim
    ring = ring_attention(local, b, at, kvt, e, cp)
    whole = flash_forward_flops(b, s, at, d, causal=True)
    assert [w.flops for w in ring.fwd] == pytest.approx([whole / cp**2] * cp, rel=1e-15)
    assert sum(w.flops for w in ring.bwd) == pytest.approx(2.5 * whole / cp, rel=1e-15)
    assert [w.attention.causal for w in ring.fwd] == [True] + [False] * (cp - 1)
    kv = 2 * b * (s // cp) * kvt * d * e
    assert ring.fwd_bytes == (kv,) * (cp - 1) + (0,)
    assert ring.bwd_bytes == (kv,) + (2 * kv,) * (cp - 2) + (kv,)
    full = ring_attention(replace(local, causal=False), b, at, kvt, e, cp)
    assert [w.flops for w in full.fwd] == pytest.approx([2 * whole / cp**2] * cp, rel=1e-15)


def test_ulysses_attention_per_rank_is_the_whole_sequence_with_heads_over_cp():
    b, tp, cp, e = 1, 2, 4, 2
    s = LLAMA.seq_len
    local = replace(LLAMA, attention="flash", seq_len=s // cp)
    at, kvt, d = LLAMA.heads // tp, LLAMA.n_kv // tp, LLAMA.head_dim
    before, core, after = ulysses_attention(local, b, at, kvt, e, cp)
    assert core.fwd.flops == flash_forward_flops(b, s, at, d, causal=True) / cp  # 1/cp of the causal whole
    assert core.fwd.attention.seq_len == s
    assert (before.nbytes, after.nbytes) == (
        b * (s // cp) * (at + 2 * kvt) * d * e,
        b * (s // cp) * at * d * e,
    )


def _scenario(comm="p2p", cp=4, tp=2, dp=1, **model):
    return {
        "name": f"cp{cp}-{comm}",
        "cluster": {
            "nodes": 1,
            "gpus_per_node": tp * cp * dp,
            "gpu": "H100-SXM5-80GB",
            "intra_node": {"bandwidth": BW, "latency": 0.0},
            "collective_alpha": {"intra_node": LAT, "inter_node": LAT},
        },
        "model": {
            "kind": "transformer",
            "layers": 2,
            "hidden": 1024,
            "heads": 16,
            "kv_heads": 8,
            "ffn_hidden": 4096,
            "vocab": 32000,
            "seq_len": 16384,
            "attention": "flash",
            "dropout": False,
            "bias": False,
            "position": "rope",
            **model,
        },
        "training": {"global_batch": dp, "micro_batch": 1},
        "parallel": {"tp": tp, "cp": cp, "cp_comm_type": comm},
        "simulation": {
            "network": "direct",
            "collective_model": "analytical",
            "collectives": {"all_to_all": "direct"},
        },
    }


def test_a_real_model_ring_sends_the_kv_block_of_its_tokens():
    cp, tp = 4, 2
    res = cs.simulate(_scenario("p2p", cp=cp, tp=tp), progress=False)
    sp = res.spans
    sends = sp[(sp["lane"] == "cp send") & (sp["device"] == "gpu0")]
    kv = 2 * 1 * (16384 // cp) * (8 // tp) * 64 * 2  # 2·b·(s/cp)·(kv_heads/tp)·head_dim·e
    layers = 2
    assert sorted(sends[sends["phase"] == "F"]["bytes"]) == [kv] * ((cp - 1) * layers)
    assert sorted(sends[sends["phase"] == "B"]["bytes"]) == sorted([kv, kv, 2 * kv, 2 * kv] * layers)
    assert res.summary["cp"] == cp and res.summary["cp_comm_type"] == "p2p"


def test_ulysses_runs_two_all_to_alls_per_attention_forward_at_their_alpha_beta_time():
    cp, tp = 4, 2
    res = cs.simulate(_scenario("a2a", cp=cp, tp=tp), progress=False)
    sp = res.spans
    a2a = sp[(sp["kind"] == "collective") & sp["name"].str.startswith("cp a2a")]
    fwd = a2a[(a2a["phase"] == "F") & (a2a["device"] == "gpu0")]
    assert len(fwd) == 2 * 2  # two per attention, two layers
    b, sl, at, kvt, d, e = 1, 16384 // cp, 16 // tp, 8 // tp, 64, 2
    qkv, out = b * sl * (at + 2 * kvt) * d * e, b * sl * at * d * e
    assert sorted(fwd["bytes"]) == sorted([qkv, out] * 2)
    for _, row in fwd.iterrows():  # direct all-to-all on one node: α + (n−1)/n · S/B
        want = LAT + (cp - 1) / cp * row["bytes"] / BW
        assert row["end_s"] - row["start_s"] == pytest.approx(want, rel=1e-12)
    bwd = a2a[(a2a["phase"] == "B") & (a2a["device"] == "gpu0")]
    assert len(bwd) == 2 * 2  # dO before, dQ/dK/dV after each attention's backward
    assert res.summary["exposed_cp_fraction"] > 0  # blocking all-to-alls: exposed as context parallelism


def test_ring_and_ulysses_groups_follow_megatron_tp_cp_dp_pp_order():
    plan = Plan(tp=2, pp=2, dp=2, gpus_per_node=8, cp=4)
    assert plan.num_devices == 2 * 4 * 2 * 2
    for stage in range(2):
        for dp_rank in range(2):
            for c in range(4):
                for t in range(2):
                    dev = t + 2 * (c + 4 * (dp_rank + 2 * stage))
                    assert plan.device(stage, c + 4 * dp_rank, t) == dev
                    assert plan.coords(dev) == (stage, c + 4 * dp_rank, t)
    assert plan.cp_ring(1, 5, 1) == (25, 27, 29, 31)  # stage 1, dp rank 1, tp rank 1
    # gradients reduce over the data-parallel ranks and their CP ranks together (Megatron)
    assert plan.dp_group(0, 0) == tuple(range(0, 16, 2))


def test_gradients_reduce_over_dp_times_cp():
    """Megatron reduces gradients over the data-parallel group with its CP ranks: with tp 2,
    cp 2, dp 2 each TP rank's all-reduce spans 4 GPUs (its 2 CP × 2 DP ranks)."""
    prog = compile_job(resolve(cs.Scenario(_scenario("p2p", cp=2, tp=2, dp=2))))
    groups = {op.group for op in prog.ops if op.kind == "collective" and op.tag.startswith("dp-allreduce")}
    assert groups == {(0, 2, 4, 6), (1, 3, 5, 7)}


@pytest.mark.parametrize("comm", ["p2p", "a2a"])
@pytest.mark.parametrize("sp", [False, True])
def test_activation_memory_is_the_layer_at_s_over_cp(comm, sp):
    """Korthikanti §4.1 with s → s/cp (flash: no s² term, plus the fp32 log-sum-exp): per
    layer s·b·h/cp · (34/t with SP, 10 + 24/t without) + 4·b·a·s/(t·cp); the CP attention
    keeps exactly what the flash kernel keeps on s/cp tokens."""
    b, t, cp = 1, 8, 4
    cfg = replace(GPT, attention="flash")
    s, h, a = cfg.seq_len, cfg.hidden, cfg.heads
    local = replace(cfg, seq_len=s // cp)
    kept = sum(
        op.activation
        for op in layer_ops(local, b, t, sp, 2, cp=cp, cp_comm=comm)
        if hasattr(op, "activation")
    )
    closed = s * b * h / cp * (34 / t if sp else 10 + 24 / t) + 4 * b * a * s / (t * cp)
    assert kept == pytest.approx(closed, rel=1e-15)
    raw = _scenario(comm, cp=cp, tp=2)
    raw["parallel"]["sequence_parallel"] = sp
    with_cp = chunk_costs(cs.Scenario(raw), 1)[0]
    short = copy.deepcopy(raw)
    short["parallel"].update(cp=1, dp=1)
    short["cluster"]["gpus_per_node"] = 2
    short["model"]["seq_len"] = raw["model"]["seq_len"] // cp
    without = chunk_costs(cs.Scenario(short), 1)[0]
    assert with_cp.activation_memory == without.activation_memory  # to the byte


def test_cp_one_builds_the_layer_it_always_did():
    ops = layer_ops(replace(LLAMA, attention="flash"), 1, 8, True, 2)
    assert not any(isinstance(op, (CPComm, CPRing)) for op in ops)


@pytest.mark.parametrize(
    "change, field, needle",
    [
        (  # 16 heads divide by tp × cp, but the 2 KV heads per TP rank do not by cp
            {"parallel": {"cp_comm_type": "a2a", "tp": 4}, "cluster": {"gpus_per_node": 16}},
            "parallel.cp",
            "the 2 key/value heads per TP rank (model.kv_heads = 8 / tp) must divide by cp",
        ),
        (
            {"model": {"heads": 12, "kv_heads": 4, "hidden": 768}, "parallel": {"cp_comm_type": "a2a"}},
            "parallel.cp",
            "model.heads = 12",
        ),
        ({"model": {"seq_len": 16388}}, "model.seq_len", "2 × cp = 8"),
        ({"model": {"attention": "standard"}}, "model.attention", "accepted: flash"),
        ({"parallel": {"dp": 2}}, "parallel", "tp × cp × pp × dp must equal"),
        ({"simulation": {"granularity": "stage"}}, "simulation.granularity", "not with parallel.cp > 1"),
    ],
)
def test_bad_cp_combinations_are_refused_naming_field_and_value(change, field, needle):
    raw = _scenario("p2p", cp=4, tp=2)
    for section, values in change.items():
        raw[section].update(values)
    with pytest.raises(cs.ScenarioError) as err:
        cs.Scenario(raw)
    assert err.value.field == field
    assert needle in str(err.value)


@pytest.mark.parametrize("comm", ["p2p", "a2a"])
def test_cp_folds_to_the_unfolded_run(comm):
    """One server: every CP rank's ring hop (or all-to-all pair) is NVLink, so the folded
    run (one GPU of the 4) ends with the unfolded one (tests/test_fold_cp.py has the rest)."""
    raw = _scenario(comm, cp=2, tp=2)
    times = []
    for fold in (True, False):
        raw["simulation"]["fold"] = fold
        times.append(cs.simulate(raw, progress=False).summary["iteration_time_s"])
    assert times[0] == pytest.approx(times[1], rel=1e-12)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"parallel": {"pp": 2, "stage_replicas": [1, 1]}}, "parallel.stage_replicas"),
        (
            {
                "parallel": {"parameter_server": {"servers": ["switch"]}},
                "simulation": {"network": "analytical"},
            },
            "parallel.parameter_server",
        ),
        ({"training": {"mode": "inference"}, "parallel": {"schedule": "gpipe"}}, "training.mode"),
    ],
)
def test_the_other_modes_compilers_refuse_cp(change, field):
    """CP runs with the uniform pipeline only: the stage-replicated, parameter-server and
    inference compilers refuse it in their check, before anything runs."""
    raw = _scenario("p2p", cp=2, tp=1)
    for section, values in change.items():
        raw[section].update(values)
    with pytest.raises(cs.ScenarioError, match=r"not with parallel.cp > 1 \(cp = 2\)") as err:
        cs.resolve_scenario(raw)
    assert err.value.field == field
