"""The Program: clustersim's intermediate representation (in the spirit of Chakra traces).

Everything upstream (schedules, parallel plans) *compiles* to a Program; the engine
*interprets* one. A Program is, for every device, ordered lanes of ops. An op has a kind
(``compute``, ``send``, ``recv``, ``collective``), runs on one lane of one device, and
starts only after (a) the previous op on its lane ended and (b) every op in ``deps``
ended (deps may sit on other devices). Compute ops carry their duration, fixed at compile
time by the cost model; communication ops carry bytes and let the fabric decide.

Ops of a lane run in the order they were added to the Program — that order is the
schedule. ``Program.check()`` rejects malformed programs before they run: a missing
dependency, a cycle (through deps and lane order, which would deadlock; or, for a run on
the DAG pass, as soon as that pass stalls), or a send without its recv.
"""

from __future__ import annotations

import operator
import sys
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, contains, eq, itemgetter, le

import numpy as np

from .errors import ProgramError
from .memory_kinds import StaticMemory

COMPUTE, SEND, RECV, COLLECTIVE = "compute", "send", "recv", "collective"
OP_KINDS = (COMPUTE, SEND, RECV, COLLECTIVE)
#: lane of the expert-parallel collectives (MoE token dispatch and combine all-to-alls, the
#: expert-TP all-gathers around them; :mod:`clustersim.workload.moe_dispatch`): a schedule
#: finds them by ``op.lane == EP_LANE`` (their names: ``ep dispatch``, ``ep combine``, …)
EP_LANE = "ep"
#: lane of compute ops that stand for waiting, not GPU work (inference request arrivals,
#: :mod:`clustersim.compilers.inference`): no speed factor or interference applies to them
ARRIVAL_LANE = "arrival"
_P2P = (SEND, RECV)

#: parameter-server lane names (:mod:`clustersim.compilers.parameter_server`), the one place
#: they are spelled (the metrics of :mod:`clustersim.trace.ps_metrics` find ops by them): a
#: worker's ``PULL`` (recvs), ``compute`` and ``PUSH`` (sends) lanes; a server's per-worker
#: ``PULL``, ``PUSH`` and ``APPLY`` lanes (:func:`server_lane`) and its one ``UPDATE`` lane
PULL, PUSH, APPLY, UPDATE = "pull", "push", "apply", "update"
_OF_WORKER = ".w"  # a server lane's kind and worker: ``pull.w3``


def server_lane(kind: str, worker: int) -> str:
    """The name of a server's ``kind`` lane (``PULL``, ``PUSH`` or ``APPLY``) for ``worker``."""
    return f"{kind}{_OF_WORKER}{worker}"


def server_lane_worker(lane: str, kind: str) -> int | None:
    """The worker of ``lane`` when it is a server's ``kind`` lane (:func:`server_lane`), else None."""
    head, sep, worker = lane.partition(_OF_WORKER)
    return int(worker) if sep and head == kind else None


def is_gpu_work(op: Op) -> bool:
    """Whether ``op`` is work a GPU does (a compute op not on the arrival lane): what
    stragglers, noise, speed factors and comm–compute slowdown act on."""
    return op.kind == COMPUTE and op.lane != ARRIVAL_LANE


