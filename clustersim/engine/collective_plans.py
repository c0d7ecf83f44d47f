"""Which algorithm each collective op runs, and its time when the collective model is analytical.

Shared by the SimPy engine (:mod:`clustersim.engine.interpreter`) and the DAG evaluator
(:mod:`clustersim.engine.dag`), so both time a collective with the same float operations.
"""

from __future__ import annotations

from ..collectives.domain import in_private_domain
from ..collectives.group import Group
from ..collectives.negligible import negligible_bytes
from ..collectives.registry import busiest_buffer, plan
from ..program import Op


class CollectivePlans:
    """``plans(op) -> (algorithm, time)``, worked out once per (kind, group, size, requested
    algorithm): the algorithm is the op's own, else the scenario's for its kind
    (``algorithms``), else the ``auto`` choice (the α-β model's fastest); the time is its
    α-β time on the group's links, with the NCCL protocol the tuner picks (``protocols``,
    :mod:`clustersim.collectives.protocol`), under ``collective_model: analytical`` or for a
    group inside one host's private links (:mod:`clustersim.collectives.domain`) or a call
    whose bytes are negligible (:mod:`clustersim.collectives.negligible`) on a fabric with
    ``coarse_collectives``, else None (the fabric times it). An uneven all-to-all (``op.split``) is timed as the even one
    of its busiest rank's buffer (the most any member sends or receives). ``latency`` is
    ``cluster.collective_latency``."""

    def __init__(
        self,
        env,
        fabric,
        names: list[str],
        alpha,
        algorithms: dict[str, str],
        collective_model: str,
        latency: str = "overlapped",
        protocols=None,
    ):
        self.env, self.fabric, self.names, self.alpha, self.latency = env, fabric, names, alpha, latency
        self.protocols = protocols
        self.algorithms, self.collective_model = algorithms, collective_model
        self._known: dict[tuple, tuple[str, float | None]] = {}
        self._idle: dict[tuple, float] = {}

    def __call__(self, op: Op) -> tuple[str, float | None]:
        requested = op.algorithm if op.algorithm != "auto" else self.algorithms.get(op.collective, "auto")
        key = (op.collective, op.group, op.nbytes, requested, op.split)
        known = self._known.get(key)
        if known is None:
            names = [self.names[d] for d in op.group]
            group = Group(self.env, self.fabric, names, self.alpha, self.latency, self.protocols)
            nbytes = busiest_buffer(op.split) if op.split else op.nbytes
            algorithm, protocol, t = plan(group, op.collective, nbytes, requested)
            analytical = self.collective_model == "analytical" or (
                not op.split
                and getattr(self.fabric, "coarse_collectives", False)
                and (
                    in_private_domain(group) or negligible_bytes(group, op.collective, algorithm, protocol, t)
                )
            )
            known = self._known[key] = (algorithm, t if analytical else None)
            self._idle[key] = t
        return known

    def idle_time(self, op: Op) -> float:
        """The α-β time of ``op``'s collective on idle links (after :meth:`__call__` on it)."""
        requested = op.algorithm if op.algorithm != "auto" else self.algorithms.get(op.collective, "auto")
        return self._idle[(op.collective, op.group, op.nbytes, requested, op.split)]
