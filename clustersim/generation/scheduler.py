"""Continuous batching above the engine: which sequences each step runs, and when.

The scheduler follows vLLM's V1 scheduler (``vllm/v1/core/sched/scheduler.py``): every
step it walks the running sequences first, in the order they were admitted, giving each
the tokens it still has to compute (a decode: 1; a prompt: the rest of it, cut to the
step's token budget ``max_num_batched_tokens`` when ``chunked_prefill``), then admits
waiting requests first come first served while the budget, ``max_num_seqs`` and the KV
cache allow. The step's time is whatever the engine says the compiled step takes
(``price``, :mod:`.runner`); the clock advances by it, and every sequence whose computed
tokens reach its known tokens samples one more token at the step's end.

KV blocks (:mod:`.kv_cache`): a running sequence that needs a block when none is free
preempts the most recently admitted running sequence (itself, if it is that one):
``recompute`` frees its blocks and sends it to the front of the queue to prefill its
prompt and the tokens generated so far again; ``swap`` copies its blocks to the host and
back when it is readmitted, at ``swap_bandwidth`` (the step waits for the copies).
No request is admitted in a step that preempted. Under ``wait`` a request is admitted only
once blocks for all its tokens are free (reserved whole), so nothing is preempted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ScenarioError
from .kv_cache import KVCache
from .requests import Request
from .step_cost import StepSeq


@dataclass
class Sequence:
    """A request being served: tokens known (prompt + generated), computed (in the cache),
    blocks held, and the times its tokens were sampled."""

    req: Request
    tokens: int
    computed: int = 0
    blocks: int = 0
    swapped: int = 0  # blocks on the host (swap preemption)
    preemptions: int = 0
    token_times: list[float] = field(default_factory=list)

    @property
    def generated(self) -> int:
        return len(self.token_times)


def _sequence(r: Request) -> Sequence:
    """A request as it enters the queue: its prompt to prefill, or, handed over prefilled,
    its prompt cached and its first token sampled."""
    if r.first_token is None:
        return Sequence(r, r.prompt)
    return Sequence(r, r.prompt + 1, computed=r.prompt, token_times=[r.first_token])


@dataclass(frozen=True)
class StepRecord:
    """One step: when it ran, its batch, and the cache after it was scheduled."""

    start_s: float
    end_s: float
    seqs: int
    prefill_tokens: int
    decode_seqs: int
    kv_blocks_used: int
    preempted: int
    swap_bytes: float


class Scheduler:
    """Serve ``requests`` (sorted by arrival) on ``cache`` under ``gen`` (the section);
    ``price(seqs, sampled)`` is the seconds of one step (module doc)."""

    def __init__(self, requests: list[Request], cache: KVCache, gen, price: Callable[[tuple, int], float]):
        self.cache, self.gen, self.price = cache, gen, price
        self.pending = deque(sorted(requests, key=lambda r: r.admissible))
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.done: list[Sequence] = []
        self.free = cache.blocks
        self.steps: list[StepRecord] = []
        self.t = 0.0
        self.check(requests)

    def check(self, requests: list[Request]) -> None:
        """Refuse what could never run: a request larger than the cache, a prompt larger
        than a step without chunked prefill."""
        gen, cache = self.gen, self.cache
        for r in requests:
            need = cache.blocks_for(r.prompt + r.output - 1) if gen.preemption != "wait" else self._reserve(r)
            if need > cache.blocks:
                field, value = (
                    ("generation.kv_blocks", gen.kv_blocks)
                    if gen.kv_blocks
                    else (
                        "generation.kv_memory_fraction",
                        gen.kv_memory_fraction,
                    )
                )
                raise ScenarioError(
                    field,
                    value,
                    f"request {r.index} ({r.prompt} + {r.output} tokens) needs {need} KV blocks of "
                    f"{cache.block_size} tokens; the cache holds {cache.blocks}",
                )
            if not gen.chunked_prefill and r.prompt > gen.max_num_batched_tokens:
                raise ScenarioError(
                    "generation.max_num_batched_tokens",
                    gen.max_num_batched_tokens,
                    f"without chunked prefill a step holds a whole prompt: at least request "
                    f"{r.index}'s {r.prompt} tokens (or chunked_prefill: true)",
                )

    def _reserve(self, r: Request) -> int:
        return self.cache.blocks_for(r.prompt + r.output - 1)

    def run(self) -> list[Sequence]:
        """Serve every request; return them as served (by request index)."""
        self.run_until(float("inf"))
        return sorted(self.done, key=lambda s: s.req.index)

    def run_until(self, t: float) -> None:
        """Run every step that starts before ``t`` (a step may end after it)."""
        while (self.pending or self.waiting or self.running) and self.t < t:
            self.advance()

    def offer(self, r: Request) -> None:
        """Queue request ``r``, arriving no earlier than those queued (a dispatcher's hand-off;
        :meth:`check` it first)."""
        self.pending.append(r)

    def outstanding(self, t: float) -> int:
        """Requests queued or in service at ``t``: those not yet done by then."""
        finished = sum(1 for s in self.done if s.token_times[-1] <= t)
        return len(self.pending) + len(self.waiting) + len(self.running) + len(self.done) - finished

    def advance(self) -> None:
        """Run the next step, or move the clock to the next arrival when nothing can run."""
        while self.pending and self.pending[0].admissible <= self.t:
            self.waiting.append(_sequence(self.pending.popleft()))
        batch, preempted, swap = self._schedule()
        if not batch:
            if self.running or self.waiting:  # check makes this unreachable
                raise RuntimeError("generation scheduler stalled with requests left")
            self.t = self.pending[0].admissible
            return
        self._step(batch, preempted, swap)

    def _schedule(self) -> tuple[list[tuple[Sequence, int]], int, float]:
        gen, budget = self.gen, self.gen.max_num_batched_tokens
        batch: list[tuple[Sequence, int]] = []
        preempted, swap = 0, 0.0
        i = 0
        while i < len(self.running) and budget > 0:
            s = self.running[i]
            new = min(s.tokens - s.computed, budget)
            if not gen.chunked_prefill and new < s.tokens - s.computed:
                i += 1
                continue
            need = self.cache.blocks_for(s.computed + new) - s.blocks
            while need > self.free and gen.preemption != "wait":
                victim = self.running.pop()
                swap += self._preempt(victim)
                preempted += 1
                if victim is s:
                    break
            if s not in self.running:
                break
            self._take(s, need)
            batch.append((s, new))
            budget -= new
            i += 1
        while not preempted and self.waiting and budget > 0 and len(self.running) < gen.max_num_seqs:
            s = self.waiting[0]
            new = min(s.tokens - s.computed, budget)
            if not gen.chunked_prefill and new < s.tokens - s.computed:
                break
            total = (
                self._reserve(s.req) if gen.preemption == "wait" else self.cache.blocks_for(s.computed + new)
            )
            if total > self.free:
                break
            self.waiting.popleft()
            swap += s.swapped * self.cache.block_bytes
            s.swapped = 0
            self._take(s, total)
            self.running.append(s)
            batch.append((s, new))
            budget -= new
        return batch, preempted, swap

    def _take(self, s: Sequence, blocks: int) -> None:
        if blocks > 0:
            self.free -= blocks
            s.blocks += blocks

    def _preempt(self, s: Sequence) -> float:
        """Free ``s``'s blocks and queue it first; the bytes a swap copies out."""
        self.free += s.blocks
        s.preemptions += 1
        out = 0.0
        if self.gen.preemption == "swap":
            s.swapped, out = s.blocks, s.blocks * self.cache.block_bytes
        else:
            s.computed = 0
        s.blocks = 0
        self.waiting.appendleft(s)
        return out

    def _step(self, batch: list[tuple[Sequence, int]], preempted: int, swap: float) -> None:
        seqs = tuple(sorted(StepSeq(new, s.computed) for s, new in batch))
        sampled = sum(1 for s, new in batch if s.computed + new == s.tokens)
        start = self.t
        swap_s = swap / self.gen.swap_bandwidth if swap else 0.0
        self.t = start + swap_s + self.price(seqs, sampled)
        used = self.cache.blocks - self.free  # as scheduled, before finished sequences free theirs
        for s, new in batch:
            s.computed += new
            if s.computed == s.tokens:
                s.token_times.append(self.t)
                s.tokens += 1
                if s.generated == s.req.output:
                    self.free += s.blocks
                    s.blocks = 0
                    self.running.remove(s)
                    self.done.append(s)
        self.steps.append(
            StepRecord(
                start,
                self.t,
                len(batch),
                sum(n.new for n in seqs if not n.decode),
                sum(1 for n in seqs if n.decode),
                used,
                preempted,
                swap,
            )
        )