class Op:
    """One operation on one lane of one device. See the module docstring for semantics.

    ``mem_alloc`` bytes are allocated on the device when the op starts and ``mem_free``
    bytes released when it ends (activations: a forward allocates, its backward frees);
    ``stash_alloc`` and ``stash_free`` say how many of those bytes are a stashed weight
    version (PipeDream's weight stashing), the rest being activations.
    ``peer`` links a send to its recv (each holds the other's id); a recv ends when its
    send's bytes have arrived. ``group`` lists the devices of a collective; every member
    holds its own op with the same ``tag``.

    Symmetry folding (only some ranks simulated, see ``docs/performance.md``) uses two
    more fields: ``arrivals``, how many members hold an op for the collective (0 = all of
    ``group``; the others are folded away and arrive with them by symmetry), and
    ``shadows``, the traffic of folded-away twins that still loads the fabric: for a send,
    (src, dst) device pairs; for a collective, further device groups running the same
    collective at the same time. A folded ring (TP overlap's userbuffers) pairs a
    representative's send with its own recv: the send stands for its ring predecessor's,
    whose bytes leave from ``source`` (−1, the default: the op's own device) — the route
    the representative's recv is fed over, its own outgoing route being a shadow.

    ``split`` makes an all-to-all uneven (an all-to-all-v): ``split[i][j]`` bytes go from
    the group's i-th member to its j-th (the same matrix on every member's op; ``nbytes``
    is then this member's row sum). Empty: every member sends ``nbytes/n`` to each.

    ``beside`` prices a compute op beside collectives kernel by kernel: its kernels'
    (memory-bound seconds, the GPU's HBM bytes/s, then per collective kind it was priced
    beside a (kind, SM-limited seconds) pair — kind 0: NCCL's CTAs, else the SMs an
    implementation holds) (:mod:`clustersim.workload.comm_interference`); empty: the run's
    scalar slowdown. On a collective op, ``(SMs,)`` its kernels hold where they are not
    NCCL's channels (DeepEP's ``Buffer.num_sms``); empty: NCCL's.

    ``layer``: the model layer a pass op belongs to (the embedding rides with the first
    layer, the output layer with the last), where the compile was asked to label layers
    (a Chakra export's, :mod:`clustersim.interop.chakra_split`); −1 (the default): none.
    """

    __slots__ = (
        "id",
        "device",
        "lane",
        "kind",
        "name",
        "stage",
        "microbatch",
        "phase",
        "iteration",
        "duration",
        "nbytes",
        "flops",
        "deps",
        "peer",
        "mem_alloc",
        "mem_free",
        "stash_alloc",
        "stash_free",
        "group",
        "collective",
        "algorithm",
        "tag",
        "version",
        "lane_id",
        "arrivals",
        "shadows",
        "split",
        "source",
        "beside",
        "layer",
    )

    def __init__(
        self,
        id: int,
        device: int,
        lane: str,
        kind: str,
        name: str,
        *,
        stage: int = -1,
        microbatch: int = -1,
        phase: str = "",
        iteration: int = 0,
        duration: float = 0.0,
        nbytes: int = 0,
        flops: float = 0.0,
        deps: tuple[int, ...] = (),
        peer: int = -1,
        mem_alloc: int = 0,
        mem_free: int = 0,
        stash_alloc: int = 0,
        stash_free: int = 0,
        group: tuple[int, ...] = (),
        collective: str = "",
        algorithm: str = "auto",
        tag: str = "",
        version: int = -1,
        arrivals: int = 0,
        shadows: tuple = (),
        split: tuple = (),
        source: int = -1,
        beside: tuple = (),
        layer: int = -1,
    ):
        # interned, so the engine's hot path can compare kinds by identity
        self.id, self.device, self.lane, self.kind, self.name = id, device, lane, sys.intern(kind), name
        self.stage, self.microbatch, self.phase, self.iteration = stage, microbatch, phase, iteration
        self.duration, self.nbytes, self.flops = duration, nbytes, flops
        self.deps, self.peer = tuple(deps), peer
        self.mem_alloc, self.mem_free = mem_alloc, mem_free
        self.stash_alloc, self.stash_free = stash_alloc, stash_free
        self.group, self.collective, self.algorithm, self.tag = tuple(group), collective, algorithm, tag
        self.version = version
        self.arrivals, self.shadows = arrivals, tuple(shadows)
        self.split, self.source, self.beside = split, source, beside
        self.layer = layer
        self.lane_id = -1  # index of (device, lane) in Program.lanes(), set by Program.add

    def origin(self) -> int:
        """The device a send's bytes leave from: ``source`` where set, else its own."""
        return self.device if self.source < 0 else self.source

    def __repr__(self) -> str:
        return f"Op#{self.id}({self.name!r} on gpu{self.device}/{self.lane})"

    def row(self) -> tuple:
        """The op's fields in ``__slots__`` order (what :meth:`from_row` takes back)."""
        return _ROW(self)

    @classmethod
    def from_row(cls, row) -> Op:
        """An op whose fields are ``row``, in ``__slots__`` order: a copy of :meth:`row`'s op
        without the keyword binding and conversions of ``__init__`` (a compiler stamping one
        op many times, :mod:`clustersim.compilers.pipeline.pass_template`, then sets what differs)."""
        op = cls.__new__(cls)
        (
            op.id,
            op.device,
            op.lane,
            op.kind,
            op.name,
            op.stage,
            op.microbatch,
            op.phase,
            op.iteration,
            op.duration,
            op.nbytes,
            op.flops,
            op.deps,
            op.peer,
            op.mem_alloc,
            op.mem_free,
            op.stash_alloc,
            op.stash_free,
            op.group,
            op.collective,
            op.algorithm,
            op.tag,
            op.version,
            op.lane_id,
            op.arrivals,
            op.shadows,
            op.split,
            op.source,
            op.beside,
            op.layer,
        ) = row
        return op


