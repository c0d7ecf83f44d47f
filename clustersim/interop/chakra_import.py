"""Chakra execution traces → Program: per-rank ET files compiled to clustersim's IR.

A folder of ``<prefix>.<rank>.et`` files (ranks 0 … N−1, as ASTRA-sim reads them) and an
optional ``comm_group.json`` (``{pg_name: [ranks]}``) becomes a Program with rank r on
device r (``gpu{r}``); the engine then maps sends and recvs onto the network and
collectives onto the fabric with the cluster's collective algorithms, so a trace taken on
one cluster runs on another topology. What is read (docs/interop.md):

* ``COMP_NODE`` → a compute op of ``duration_micros`` (``num_ops`` FLOPs), a node without
  one priced on the scenario's GPU (:mod:`.chakra_pricing`); one with ``is_cpu_op`` (as is
  any host-side communication call) on the rank's host lane, beside its GPU lanes;
  ``MEM_LOAD_NODE``/``MEM_STORE_NODE`` → a move of ``tensor_size`` bytes on the memory lane;
  ``METADATA_NODE`` → the process groups it lists (:mod:`.chakra_pytorch`), no op;
  ``COMM_SEND_NODE``/``COMM_RECV_NODE`` → a send/recv of ``comm_size`` bytes, paired by
  (``comm_src``, ``comm_dst``, ``comm_tag``) in file order, as MPI matches messages (an end
  not given: the other rank of the node's two-rank ``pg_name``);
  ``COMM_COLL_NODE`` → a collective of ``comm_type`` over ``pg_name``'s ranks (all ranks
  without one, or with ASTRA-sim's default group ``"0"`` undeclared), the k-th of a group on every rank being one collective, of ``comm_size``
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
import warnings
from collections import defaultdict
from itertools import chain
from pathlib import Path

from ..errors import ProgramError, ScenarioError, ScenarioWarning
from ..program import COLLECTIVE, COMPUTE, RECV, SEND, Op, Program
from . import chakra_pytorch as pytorch
from . import chakra_values as values
from .chakra_attrs import OWN, attrs_of
from .chakra_export import NODE_TYPE
from .chakra_file import FIELD, read_metadata, read_trace, read_view
from .chakra_groups import collective, comm_groups, pair
from .chakra_pricing import Pricer
from .chakra_schema import NODE_TYPES, Node

_KIND = {number: kind for kind, number in NODE_TYPE.items()}
_TYPE_NAME = {number: name for name, number in NODE_TYPES.items()}
_LANE = {COMPUTE: "compute", SEND: "send", RECV: "recv", COLLECTIVE: "comm"}
_MEMORY = {NODE_TYPES["MEM_LOAD_NODE"], NODE_TYPES["MEM_STORE_NODE"]}
#: node types that are no op: their dependencies pass through them
_NO_OP = {NODE_TYPES["INVALID_NODE"], NODE_TYPES["METADATA_NODE"]}
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
    "layer",
)
#: (Op field, attribute name) of :data:`_OP_FIELDS`
_OWN_FIELDS = tuple((f, OWN + f) for f in _OP_FIELDS)
#: the attributes a node's memory moves come in, by their Op field
_MEMORY_FIELDS = tuple((k, OWN + k) for k in ("mem_alloc", "mem_free", "stash_alloc", "stash_free"))


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

    def __init__(self, rank: int, path: Path, known: dict):
        """``known``: the attribute dicts read so far (:func:`.chakra_file.read_view`)."""
        self.rank, self.path = rank, path
        view = read_view(path, known)
        if view is None:  # (a damaged file: the message-by-message read names where)
            self.meta, nodes = read_trace(path)
            attrs = list(map(attrs_of, nodes))
        else:
            self.meta, nodes, attrs = view
        self.meta_attrs = attrs_of(self.meta)
        ids = [n.id for n in nodes]
        self.by_id: dict[int, object] = dict(zip(ids, nodes))
        if len(self.by_id) < len(nodes):
            first = {}
            for node in nodes:
                if first.setdefault(node.id, node) is not node:
                    self.fail(node, "the id is used by an earlier node too")
        self.attrs = dict(zip(ids, attrs))
        # Chakra's PyTorch converter (its GlobalMetadata names the PyTorch trace ``schema``)
        # writes a node's caller as its ctrl dep and the execution order as data deps
        # (``convert_ctrl_dep_to_data_dep``): there, only data deps are waits, as in Chakra's feeder
        self.call_tree = "schema" in self.meta_attrs
        self.callers = {n.id: list(n.ctrl_deps) for n in nodes} if self.call_tree else {}
        for node in nodes if self.call_tree else ():
            del node.ctrl_deps[:]
        # each rule tested over the whole file first; the node-by-node pass names the first breach
        waits = chain.from_iterable(
            [n.data_deps for n in nodes] if self.call_tree else [(*n.data_deps, *n.ctrl_deps) for n in nodes]
        )
        if not (_TYPE_NAME.keys() >= {n.type for n in nodes} and self.by_id.keys() >= set(waits)):
            self._check_nodes(nodes)
        self.own = OWN + "rank" in self.meta_attrs
        # clustersim's own file lists a device's ops in Program order, which is its lanes'
        # order (a dep may point forward); another producer's nodes run in dependency order
        order = nodes if self.own else self._topological(nodes)
        self.order = [n for n in order if n.type not in _NO_OP]
        self.through: dict[int, list[int]] = {}  # a no-op node → the ops it stands for as a dep
        for node in order if len(self.order) < len(order) else ():
            if node.type in _NO_OP:
                self.through[node.id] = self.deps_of(node.data_deps)

    def _check_nodes(self, nodes) -> None:
        """Refuse the first node of an unknown type or with a dependency the file does not hold."""
        for node in nodes:
            if node.type not in _TYPE_NAME:
                self.fail(
                    node,
                    f"node type {node.type} is unknown; Chakra's et_def.proto defines "
                    f"{', '.join(f'{t} {n}' for t, n in sorted(_TYPE_NAME.items()))}",
                )
            for dep in (*node.data_deps, *(() if self.call_tree else node.ctrl_deps)):
                if dep not in self.by_id:
                    self.fail(node, f"depends on node {dep}, which this file does not hold")

    def deps_of(self, ids) -> list[int]:
        """Node ids ``ids`` with each no-op node replaced by what it depends on."""
        if not self.through:  # (no no-op nodes: the ids, each once)
            return list(ids) if len(ids) < 2 else list(dict.fromkeys(ids))
        out: list[int] = []
        for i in ids:
            for d in self.through.get(i, (i,)):
                if d not in out:
                    out.append(d)
        return out

    def cpu(self, node) -> bool:
        """Whether ``node`` ran on the host (:func:`.chakra_pytorch.is_cpu_op`)."""
        return pytorch.is_cpu_op(self.attrs[node.id])

    def kind(self, node) -> str:
        """The Program kind of ``node``: a host-side communication call is compute (its
        host time; the GPU kernel it launches is the communication)."""
        if node.type in _MEMORY or (not self.own and self.cpu(node)):
            return COMPUTE
        return _KIND[node.type]

    def lane(self, node) -> str:
        """The lane ``node`` runs on: the one clustersim's export names, else the host lane
        for a CPU op, the memory lane for a load/store, else the lane of its kind."""
        if node.type in _MEMORY:
            default = pytorch.MEMORY_LANE
        elif not self.own and self.cpu(node):
            default = pytorch.HOST_LANE
        else:
            default = _LANE[_KIND[node.type]]
        return self.attr(node, OWN + "lane", default)

    def launcher(self, node):
        """The host op that launched a GPU node — its caller in a PyTorch trace's call tree —
        or None."""
        caller = self.by_id.get(next(iter(self.callers.get(node.id, ())), None))
        return caller if caller is not None and self.cpu(caller) else None

    def message(self, node):
        """``node`` as a Chakra Node message (:func:`.chakra_file.read_view` leaves its
        attributes as bytes; the same encoding parsed as a Node)."""
        return node if isinstance(node, Node) else Node.FromString(node.SerializeToString())

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


def import_chakra(folder: str | Path, num_gpus: int | None = None, cost=None) -> Program:
    """The checked Program of the Chakra traces in ``folder`` (module docstring); with
    ``num_gpus``, the ranks must be that many GPUs (plus any non-GPU device, such as a
    parameter server, that clustersim's own export names); ``cost``: a function making the
    :class:`~clustersim.workload.cost_model.CostModel` that prices nodes without a
    duration, called on first need (None: they run as 0 s, counted and warned of)."""
    return read_chakra(folder, num_gpus, cost)[0]


def read_chakra(folder: str | Path, num_gpus: int | None = None, cost=None) -> tuple[Program, dict]:
    """:func:`import_chakra`'s Program and how many compute and memory nodes were priced
    each way (``{"trace_nodes_measured": …}``, :data:`.chakra_pricing.WAYS`)."""
    paths = rank_files(folder)
    if num_gpus is not None:
        check_rank_count(folder, num_gpus)
    known: dict = {}  # attribute bytes → their dict, shared by the ranks' nodes (read_view)
    ranks = [_Rank(r, p, known) for r, p in enumerate(paths)]
    names = [_device_name(rk.rank, rk.meta_attrs) for rk in ranks]
    groups = comm_groups(Path(folder), ranks)
    order = _merge(ranks)
    new_ids: list[dict[int, int]] = [{} for _ in ranks]  # per rank: node id → op id
    for i, (rk, node) in enumerate(order):
        new_ids[rk.rank][node.id] = i
    peers = pair(order, len(ranks), groups)
    pricer = Pricer(cost)
    prog = Program(len(ranks), names)
    for rk in ranks:
        mem = rk.meta_attrs.get(OWN + "static_memory")
        if mem is not None:
            prog.static_memory[rk.rank] = values.static_memory(rk.fail_metadata, OWN + "static_memory", mem)
    seen: dict[tuple[int, str], int] = defaultdict(int)  # collectives of a group met so far, per rank
    last_on_lane: dict[tuple[int, str], int] = {}
    # what a node's attributes (their dict's identity: one dict per distinct attribute list,
    # chakra_file.read_view, all alive until the end) and its type and duration decide, read
    # once: its kind and lane, and the fields of _fixed where it needs no pricing
    kinds: dict[tuple, tuple[str, str]] = {}
    fixed: dict[tuple, dict] = {}
    rows: dict[tuple, tuple] = {}  # (the key of fixed, name) → the row of the first such op
    for i, (rk, node) in enumerate(order):
        a, rank = rk.attrs[node.id], rk.rank
        alike = (id(a), node.type, node.duration_micros, rk.own)
        kind_lane = kinds.get(alike)
        if kind_lane is None:
            kind_lane = kinds[alike] = (rk.kind(node), rk.lane(node))
        kind, lane = kind_lane
        before, new_id = last_on_lane.get((rank, lane)), new_ids[rank]
        deps = [new_id[d] for d in rk.deps_of(node.data_deps)]
        waits = node.ctrl_deps
        if waits:
            serial = a.get(OWN + "serial", [])  # ASTRA-sim's chain (chakra_serial), not the Program's
            ctrl = (new_id[d] for d in rk.deps_of(waits) if d not in serial)
            deps += [c for c in ctrl if c != before and c not in deps]
        remote = a.get(OWN + "remote_deps")
        if remote is not None:
            for r, d in zip(remote[::2], remote[1::2]):
                # (r as any list attribute holds it: a rank equal to a float such as 1.0 too)
                there = new_ids[int(r)] if r in range(len(ranks)) else {}
                if d not in there:
                    rk.fail(node, f"depends on node {d} of rank {r}, which does not exist")
                deps.append(there[d])
        fields = {"deps": tuple(deps)}
        if kind in (SEND, RECV):
            fields["peer"] = peers[i]
            fields["tag"] = a.get(OWN + "tag", "")
        elif kind == COLLECTIVE:
            fields.update(collective(rk, node, groups, seen))
        group = fields.get("group", ())
        members = len(group) if fields.get("collective") == "all_gather" else 1
        if kind == COMPUTE and not rk.own and node.duration_micros == 0:  # priced: node by node
            fields.update(_fixed(rk, node, kind, pricer, members, len(ranks), group))
            op = prog.add(rank, lane, kind, node.name, **fields)
        else:
            like = (alike, members, len(group))
            known = fixed.get(like)
            if known is None:
                known = fixed[like] = _fixed(rk, node, kind, pricer, members, len(ranks), group)
            elif kind == COMPUTE:
                pricer.measured()
            # the first op of these fields and this name built from keywords, the others
            # stamped from its row with what differs (Op.from_row)
            row = rows.get((like, node.name))
            if row is None:
                op = prog.add(rank, lane, kind, node.name, **fields, **known)
                rows[like, node.name] = op.row()
            else:
                op = prog.append(Op.from_row(_stamped(row, len(prog.ops), rank, fields)))
        last_on_lane[rank, lane] = op.id
    try:
        prog.check()
    except ProgramError as exc:
        raise ScenarioError(FIELD, str(folder), f"the traces do not form a runnable program: {exc}") from None
    left = pricer.counts["unpriced"]
    if left:
        warnings.warn(
            ScenarioWarning(
                FIELD,
                str(folder),
                f"holds {left} node(s) with no duration and nothing to price them by, run as 0 s "
                f"(trace_nodes_unpriced; the first: {pricer.unpriced})",
            ),
            stacklevel=2,
        )
    return prog, {f"trace_nodes_{way}": n for way, n in pricer.counts.items()}


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
            "(accepted: a cluster, or parallel.gpus, of as many GPUs as the trace has ranks; "
            "model.replay_dp replays a data-parallel trace at another number of replicas, "
            "model.replay_pp a pipeline trace at another number of stages)",
        )


def _device_name(rank: int, meta_attrs: dict) -> str:
    """The device rank ``rank`` runs on: the one clustersim's export names, else ``gpu{rank}``."""
    name = meta_attrs.get(OWN + "device", f"gpu{rank}")
    return name if isinstance(name, str) else f"gpu{rank}"


#: positions in an Op's row (:meth:`Op.row`) of what differs between ops of one node's fields
_ID, _DEVICE, _DEPS, _PEER, _GROUP, _COLLECTIVE, _TAG, _LANE_ID = map(
    Op.__slots__.index, ("id", "device", "deps", "peer", "group", "collective", "tag", "lane_id")
)


def _stamped(row: tuple, op_id: int, device: int, fields: dict) -> list:
    """``row`` as :meth:`Program.add` makes op ``op_id`` on ``device`` with the per-node
    ``fields`` (deps, and a send's or collective's peer, tag, kind and group), what
    :meth:`Op.__init__` sets of them set as it would."""
    out = list(row)
    out[_ID], out[_DEVICE], out[_DEPS], out[_LANE_ID] = op_id, device, fields["deps"], -1
    out[_PEER], out[_TAG] = fields.get("peer", -1), fields.get("tag", "")
    out[_GROUP], out[_COLLECTIVE] = tuple(fields.get("group", ())), fields.get("collective", "")
    return out


def _fixed(rk: _Rank, node, kind: str, pricer: Pricer, members: int, devices: int, group: tuple) -> dict:
    """A node's fields read from its attributes alone (their clustersim.* copies,
    :func:`_quantities`, :func:`_device_lists`): the same for every node of the same
    attributes, type and duration, except where a compute node without a duration is priced."""
    a = rk.attrs[node.id]
    out = {f: a[k] for f, k in _OWN_FIELDS if k in a}
    out.update(_quantities(rk, node, kind, pricer, members))
    out.update(_device_lists(rk, node, kind, devices, group))
    return out


def _quantities(rk: _Rank, node, kind: str, pricer: Pricer, members: int = 1) -> dict:
    """A node's seconds, FLOPs and bytes, each checked (:mod:`.chakra_values`), a compute
    node without a duration priced by ``pricer``; ``members``: how many ranks an
    all-gather's ``comm_size`` is multiplied by (1 for every other op)."""
    fail, out, a = rk.failing(node), {}, rk.attrs[node.id]
    if kind == COMPUTE:
        micros = values.seconds(fail, "duration_micros", node.duration_micros * 1e-6)
        ops = a.get(OWN + "flops")
        out["flops"] = (
            values.flops(fail, OWN + "flops", ops)
            if ops is not None
            else float(values.flops(fail, "num_ops", a.get("num_ops", 0)))
        )
        values.nbytes(fail, "tensor_size", a.get("tensor_size", 0))
        if rk.own or micros > 0:  # clustersim's own file states every op's time, 0 s too
            pricer.measured()
        elif node.type in _MEMORY:
            micros = values.seconds(fail, "(priced) seconds", pricer.memory(fail, node, rk.attrs[node.id]))
        else:
            cpu = rk.cpu(node)
            launcher = None if cpu else rk.launcher(node)
            micros, priced = pricer.compute(
                fail, rk.message(node), a, cpu, None if launcher is None else rk.message(launcher)
            )
            micros = values.seconds(fail, "(priced from its FLOPs, bytes or shapes) seconds", micros)
            # a kernel the tables identify: the FLOPs of its shapes
            out["flops"] = out["flops"] or float(values.flops(fail, "(of its shapes) FLOPs", priced))
        out["duration"] = values.seconds(fail, OWN + "duration_s", a.get(OWN + "duration_s", micros))
    else:
        size = a.get(OWN + "nbytes")
        if size is not None:
            out["nbytes"] = values.nbytes(fail, OWN + "nbytes", size)
        else:  # Chakra's comm_size: an all-gather's is one rank's contribution (chakra_export.per_rank_factor)
            size = values.nbytes(fail, "comm_size", rk.attr(node, "comm_size", required=True))
            out["nbytes"] = values.nbytes(fail, "comm_size × group size", size * members)
    for key, name in _MEMORY_FIELDS:
        if name in a:
            out[key] = values.nbytes(fail, name, a[name])
    return out


def _device_lists(rk: _Rank, node, kind: str, devices: int, group: tuple) -> dict:
    """A node's ``shadows`` (folded twins' traffic), ``source`` (where a folded ring send's
    bytes leave from) and ``split`` (all-to-all-v bytes), checked."""
    a = rk.attrs[node.id]
    if OWN + "source" not in a and OWN + "shadows" not in a and OWN + "split" not in a:
        return {}
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
    ids = [[n.id for n in rk.order] for rk in ranks]
    if all(all(a < b for a, b in zip(i, i[1:])) for i in ids):
        # each rank's ids rising (clustersim's own files): the merge is the (id, rank) order
        return [
            (ranks[r], ranks[r].order[k])
            for _, r, k in sorted((i, r, k) for r, rid in enumerate(ids) for k, i in enumerate(rid))
        ]
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
