"""The rule of a trace model (``model.kind: trace``) checked before every other rule.

A Chakra trace fixes its own rank count; when the cluster (or ``parallel.gpus``) has another
number of GPUs, every rule that derives something from the GPU count — data-parallel
degree, batch split — would fail first with an error about that derived field, sending the
user to fix the wrong thing. So :func:`check_trace_ranks` compares the counts first, from
each rank file's metadata alone (the nodes are read once, when the job compiles).
"""

from __future__ import annotations

from .rules import job_gpus
from .schema import ScenarioSpec


def check_trace_ranks(spec: ScenarioSpec) -> None:
    """Raise ScenarioError (``model.chakra``) when a trace model's GPU ranks are not the job's GPUs."""
    if spec.model.kind != "trace":
        return
    from ..interop.chakra_import import check_rank_count  # (protobuf: only trace models need it)

    check_rank_count(spec.model.chakra, job_gpus(spec))