def beside_sum(a: tuple, b: tuple) -> tuple:
    """Two compute ops' ``beside`` tuples (:attr:`clustersim.program.Op.beside`) summed into
    the merged op's: the memory-bound seconds and each kind's SM-limited seconds added; empty
    where either is, or they hold different HBM rates or kinds (the scalar slowdown then)."""
    if not a or not b or a[1] != b[1] or [k for k, _ in a[2:]] != [k for k, _ in b[2:]]:
        return ()
    return (a[0] + b[0], a[1], *((k, s + t) for (k, s), (_, t) in zip(a[2:], b[2:])))


def beside_scaled(b: tuple, share: float) -> tuple:
    """``share`` of a compute op's ``beside`` tuple (its seconds times ``share``)."""
    return (b[0] * share, b[1], *((k, s * share) for k, s in b[2:])) if b else ()


_ROW = operator.attrgetter(*Op.__slots__)


@dataclass
class _Ahead:
    """Allocations the memory replay counts ahead of their Program place: the ops' ids, and
    by the id of the op they may start right after (-1: before any), those ops."""

    hoisted: set[int] = field(default_factory=set)
    after: dict[int, list[Op]] = field(default_factory=dict)


class Program:
    """Per-device ordered ops with dependencies, plus the static memory of each device."""

    def __init__(self, num_devices: int, device_names: list[str] | None = None):
        """``device_names``: the topology node of each device (default ``gpu{i}``); a
        parameter server adds non-GPU devices such as the star's ``server``."""
        self.num_devices = num_devices
        self.device_names = list(device_names) if device_names else [f"gpu{d}" for d in range(num_devices)]
        if len(self.device_names) != num_devices:
            raise ProgramError(f"{len(self.device_names)} device names for {num_devices} devices")
        self.ops: list[Op] = []
        self._lanes: dict[tuple[int, str], list[Op]] = {}
        #: bytes resident on each device for the whole run, by kind
        self.static_memory: list[StaticMemory] = [StaticMemory()] * num_devices

    def add(self, device: int, lane: str, kind: str, name: str, **fields) -> Op:
        """Append an op to ``device``'s ``lane`` (after every op already on that lane)."""
        if kind not in OP_KINDS:
            raise ProgramError(f"op {name!r}: kind {kind!r} is not one of {', '.join(OP_KINDS)}")
        return self.append(Op(len(self.ops), device, lane, kind, name, **fields))

    def append(self, op: Op) -> Op:
        """Append ``op``, built with id ``len(self.ops)`` (:meth:`Op.from_row`), to its device's
        lane as :meth:`add` does; its ``lane_id`` is set here."""
        if op.id != len(self.ops):
            raise ProgramError(f"{op!r} appended as op #{len(self.ops)}: its id must be its index")
        device, lane = op.device, op.lane
        self.ops.append(op)
        lane_ops = self._lanes.get((device, lane))
        if lane_ops is None:
            lane_ops = self._lanes[(device, lane)] = []
            op.lane_id = len(self._lanes) - 1
        else:
            op.lane_id = lane_ops[0].lane_id
        lane_ops.append(op)
        return op

    def memory_peaks(self) -> list[tuple[int, int]]:
        """Per device, (peak bytes, stashed weight bytes held at that peak — a static second
        copy and the versions ops stashed): the memory ledger replayed over the ops
        without running them. A device's compute-lane ops (a pass's first and last, which
        allocate and free its activations) run one after another, each pass after the
        previous one on its GPU, so their Program order is their time order. An op on
        another lane (a prefetched all-gather or its copy-in) may start as soon as its
        dependencies and its lane's previous op have ended — ahead of compute ops added
        before it, whose frees may come later — so its allocation is counted from there:
        right after the last of those ops in Program order. The replay's peak is then at
        least the one the engine's ledger reaches."""
        live = [m.total for m in self.static_memory]
        stash = [m.stashed for m in self.static_memory]
        peaks = list(zip(live, stash))
        ahead = self._allocations_ahead()

        def alloc(op: Op) -> None:
            d = op.device
            live[d] += op.mem_alloc
            stash[d] += op.stash_alloc
            if live[d] > peaks[d][0]:
                peaks[d] = (live[d], stash[d])

        for early in ahead.after.get(-1, ()):
            alloc(early)
        for op in self.ops:
            if op.mem_alloc and op.id not in ahead.hoisted:
                alloc(op)
            live[op.device] -= op.mem_free
            stash[op.device] -= op.stash_free
            for early in ahead.after.get(op.id, ()):
                alloc(early)
        return peaks

    def _allocations_ahead(self) -> _Ahead:
        """The allocating ops off the compute lane whose earliest start (after their
        dependencies and their lane's previous op) is before their place in Program order,
        keyed by the op they may start right after (:meth:`memory_peaks`)."""
        out = _Ahead()
        prev: dict[tuple[int, str], int] = {}
        for op in self.ops:
            key = (op.device, op.lane)
            if op.mem_alloc and op.lane != COMPUTE:
                start = max((*op.deps, prev.get(key, -1)), default=-1)
                if start < op.id - 1:
                    out.hoisted.add(op.id)
                    out.after.setdefault(start, []).append(op)
            prev[key] = op.id
        return out

    def lanes(self) -> dict[tuple[int, str], list[Op]]:
        """Ops grouped by (device, lane), each list in execution order (do not mutate)."""
        return self._lanes

    def check(self, acyclic: bool = True) -> None:
        """Raise :class:`ProgramError` if a dependency is missing, a cycle exists, a
        send/recv is unmatched or an op moves negative memory — naming the ops involved.

        Each rule is first tested as a whole, over columns of the ops (C-level ``map``s and
        numpy); only a Program that breaks one goes through that rule's op-by-op pass,
        which finds the first op breaking it and says so.

        ``acyclic`` False leaves cycles through other lanes to the evaluator that runs the
        Program next, when it proves there are none by running it: the DAG pass
        (:mod:`clustersim.engine.dag`) ends every op exactly when the graph
        :meth:`check_acyclic` searches has no cycle, and its caller asks
        :meth:`check_acyclic` to name the cycle of a run that stalls. The pass reads
        waits on other lanes only, so an op waiting on itself or on a later op of its
        own lane — a cycle too — is still refused here."""
        ops = self.ops
        deps = list(map(_DEPS, ops))
        flat = list(chain.from_iterable(deps))
        if not self._fields_hold(flat):
            self._check_fields()
        kinds = list(map(_KIND, ops))
        p2p = [op for op, k in zip(ops, kinds) if k in _P2P]
        if not _matched(ops, p2p):
            self._check_matching()
        collective_ops = [op for op, k in zip(ops, kinds) if k == COLLECTIVE]
        if not _collectives_hold(collective_ops, self.num_devices):
            self._check_collectives(collective_ops)
        if not (self._acyclic(deps, flat, kinds) if acyclic else self._lane_waits_hold(deps, flat)):
            self.check_acyclic()

    def _fields_hold(self, flat: list[int]) -> bool:
        """Whether every op's device, deps (``flat``: all of them) and memory fields pass
        :meth:`_check_fields`."""
        ops = self.ops
        if not ops:
            return True
        devices = list(map(_DEVICE, ops))
        if min(devices) < 0 or max(devices) >= self.num_devices:
            return False
        if flat and (min(flat) < 0 or max(flat) >= len(ops)):
            return False
        alloc, free = list(map(_MEM_ALLOC, ops)), list(map(_MEM_FREE, ops))
        stash_alloc, stash_free = list(map(_STASH_ALLOC, ops)), list(map(_STASH_FREE, ops))
        if min(alloc) < 0 or min(free) < 0 or min(stash_alloc) < 0 or min(stash_free) < 0:
            return False
        return all(map(le, stash_alloc, alloc)) and all(map(le, stash_free, free))

    def _check_fields(self) -> None:
        n = len(self.ops)
        for op in self.ops:
            if not 0 <= op.device < self.num_devices:
                raise ProgramError(f"{op!r} is on device {op.device}, outside 0..{self.num_devices - 1}")
            for d in op.deps:
                if not 0 <= d < n:
                    raise ProgramError(f"{op!r} depends on op #{d}, which does not exist")
            if op.mem_alloc < 0 or op.mem_free < 0:
                raise ProgramError(
                    f"{op!r}: memory to allocate or free must be ≥ 0 bytes "
                    f"(mem_alloc={op.mem_alloc}, mem_free={op.mem_free})"
                )
            if not (0 <= op.stash_alloc <= op.mem_alloc and 0 <= op.stash_free <= op.mem_free):
                raise ProgramError(
                    f"{op!r}: stashed weights must be a part of the bytes moved "
                    f"(stash_alloc={op.stash_alloc} of mem_alloc={op.mem_alloc}, "
                    f"stash_free={op.stash_free} of mem_free={op.mem_free})"
                )

    def _check_matching(self) -> None:
        ops = self.ops
        for op in ops:
            if op.kind not in (SEND, RECV):
                continue
            other = ops[op.peer] if 0 <= op.peer < len(ops) else None
            want = RECV if op.kind == SEND else SEND
            if other is None or other.kind != want or other.peer != op.id:
                raise ProgramError(f"{op!r} ({op.kind}) has no matching {want}")
            if other.nbytes != op.nbytes:
                raise ProgramError(
                    f"{op!r} and {other!r} disagree on size ({op.nbytes} vs {other.nbytes} bytes)"
                )

    def collective_members(self) -> dict[str, list[Op]]:
        """Collective ops grouped by tag (one entry per collective instance)."""
        out: dict[str, list[Op]] = {}
        for op in self.ops:
            if op.kind == COLLECTIVE:
                out.setdefault(op.tag, []).append(op)
        return out

    def _check_collectives(self, collective_ops: list[Op]) -> None:
        by_tag: dict[str, list[Op]] = {}
        for op in collective_ops:
            members = by_tag.get(op.tag)
            if members is None:
                by_tag[op.tag] = [op]
            else:
                members.append(op)
        valid: dict[tuple[int, ...], frozenset] = {}  # a group found valid → its devices
        for tag, members in by_tag.items():
            first = members[0]
            group = first.group
            devices = valid.get(group)
            if devices is None:
                if len(set(group)) != len(group):
                    dup = next(d for d in group if group.count(d) > 1)
                    raise ProgramError(
                        f"collective {tag!r}: gpu{dup} appears twice in its group {list(group)}"
                    )
                for d in group:
                    if not 0 <= d < self.num_devices:
                        raise ProgramError(
                            f"collective {tag!r}: group member {d} is not a device (0..{self.num_devices - 1})"
                        )
                devices = valid[group] = frozenset(group)
            # an uneven all-to-all's members agree on its matrix, each sends its row
            agreed = (group, first.collective, first.split or first.nbytes)
            for op in members:
                if (op.group, op.collective, op.split or op.nbytes) != agreed:
                    raise ProgramError(
                        f"collective {tag!r}: members disagree — {first!r} has {first.collective} of "
                        f"{first.nbytes} bytes over {list(group)}, {op!r} has {op.collective} of "
                        f"{op.nbytes} bytes over {list(op.group)}"
                    )
                if op.device not in devices:
                    raise ProgramError(f"collective {tag!r}: {op!r} is not in its group {list(group)}")
            want = first.arrivals or len(group)
            present = {op.device for op in members}
            if len(members) != len(present):
                raise ProgramError(f"collective {tag!r}: a device holds two ops for it")
            if len(present) < want:
                missing = [f"gpu{d}" for d in group if d not in present]
                raise ProgramError(f"collective {tag!r}: members that never reach it: {', '.join(missing)}")

    def _acyclic(self, deps: list[tuple[int, ...]], flat: list[int], kinds: list[str]) -> bool:
        """Whether the graph :meth:`check_acyclic` builds has no cycle (``deps``, ``flat``:
        each op's deps and all of them; ``kinds``: each op's kind): the graph's edges built
        in numpy, then Kahn's algorithm — an op whose waits have all ended ends, and takes
        one off the waits of what waits on it; every op ends when there is no cycle."""
        ops, n = self.ops, len(self.ops)
        if not n:
            return True
        lanes = self.lanes().values()
        in_lanes = np.fromiter(map(_ID, chain.from_iterable(lanes)), np.int64, n)
        heads = np.zeros(n, bool)  # whether in_lanes[k] is its lane's first op
        heads[np.cumsum([0] + list(map(len, lanes))[:-1])] = True
        later, earlier = in_lanes[1:][~heads[1:]], in_lanes[:-1][~heads[1:]]
        before = np.full(n, -1, np.int64)  # per op, the op before it on its lane (-1: none)
        before[later] = earlier
        dep_of = np.repeat(np.arange(n, dtype=np.int64), np.fromiter(map(len, deps), np.int64, n))
        waited = np.array(flat, np.int64)
        recvs = np.array([i for i, k in enumerate(kinds) if k == RECV], np.int64)
        sends = np.fromiter(map(_PEER, map(ops.__getitem__, recvs.tolist())), np.int64, len(recvs))
        # collective c is node n + c: its members wait on it, it on what its members wait on
        tags: dict[str, int] = {}
        members = np.array([i for i, k in enumerate(kinds) if k == COLLECTIVE], np.int64)
        node = np.full(n, -1, np.int64)
        node[members] = [n + tags.setdefault(ops[i].tag, len(tags)) for i in members.tolist()]
        by_member = node[dep_of] >= 0
        member_before = before[members]
        behind = member_before >= 0
        src = np.concatenate(
            (earlier, waited, sends, waited[by_member], member_before[behind], node[members])
        )
        dst = np.concatenate((later, dep_of, recvs, node[dep_of[by_member]], node[members[behind]], members))
        total = n + len(tags)
        succ = dst[np.argsort(src, kind="stable")]
        first = np.zeros(total + 1, np.int64)
        np.cumsum(np.bincount(src, minlength=total), out=first[1:])
        waits = np.bincount(dst, minlength=total)
        # the pass one op at a time over plain lists: the Programs checked for cycles here
        # are mostly the SimPy engine's (the DAG pass proves its own, see check), tens of ops
        # wide and thousands of layers deep, where a round of NumPy calls per layer cost
        # more (quickstart 0.031 → 0.015 s); a wide one (5,120 lanes, 110k ops) takes 1.4×
        # the rounds' time, little beside its SimPy run
        ready = np.flatnonzero(waits == 0).tolist()
        succ, first, waits = succ.tolist(), first.tolist(), waits.tolist()
        pop, push, ended = ready.pop, ready.append, 0
        while ready:
            i = pop()
            ended += 1
            for j in succ[first[i] : first[i + 1]]:
                left = waits[j] - 1
                waits[j] = left
                if not left:
                    push(j)
        return ended == total

    def _lane_waits_hold(self, deps: list[tuple[int, ...]], flat: list[int]) -> bool:
        """Whether no op waits on itself or on a later op of its own lane (``deps``,
        ``flat``: each op's deps and all of them): ids rise along a lane, so such a wait
        is a cycle."""
        n = len(self.ops)
        waiter = np.repeat(np.arange(n, dtype=np.int64), np.fromiter(map(len, deps), np.int64, n))
        waited = np.array(flat, np.int64)
        lane_of = np.fromiter(map(_LANE_ID, self.ops), np.int64, n)
        return not ((waited >= waiter) & (lane_of[waited] == lane_of[waiter])).any()

    def wait_graph(self) -> tuple[list[list[int]], list[int], dict[str, int], dict[tuple[int, int], str]]:
        """The graph of what waits on what: explicit deps, the implicit lane-order edges, a
        recv after its send, and one virtual node per collective that every member's start
        feeds and every member's end needs (the rendezvous). Returns per node — the op ids,
        then the rendezvous nodes — its successors and its count of waits, each collective
        tag's node, and (waiter, waited) → the kind of wait (for a report)."""
        n = len(self.ops)
        tags = {tag: n + k for k, tag in enumerate(self.collective_members())}
        succ: list[list[int]] = [[] for _ in range(n + len(tags))]
        indeg = [0] * (n + len(tags))
        why: dict[tuple[int, int], str] = {}
        before: dict[int, int] = {}

        def edge(a: int, b: int, kind: str) -> None:
            succ[a].append(b)
            indeg[b] += 1
            why.setdefault((b, a), kind)

        for lane_ops in self.lanes().values():
            for a, b in zip(lane_ops, lane_ops[1:]):
                edge(a.id, b.id, "waits on its lane for")
                before[b.id] = a.id
        for op in self.ops:
            for d in op.deps:
                edge(d, op.id, "depends on")
            if op.kind == RECV:  # a recv waits for its send to deliver, an implicit dependency
                edge(op.peer, op.id, "receives from")
            if op.kind == COLLECTIVE:  # whatever the member waits on, the rendezvous waits on
                r = tags[op.tag]
                for d in op.deps + ((before[op.id],) if op.id in before else ()):
                    edge(d, r, "needs a member that waits for")
                edge(r, op.id, "waits for all members of")
        return succ, indeg, tags, why

    def check_acyclic(self) -> None:
        """Raise :class:`ProgramError` naming a dependency cycle (through deps, lane order,
        a recv's send and a collective's rendezvous: it would deadlock), if there is one."""
        # Kahn's algorithm over the wait graph: crossed collective orders are cycles too
        n = len(self.ops)
        succ, indeg, tags, why = self.wait_graph()
        ready = [i for i, k in enumerate(indeg) if k == 0]
        seen = 0
        while ready:
            i = ready.pop()
            seen += 1
            for j in succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        if seen < len(indeg):
            stuck = sum(1 for k in indeg[:n] if k > 0)
            names = {r: f"collective {tag!r}" for tag, r in tags.items()}
            cycle = _a_cycle(succ, indeg)
            steps = [
                f"{names.get(a, repr(self.ops[a]) if a < n else '')} {why[a, b]} "
                f"{names.get(b, repr(self.ops[b]) if b < n else '')}"
                for a, b in zip(cycle, cycle[1:])
            ]
            raise ProgramError(
                f"dependency cycle (would deadlock), {stuck} ops stuck: "
                + "; ".join(steps[:-1])
                + f"; and, closing the cycle, {steps[-1]}"
            )


