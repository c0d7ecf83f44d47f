"""Hardware presets in scenarios: ``cluster: {preset: dgx_a100, nodes: 4}``.

The preset's values are defaults; any field the user writes wins (merged key by key,
one level into nested sections such as ``intra_node`` and ``nic``).
"""

from __future__ import annotations

from typing import Any

from ..hardware.presets import expand_preset


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def expand_cluster_preset(raw: dict[str, Any]) -> dict[str, Any]:
    """Return ``raw`` with ``cluster.preset`` expanded under the user's own cluster fields."""
    cluster = raw.get("cluster") if isinstance(raw, dict) else None
    if not isinstance(cluster, dict) or not cluster.get("preset"):
        return raw
    return {**raw, "cluster": _merge(expand_preset(cluster["preset"]), cluster)}
