"""Parallel plans: which device holds which stage, data-parallel replica and tensor shard."""

from .plan import Plan

__all__ = ["Plan"]
