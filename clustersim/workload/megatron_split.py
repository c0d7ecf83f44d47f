"""Megatron-Core's uneven pipeline split: the decoder layers each model chunk builds.

Megatron-Core (``megatron/core/transformer/transformer_block.py``, ``get_num_layers_to_build``,
checked by ``TransformerConfig.__post_init__``) cuts a model two uneven ways:

* ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``: the first
  (last) pipeline stage holds that many layers; the rest split evenly over the middle stages.
  Each count must be > 0 and divide by the virtual stages; the middle layers must divide by
  the middle stages (there are middle layers exactly when there are middle stages), and each
  middle stage's share by the virtual stages.
* ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``:
  the embedding (loss) counts as one layer: ``layers + 1 (+ 1)`` must divide by ``pp`` and
  each stage's share by the virtual stages; the first (last) model chunk then builds one
  decoder layer fewer (zero is allowed: a chunk of only the embedding or the loss).

The two ways exclude each other. A stage's layers split evenly over its virtual stages.

* ``--pipeline-model-parallel-layout`` (``PipelineParallelLayerLayout``,
  ``megatron/core/transformer/pipeline_parallel_layer_layout.py``): each chunk's layers
  spelled out, ``E`` the embedding, ``t`` a decoder layer, ``m`` an MTP layer, ``L`` the loss,
  ``|`` between chunks, ``(…)*n`` and ``x*n`` repeats, commas cosmetic — e.g. DeepSeek-V3's
  ``Et*3|(tt|)*29,m|L`` at pp 16. Its chunks count ``pp × virtual stages``; ``E`` comes first
  and ``L`` last, once each; the ``t`` count is the model's layers, the ``m`` count its MTP
  layers, after every ``t``. It excludes the other ways. Here the MTP layers run with the
  loss (:func:`~.stage_builder.transformer_chunk_costs` prices them on the last chunk), so
  a layout placing them in another chunk is refused.

Chunk ``k = a·pp + b`` is virtual stage ``a`` of pipeline stage ``b`` (Megatron's order, and
the order of ``parallel.partition``'s list form).
"""

from __future__ import annotations

import re
from typing import Any

from .resolve import resolve_transformer

#: Megatron's layout characters (``PipelineParallelLayerLayout.parse_str_to_list``)
LAYOUT_CHARS = {"E": "the embedding", "t": "a decoder layer", "m": "an MTP layer", "L": "the loss"}


def megatron_split(
    layers: int,
    pp: int,
    vp: int = 1,
    *,
    first_stage_layers: int | None = None,
    last_stage_layers: int | None = None,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
    layout: str | None = None,
    mtp_layers: int = 0,
) -> list[int]:
    """Decoder layers of each of the ``pp × vp`` model chunks under Megatron-Core's uneven
    split (module doc; the keywords are ``parallel.partition``'s Megatron fields, and the
    model's ``mtp_layers``, which a layout places). Raises ``ValueError`` saying which of
    Megatron's rules fails."""
    first, last = first_stage_layers, last_stage_layers
    embedding, loss = account_for_embedding, account_for_loss
    if layout is not None:
        if first is not None or last is not None or embedding or loss:
            raise ValueError("a layout cannot be combined with the other ways of splitting")
        return layout_split(layout, layers, pp, vp, mtp_layers)
    if (first is not None or last is not None) and (embedding or loss):
        raise ValueError(
            "first/last stage layer counts cannot be combined with accounting for the embedding or loss"
        )
    if first is not None or last is not None:
        per_stage = _first_last(layers, pp, vp, first, last)
    else:
        total = layers + embedding + loss
        if total % pp:
            raise ValueError(f"{_counted(layers, embedding, loss)} = {total} must divide by pp = {pp}")
        per_stage = [total // pp] * pp
    for stage, n in enumerate(per_stage):
        if n % vp:
            raise ValueError(f"stage {stage}'s {n} layers must divide by virtual_stages = {vp}")
    chunks = [n // vp for _ in range(vp) for n in per_stage]
    chunks[0] -= embedding
    chunks[-1] -= loss
    if min(chunks) < 0:
        raise ValueError("a model chunk holding the embedding or the loss has no layer to give up")
    return chunks


def layout_split(layout: str, layers: int, pp: int, vp: int, mtp_layers: int = 0) -> list[int]:
    """Decoder layers of each chunk of Megatron's ``--pipeline-model-parallel-layout``
    string ``layout`` (module doc) for a model of ``layers`` decoder and ``mtp_layers`` MTP layers."""
    flat = layout.replace(",", "")  # Megatron's unrolling: groups first, then single characters
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        flat = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), flat)
    unknown = sorted(set(flat) - set(LAYOUT_CHARS) - {"|"})
    if unknown:
        known = ", ".join(f"{c} ({what})" for c, what in LAYOUT_CHARS.items())
        raise ValueError(f"unknown layout character {unknown[0]!r}; known: {known}, | between chunks")
    chunks = flat.split("|")
    if len(chunks) != pp * vp:
        raise ValueError(
            f"the layout holds {len(chunks)} chunks; pp × virtual_stages = {pp} × {vp} = {pp * vp} expected "
            "(Megatron's virtual stages are chunks / pp: state parallel.virtual_stages)"
        )
    whole = "".join(chunks)
    counts = {c: whole.count(c) for c in LAYOUT_CHARS}
    if not whole.startswith("E") or not whole.endswith("L") or counts["E"] != 1 or counts["L"] != 1:
        raise ValueError("the embedding E must come first and the loss L last, once each")
    for char, want in (("t", layers), ("m", mtp_layers)):
        if counts[char] != want:
            raise ValueError(
                f"the layout holds {counts[char]} × {char} ({LAYOUT_CHARS[char]}); the model has {want}"
            )
    if "m" in whole and ("t" in whole[whole.index("m") :] or any("m" in c for c in chunks[:-1])):
        raise ValueError(
            "the MTP layers must follow every decoder layer, in the last chunk with the loss "
            "(a chunk of MTP layers apart from the loss is not modelled)"
        )
    return [c.count("t") for c in chunks]


