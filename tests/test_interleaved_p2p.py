"""The interleaved 1F1B schedule against Megatron-Core's
``forward_backward_pipelining_with_interleaving`` (megatron/core/pipeline_parallel/schedules.py):
the same per-stage order (warm-up count, chunk and micro-batch of every step), and pipeline
sends and receives on their own lanes that do not hold up compute (Megatron's
``overlap_p2p_comm``, on by default for the interleaved schedule). docs/schedules.md says
what matches and what differs."""

import pytest

import clustersim as cs
from clustersim.schedules import SCHEDULES
from tests.conftest import synthetic


def megatron_order(stage: int, p: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Megatron-Core's order of one pipeline rank, written from its code:
    ``get_pp_rank_microbatches`` (warm-up = (p − rank − 1)·2 + (v − 1)·g, g =
    ``microbatch_group_size_per_vp_stage``, default p; all warm-up when nothing remains),
    ``get_model_chunk_id`` and ``get_microbatch_id_in_model_chunk``. Chunks are returned as
    model-chunk indices (local chunk c of rank s is model chunk c·p + s)."""
    total, g = m * v, p
    warmup = (p - stage - 1) * 2 + (v - 1) * g
    if total - warmup <= 0:
        warmup = total

    def chunk(k: int, forward: bool) -> int:
        c = (k % (p * v)) // p
        return (c if forward else v - c - 1) * p + stage

    def micro(k: int) -> int:
        return (k // (p * v)) * p + k % p

    order = [("F", micro(k), chunk(k, True)) for k in range(warmup)]
    for k in range(total - warmup):
        order += [("F", micro(k + warmup), chunk(k + warmup, True)), ("B", micro(k), chunk(k, False))]
    order += [("B", micro(k), chunk(k, False)) for k in range(total - warmup, total)]
    return order


@pytest.mark.parametrize(
    "p,v,m", [(2, 2, 4), (4, 2, 8), (4, 3, 8), (4, 4, 4), (3, 2, 6), (8, 2, 16), (2, 5, 2)]
)
def test_order_is_megatrons(p, v, m):
    schedule = SCHEDULES["interleaved"]
    for s in range(p):
        assert list(schedule.order(s, p, m, v=v)) == megatron_order(s, p, m, v)


@pytest.mark.parametrize("p,v,m", [(4, 2, 8), (4, 3, 12), (8, 2, 16)])
def test_warmup_count_is_megatrons_formula(p, v, m):
    """Warm-up forwards w = (p − s − 1)·2 + (v − 1)·p, then the first 1F1B step's forward:
    a stage's first backward is step min(w + 1, m·v)."""
    schedule = SCHEDULES["interleaved"]
    for s in range(p):
        phases = [ph for ph, *_ in schedule.order(s, p, m, v=v)]
        assert phases.index("B") == min((p - s - 1) * 2 + (v - 1) * p + 1, m * v)


def test_sends_on_their_own_lane_do_not_hold_up_compute():
    """Stage 0's first p forwards (chunk 0, micro-batches 0..p−1) need no input from another
    stage: they run back to back although each one's send takes longer than a forward — a
    send blocking the compute stream (Megatron without overlap_p2p_comm) would space them
    by the send time."""
    p, v, m, f = 2, 2, 4, 1e-3
    raw = synthetic(p, m, f, 2e-3, schedule="interleaved", layers_per_stage=v, activation=4e8, bandwidth=1e11)
    raw["parallel"]["virtual_stages"] = v
    res = cs.simulate(raw, progress=False)
    sp = res.spans
    fwd = sp[(sp.stage == 0) & (sp.lane == "compute") & (sp.phase == "F")].sort_values("start_s").iloc[:p]
    sends = sp[(sp.stage == 0) & (sp.lane == "send")].sort_values("start_s").iloc[:p]
    per_send = (sends.end_s - sends.start_s).to_numpy()
    assert (per_send > f / v).all()
    assert fwd.start_s.tolist() == pytest.approx([j * f / v for j in range(p)], rel=1e-12, abs=1e-15)
