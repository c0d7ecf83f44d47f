"""Issue 39's input surfaces: each value a Chakra trace, a Kineto trace, a ``model.profile``
table, an HF config or a plan search can carry that used to run silently or crash is
refused with one error naming the file, the node/attribute/field, the value and what is
accepted (docs/limits.md)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.interop.chakra_attrs import OWN, attr
from clustersim.interop.chakra_file import read_trace, write_trace
from clustersim.interop.chakra_values import MAX_BYTES, MEMORY_KINDS

ROOT = Path(__file__).resolve().parents[1]

# -- Chakra ET (case 5, 9, 12) -------------------------------------------------------------------


def _four_ranks(folder: Path) -> list[Path]:
    return cs.export_chakra(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml", folder)


def _set_attr(path: Path, kind: int, name: str, value, which: str | None = None) -> str:
    """Give the first node of type ``kind`` in ``path`` attribute ``name`` = ``value``;
    returns the node's name."""
    meta, nodes = read_trace(path)
    node = next(n for n in nodes if n.type == kind)
    kept = [a for a in node.attr if a.name != name]
    del node.attr[:]
    node.attr.extend([*kept, attr(name, value, which)])
    write_trace(path, meta, nodes)
    return node.name


def _refusal(folder: Path, gpus: int = 4) -> str:
    with pytest.raises(cs.ScenarioError) as err:
        cs.import_chakra(folder, gpus)
    return str(err.value)


@pytest.mark.parametrize(
    "name,value,accepted",
    [
        (OWN + "duration_s", -1.0, "seconds from 0 to 1,000,000"),
        (OWN + "duration_s", math.nan, "seconds from 0 to 1,000,000"),
        (OWN + "duration_s", math.inf, "seconds from 0 to 1,000,000"),
        ("num_ops", -(2**62), "FLOPs from 0 to 1e+24"),
    ],
)
def test_chakra_compute_values_out_of_range_are_refused(tmp_path, name, value, accepted):
    files = _four_ranks(tmp_path)
    _remove_attr(files[1], OWN + "flops")  # num_ops is read where clustersim's own FLOPs are absent
    node = _set_attr(files[1], 4, name, value)
    msg = _refusal(tmp_path)
    assert "model.chakra" in msg and "trace.1.et" in msg and f"({node!r})" in msg
    assert f"attribute {name} = {value!r}" in msg and accepted in msg


def _remove_attr(path: Path, name: str) -> None:
    meta, nodes = read_trace(path)
    for node in nodes:
        kept = [a for a in node.attr if a.name != name]
        del node.attr[:]
        node.attr.extend(kept)
    write_trace(path, meta, nodes)


def _set_static_memory(path: Path, value) -> None:
    meta, nodes = read_trace(path)
    kept = [a for a in meta.attr if a.name != OWN + "static_memory"]
    del meta.attr[:]
    meta.attr.extend([*kept, attr(OWN + "static_memory", value)])
    write_trace(path, meta, nodes)


@pytest.mark.parametrize(
    "value,words",
    [
        ([1, 2, 3], f"a list of {len(MEMORY_KINDS)} byte counts"),
        ([1] * 7, f"a list of {len(MEMORY_KINDS)} byte counts"),
        (
            [2**62] * 5,
            f"static_memory[0] (weights) = {2**62} is invalid; accepted: bytes from 0 to {MAX_BYTES:,}",
        ),
        ([0, -4, 0, 0, 0], "static_memory[1] (grads) = -4 is invalid"),
    ],
)
def test_chakra_static_memory_of_the_wrong_shape_or_size_is_refused(tmp_path, value, words):
    files = _four_ranks(tmp_path)
    _set_static_memory(files[2], value)
    msg = _refusal(tmp_path)
    assert "trace.2.et" in msg and "global metadata" in msg and words in msg


def test_chakra_byte_counts_past_a_pebibyte_are_refused(tmp_path):
    files = _four_ranks(tmp_path)
    node = _set_attr(files[0], 5, "comm_size", 2**62)  # a send
    msg = _refusal(tmp_path)
    assert f"({node!r})" in msg and f"attribute comm_size = {2**62}" in msg and f"{MAX_BYTES:,}" in msg


@pytest.mark.parametrize(
    "text,words",
    [
        ("[[1e999]]", "1e999 is not a finite number"),
        ("[[NaN]]", "NaN is not a number"),
        ("[[0, 99]]", "device indices 0..3, 2 per list"),
        ("[[0]]", "2 per list"),
        ("not json", "is not a JSON list of lists"),
        ("[1, 2]", "accepted: a JSON list of lists"),
    ],
)
def test_chakra_shadows_of_a_send_are_checked_at_import(tmp_path, text, words):
    files = _four_ranks(tmp_path)
    node = _set_attr(files[0], 5, OWN + "shadows", text)
    msg = _refusal(tmp_path)
    assert "trace.0.et" in msg and f"({node!r})" in msg and OWN + "shadows" in msg and words in msg


def test_chakra_rank_count_is_the_first_error(tmp_path):
    """A 4-rank trace on 8 GPUs with a batch that fits the trace: the rank count is named,
    not the global batch (which would fit once the cluster is right)."""
    _four_ranks(tmp_path)
    raw = {
        "name": "t",
        "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu": "A100-SXM4-80GB"},
        "model": {"kind": "trace", "chakra": str(tmp_path)},
        "training": {"global_batch": 4},
    }
    with pytest.raises(cs.ScenarioError) as err:
        cs.load_scenario(raw)
    assert err.value.field == "model.chakra"
    assert "the trace has 4 GPU ranks" in str(err.value) and "the cluster has 8 GPUs" in str(err.value)
    raw["cluster"]["gpus_per_node"] = 4
    assert cs.load_scenario(raw).num_gpus == 4