def model_split(model, pp: int, vp: int, form: dict[str, Any]) -> list[int]:
    """Decoder layers per chunk of transformer ``model`` (a model section) under Megatron's
    uneven split ``form`` (``parallel.partition``'s fields)."""
    cfg = resolve_transformer(model)
    return megatron_split(cfg.layers, pp, vp, mtp_layers=cfg.mtp_layers, **form)


def megatron_placement(schedule) -> bool:
    """Whether ``schedule`` places model chunk ``a·pp + b`` on stage ``b``, as Megatron's
    split assumes (one direction, looping placement)."""
    return schedule.directions == 1 and schedule.placement == "loop"


def _first_last(layers: int, pp: int, vp: int, first: int | None, last: int | None) -> list[int]:
    """Layers per pipeline stage with the first and/or last stage's count given."""
    ends = [n for n in (first, last) if n is not None]
    if pp < len(ends) or (pp == 1 and ends):
        raise ValueError(f"pp = {pp} has no separate first and last stage to size")
    middle_layers, middle_stages = layers - sum(ends), pp - len(ends)
    if middle_layers < 0 or bool(middle_layers) != bool(middle_stages):
        raise ValueError(
            f"{middle_layers} layers left for the {middle_stages} middle stages "
            f"(model.layers = {layers} minus the first/last stage counts)"
        )
    if middle_stages and middle_layers % middle_stages:
        raise ValueError(
            f"the {middle_layers} middle layers must divide by the {middle_stages} middle stages"
        )
    each = middle_layers // middle_stages if middle_stages else 0
    out = [each] * pp
    if first is not None:
        out[0] = first
    if last is not None:
        out[-1] = last
    return out


def _counted(layers: int, embedding: bool, loss: bool) -> str:
    return (
        f"model.layers = {layers}"
        + (" + 1 (embedding)" if embedding else "")
        + (" + 1 (loss)" if loss else "")
    )


def uneven_split(layers: int, pp: int, vp: int = 1) -> dict[str, Any] | None:
    """A Megatron-Core form of ``parallel.partition`` splitting ``layers`` into ``pp × vp``
    chunks when they do not divide evenly, as Megatron's recipes pick one: the embedding
    and loss counted as layers (Llama-3.1-405B's 126 layers at pp 8: 15, 16 × 6, 15); else
    the first and last stage each given the fewest layers that leave an even middle, the
    first taking any extra (DeepSeek-V3's 61 at pp 16: 3, 4 × 14, 2). Every chunk keeps at
    least one layer. None when no such form exists."""
    tries = [{"account_for_embedding": True, "account_for_loss": True}]
    if pp > 2:  # middle stages of m layers each, the rest shared by the ends (the first: any odd one)
        ends = [(m, layers - m * (pp - 2)) for m in range(layers // (pp - 2), 0, -1)]
        tries += [
            {"first_stage_layers": rest - rest // 2, "last_stage_layers": rest // 2}
            for m, rest in ends
            if 0 < rest // 2 and rest - rest // 2 <= m
        ]
    for form in tries:
        try:
            chunks = megatron_split(layers, pp, vp, **form)
        except ValueError:
            continue
        if min(chunks) >= 1:
            return form
    return None
