"""Workloads: what a model costs per pipeline stage (compute time, bytes, memory)."""

from .stage_cost import StageCost, stage_costs

__all__ = ["StageCost", "stage_costs"]
