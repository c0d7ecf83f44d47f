"""A ring's steps merged into one message per hop, on a network model that shares links at
flow level (the ``flow`` model of ``simulation.fidelity: balanced``; the fabric's
:attr:`~clustersim.network.base.Fabric.coarse_collectives`).

In a reduce-scatter, all-gather or all-reduce by ring (:mod:`.ring`), chunk k leaves rank k
at step 0 and travels on around the ring, one hop per step, each rank forwarding it once it
has arrived: the steps' messages form n independent *chains*, one per chunk. Where every
hop of the ring has the same bottleneck bandwidth B, a rank's engine is never held back by
its own pacing (its next chunk arrives α + latency + z/B after the last, later than the
z/B its port needs), so on an idle fabric chain k's last message lands at

    start + Σ over its hops (α_h + latency_h) + steps · z_k / B

and the last message on hop i is the one of the chain that ends there, k = i − steps + 1
(mod n). A merged ring sends one message per hop instead of ``steps`` of them: that chain's
bytes over the whole run (steps · z_k, within ``steps`` bytes of what the hop carries in all
— the chunks differ by one byte at most), issued after the chain's α's and all its hops'
latencies but the last (which the fabric adds). On an idle fabric it lands when the
per-step ring's last message on that hop does, so every member finishes when it would
(tests/test_merged_ring.py, to 1e-9); the collective costs n flows per channel instead of
n · steps.

Under contention a hop's message is one flow that shares its links max-min fairly for the
whole collective, as one NCCL connection does, instead of ``steps`` flows of which several
may be in flight on a slow hop at once (the per-step ring's engines pace at the idle
bandwidth, so a hop held back by other traffic collects them and takes a larger share);
and the α's are paid before the bytes rather than between them. docs/fidelity.md states
what that costs against ``packet``. Rings whose hops differ in bandwidth (a multi-host ring
with several members per host: NVLink and network hops) keep their steps.
"""

from __future__ import annotations

from itertools import accumulate

from .schedule import Msg, split


def merged_ring(group, orders: list[list[str]], steps_of, nbytes: int, head: float | None):
    """(engines, done) of the merged ring over channel ``orders`` (module docstring), or
    None where its hops' bottleneck bandwidths differ. ``steps_of(n)``: the kind's steps
    over n ranks; ``head``: the pipeline fill a ``latency: nccl`` ring pays before its first
    step (its messages then pay no α of their own), None for per-message α's."""
    rows = [[group.path(a, order[(i + 1) % len(order)]) for i, a in enumerate(order)] for order in orders]
    bandwidths = {bw for row in rows for bw, _, _ in row}
    if len(bandwidths) != 1 or not 0 < next(iter(bandwidths)) < float("inf"):
        return None
    env, engines, done = group.env, [], {}
    for order, part, row in zip(orders, split(nbytes, len(orders)), rows, strict=True):
        n = len(order)
        if n == 1:
            continue
        steps, sizes = steps_of(n), split(part, n)
        succ = [order[(i + 1) % n] for i in range(n)]
        alpha = [0.0 if head is not None else group.alpha_of(a, b) for a, b in zip(order, succ, strict=True)]
        # Σ (α + latency) over consecutive hops of the ring, run twice round (a chain's steps
        # may pass a hop twice): cum[j] covers hops 0 .. j−1 (mod n)
        cum = [0.0, *accumulate((alpha[j % n] + row[j % n][1]) for j in range(n + steps))]
        for i, src in enumerate(order):
            k = (i - steps + 1) % n  # the chain whose last step is on hop i
            msg = Msg(env, src, succ[i], steps * sizes[k])
            # its hops k .. i: every α and latency but hop i's latency, which the fabric adds
            msg.alpha = (head or 0.0) + cum[k + steps] - cum[k] - row[i][1]
            engines.append([msg])
            done[succ[i]] = done.get(succ[i], ()) + (msg.done,)
    return engines, done
