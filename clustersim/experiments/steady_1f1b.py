"""1F1B's iteration timed round by round, its steady state skipped: O(p² + p·T), not O(p·m).

:class:`~.stage_timing.Timeline` times any flushing schedule pass by pass — p stages × m
micro-batches × 2 passes, plus building its steps from the orders, which is most of a
64-stage, 512-micro-batch estimate. 1F1B's order is known in closed form (stage s:
w = min(p − s − 1, m) warm-up forwards, then m − w rounds of one forward and one
backward, then w backwards), so :class:`OneFOneB` needs no orders: it runs the same
recurrence as :meth:`Timeline.run` (each pass after the previous one on its stage and after
its input's send, the send after the sending stage's earlier sends), in the same floating-
point operations, round by round.

**The skip.** In the rounds every stage runs (r = 0 … m − p), the state the next round reads
— each stage's clock, its send lane, its latest forward's arrival downstream — is a
max-plus linear, homogeneous function of the previous round's: f(x + c) = f(x) + c. So once
a round's state is the previous one's shifted by one constant λ in every entry, every later
full round adds λ again, exactly in real arithmetic; the rounds up to the last full one are
then jumped over by adding k·λ. In floating point the shift is constant only up to rounding
(δ, the spread of the entries' differences); f is non-expansive in the sup norm, so the
jump is off by at most k·δ — it is taken only where that bound is within
:data:`TOLERANCE` of the times, else the rounds run one by one. The fill, the rounds the
upper stages run alone and the drain always run pass by pass. Without a jump the result is
:meth:`Timeline.run`'s to the bit (tests/test_steady_1f1b.py checks both against the
independent longest path of tests/test_estimate_speed.py).
"""

from __future__ import annotations

from ..accel import load
from .stage_timing import Timeline

_accel = load("clustersim.experiments._c1f1b")  # built by setup.py where a C compiler works
#: whether :meth:`OneFOneB.run` runs its fill, rounds and drain in C in this process
ACCELERATED = _accel is not None

#: the largest relative error the skip may add to a stage's end
TOLERANCE = 1e-12


class OneFOneB(Timeline):
    """The :class:`~.stage_timing.Timeline` of 1F1B (one chunk per stage, loop placement)
    for ``p`` stages and ``m`` micro-batches, with the same ``keys``, ``sends`` and ``counts``
    reading, timed by the round recurrence (module docstring) instead of its steps."""

    def __init__(self, p: int, m: int):  # noqa: D107 — built from (p, m) alone, no orders
        self.p, self.m = p, m
        # stage s's keys, its forward's first (as the pass-by-pass build finds them)
        self.keys = [key for s in range(p) for key in (("F", s, s > 0), ("B", s, s < p - 1))]
        self.sends = [(s, s + 1, s) for s in range(p - 1)] + [(s + 1, s, s) for s in range(p - 1)]
        self.counts = [[(2 * s, m), (2 * s + 1, m)] for s in range(p)]

    def run(self, durations: list[float], sends: list[float], apart: bool = False) -> list[float]:
        """Per stage, the end of its last pass (:meth:`Timeline.run`'s, within
        :data:`TOLERANCE` where the steady state is skipped); 1F1B has no pairs: ``apart``
        changes nothing."""
        p, m = self.p, self.m
        fwd, bwd = durations[0::2], durations[1::2]
        down = sends[: p - 1] + [0.0]  # stage s's forward output to s + 1 (the last sends none)
        up = [0.0] + sends[p - 1 :]  # stage s's backward output to s − 1 (the first sends none)
        warm = [min(p - s - 1, m) for s in range(p)]
        clock, lane = [0.0] * p, [0.0] * p
        f_at = [[0.0] * m for _ in range(p)]  # when forward j's output reaches stage s + 1
        b_at = [[0.0] * m for _ in range(p)]  # when backward j's output reaches stage s − 1

        # per stage: where its forwards' and backwards' inputs arrive and its outputs go
        f_in, f_out = [None, *f_at[:-1]], [*f_at[:-1], None]
        b_in, b_out = [*b_at[1:], None], [None, *b_at[1:]]
        passes, one_round = (_passes, _round) if _accel is None else (_accel.passes, _accel.round)
        for s in range(p):  # the fill
            clock[s], lane[s] = passes(clock[s], lane[s], fwd[s], down[s], f_in[s], f_out[s], 0, warm[s])
        full = m - warm[0]  # rounds every stage runs
        # per stage, what a round reads (the first and last stages have a None where they
        # have no neighbour)
        rows = list(zip(warm, f_in, f_out, b_in, b_out, fwd, bwd, down, up))
        seen: list[list[float]] = []  # the state after each full round
        r, rounds = 0, max(m - w for w in warm)
        lo = 0  # the lowest stage that runs round r (m − warm[s] grows with s: a suffix runs)
        while r < rounds:
            while r >= m - warm[lo]:
                lo += 1
            one_round(r, lo, rows, clock, lane)
            if r < full - 1:
                seen.append(clock + lane + [f_at[s][warm[s] + r] for s in range(p - 1)])
                to = self._jump(r, full - 1, seen, clock, lane, f_at, warm)
                if to != r:  # the rounds seen before no longer precede the next one's
                    r = to
                    seen.clear()
            r += 1
        for s in range(p - 1, -1, -1):  # the drain
            clock[s], lane[s] = passes(clock[s], lane[s], bwd[s], up[s], b_in[s], b_out[s], m - warm[s], m)
        return clock

    @staticmethod
    def _jump(r, end, seen, clock, lane, f_at, warm) -> int:
        """The round to go on from: where round ``r``'s state (``seen[-1]``) is the state
        q rounds before shifted by one λ in every entry (q ≤ 2p: the round trip's
        period), the last round ≤ ``end`` a whole number n of such periods on, with the
        state shifted by n·λ there (taken only where its bound n·δ, δ the entries' spread
        around λ, is within :data:`TOLERANCE`); else ``r``."""
        state, p = seen[-1], len(clock)
        allowed = TOLERANCE * 0.1 * max(state)
        for q in range(1, min(len(seen) - 1, 2 * p + 2) + 1):
            before = seen[-1 - q]
            n = (end - r) // q
            if n == 0:
                break
            lam = state[0] - before[0]
            if abs(state[-1] - before[-1] - lam) * n > allowed:  # a cheap first look
                continue
            diffs = [a - b for a, b in zip(state, before)]
            if (max(diffs) - min(diffs)) * n > allowed:
                continue
            step = n * lam
            for s in range(p):
                clock[s] += step
                lane[s] += step
            for s in range(p - 1):
                f_at[s][warm[s] + r + n * q] = f_at[s][warm[s] + r] + step
            return r + n * q
        return r


