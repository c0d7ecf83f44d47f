"""More than one serving replica: ``parallel.dp`` copies of the model, each on tp × pp GPUs
with its own continuous-batching scheduler and KV cache, and a dispatcher in front.

Replica k holds GPUs k·tp·pp to (k + 1)·tp·pp − 1 of the job. The dispatcher hands each
request, in arrival order and at its arrival, to one replica (``generation.dispatch``):

* ``round_robin`` — request i to replica i mod dp (the default);
* ``least_loaded`` — to the replica with the fewest requests outstanding at that moment
  (arrived and not yet finished: queued, running, or in a step that ends later), the lowest
  index on a tie (join the shortest queue).

The replicas share nothing but the dispatcher: they run in lockstep, each up to the next
arrival, so the dispatcher sees each one's load as it stands then. A request is served
whole on its replica (no migration, no work stealing).
"""

from __future__ import annotations

from .requests import Request
from .scheduler import Scheduler


def pick(scheds: list[Scheduler], i: int, r: Request, policy: str) -> int:
    """The replica that gets request ``r``, the ``i``-th to arrive (module doc)."""
    if policy == "round_robin":
        return i % len(scheds)
    return min(range(len(scheds)), key=lambda k: (scheds[k].outstanding(r.arrival), k))


def dispatch(scheds: list[Scheduler], reqs: list[Request], policy: str) -> None:
    """Serve ``reqs`` (in arrival order) on the replicas' schedulers ``scheds`` under ``policy``."""
    for i, r in enumerate(reqs):
        for s in scheds:
            s.run_until(r.arrival)
        scheds[pick(scheds, i, r, policy)].offer(r)
    for s in scheds:
        s.run()
