"""The layer table of a labelled Chakra export: what ``model.replay_pp`` needs to split
stages beyond the ops' ``clustersim.layer`` labels (:mod:`.chakra_split`, docs/interop.md).

``export_chakra(scenario, folder, layers=True)`` writes it in every rank's GlobalMetadata as
``clustersim.layer_grads`` (int64 list), ``clustersim.layer_send``,
``clustersim.layer_gather`` and ``clustersim.layer_tied`` (int64), which other readers skip.
"""

from __future__ import annotations

from pathlib import Path

from ..workload.rules import model_layers
from ..workload.stage_cost import chunk_costs
from .chakra_attrs import OWN, attr, attrs_of
from .chakra_file import read_metadata

#: the GlobalMetadata attributes of a labelled export, by :func:`layer_table` key
TABLE = {key: f"{OWN}layer_{key}" for key in ("grads", "send", "gather", "tied")}


def layer_table(sc) -> dict:
    """What a labelled export's metadata says of the model (every rank the same): each
    layer's data-parallel gradient bytes (``grads``; the embedding's with the first, the
    output layer's with the last), the bytes one micro-batch's activation takes across a
    layer boundary (``send``), the all-gather of it a receiver runs (``gather``;
    Megatron-LM 2021's scatter-gather) and the tied embedding's gradient all-reduced
    between the first and the last stage (``tied``), 0 where none — the per-layer chunk
    costs of ``sc``."""
    n = model_layers(sc.model)
    costs = chunk_costs(sc, n, [1] * n)
    return {
        "grads": [c.grad_bytes + c.expert_grad_bytes for c in costs],
        "send": costs[0].activation_bytes if n > 1 else 0,
        "gather": costs[0].recv_gather,
        "tied": costs[0].tied_grad_bytes,
    }


def table_attrs(table: dict) -> list:
    """``table`` (:func:`layer_table`) as GlobalMetadata attributes."""
    return [attr(name, table[key]) for key, name in TABLE.items()]


def read_table(folder) -> dict | None:
    """The layer table rank 0's metadata in trace ``folder`` holds (:func:`layer_table`), or None."""
    meta = attrs_of(read_metadata(next(Path(folder).glob("*.0.et"))))  # (the import checked the folder)
    if not all(name in meta for name in TABLE.values()):
        return None
    return {key: meta[name] for key, name in TABLE.items()}
