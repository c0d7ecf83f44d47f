"""Failures and elasticity: a multi-iteration job with faults and a recovery policy.

The per-iteration engine simulates one steady-state iteration of each configuration the
job runs in (the healthy cluster, the cluster after an elastic re-plan, the cluster with
a cable down); :mod:`.timeline` lays the job out on top of those iteration times —
iterations, checkpoint writes, failures, lost work, restarts, state migrations — and
:mod:`.job` reports goodput next to throughput. Semantics: docs/faults.md.
"""

from .job import simulate_job

__all__ = ["simulate_job"]
