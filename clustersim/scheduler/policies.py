"""The queue's rules: which waiting jobs start now, and which running jobs are preempted
(docs/scheduler.md). Pure functions of GPU counts and estimates — no simulation here.

* ``fifo`` — the queue in arrival order; the head starts when its GPUs are free, and no job
  starts before the head (a job that does not fit blocks the queue).
* ``easy`` — EASY backfilling (Lifka 1995; Mu'alem & Feitelson, IEEE TPDS 12(6), 2001): as
  ``fifo``, but when the head does not fit it gets a reservation at the *shadow time* (the
  estimated end of running jobs when enough GPUs are free for it); a later job may start
  now if it fits and either ends by the shadow time or uses only the *extra* GPUs (those
  the head leaves free at the shadow time).
* ``priority`` — the queue by priority (higher first; ties in arrival order), the head
  blocking as in ``fifo``. With ``preemption``, a head that does not fit preempts running
  jobs of strictly lower priority, lowest priority first (ties: the latest started), if
  that frees enough GPUs; otherwise none.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    """A queued job: ``rank`` its position key in the queue, ``estimate_s`` its estimated
    remaining run time."""

    name: str
    gpus: int
    priority: int
    rank: tuple
    estimate_s: float


@dataclass(frozen=True)
class Running:
    """A running job, its estimated end (now + remaining iterations × its present
    iteration time) and its ``rank`` in the queue (where it returns if preempted)."""

    name: str
    gpus: int
    priority: int
    started_s: float
    end_s: float
    rank: tuple


@dataclass(frozen=True)
class Decision:
    """What the scheduler does at one instant: preempt ``preempt`` (with the job that
    preempts each), then start ``start`` in this order; ``reservation`` = (head, shadow
    time) when EASY reserved for a blocked head."""

    start: tuple[str, ...] = ()
    preempt: tuple[tuple[str, str], ...] = ()
    reservation: tuple[str, float] | None = None


def queue_rank(policy: str, priority: int, arrival_s: float, index: int) -> tuple:
    """The key the queue is ordered by: arrival (then list index), or for ``priority``
    the priority first (higher first)."""
    if policy == "priority":
        return (-priority, arrival_s, index)
    return (arrival_s, index)


def decide(
    policy: str, preemption: bool, now: float, total: int, waiting: list[Waiting], running: list[Running]
) -> Decision:
    """The starts (and preemptions) at ``now`` on a cluster of ``total`` GPUs (module docstring)."""
    queue = sorted(waiting, key=lambda w: w.rank)
    free = total - sum(r.gpus for r in running)
    starts: list[str] = []
    preempted: list[tuple[str, str]] = []
    active = list(running)
    while queue:
        head = queue[0]
        if head.gpus > free and preemption:
            victims = _victims(head, active, free)
            for v in victims:  # back to the queue in its place (none of them fits again now)
                preempted.append((v.name, head.name))
                active.remove(v)
                free += v.gpus
                queue.append(Waiting(v.name, v.gpus, v.priority, v.rank, v.end_s - now))
            queue.sort(key=lambda w: w.rank)
        if head.gpus > free:
            break
        starts.append(head.name)
        free -= head.gpus
        active.append(Running(head.name, head.gpus, head.priority, now, now + head.estimate_s, head.rank))
        queue.pop(0)
    if policy != "easy" or not queue:
        return Decision(tuple(starts), tuple(preempted))
    head, shadow, extra = _reserve(queue[0], active, free)
    for job in queue[1:]:
        if job.gpus > free:
            continue
        ends_in_time = now + job.estimate_s <= shadow
        if not ends_in_time and job.gpus > extra:
            continue
        starts.append(job.name)
        free -= job.gpus
        if not ends_in_time:
            extra -= job.gpus
    return Decision(tuple(starts), tuple(preempted), (head.name, shadow))


def _victims(head: Waiting, running: list[Running], free: int) -> list[Running]:
    """The lower-priority running jobs whose preemption frees enough GPUs for ``head``
    (lowest priority first, then the latest started), or none if they cannot. A job taken
    that the others make unneeded is left running (so no victim fits again at once)."""
    lower = sorted(
        (r for r in running if r.priority < head.priority), key=lambda r: (r.priority, -r.started_s, r.name)
    )
    chosen = []
    for r in lower:
        if free >= head.gpus:
            break
        chosen.append(r)
        free += r.gpus
    if free < head.gpus:
        return []
    for r in list(chosen):
        if free - r.gpus >= head.gpus:
            chosen.remove(r)
            free -= r.gpus
    return chosen


def _reserve(head: Waiting, running: list[Running], free: int) -> tuple[Waiting, float, int]:
    """EASY's reservation for a blocked ``head``: (head, shadow time, extra GPUs)."""
    for r in sorted(running, key=lambda r: (r.end_s, r.name)):
        free += r.gpus
        if free >= head.gpus:
            return head, r.end_s, free - head.gpus
    raise AssertionError("a queued job larger than the cluster was admitted")  # refused at load
