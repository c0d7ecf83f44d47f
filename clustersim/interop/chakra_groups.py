"""Who talks to whom in a Chakra trace: process groups, collective instances, send/recv pairs.

Used by :mod:`.chakra_import` on its ranks (each a ``_Rank``: the file's nodes, their
attributes, ``fail`` naming file and node). Process groups come from ``comm_group.json``
(ASTRA-sim's ``--comm-group-configuration``) and the METADATA_NODEs of Chakra's PyTorch
converter (:func:`.chakra_pytorch.process_groups`); a collective without ``pg_name`` — or
with ASTRA-sim's default ``"0"`` where no group declares it — spans every rank.
"""

from __future__ import annotations

from collections import defaultdict, deque
from pathlib import Path

from ..errors import ScenarioError
from ..program import RECV, SEND
from ..reader import read_json_file
from . import chakra_pytorch as pytorch
from .chakra_attrs import OWN
from .chakra_export import COMM_GROUPS, COMM_TYPE
from .chakra_file import FIELD
from .chakra_schema import NODE_TYPES

_COLLECTIVE = {number: kind for kind, number in COMM_TYPE.items()}


def pair(order, n: int, groups: dict) -> dict[int, int]:
    """Each send's and recv's peer (new op ids), matched by (src, dst, tag) in order; an
    end not given is the other rank of the node's two-rank process group."""
    pending: dict[tuple, dict[str, deque]] = defaultdict(lambda: {SEND: deque(), RECV: deque()})
    peers: dict[int, int] = {}
    where: dict[int, tuple] = {}
    for i, (rk, node) in enumerate(order):
        kind = rk.kind(node)
        if kind not in (SEND, RECV):
            continue
        field = "comm_dst" if kind == SEND else "comm_src"
        other = rk.attr(node, field)
        if other is None:
            pg = rk.attr(node, "pg_name")
            if pg is None:
                rk.fail(node, f"has neither {field} nor a pg_name whose process group defines it")
            other = pytorch.peer(rk.failing(node), rk.rank, _group(rk, node, groups, pg), field, pg)
        if not 0 <= other < n:
            rk.fail(node, f"its peer rank {other} is not one of the trace's ranks 0..{n - 1}")
        src, dst = (rk.rank, other) if kind == SEND else (other, rk.rank)
        key = (src, dst, rk.attr(node, "comm_tag", 0))
        mine, theirs = pending[key][kind], pending[key][RECV if kind == SEND else SEND]
        if theirs:
            j = theirs.popleft()
            peers[i], peers[j] = j, i
        else:
            mine.append(i)
            where[i] = (rk, node)
    for key, sides in pending.items():
        for kind, left in sides.items():
            if left:
                rk, node = where[left[0]]
                want = "recv on rank" if kind == SEND else "send from rank"
                rk.fail(
                    node,
                    f"{kind} of tag {key[2]} has no matching {want} {key[1] if kind == SEND else key[0]}",
                )
    return peers


def collective(rk, node, groups: dict, seen: dict) -> dict:
    """A COMM_COLL_NODE's collective kind, group and tag (the k-th of its group on its rank)."""
    comm_type = rk.attr(node, "comm_type", required=True)
    if comm_type not in _COLLECTIVE:
        rk.fail(node, f"comm_type {comm_type} has no clustersim collective; known: {sorted(_COLLECTIVE)}")
    pg = rk.attr(node, "pg_name", "")
    group = _group(rk, node, groups, pg)
    dims = rk.attr(node, "involved_dim")
    if dims is not None and not all(dims):
        rk.fail(
            node,
            f"involved_dim {dims} leaves out dimensions of ASTRA-sim's network, which clustersim's "
            "topology does not have; accepted: every dimension true, or a pg_name naming the ranks",
        )
    if rk.rank not in group:
        rk.fail(node, f"its rank {rk.rank} is not in group {pg!r} {list(group)}")
    k = seen[rk.rank, pg]
    seen[rk.rank, pg] = k + 1
    return {
        "collective": _COLLECTIVE[comm_type],
        "group": group,
        "tag": rk.attr(node, OWN + "tag", f"{pg or 'all'}#{k}"),
    }


def _group(rk, node, groups: dict, pg: str) -> tuple[int, ...]:
    """The ranks of process group ``pg`` ("" or an undeclared ``"0"``, ASTRA-sim's default
    group: every rank)."""
    if pg and pg in groups:
        return tuple(groups[pg])
    if pg not in ("", "0"):
        rk.fail(
            node,
            f"pg_name {pg!r} is not in {COMM_GROUPS} nor a METADATA_NODE (groups: {sorted(groups)[:6]})",
        )
    return tuple(range(groups[""]))


def comm_groups(folder: Path, ranks: list) -> dict:
    """``comm_group.json`` checked (each group a list of distinct ranks of the trace) and
    the process groups of every rank's METADATA_NODEs (:func:`.chakra_pytorch.process_groups`),
    which must agree; the key ``""`` holds the rank count, the group of a collective without
    ``pg_name``."""
    n = len(ranks)
    path = folder / COMM_GROUPS
    groups = read_json_file(path, FIELD) if path.is_file() else {}
    if not isinstance(groups, dict):
        raise ScenarioError(FIELD, str(path), "expected a JSON object {pg_name: [ranks]}")
    for name, members in groups.items():
        if not (isinstance(members, list) and all(isinstance(r, int) and 0 <= r < n for r in members)):
            raise ScenarioError(FIELD, str(path), f"group {name!r}: expected a list of ranks 0..{n - 1}")
    for rk in ranks:
        for node in rk.by_id.values():
            if node.type != NODE_TYPES["METADATA_NODE"]:
                continue
            for name, members in pytorch.process_groups(rk.failing(node), node, n).items():
                if name in groups and tuple(groups[name]) != members:
                    rk.fail(node, f"process group {name!r} {list(members)} differs from {list(groups[name])}")
                groups[name] = members
    return {**groups, "": n}
