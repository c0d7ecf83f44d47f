"""Resolve: a Scenario becomes a :class:`Job` once, and nothing downstream reads the Scenario.

``resolve(scenario) -> Job`` (:mod:`.resolve`); the Job (:mod:`.job`) holds the layout
(:class:`.layout.Layout`), partition, chunk costs per GPU type, micro-batches per replica,
and — on first use — the topology graph (:mod:`.topology`), compression domains and fold
decision. See ``docs/architecture.md``.
"""

from .job import Job
from .layout import Layout
from .resolve import resolve
from .topology import topology_graph

__all__ = ["Job", "Layout", "resolve", "topology_graph"]
