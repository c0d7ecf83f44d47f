"""A scenario load's copy of its cluster preset (:func:`clustersim.hardware.presets.expand_preset`,
built directly for speed, issue 38 item 8) is what :func:`copy.deepcopy` gives: equal, of
the same types, and sharing no mutable part with the preset, so changing it changes no preset."""

from __future__ import annotations

import copy

import pytest

from clustersim.hardware.presets import CLUSTER_PRESETS, expand_preset


def _mutables(value, path=()):
    """(path, object) of every dict and list inside ``value``."""
    if isinstance(value, dict):
        yield path, value
        for k, v in value.items():
            yield from _mutables(v, (*path, k))
    elif isinstance(value, list | tuple):
        if isinstance(value, list):
            yield path, value
        for i, v in enumerate(value):
            yield from _mutables(v, (*path, i))


@pytest.mark.parametrize("name", sorted(CLUSTER_PRESETS))
def test_a_preset_copy_is_its_deepcopy_sharing_nothing_mutable(name):
    preset = CLUSTER_PRESETS[name]
    fresh, deep = expand_preset(name), copy.deepcopy(preset)
    assert fresh == deep and repr(fresh) == repr(deep)
    theirs = {id(obj) for _, obj in _mutables(preset)}
    mine = list(_mutables(fresh))
    assert len(mine) == len(list(_mutables(deep)))
    assert not any(id(obj) in theirs for _, obj in mine)
    mine[0][1]["__probe__"] = 1  # the copy's own: the preset stays as it was
    assert "__probe__" not in CLUSTER_PRESETS[name] and CLUSTER_PRESETS[name] == deep
