"""Scenarios: what a user asks clustersim to simulate, typed, validated and frozen.

``load_scenario(path_or_dict)`` → :class:`Scenario`; ``Scenario.with_overrides`` makes
variants; ``Scenario.resolved()`` is the full dict with every default filled, saved with
every result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ScenarioError
from .loader import apply_overrides, parse_overrides, read_yaml, validate_spec
from .model_files import check_model_files
from .multi_job import MultiJobScenario
from .presets import expand_cluster_preset
from .rules import check_rules, job_gpus, resolve_dp
from .schema import ScenarioSpec


class Scenario:
    """A validated, immutable scenario and the quantities derived from it.

    Sections are available as typed attributes: ``cluster``, ``model``, ``training``,
    ``parallel``, ``simulation``, ``faults``, ``recovery``, ``generation``, ``rlhf``. Derived: ``num_gpus``, ``dp``, ``num_microbatches``.
    """

    #: the sections, read as plain attributes (the layers below resolve read them many times)
    SECTIONS = (
        "name",
        "cluster",
        "model",
        "training",
        "parallel",
        "simulation",
        "faults",
        "recovery",
        "generation",
        "rlhf",
    )
    __slots__ = ("_raw", "spec", "dp", *SECTIONS)

    def __init__(self, raw: dict[str, Any]):
        self._raw = raw
        self.spec: ScenarioSpec = validate_spec(expand_cluster_preset(raw))
        check_model_files(self.spec)  # first: the rules below derive fields from what they hold
        check_rules(self.spec)
        self.dp: int = resolve_dp(self.spec)
        for section in self.SECTIONS:
            setattr(self, section, getattr(self.spec, section))

    @property
    def num_gpus(self) -> int:
        """The GPUs the job runs on (``parallel.gpus``, else the whole cluster)."""
        return job_gpus(self.spec)

    @property
    def num_microbatches(self) -> int:
        """m = global_batch / (micro_batch × dp)."""
        tr = self.spec.training
        return tr.global_batch // (tr.micro_batch * self.dp)

    def with_overrides(self, overrides: dict[str, Any]) -> Scenario:
        """A new Scenario with dotted keys replaced, e.g. ``{"parallel.pp": 4}``."""
        return Scenario(apply_overrides(self._raw, overrides))

    def resolved(self) -> dict[str, Any]:
        """Every field with its value in base units, defaults filled, dp resolved."""
        out = self.spec.model_dump(mode="json")
        out["parallel"]["dp"] = self.dp
        return out

    def to_yaml(self) -> str:
        """The resolved scenario as YAML (what ``res.save`` writes)."""
        return yaml.safe_dump(self.resolved(), sort_keys=False)

    def __repr__(self) -> str:
        p = self.spec.parallel
        return (
            f"Scenario({self.name!r}, gpus={self.num_gpus}, tp={p.tp}, pp={p.pp}, dp={self.dp}, "
            f"schedule={p.schedule!r}, m={self.num_microbatches})"
        )


def load_scenario(
    source: str | Path | dict[str, Any] | Scenario, overrides: dict[str, Any] | None = None
) -> Scenario | MultiJobScenario:
    """Load and validate a scenario from a YAML path or a dict (or pass a Scenario through);
    one with ``jobs`` is a :class:`~.multi_job.MultiJobScenario` (docs/multi_job.md).
    ``overrides`` (dotted keys, :func:`~.loader.apply_overrides`) are merged into the file
    as written, before a profile fills defaults and before validation, so an override can
    undo what the file implies and mend a file that would not validate alone."""
    if isinstance(source, (Scenario, MultiJobScenario)):
        return source.with_overrides(overrides) if overrides else source
    if isinstance(source, (str, Path)):
        source = read_yaml(source)
    if isinstance(source, dict):
        if overrides:
            source = apply_overrides(source, overrides)
        if "scheduler" in source:  # a queue file handed to run: say which command reads it
            raise ScenarioError(
                "scheduler",
                source["scheduler"],
                "this is a queue of arriving jobs (docs/scheduler.md), not a scenario; run it with "
                "`clustersim schedule FILE` (or clustersim.scheduler.schedule in Python)",
            )
        return MultiJobScenario(source) if "jobs" in source else Scenario(source)
    raise ScenarioError("scenario", source, "expected a YAML file path or a dict")


__all__ = ["MultiJobScenario", "Scenario", "load_scenario", "parse_overrides"]
