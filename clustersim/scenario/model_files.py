"""The files a ``model`` section names, checked at load before the cross-field rules.

A Chakra trace (``model.kind: trace``) fixes its own rank count; when the cluster (or
``parallel.gpus``) has another number of GPUs, every rule that derives something from the
GPU count — data-parallel degree, batch split — would fail first with an error about that
derived field, sending the user to fix the wrong thing. So :func:`check_model_files`
compares the counts first, from each rank file's metadata alone (the nodes are read once,
when the job compiles). A ``config.json`` (``model.hf_config``) sets model fields through
its own keys; each is held to the range of the field it sets (docs/limits.md), and a
value past it is named by its key.
"""

from __future__ import annotations

from ..errors import ScenarioError
from ..workload.hf_config import HF_FIELDS, read_hf_config
from .rules import job_gpus
from .schema import ScenarioSpec, field_ranges


def check_model_files(spec: ScenarioSpec) -> None:
    """Raise ScenarioError when a trace model's GPU ranks — or its ``replay_dp`` — are not
    the job's GPUs (``model.chakra``, ``model.replay_dp``), or a config.json key is past its model field's range (``model.hf_config``)."""
    model = spec.model
    if model.kind == "trace":
        from ..interop.chakra_import import check_rank_count  # (protobuf: only trace models need it)

        gpus = job_gpus(spec)
        if model.replay_dp is None and model.replay_pp is None:
            check_rank_count(model.chakra, gpus)
        elif model.replay_dp is not None and gpus % model.replay_dp:
            raise ScenarioError(
                "model.replay_dp",
                model.replay_dp,
                f"a trace replayed at replay_dp replicas runs on a multiple of that many GPUs (replay_dp × "
                f"the ranks of one replica); the job has {gpus}",
            )
    elif model.kind == "transformer" and model.hf_config:
        check_hf_ranges(model.hf_config)


def check_hf_ranges(path: str) -> None:
    """Each whole-number key of config.json ``path`` within its model field's range."""
    ranges = field_ranges()
    for key, value in read_hf_config(path).items():
        field = HF_FIELDS.get(key)
        if field is None or isinstance(value, bool) or not isinstance(value, int):
            continue  # (other types are refused by load_hf_config, naming the key)
        rng = ranges[f"model.{field}"]
        if value and not (rng.lo <= value <= rng.hi):  # (0 reads as "absent" for optional keys)
            raise ScenarioError(
                "model.hf_config",
                path,
                f"{key} = {value:,} sets model.{field}; accepted: {rng}",
            )
