"""Disaggregated serving (DistServe, Splitwise): prefill and decode on separate GPU pools.

With ``generation.disaggregated`` the job's first tp × pp GPUs (replica 0) run prefills
only and the next tp × pp (replica 1) decode only. A request's prompt is prefilled on the
prefill pool, which samples its first token; its KV cache then travels from every prefill
GPU to its peer in the decode pool (same stage, same TP rank: that GPU's layers and heads),
all GPUs' pieces at once over the job's fabric; once it lands, the request joins the
decode pool's queue with its prompt cached. The prefill pool never waits for the decode
pool (its finished caches are assumed to be held until sent), so the prefill pool is
served first and the decode pool's arrivals are its handovers. Each transfer is priced on
an otherwise idle fabric (concurrent handovers do not share links here).
"""

from __future__ import annotations

from dataclasses import replace

import simpy

from ..engine.network_setup import build_network
from ..record import Recorder
from ..resolve import resolve
from ..workload.resolve import resolve_transformer
from .kv_cache import kv_cache_of


def pool_scenario(sc):
    """The scenario of one pool: the job's first tp × pp GPUs, one replica serving."""
    par = sc.parallel
    return sc.with_overrides(
        {
            "parallel.gpus": par.tp * par.pp,
            "parallel.dp": 1,
            "training.global_batch": 1,
            "generation.disaggregated": False,
        }
    )


def kv_transfer_s(job, cache, prompt: int) -> float:
    """Seconds until the KV cache of ``prompt`` tokens has gone from every GPU of the prefill
    pool to its peer in the decode pool, all at once on ``job``'s fabric."""
    n = job.plan.num_devices // 2
    env = simpy.Environment()
    fabric = build_network(job, env, Recorder())
    blocks = cache.blocks_for(prompt)  # whole blocks are sent
    done = [
        fabric.transfer(
            f"gpu{d}",
            f"gpu{d + n}",
            int(blocks * cache.stage_bytes[job.plan.coords(d)[0]]),
            label="kv cache",
        )
        for d in range(n)
    ]
    env.run(simpy.AllOf(env, done))
    return env.now


def serve_disaggregated(sc, job, reqs, build_engine, serve) -> tuple[list, list, dict]:
    """(pools, served sequences, summary fields) of a disaggregated run (module doc);
    ``serve`` serves requests on one pool (:func:`.runner.serve`)."""
    pool_sc = pool_scenario(sc)
    pool = resolve(pool_sc)
    cache = kv_cache_of(pool, resolve_transformer(sc.model), sc.generation)
    prefill = serve(pool_sc, pool, cache, [replace(r, output=1) for r in reqs], build_engine, "prefill")
    first = {s.req.index: s.token_times[0] for s in prefill.sched.done}
    moved = {p: kv_transfer_s(job, cache, p) for p in sorted({r.prompt for r in reqs if r.output > 1})}
    handed = [
        replace(r, first_token=first[r.index], ready=first[r.index] + moved[r.prompt])
        for r in reqs
        if r.output > 1
    ]
    pools = [prefill]
    by_index = {r.index: r for r in reqs}
    done = [s for s in prefill.sched.done if by_index[s.req.index].output == 1]  # done with their first token
    if handed:
        decode = serve(pool_sc, pool, cache, handed, build_engine, "decode", pool.plan.num_devices)
        pools.append(decode)
        done += decode.sched.done
    # the sequences carry the requests as each pool served them: report the requests as asked
    for s in done:
        s.req = by_index[s.req.index]
    times = [moved[r.prompt] for r in handed]
    return pools, done, {"kv_transfer_mean_s": sum(times) / len(times) if times else 0.0}