_ID, _KIND, _DEVICE, _DEPS, _PEER = map(attrgetter, ("id", "kind", "device", "deps", "peer"))
_LANE_ID = attrgetter("lane_id")
_MEM_ALLOC, _MEM_FREE = attrgetter("mem_alloc"), attrgetter("mem_free")
_STASH_ALLOC, _STASH_FREE = attrgetter("stash_alloc"), attrgetter("stash_free")


def _matched(ops: list[Op], p2p: list[Op]) -> bool:
    """Whether every send and recv of ``p2p`` passes :meth:`Program._check_matching`: its
    peer is an op of the other kind, of its size, whose peer is it."""
    n = len(ops)
    for op in p2p:
        peer = op.peer
        if not 0 <= peer < n:
            return False
        other = ops[peer]
        if (
            other.peer != op.id
            or other.kind == op.kind
            or other.kind not in _P2P
            or other.nbytes != op.nbytes
        ):
            return False
    return True


_AGREED = attrgetter("group", "collective", "split", "nbytes")
_TAG, _ARRIVALS = attrgetter("tag"), attrgetter("arrivals")


def _collectives_hold(collective_ops: list[Op], num_devices: int) -> bool:
    """Whether the collective ops pass :meth:`Program._check_collectives`, tested over
    columns of them (C-level ``map``s; a folded Program holds one op per collective, so
    a loop per collective is one per op): each tag's members agree with its first on
    group, collective and size, sit in the group, one per device, at least ``arrivals``
    (0: the whole group) of them; and each group lists distinct devices."""
    tags = list(map(_TAG, collective_ops))
    agreed = [(g, c, s or b) for g, c, s, b in map(_AGREED, collective_ops)]
    first = dict(zip(reversed(tags), reversed(agreed)))  # tag → its first member's
    if not all(map(eq, agreed, map(first.__getitem__, tags))):
        return False
    for group in {a[0] for a in first.values()}:
        if not group or len(set(group)) != len(group) or min(group) < 0 or max(group) >= num_devices:
            return False
    devices = list(map(_DEVICE, collective_ops))
    if not all(map(contains, map(itemgetter(0), agreed), devices)):
        return False
    if len(set(zip(tags, devices))) != len(tags):
        return False
    wants = [a or len(k[0]) for a, k in zip(map(_ARRIVALS, collective_ops), agreed)]
    want = dict(zip(reversed(tags), reversed(wants)))  # the first member's arrivals
    members = Counter(tags)
    return all(members[tag] >= w for tag, w in want.items())


def _a_cycle(succ: list[list[int]], indeg: list[int]) -> list[int]:
    """One cycle among the nodes Kahn's algorithm left (``indeg`` > 0), as waiter → waited
    → … → the first waiter again. Every such node waits on another such node, so walking
    from waiter to waited must come back to a node already on the walk."""
    waits_on: dict[int, int] = {}
    for a, targets in enumerate(succ):
        if indeg[a] > 0:
            for b in targets:
                if indeg[b] > 0:
                    waits_on.setdefault(b, a)
    node = next(i for i, k in enumerate(indeg) if k > 0)
    walk, at = [], {}
    while node not in at:
        at[node] = len(walk)
        walk.append(node)
        node = waits_on[node]
    return walk[at[node] :] + [node]
