"""Which algorithm each collective op runs, and its time when the collective model is analytical.

Shared by the SimPy engine (:mod:`clustersim.engine.interpreter`) and the DAG evaluator
(:mod:`clustersim.engine.dag`), so both time a collective with the same float operations.
"""

from __future__ import annotations

from ..collectives import choose_algorithm, estimate_time
from ..collectives.group import Group
from ..program import Op


class CollectivePlans:
    """``plans(op) -> (algorithm, time)``, worked out once per (kind, group, size, requested
    algorithm): the algorithm is the op's own, else the scenario's for its kind
    (``algorithms``), else the ``auto`` choice (the α-β model's fastest); the time is its
    α-β time on the group's links under ``collective_model: analytical``, else None (the
    fabric times it). ``latency`` is ``cluster.collective_latency``."""

    def __init__(
        self,
        env,
        fabric,
        names: list[str],
        alpha,
        algorithms: dict[str, str],
        collective_model: str,
        latency: str = "overlapped",
    ):
        self.env, self.fabric, self.names, self.alpha, self.latency = env, fabric, names, alpha, latency
        self.algorithms, self.collective_model = algorithms, collective_model
        self._known: dict[tuple, tuple[str, float | None]] = {}

    def __call__(self, op: Op) -> tuple[str, float | None]:
        requested = op.algorithm if op.algorithm != "auto" else self.algorithms.get(op.collective, "auto")
        key = (op.collective, op.group, op.nbytes, requested)
        known = self._known.get(key)
        if known is None:
            group = Group(self.env, self.fabric, [self.names[d] for d in op.group], self.alpha, self.latency)
            algorithm = (
                requested if requested != "auto" else choose_algorithm(group, op.collective, op.nbytes)
            )
            t = (
                None
                if self.collective_model != "analytical"
                else estimate_time(op.collective, algorithm, len(op.group), op.nbytes, **group.shape())
            )
            known = self._known[key] = (algorithm, t)
        return known
