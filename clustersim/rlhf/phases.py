"""The seconds of each phase of an RLHF iteration, each from its own simulation
(docs/rlhf.md): the rollouts from the generation mode's scheduler (one run per generation
replica, the phase as long as the slowest), the scoring forwards from the inference
compile path, the training step from the training compile path, and the weight transfer
on the cluster's fabric. Nothing here enters the engine; each phase is a run of its own.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..compilers import check_job
from ..errors import ScenarioError
from ..faults.replan import migration_time
from ..faults.state import stage_state_bytes
from ..generation.kv_cache import kv_cache_of
from ..generation.requests import Request, lengths
from ..generation.runner import serve
from ..generation.step_cost import check_generation_model
from ..resolve import resolve
from ..workload.calibration import ELEMENT_BYTES
from ..workload.resolve import resolve_transformer
from .layout import Layout, generation_layout, param_units, training_layout, weight_moves


@dataclass(frozen=True)
class Pools:
    """The GPUs of generation (``gen``, from GPU 0) and of scoring and training (``train``,
    after them); colocated: both are every GPU."""

    gen: int
    train: int
    colocated: bool

    @property
    def train_first(self) -> int:
        return 0 if self.colocated else self.gen


def pools_of(sc) -> Pools:
    """The pools of scenario ``sc``, refused naming ``rlhf.generation_gpus`` where they do not fit."""
    rl, total = sc.rlhf, sc.num_gpus
    size = rl.rollout.tp * rl.rollout.pp
    if rl.generation_gpus == 0:
        pools = Pools(total, total, True)
    elif rl.generation_gpus >= total:
        raise ScenarioError(
            "rlhf.generation_gpus",
            rl.generation_gpus,
            f"0 (colocated) or fewer than the job's {total} GPUs, leaving some to train",
        )
    else:
        pools = Pools(rl.generation_gpus, total - rl.generation_gpus, False)
    if pools.gen % size:
        raise ScenarioError(
            "rlhf.generation_gpus",
            rl.generation_gpus,
            f"a multiple of a generation replica's rollout.tp × rollout.pp = {size} GPUs"
            + (" (colocated: the job's GPUs)" if pools.colocated else ""),
        )
    replicas = pools.gen // size
    samples = rl.prompts * rl.samples_per_prompt
    if replicas > samples:
        raise ScenarioError(
            "rlhf.generation_gpus",
            rl.generation_gpus,
            f"{replicas} generation replicas for {samples} samples: give fewer GPUs to generation or more prompts",
        )
    return pools


def rollouts(sc) -> list[Request]:
    """The iteration's samples: ``prompts`` prompt lengths (stream [seed, 1]), each repeated
    ``samples_per_prompt`` times (a GRPO group shares its prompt), and an output length per
    sample (stream [seed, 2]); all at t = 0 (an offline batch)."""
    rl, seed = sc.rlhf, sc.simulation.seed
    prompts = lengths(rl.prompt_len, rl.prompts, np.random.default_rng([seed, 1]), "rlhf.prompt_len")
    n = rl.prompts * rl.samples_per_prompt
    outputs = lengths(rl.output_len, n, np.random.default_rng([seed, 2]), "rlhf.output_len")
    return [Request(i, 0.0, prompts[i // rl.samples_per_prompt], outputs[i]) for i in range(n)]


def padded_len(reqs: list[Request]) -> int:
    """The sequence length scoring and training run at: the longest prompt plus the longest
    output of the batch (samples padded to it, as a batch without packing is)."""
    return max(r.prompt for r in reqs) + max(r.output for r in reqs)


def _sub(sc, overrides: dict):
    """A phase's scenario: ``sc`` without its ``rlhf`` section, with ``overrides``."""
    return sc.with_overrides({"rlhf": None, **overrides})


def training_scenario(sc, pools: Pools, samples: int, seq: int):
    """The actor's training step on the training pool: the iteration's samples at ``seq``
    tokens (a batch the training layout cannot split is refused naming ``rlhf.prompts``)."""
    overrides = {
        "training.global_batch": samples,
        "model.seq_len": seq,
        "parallel.gpus": pools.train,
        "parallel.dp": "auto",
    }
    try:
        return _sub(sc, overrides)
    except ScenarioError as exc:
        if exc.field != "training.global_batch":
            raise
        raise ScenarioError(
            "rlhf.prompts",
            sc.rlhf.prompts,
            f"the {samples} samples (prompts × samples_per_prompt) train as the global batch on "
            f"{pools.train} GPUs: {exc.expected}",
        ) from None


