"""``simulate_rlhf``: the Result of a scenario with an ``rlhf`` section (docs/rlhf.md).

A driver above the engine, as the fault timeline and the generation scheduler are: it
runs each phase's simulation (:mod:`.phases`) and composes the timeline (:mod:`.timeline`).
The scoring forwards and the training steps of the reference, reward and critic models are
the actor's architecture on the actor's layout, so each kind is simulated once and its
seconds used for each model that runs it.
"""

from __future__ import annotations

import time

import pandas as pd

from ..compilers import check_job
from ..errors import ScenarioError
from ..resolve import resolve
from ..trace.result import Result
from ..workload.calibration import ELEMENT_BYTES
from . import timeline as tl
from .phases import (
    generation_seconds,
    offload_seconds,
    padded_len,
    pools_of,
    rollouts,
    scoring_scenario,
    training_scenario,
    transfer,
)


def scoring_phases(rl) -> list[str]:
    """The forwards over the rollouts: the actor's log-probabilities and the reference's
    (the KL term); the reward model's, if any; PPO's critic values."""
    return [
        "actor_logprob",
        "reference",
        *(["reward"] if rl.reward_model else []),
        *(["critic_forward"] if rl.algorithm == "ppo" else []),
    ]


def training_phases(rl) -> list[str]:
    """The training steps: the actor's, and PPO's critic's."""
    return ["actor_train", *(["critic_train"] if rl.algorithm == "ppo" else [])]


def simulate_rlhf(sc, run_job, build_engine) -> Result:
    """Simulate ``rlhf.iterations`` iterations of scenario ``sc`` (module doc): ``res.phases``
    the timeline (iteration, pool, phase, start_s, end_s, bytes), ``res.pools`` each pool's
    busy and idle seconds, ``res.transfers`` the weight transfer's moves (src, dst, bytes);
    ``res.devices`` and ``res.memory`` (and the summary's peak memory) are the training step's."""
    wall0 = time.perf_counter()
    rl = sc.rlhf
    if sc.training.precision not in ELEMENT_BYTES:
        raise ScenarioError(
            "training.precision", sc.training.precision, f"rlhf generates in {', '.join(ELEMENT_BYTES)}"
        )
    pools = pools_of(sc)
    reqs = rollouts(sc)
    seq = padded_len(reqs)
    train_job = check_job(resolve(training_scenario(sc, pools, len(reqs), seq)))
    trained = run_job(train_job)
    train_s = trained.summary["iteration_time_s"]
    score_s = run_job(check_job(resolve(scoring_scenario(sc, pools, len(reqs), seq)))).summary[
        "iteration_time_s"
    ]
    replicas = pools.gen // (rl.rollout.tp * rl.rollout.pp)
    gen_each = generation_seconds(sc, reqs, replicas, build_engine)
    gen_s = max(gen_each)
    sync_s, moves, _ = transfer(sc, pools, train_job)
    moved = float(sum(b for _, _, b in moves))
    work = [(p, score_s, 0.0) for p in scoring_phases(rl)] + [(p, train_s, 0.0) for p in training_phases(rl)]
    if pools.colocated:
        off = offload_seconds(sc, train_job)
        offload = [("offload", off, 0.0)] if rl.offload else []
        reload = [("reload", off, 0.0)] if rl.offload else []
        phases = [("weight_sync", sync_s, moved), *offload, ("generation", gen_s, 0.0), *reload, *work]
        timeline = tl.colocated(rl.iterations, phases)
    else:
        timeline = tl.split(
            rl.iterations, rl.staleness, ("generation", gen_s), [*work, ("weight_sync", sync_s, moved)]
        )
    usage = tl.pool_usage(timeline)
    makespan = float(timeline["end_s"].max())
    samples = len(reqs)
    summary = {
        "iteration_time_s": makespan / rl.iterations,
        "makespan_s": makespan,
        "samples_per_s": samples * rl.iterations / makespan,
        "generation_s": gen_s,
        "generation_replica_s": gen_each,
        "scoring_forward_s": score_s,
        "train_step_s": train_s,
        "weight_sync_s": sync_s,
        "weight_sync_bytes": moved,
        "padded_seq_len": seq,
        "output_tokens": sum(r.output for r in reqs),
        "generation_gpus": pools.gen,
        "training_gpus": pools.train,
        "colocated": pools.colocated,
        "num_gpus": sc.num_gpus,
        "peak_memory_gib": trained.summary["peak_memory_gib"],  # the training step's
        "oom": trained.summary["oom"],
        **{f"{row.pool}_busy_s": row.busy_s for row in usage.itertuples()},
        **{f"{row.pool}_idle_s": row.idle_s for row in usage.itertuples()},
        "wall_time_s": time.perf_counter() - wall0,
    }
    # the devices and memory tables are the training step's (its GPUs, its peak)
    pools_gpus = (
        {"all": range(pools.gen)}
        if pools.colocated
        else {"generation": range(pools.gen), "training": range(pools.gen, pools.gen + pools.train)}
    )
    spans = tl.phase_spans(timeline, pools_gpus)
    res = Result(summary, spans, trained.devices, trained.memory, sc.resolved())
    res.phases, res.pools = timeline, usage
    res.transfers = pd.DataFrame(moves, columns=["src", "dst", "bytes"]).astype({"bytes": float})
    return res