def _round(r: int, lo: int, rows: list[tuple], clock: list[float], lane: list[float]) -> None:
    """Round ``r`` of stages ``lo`` … p − 1, top down (``rows``: per stage, what a round
    reads — :meth:`OneFOneB.run`): stage s's forward w_s + r, then its backward r, as
    :func:`_passes` runs them; ``clock`` and ``lane`` updated in place."""
    top = len(rows) - 1
    for s in range(top, lo - 1, -1):
        w, f_prev, f_own, b_next, b_own, f_s, b_s, hop_down, hop_up = rows[s]
        j, t, u = w + r, clock[s], lane[s]
        if 0 < s < top:  # a middle stage: an input and an output each way
            if f_prev[j] > t:
                t = f_prev[j]
            t += f_s
            u = f_own[j] = (t if t > u else u) + hop_down
            if b_next[r] > t:
                t = b_next[r]
            t += b_s
            u = b_own[r] = (t if t > u else u) + hop_up
        else:
            if f_prev is not None and f_prev[j] > t:
                t = f_prev[j]
            t += f_s
            if f_own is not None:
                u = f_own[j] = (t if t > u else u) + hop_down
            if b_next is not None and b_next[r] > t:
                t = b_next[r]
            t += b_s
            if b_own is not None:
                u = b_own[r] = (t if t > u else u) + hop_up
        clock[s], lane[s] = t, u


def _passes(
    t: float, u: float, step: float, hop: float, arrive, out, start: int, stop: int
) -> tuple[float, float]:
    """A stage's passes of micro-batches ``start`` … ``stop`` − 1 one after another, from its clock ``t`` and
    send lane ``u``: each after its input's arrival (``arrive[j]``; None: no input from
    another stage), ``step`` long, its output sent after the lane's earlier sends and
    arriving ``hop`` later (``out[j]``; None: it sends none) — :meth:`.stage_timing.Timeline.run`'s
    operations, in its order. The stage's clock and lane after them."""
    for j in range(start, stop):
        if arrive is not None and arrive[j] > t:
            t = arrive[j]
        t += step
        if out is not None:
            u = out[j] = (t if t > u else u) + hop
    return t, u
