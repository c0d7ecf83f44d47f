"""A flushing schedule's iteration timed at stage granularity: the longest path over (stage, pass).

Each stage runs its passes in the schedule's own order (:func:`clustersim.schedules.orders.run_orders`),
one after the other — the compiler chains a pass after the previous pass on its GPU. A pass
that consumes another stage's output (a forward the activations of chunk k − 1, a backward
the gradient from chunk k + 1) starts once it has arrived: the producing pass's end, then
its send, which also waits for the sending stage's earlier sends (one ``send`` lane per GPU,
in producer order, as the compiler emits them); a chunk boundary inside one stage (the V
placement's turn) is a plain dependency. Receives need no lane here: the compiler posts them
in consumer order, which is the order the stage runs its passes. An overlapped F&B pair
(DualPipe) waits for both inputs and takes the pair's time; both outputs leave at its end.

That is the compiled Program's dependency structure with each pass as one op, so it is exact
for any order — V placement, interleaving, split backwards, pairs — wherever the passes' and
sends' times are (the estimate's idle-network times). :class:`Timeline` compiles a shape
(schedule, p, m, v) once into flat steps; :meth:`Timeline.run` times them for one plan, in
p × passes Python steps.
"""

from __future__ import annotations

from ..schedules.orders import StageOrder
from ..schedules.registry import Schedule

#: a pass's duration key: (phase, chunk, received) with phase F, B (whole), Bi (input part), W;
#: a pair's: ("F&B", forward chunk, received, backward phase, backward chunk, received)
Key = tuple


class Timeline:
    """The timing steps of one shape's per-stage orders (one iteration of a flushing
    schedule, optimizer items left out). ``keys``: the distinct pass durations the steps
    read, ``sends``: the distinct (from stage, to stage, boundary chunk) transfers, whose
    bytes are ``costs[chunk].activation_bytes`` (:func:`~clustersim.workload.pass_costs.pass_transfers`);
    ``counts``: per stage, (key index, how many passes of it) — the stage's busy time."""

    def __init__(self, schedule: Schedule, orders: list[StageOrder], p: int):
        self.p = p
        self.keys: list[Key] = []
        self.sends: list[tuple[int, int, int]] = []
        key_of: dict[Key, int] = {}
        send_of: dict[tuple[int, int, int], int] = {}
        counts = [dict() for _ in range(p)]
        n_chunks = len({k for order in orders for ph, _, k in order if ph != "O"})
        route = [
            set(schedule.route(k, n_chunks)) for k in range(n_chunks)
        ]  # the chunks k's micro-batch visits
        stage_of = [schedule.stage_of(k, p) for k in range(n_chunks)]

        def index(table: dict, items: list, x) -> int:
            if x not in table:
                table[x] = len(items)
                items.append(x)
            return table[x]

        def source(ph: str, j: int, k: int) -> tuple[str, int, int] | None:
            """The pass whose output pass (ph, j, k) consumes (None: it consumes none)."""
            c = k - 1 if ph == "F" else k + 1
            return (ph, j, c) if ph in ("F", "B") and c in route[k] else None

        def build(apart: bool) -> list[tuple[int, int, int, int]]:
            """The steps, a pair as one (``apart`` False) or as its forward then its backward."""
            steps: list[tuple[int, int, int, int]] = []
            made: dict[tuple[str, int, int], int] = {}  # (phase, j, k) → the step its consumer waits for

            def step(s: int, key: Key, dep: tuple | None, out: tuple | None) -> None:
                """A step on stage ``s`` reading ``key``, after ``dep``'s output, producing ``out``'s."""
                ki = key_of.get(key)
                if ki is None:
                    ki = index(key_of, self.keys, key)
                if not apart:
                    counts[s][ki] = counts[s].get(ki, 0) + 1
                send = -1
                if out is not None and out[0] != "W":  # a forward's or a backward's output
                    ph, _, k = out
                    nxt = k + 1 if ph == "F" else k - 1
                    if nxt in route[k] and stage_of[nxt] != s:
                        edge = (s, stage_of[nxt], k if k < nxt else nxt)
                        send = send_of.get(edge)
                        if send is None:
                            send = index(send_of, self.sends, edge)
                    made[out] = len(steps)
                steps.append((s, ki, made[dep] if dep is not None else -1, send))

            def received(s: int, src) -> bool:
                return src is not None and stage_of[src[2]] != s

            pos = [0] * p
            while any(pos[s] < len(items[s]) for s in range(p)):
                moved = False
                for s in range(p):
                    its, i = items[s], pos[s]
                    while i < len(its):  # as far as its inputs are produced: then another stage's turn
                        ph, j, k = x = its[i]
                        if i not in pairs[s]:  # a pass
                            src = source(ph, j, k)
                            if src is not None and src not in made:
                                break
                            phase = ("Bi" if (j, k) in split[s] else "B") if ph == "B" else ph
                            step(s, (phase, k, received(s, src)), src, x)
                            i += 1
                            continue
                        group = its[i : i + 2]  # an F&B pair
                        srcs = [source(*x) for x in group]
                        if any(x is not None and x not in made for x in srcs):
                            break
                        (_, _, k2), (sf, sb) = group[1], srcs
                        backward = "Bi" if (group[1][1], k2) in split[s] else "B"
                        if not apart:
                            key = ("F&B", k, received(s, sf), backward, k2, received(s, sb))
                            step(s, (), sf, None)  # the pair waits for both inputs: the forward's,
                            step(s, key, sb, group[0])  # then the backward's, and takes the pair's time
                            step(s, (), None, group[1])  # the backward's output leaves with the forward's
                        else:  # its passes in turn, the forward first
                            step(s, ("F", k, received(s, sf)), sf, group[0])
                            step(s, (backward, k2, received(s, sb)), sb, group[1])
                        i += 2
                    if i > pos[s]:
                        pos[s], moved = i, True
                if not moved:
                    raise ValueError(f"schedule {schedule.name!r}: the stages' orders wait on each other")
            return steps

        items = [[x for x in order if x[0] != "O"] for order in orders]  # O: the last item
        pairs = [order.pairs for order in orders]
        split = [{(j, k) for ph, j, k in its if ph == "W"} for its in items]
        self._steps = build(apart=False)
        # a pair whose chunks only compute runs its forward, then its backward (the
        # compiler's order, compilers/pipeline/overlap.py): the forward's output leaves first
        self._steps_apart = build(apart=True) if any(pairs) else self._steps
        self.counts = [sorted(c.items()) for c in counts]

    def run(self, durations: list[float], sends: list[float], apart: bool = False) -> list[float]:
        """Per stage, the end of its last pass, for ``durations`` (per :attr:`keys`; the
        empty key, a pair's wait for its first input, is 0) and ``sends`` (seconds per
        :attr:`sends`), from an idle start; ``apart``: the pairs' chunks only compute, so
        each pair runs as its forward, then its backward."""
        clock = [0.0] * self.p
        lane = [0.0] * self.p
        ready = [0.0] * len(self._steps)
        for i, (s, k, dep, send) in enumerate(self._steps_apart if apart else self._steps):
            t = clock[s]
            if dep >= 0 and ready[dep] > t:
                t = ready[dep]
            t += durations[k]
            clock[s] = t
            if send >= 0:
                u = lane[s]
                u = (t if t > u else u) + sends[send]
                lane[s] = ready[i] = u
            else:
                ready[i] = t
        return clock

    def busy(self, durations: list[float]) -> list[float]:
        """Per stage, the sum of its passes' durations."""
        return [sum(n * durations[k] for k, n in c) for c in self.counts]
