"""Chakra execution traces → Program: per-rank ET files compiled to clustersim's IR.

A folder of ``<prefix>.<rank>.et`` files (ranks 0 … N−1, as ASTRA-sim reads them) and an
optional ``comm_group.json`` (``{pg_name: [ranks]}``) becomes a Program with rank r on
device r (``gpu{r}``); the engine then maps sends and recvs onto the network and
collectives onto the fabric with the cluster's collective algorithms, so a trace taken on
one cluster runs on another topology. What is read (docs/interop.md):

* ``COMP_NODE`` → a compute op of ``duration_micros`` (``num_ops`` FLOPs);
  ``COMM_SEND_NODE``/``COMM_RECV_NODE`` → a send/recv of ``comm_size`` bytes, paired by
  (``comm_src``, ``comm_dst``, ``comm_tag``) in file order, as MPI matches messages;
  ``COMM_COLL_NODE`` → a collective of ``comm_type`` over ``pg_name``'s ranks (all ranks
  without one), the k-th of a group on every rank being one collective, of ``comm_size``
  bytes as ASTRA-sim reads them (an all-gather's is one rank's contribution: the op moves
  ``comm_size`` × group size, :func:`.chakra_export.per_rank_factor`);
* ``data_deps`` and ``ctrl_deps`` → dependencies (a ctrl dep on the op just before on the
  same lane is lane order, which clustersim keeps anyway);
* a rank's ops run in dependency order (ties by node id) on lanes by kind — ``compute``,
  ``send``, ``recv``, ``comm`` — unless ``clustersim.*`` attributes (written by
  :mod:`.chakra_export`) name the lane and the rest of the op, and the file's order is the
  Program's: then export → import gives back the same Program.

Every malformed input is a ScenarioError naming the file and, within it, the node.
"""

from __future__ import annotations

import heapq
import re
from collections import defaultdict, deque
from pathlib import Path

from ..errors import ProgramError, ScenarioError
from ..program import COLLECTIVE, COMPUTE, RECV, SEND, Program
from ..reader import read_json_file
from . import chakra_values as values
from .chakra_attrs import OWN, attrs_of
from .chakra_export import COMM_GROUPS, COMM_TYPE, NODE_TYPE
from .chakra_file import FIELD, read_metadata, read_trace
from .chakra_schema import NODE_TYPES

_KIND = {number: kind for kind, number in NODE_TYPE.items()}
_COLLECTIVE = {number: kind for kind, number in COMM_TYPE.items()}
_TYPE_NAME = {number: name for name, number in NODE_TYPES.items()}
_LANE = {COMPUTE: "compute", SEND: "send", RECV: "recv", COLLECTIVE: "comm"}
_RANK_FILE = re.compile(r"^(?P<prefix>.*)\.(?P<rank>\d+)\.et$")
#: clustersim.* attributes copied onto the Op as they are
_OP_FIELDS = (
    "stage",
    "microbatch",
    "phase",
    "iteration",
    "version",
    "mem_alloc",
    "mem_free",
    "stash_alloc",
    "stash_free",
    "algorithm",
    "arrivals",
)


def rank_files(folder: str | Path) -> list[Path]:
    """The ET files of ``folder`` in rank order, refused unless they share one prefix and
    number the ranks 0 … N−1 without a gap."""
    root = Path(folder)
    if not root.is_dir():
        raise ScenarioError(FIELD, str(folder), "expected a folder of Chakra ET files (<prefix>.<rank>.et)")
    found: dict[int, Path] = {}
    prefixes = set()
    for path in sorted(root.glob("*.et")):
        m = _RANK_FILE.match(path.name)
        if m is None:
            raise ScenarioError(FIELD, str(path), "an ET file must be named <prefix>.<rank>.et")
        prefixes.add(m["prefix"])
        found[int(m["rank"])] = path
    if not found:
        raise ScenarioError(FIELD, str(folder), "the folder holds no .et files")
    if len(prefixes) > 1:
        raise ScenarioError(FIELD, str(folder), f"ET files of several traces: prefixes {sorted(prefixes)}")
    missing = [r for r in range(max(found) + 1) if r not in found]
    if missing:
        raise ScenarioError(FIELD, str(folder), f"ranks 0..{max(found)} expected; missing rank {missing[0]}")
    return [found[r] for r in range(len(found))]


