"""The continuous-batching scheduler on its own (a step priced by a stand-in), over random
loads: invariants that hold for every policy."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.generation.kv_cache import KVCache
from clustersim.generation.requests import Request
from clustersim.generation.scheduler import Scheduler
from clustersim.scenario.generation_spec import GenerationSpec


def price(seqs, sampled):
    """A step's stand-in time: a fixed part, per token, per cached token read."""
    return 1e-3 + 1e-5 * sum(s.new for s in seqs) + 1e-8 * sum(s.context for s in seqs)


requests = st.lists(
    st.tuples(st.floats(0, 0.5), st.integers(1, 300), st.integers(1, 40)), min_size=1, max_size=12
)


@settings(max_examples=60, deadline=None)
@given(
    reqs=requests,
    policy=st.sampled_from(["recompute", "swap", "wait"]),
    chunked=st.booleans(),
    budget=st.integers(300, 2000),
    seqs=st.integers(1, 8),
    spare=st.integers(0, 40),
)
def test_every_request_gets_its_tokens_within_the_cache(reqs, policy, chunked, budget, seqs, spare):
    block = 16
    reqs = sorted(reqs)
    need = max(-(-(p + o - 1) // block) for _, p, o in reqs)
    blocks = need + spare  # the largest request fits
    gen = GenerationSpec(
        requests=1,
        prompt_len=1,
        output_len=1,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        chunked_prefill=chunked,
        block_size=block,
        kv_blocks=blocks,
        preemption=policy,
        swap_bandwidth=1e10 if policy == "swap" else None,
    )
    cache = KVCache(blocks, block, 1e6)
    sched = Scheduler([Request(i, t, p, o) for i, (t, p, o) in enumerate(reqs)], cache, gen, price)
    done = sched.run()
    assert [s.req.index for s in done] == list(range(len(reqs)))
    for s in done:
        assert s.generated == s.req.output and s.blocks == 0
        assert s.token_times[0] > s.req.arrival
        assert all(a < b for a, b in zip(s.token_times, s.token_times[1:]))
    assert sched.free == blocks
    for step in sched.steps:
        assert step.kv_blocks_used <= blocks and step.seqs <= seqs
        assert step.prefill_tokens + step.decode_seqs <= budget
        assert step.end_s > step.start_s
    if policy == "wait":
        assert all(s.preemptions == 0 for s in done)
    assert all(a.end_s <= b.start_s for a, b in zip(sched.steps, sched.steps[1:]))