#: what a forward-only run (the inference mode) takes of a training scenario's settings:
#: the backward's, the optimizer's and the training schedule's are left out (the inference
#: mode refuses them by name), a forward has one chunk per stage and runs once
FORWARD_ONLY = {
    "training.mode": "inference",
    "training.recompute": "none",
    "parallel.zero": 0,
    "parallel.virtual_stages": 1,
    "parallel.schedule": "1f1b",
    "parallel.gradient_compression": None,
    "parallel.activation_compression": None,
    "simulation.iterations": 1,
}


def scoring_scenario(sc, pools: Pools, samples: int, seq: int):
    """One forward over the iteration's samples on the training layout (inference mode)."""
    return training_scenario(sc, pools, samples, seq).with_overrides(FORWARD_ONLY)


def generation_scenario(sc):
    """One generation replica (``rlhf.rollout``) of the actor, serving the rollouts."""
    ro = sc.rlhf.rollout
    gen = {
        "prompt_len": 1,  # (the requests are the rollouts, handed to the scheduler)
        "output_len": 1,
        "max_num_seqs": ro.max_num_seqs,
        "max_num_batched_tokens": ro.max_num_batched_tokens,
        "kv_memory_fraction": ro.kv_memory_fraction,
    }
    return _sub(
        sc,
        {
            **FORWARD_ONLY,
            "training.global_batch": 1,
            "training.micro_batch": 1,
            "parallel": {"tp": ro.tp, "pp": ro.pp, "dp": 1, "gpus": ro.tp * ro.pp},
            "generation": gen,
        },
    )


def generation_seconds(sc, reqs: list[Request], replicas: int, build_engine) -> list[float]:
    """Each replica's makespan serving its share of ``reqs`` (sample i on replica i mod
    ``replicas``, as a round-robin router sends them)."""
    gsc = generation_scenario(sc)
    check_generation_model(gsc)
    job = check_job(resolve(gsc))
    with rollout_fields(sc):
        cache = kv_cache_of(job, resolve_transformer(gsc.model), gsc.generation)
    runs: dict[tuple, float] = {}  # replicas given the same lengths run the same
    out = []
    for r in range(replicas):
        share = [Request(i, 0.0, q.prompt, q.output) for i, q in enumerate(reqs[r::replicas])]
        key = tuple((q.prompt, q.output) for q in share)
        if key not in runs:
            runs[key] = _served(sc, gsc, job, cache, share, build_engine)
        out.append(runs[key])
    return out


def _served(sc, gsc, job, cache, share: list[Request], build_engine) -> float:
    """One replica's makespan."""
    with rollout_fields(sc):
        pool = serve(gsc, job, cache, share, build_engine)
    return max(s.token_times[-1] for s in pool.sched.done)


@contextmanager
def rollout_fields(sc):
    """Let the generation mode's refusals name the ``rlhf`` field the user wrote
    (``generation.kv_memory_fraction`` → ``rlhf.rollout.kv_memory_fraction``)."""
    try:
        yield
    except ScenarioError as exc:
        name = exc.field.removeprefix("generation.")
        if name == exc.field:
            raise
        field = f"rlhf.rollout.{name}" if name in type(sc.rlhf.rollout).model_fields else "rlhf.rollout"
        raise ScenarioError(field, exc.value, exc.expected) from None


def transfer(sc, pools: Pools, train_job) -> tuple[float, list[tuple[int, int, Fraction]], Layout]:
    """(seconds, moves, generation layout) of the weight transfer after an update: the
    training layout's parameters to every GPU of the generation layout, in the generation
    dtype (the training precision), all at once on the cluster's fabric."""
    ro = sc.rlhf.rollout
    gen = generation_layout(pools.gen, ro.tp, ro.pp)
    train = training_layout(train_job.plan, pools.train_first)
    sizes = param_units(resolve_transformer(sc.model))
    nbytes = ELEMENT_BYTES[sc.training.precision]
    moves = weight_moves(sizes, train, gen, nbytes, sc.cluster.gpus_per_node)
    priced = [(s, d, int(b)) for s, d, b in moves]
    return migration_time(sc, sc.cluster.nodes, priced), moves, gen


def offload_seconds(sc, train_job) -> float:
    """Seconds to copy the training state (weights and optimizer states) of the fullest GPU
    to the host at ``rlhf.offload_bandwidth`` (and as long back); 0 without offload."""
    rl = sc.rlhf
    if not rl.offload:
        return 0.0
    return float(max(stage_state_bytes(train_job))) / rl.offload_bandwidth
