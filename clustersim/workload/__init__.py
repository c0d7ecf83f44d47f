"""Workloads: what a model costs per pipeline stage (compute time, bytes, memory)."""

from .stage_cost import Segment, StageCost, chunk_costs, even_partition

__all__ = ["Segment", "StageCost", "chunk_costs", "even_partition"]