class _Rank:
    """One rank's file read and checked: its nodes in execution order and their attributes."""

    def __init__(self, rank: int, path: Path):
        self.rank, self.path = rank, path
        self.meta, nodes = read_trace(path)
        self.meta_attrs = attrs_of(self.meta)
        self.by_id: dict[int, object] = {}
        for node in nodes:
            if node.id in self.by_id:
                self.fail(node, "the id is used by an earlier node too")
            self.by_id[node.id] = node
        self.attrs = {n.id: attrs_of(n) for n in nodes}
        for node in nodes:
            if node.type not in _KIND:
                what = _TYPE_NAME.get(node.type)
                self.fail(
                    node,
                    f"node type {what or node.type} is {'not simulated' if what else 'unknown'}; "
                    f"clustersim reads {', '.join(_TYPE_NAME[t] for t in _KIND)}",
                )
            for dep in (*node.data_deps, *node.ctrl_deps):
                if dep not in self.by_id:
                    self.fail(node, f"depends on node {dep}, which this file does not hold")
        # clustersim's own file lists a device's ops in Program order, which is its lanes'
        # order (a dep may point forward); another producer's nodes run in dependency order
        self.order = nodes if OWN + "rank" in self.meta_attrs else self._topological(nodes)

    def fail(self, node, why: str):
        raise ScenarioError(FIELD, str(self.path), f"node {node.id} ({node.name!r}): {why}")

    def fail_metadata(self, why: str):
        raise ScenarioError(FIELD, str(self.path), f"global metadata: {why}")

    def failing(self, node):
        """A ``fail(why)`` for :mod:`.chakra_values` that names this file and ``node``."""
        return lambda why: self.fail(node, why)

    def _topological(self, nodes) -> list:
        """The nodes in dependency order, ties by smallest id (Kahn's algorithm)."""
        indeg = {n.id: len(set(n.data_deps) | set(n.ctrl_deps)) for n in nodes}
        succ = defaultdict(list)
        for n in nodes:
            for dep in set(n.data_deps) | set(n.ctrl_deps):
                succ[dep].append(n.id)
        ready = [i for i, k in indeg.items() if k == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            i = heapq.heappop(ready)
            out.append(self.by_id[i])
            for j in succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    heapq.heappush(ready, j)
        if len(out) < len(nodes):
            stuck = min(i for i, k in indeg.items() if k > 0)
            self.fail(self.by_id[stuck], "its dependencies form a cycle")
        return out

    def attr(self, node, name: str, default=None, required: bool = False):
        value = self.attrs[node.id].get(name, default)
        if value is None and required:
            self.fail(node, f"a {_TYPE_NAME[node.type]} needs the attribute {name!r}")
        return value


def import_chakra(folder: str | Path, num_gpus: int | None = None) -> Program:
    """The checked Program of the Chakra traces in ``folder`` (module docstring); with
    ``num_gpus``, the ranks must be that many GPUs (plus any non-GPU device, such as a
    parameter server, that clustersim's own export names)."""
    paths = rank_files(folder)
    if num_gpus is not None:
        check_rank_count(folder, num_gpus)
    ranks = [_Rank(r, p) for r, p in enumerate(paths)]
    names = [_device_name(rk.rank, rk.meta_attrs) for rk in ranks]
    groups = _comm_groups(Path(folder), len(ranks))
    order = _merge(ranks)
    new_id = {(rk.rank, node.id): i for i, (rk, node) in enumerate(order)}
    peers = _pair(order, new_id, len(ranks))
    prog = Program(len(ranks), names)
    for rk in ranks:
        mem = rk.meta_attrs.get(OWN + "static_memory")
        if mem is not None:
            prog.static_memory[rk.rank] = values.static_memory(rk.fail_metadata, OWN + "static_memory", mem)
    seen: dict[tuple[int, str], int] = defaultdict(int)  # collectives of a group met so far, per rank
    last_on_lane: dict[tuple[int, str], int] = {}
    for i, (rk, node) in enumerate(order):
        kind = _KIND[node.type]
        lane = rk.attr(node, OWN + "lane", _LANE[kind])
        before = last_on_lane.get((rk.rank, lane))
        deps = [new_id[rk.rank, d] for d in node.data_deps]
        serial = rk.attr(node, OWN + "serial", [])  # ASTRA-sim's chain (chakra_serial), not the Program's
        ctrl = (new_id[rk.rank, d] for d in node.ctrl_deps if d not in serial)
        deps += [c for c in ctrl if c != before and c not in deps]
        remote = rk.attr(node, OWN + "remote_deps", [])
        for r, d in zip(remote[::2], remote[1::2]):
            if (r, d) not in new_id:
                rk.fail(node, f"depends on node {d} of rank {r}, which does not exist")
            deps.append(new_id[r, d])
        fields = {f: rk.attrs[node.id][OWN + f] for f in _OP_FIELDS if OWN + f in rk.attrs[node.id]}
        fields["deps"] = tuple(deps)
        if kind in (SEND, RECV):
            fields["peer"] = peers[i]
            fields["tag"] = rk.attr(node, OWN + "tag", "")
        elif kind == COLLECTIVE:
            fields.update(_collective(rk, node, groups, seen))
        gathered = fields.get("collective") == "all_gather"
        fields.update(_quantities(rk, node, kind, len(fields["group"]) if gathered else 1))
        fields.update(_device_lists(rk, node, kind, len(ranks), fields.get("group", ())))
        op = prog.add(rk.rank, lane, kind, node.name, **fields)
        last_on_lane[rk.rank, lane] = op.id
    try:
        prog.check()
    except ProgramError as exc:
        raise ScenarioError(FIELD, str(folder), f"the traces do not form a runnable program: {exc}") from None
    return prog


def check_rank_count(folder: str | Path, num_gpus: int) -> None:
    """Refuse the traces in ``folder`` unless their GPU ranks are ``num_gpus`` — read from
    each file's metadata alone, so a scenario can be checked at load before anything else
    about the job (its batch, its plan) is compared with a GPU count the trace contradicts."""
    paths = rank_files(folder)
    names = [_device_name(r, attrs_of(read_metadata(p))) for r, p in enumerate(paths)]
    gpus = sum(1 for name in names if name.startswith("gpu"))
    if gpus != num_gpus:
        raise ScenarioError(
            FIELD,
            str(folder),
            f"the trace has {gpus} GPU ranks ({paths[0].name} …); the cluster has {num_gpus} GPUs "
            "(accepted: a cluster, or parallel.gpus, of as many GPUs as the trace has ranks)",
        )


def _device_name(rank: int, meta_attrs: dict) -> str:
    """The device rank ``rank`` runs on: the one clustersim's export names, else ``gpu{rank}``."""
    name = meta_attrs.get(OWN + "device", f"gpu{rank}")
    return name if isinstance(name, str) else f"gpu{rank}"


def _quantities(rk: _Rank, node, kind: str, members: int = 1) -> dict:
    """A node's seconds, FLOPs and bytes, each checked (:mod:`.chakra_values`); ``members``:
    how many ranks an all-gather's ``comm_size`` is multiplied by (1 for every other op)."""
    fail, out = rk.failing(node), {}
    if kind == COMPUTE:
        micros = values.seconds(fail, "duration_micros", node.duration_micros * 1e-6)
        out["duration"] = values.seconds(fail, OWN + "duration_s", rk.attr(node, OWN + "duration_s", micros))
        ops = rk.attr(node, OWN + "flops")
        out["flops"] = (
            values.flops(fail, OWN + "flops", ops)
            if ops is not None
            else float(values.flops(fail, "num_ops", rk.attr(node, "num_ops", 0)))
        )
    else:
        size = rk.attr(node, OWN + "nbytes")
        if size is not None:
            out["nbytes"] = values.nbytes(fail, OWN + "nbytes", size)
        else:  # Chakra's comm_size: an all-gather's is one rank's contribution (chakra_export.per_rank_factor)
            size = values.nbytes(fail, "comm_size", rk.attr(node, "comm_size", required=True))
            out["nbytes"] = values.nbytes(fail, "comm_size × group size", size * members)
    for key in ("mem_alloc", "mem_free", "stash_alloc", "stash_free"):
        if OWN + key in rk.attrs[node.id]:
            out[key] = values.nbytes(fail, OWN + key, rk.attrs[node.id][OWN + key])
    return out


def _device_lists(rk: _Rank, node, kind: str, devices: int, group: tuple) -> dict:
    """A node's ``shadows`` (folded twins' traffic), ``source`` (where a folded ring send's
    bytes leave from) and ``split`` (all-to-all-v bytes), checked."""
    out, fail = {}, rk.failing(node)
    source = rk.attr(node, OWN + "source")
    if source is not None:
        if (
            kind != SEND
            or isinstance(source, bool)
            or not isinstance(source, int)
            or not 0 <= source < devices
        ):
            fail(
                f"attribute {OWN}source holds {source!r}; accepted: on a send, a device index 0..{devices - 1}"
            )
        out["source"] = source
    text = rk.attr(node, OWN + "shadows")
    if text is not None:
        pairs = 2 if kind in (SEND, RECV) else None
        out["shadows"] = values.device_lists(fail, OWN + "shadows", text, devices, pairs)
    text = rk.attr(node, OWN + "split")
    if text is not None:
        out["split"] = values.byte_matrix(fail, OWN + "split", text, len(group))
    return out


def _merge(ranks: list[_Rank]) -> list[tuple[_Rank, object]]:
    """Every rank's nodes in one sequence: each rank's own order kept, the next node taken
    from the rank whose next node has the smallest (id, rank) — for clustersim's own
    export, whose ids are Program ids, this is the original Program order."""
    heads = [(rk.order[0].id, rk.rank, 0) for rk in ranks if rk.order]
    heapq.heapify(heads)
    out = []
    while heads:
        _, r, k = heapq.heappop(heads)
        rk = ranks[r]
        out.append((rk, rk.order[k]))
        if k + 1 < len(rk.order):
            heapq.heappush(heads, (rk.order[k + 1].id, r, k + 1))
    return out


def _pair(order, new_id, n: int) -> dict[int, int]:
    """Each send's and recv's peer (new op ids), matched by (src, dst, tag) in order."""
    pending: dict[tuple, dict[str, deque]] = defaultdict(lambda: {SEND: deque(), RECV: deque()})
    peers: dict[int, int] = {}
    where: dict[int, tuple] = {}
    for i, (rk, node) in enumerate(order):
        kind = _KIND[node.type]
        if kind not in (SEND, RECV):
            continue
        other = rk.attr(node, "comm_dst" if kind == SEND else "comm_src", required=True)
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


def _collective(rk: _Rank, node, groups: dict, seen: dict) -> dict:
    comm_type = rk.attr(node, "comm_type", required=True)
    if comm_type not in _COLLECTIVE:
        rk.fail(node, f"comm_type {comm_type} has no clustersim collective; known: {sorted(_COLLECTIVE)}")
    pg = rk.attr(node, "pg_name", "")
    if pg and pg not in groups:
        rk.fail(node, f"pg_name {pg!r} is not in {COMM_GROUPS} (groups: {sorted(groups)[:6]})")
    group = tuple(groups[pg]) if pg else tuple(range(groups[""]))
    if rk.rank not in group:
        rk.fail(node, f"its rank {rk.rank} is not in group {pg!r} {list(group)}")
    k = seen[rk.rank, pg]
    seen[rk.rank, pg] = k + 1
    return {
        "collective": _COLLECTIVE[comm_type],
        "group": group,
        "tag": rk.attr(node, OWN + "tag", f"{pg or 'all'}#{k}"),
    }


def _comm_groups(folder: Path, n: int) -> dict:
    """``comm_group.json`` checked (each group a list of distinct ranks of the trace);
    the key ``""`` holds the rank count, the group of a collective without ``pg_name``."""
    path = folder / COMM_GROUPS
    groups = read_json_file(path, FIELD) if path.is_file() else {}
    if not isinstance(groups, dict):
        raise ScenarioError(FIELD, str(path), "expected a JSON object {pg_name: [ranks]}")
    for name, ranks in groups.items():
        if not (isinstance(ranks, list) and all(isinstance(r, int) and 0 <= r < n for r in ranks)):
            raise ScenarioError(FIELD, str(path), f"group {name!r}: expected a list of ranks 0..{n - 1}")
    return {**groups, "": n}
