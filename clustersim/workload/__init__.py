"""Workloads: what a model costs per pipeline stage (compute time, bytes, memory)."""

from .stage_cost import Segment, StageCost, stage_costs

__all__ = ["Segment", "StageCost", "stage_costs"]
