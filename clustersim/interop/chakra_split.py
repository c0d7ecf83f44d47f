"""An imported trace replayed at more pipeline stages (``model.replay_pp`` a multiple of P).

A trace exported with layer labels (``export_chakra(..., layers=True)``: every op of a pass
carries ``clustersim.layer``, the embedding with the first layer, the output layer with the
last, and each rank's metadata the model's layer table, :func:`.chakra_layers.layer_table`) can be cut
where a native compile at P' stages cuts it: new stage s' holds layers s'·n/P' …
(s'+1)·n/P' − 1 of the model's n (Megatron's even split,
:func:`~clustersim.workload.stage_cost.even_partition`), so traced stage s becomes new
stages s·k … s·k + k − 1 (k = P'/P), on the ranks a native compile lays them on
(stage-major or replica-major, as the trace is):

* a pass's labelled ops go to the new stage of their layer, with their traced times; the
  ops that lead the pass without a layer — the framework's per-pass work, the all-gather of
  a received tensor (Megatron's scatter-gather) — lead each piece of it, the gather where
  the piece receives (made from the table's bytes where the trace, P = 1, has none); the
  pass's activation memory is shared out equally among its pieces;
* between two pieces of a pass, a send and a receive of the trace's own cross-stage size for
  that direction (activations forward, their gradient backward; the table's boundary bytes
  where the trace has no stage boundary, P = 1); the trace's own sends leave the piece at
  the old boundary;
* the passes run in the order of the trace's own schedule (recognised as
  :mod:`.chakra_restage` recognises it) at P' stages, each piece after the op before it on
  its GPU (the previous piece, or the previous iteration's step) and after its receive;
* the ops around the passes are copied to each new stage: a compute op (the optimizer, the
  gradient norm) for its share of the traced stage's gradient bytes (the table's per-layer
  bytes); a collective over one stage's ranks of at least one layer's gradient bytes (a
  data-parallel reduction) for its share too; a scalar's reduction (over the
  gradient-statistics group: the model-parallel group or the world) spans every new stage;
  the tied embedding's reduction (the table's bytes) joins the new stages holding the first
  and the last layer — a P = 1 trace has none to copy, so it is added after their gradient
  reduction. The static memory's weights, gradients, optimizer state and stash are shared
  out the same way; its buffers (working sets, communicators) are each new GPU's own.

What the trace cannot say departs from a native compile, as docs/interop.md states: each
new stage's step costs are the traced stage's shared by gradient bytes (a kernel's launch
shared with them); a P = 1 trace on one GPU per replica has no gradient-norm reduction to
copy; overlapped gradient buckets (``parallel.data_parallel``) keep the traced stage's,
shared out, after each new stage's last pass.

Refused, with the reason (:class:`ScenarioError` on ``model.replay_pp``): a trace without
layer labels or its table (as every foreign trace, or one exported without ``layers=True``),
a stage count that does not divide the model's layers, a traced stage whose layers are not
the ones the even split gives it, and an unlabelled op inside a pass after its first
labelled one.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import takewhile
from typing import NoReturn

from ..memory_kinds import StaticMemory
from ..program import COLLECTIVE, COMPUTE, RECV, SEND, Op, Program


class _Entry:
    """An op of the new Program before ids are given: its source op, the fields that
    differ, the entries it waits for, its peer entry, and its place on its new lane."""

    __slots__ = ("src", "fields", "deps", "peer", "key")

    def __init__(self, src: Op, fields: dict, key: tuple):
        self.src, self.fields, self.deps, self.peer, self.key = src, fields, [], None, key


_NO_MEMORY = {"mem_alloc": 0, "mem_free": 0, "stash_alloc": 0, "stash_free": 0}


def split_stages(
    prog: Program,
    pp: int,
    passes: list,
    order: Callable[[int, int, int], list],
    replicas: list[list[int]],
    place,
    table: dict | None,
    refuse: Callable[[str], NoReturn],
) -> Program:
    """``prog`` replayed at ``pp`` stages, a multiple of its P (module docstring):
    ``passes`` each op's pass (:func:`.chakra_restage._pass_of`), ``order`` the trace's
    schedule, ``replicas`` and ``place`` its rank layout (:mod:`.chakra_rescale`)."""
    depth, chains = len(replicas[0]), len(replicas)
    k = pp // depth
    n = _check(prog, table, pp, refuse)
    per = n // pp
    where = {rank: (j, p) for j, ranks in enumerate(replicas) for p, rank in enumerate(ranks)}
    for op in prog.ops:
        if op.layer >= 0 and op.layer // per // k != where[op.device][1]:
            refuse(
                f"op {op.name!r} of layer {op.layer} sits on traced stage {where[op.device][1]}, not where "
                f"an even split of {n} layers over {depth} stages puts it"
            )
    m = max(op.microbatch for op in prog.ops) + 1
    slot = [{item: i for i, item in enumerate(map(tuple, order(s, pp, m)))} for s in range(pp)]
    grads = table["grads"]
    share = {}  # (traced position, sub) → its share of the traced stage's gradient bytes
    for p in range(depth):
        subs = [sum(grads[(p * k + i) * per : (p * k + i + 1) * per]) for i in range(k)]
        share.update(((p, i), g / sum(subs)) for i, g in enumerate(subs))

    def device(rank: int, sub: int) -> int:
        j, p = where[rank]
        return place(j, p * k + sub, chains, pp)

    build = _Builder(prog, k, per, device, where, passes, refuse)
    build.passes(slot, table)
    build.steps(share, min(grads), table["tied"])
    if depth == 1 and k > 1 and table["tied"]:
        build.tied(table["tied"], min(grads))
    build.chain()
    out = build.program(chains * pp)
    for rank, mem in enumerate(prog.static_memory):
        for i in range(k):
            f = share[where[rank][1], i]
            out.static_memory[device(rank, i)] = StaticMemory(
                weights=round(mem.weights * f),
                grads=round(mem.grads * f),
                optimizer=round(mem.optimizer * f),
                buffers=mem.buffers,
                stashed=round(mem.stashed * f),
            )
    out.check()
    return out


def _check(prog: Program, table: dict | None, pp: int, refuse) -> int:
    """The model's layer count, once the trace carries what a split needs."""
    if table is None or not any(op.layer >= 0 for op in prog.ops):
        refuse(
            "splitting a stage needs its layers, and the trace's ops carry no clustersim.layer label "
            "(a foreign trace, or one exported without layers=True); accepted: "
            "a divisor of the trace's stages, or a trace exported with layer labels"
        )
    n = len(table["grads"])
    if n % pp:
        refuse(f"{pp} stages do not each take a whole number of the model's {n} layers")
    return n


class _Builder:
    """The new Program's entries: the passes' pieces, the sends between them, the ops
    around the passes, and the chain of pieces on each GPU."""

    def __init__(self, prog: Program, k: int, per: int, device, where: dict, passes: list, refuse):
        self.prog, self.k, self.per, self.device, self.where = prog, k, per, device, where
        self.pass_of, self.refuse = passes, refuse
        self.depth = max(p for _, p in where.values()) + 1
        self.entries: list[_Entry] = []
        self.copy: dict[tuple[int, int], _Entry] = {}  # (old id, sub) → its entry there
        self.pieces: dict[tuple, list[_Entry]] = {}  # (rank, pass, sub) → its entries in order
        self.recv_of: dict[tuple, _Entry] = {}  # (rank, pass, sub) → the receive it waits for
        self.last: dict[tuple[int, int], _Entry] = {}  # (new device, iteration) → its last pass op

    def add(self, src: Op, sub: int, key: tuple, **fields) -> _Entry:
        """An entry copying ``src`` onto piece ``sub`` of its rank, ``fields`` changed."""
        stage = self.where[src.device][1] * self.k + sub
        e = _Entry(src, {"device": self.device(src.device, sub), "stage": stage, **fields}, key)
        self.entries.append(e)
        self.copy[src.id, sub] = e
        return e

    def passes(self, slot: list[dict], table: dict) -> None:
        """Every pass's pieces, their own waits, and the sends into and between them."""
        prog, k, pass_of = self.prog, self.k, self.pass_of
        ops_of: dict[tuple, list[Op]] = {}
        for op in prog.ops:
            if pass_of[op.id] is not None and not (op.kind in (SEND, RECV) and op.layer < 0):
                ops_of.setdefault((op.device, pass_of[op.id]), []).append(op)
        sends = [op for op in prog.ops if op.kind == SEND and op.layer < 0]
        size = {ph: next((s.nbytes for s in sends if pass_of[s.id][1] == ph), table["send"]) for ph in "FB"}
        stages = len(slot)
        for (rank, ps), ops in ops_of.items():
            it, ph, mb = ps
            p = self.where[rank][1]
            heads = list(takewhile(lambda op: op.layer < 0, ops))
            for i in range(k):
                key = (it, 1, slot[p * k + i][ph, mb])
                receives = p * k + i > 0 if ph == "F" else ph == "B" and p * k + i < stages - 1
                got = [
                    self._head(h, i, key + (n,))
                    for n, h in enumerate(heads)
                    if h.kind != COLLECTIVE or receives
                ]
                if receives and table["gather"] and not any(h.kind == COLLECTIVE for h in heads):
                    got += self._gather(ops, i, key + (len(heads),), table["gather"])
                self.pieces[rank, ps, i] = got
            for n, op in enumerate(ops[len(heads) :]):
                if op.layer < 0:
                    self.refuse(f"op {op.name!r} (rank {rank}) inside a pass carries no layer label")
                i = op.layer // self.per - p * k
                fields = dict(_NO_MEMORY)
                if op.kind == COLLECTIVE:  # (its members run the same layer: the same piece)
                    fields["group"] = tuple(self.device(m, i) for m in op.group)
                e = self.add(op, i, (it, 1, slot[p * k + i][ph, mb], len(heads) + n), **fields)
                self.pieces[rank, ps, i].append(e)
            self._memory(ops, [self.pieces[rank, ps, i] for i in range(k)])
        for e in self.entries:  # a send or receive inside a pass (TP overlap): its peer's copy
            if e.src.kind in (SEND, RECV):
                peer = prog.ops[e.src.peer]
                e.peer = self.copy[peer.id, peer.layer // self.per - self.where[peer.device][1] * k]
        self._inside()
        self._sends(ops_of, size)
        for (_, ps, _), piece in self.pieces.items():
            dev = piece[0].fields["device"]
            if self.last.get((dev, ps[0])) is None or self.last[dev, ps[0]].key < piece[-1].key:
                self.last[dev, ps[0]] = piece[-1]

    def _head(self, op: Op, sub: int, key: tuple) -> _Entry:
        """A pass's unlabelled leading op, copied to piece ``sub``."""
        fields = dict(_NO_MEMORY)
        if op.kind == COLLECTIVE:
            fields["group"] = tuple(self.device(m, sub) for m in op.group)
            fields["tag"] = f"{op.tag} /{sub}"
        return self.add(op, sub, key, **fields)

    def _gather(self, ops: list[Op], sub: int, key: tuple, nbytes: int) -> list[_Entry]:
        """The received tensor's all-gather over the TP group where the trace has none to
        copy (P = 1), made from the pass's first TP collective; none without one."""
        tp = next((op for op in ops if op.kind == COLLECTIVE and op.lane == "tp"), None)
        if tp is None:
            return []
        e = _Entry(
            tp,
            {
                "device": self.device(tp.device, sub),
                "stage": self.where[tp.device][1] * self.k + sub,
                "nbytes": nbytes,
                "collective": "all_gather",
                "name": "pp all-gather",
                "layer": -1,
                "group": tuple(self.device(m, sub) for m in tp.group),
                "tag": f"pp all-gather {tp.tag} /{sub}",
                **_NO_MEMORY,
            },
            key,
        )
        self.entries.append(e)
        return [e]

    def _memory(self, ops: list[Op], pieces: list[list[_Entry]]) -> None:
        """The pass's allocation on each piece's first op, its release on each one's last,
        shared out by the pieces (equal layer counts under an even split)."""
        k = len(pieces)
        for name, end in (("mem_alloc", 0), ("stash_alloc", 0), ("mem_free", -1), ("stash_free", -1)):
            total = sum(getattr(op, name) for op in ops)
            for i, piece in enumerate(pieces):
                if piece:
                    piece[end].fields[name] = total * (i + 1) // k - total * i // k

    def _inside(self) -> None:
        """Each piece's op waits for what it waited for in the trace within the piece; a
        wait on an op now on another piece becomes one on the op before it in this piece."""
        prog, pass_of = self.prog, self.pass_of
        for (_, ps, i), piece in self.pieces.items():
            mine = {id(e) for e in piece}
            for n, e in enumerate(piece):
                inside = [d for d in e.src.deps if pass_of[d] == ps and prog.ops[d].kind not in (SEND, RECV)]
                mapped = [
                    self.copy[d, i] for d in inside if (d, i) in self.copy and id(self.copy[d, i]) in mine
                ]
                if n and (len(mapped) < len(inside) or not inside):
                    mapped.append(piece[n - 1])
                e.deps = list(dict.fromkeys(mapped))

    def _sends(self, ops_of: dict, size: dict) -> None:
        """The trace's sends, from the piece at the old boundary into the one after it, and
        new ones between the pieces of a pass."""
        prog, k = self.prog, self.k
        feeds = {}  # receive → the pass that waits for it
        for op in prog.ops:
            for d in op.deps:
                if prog.ops[d].kind == RECV and prog.ops[d].layer < 0 and self.pass_of[op.id] is not None:
                    feeds.setdefault(d, self.pass_of[op.id])
        for op in prog.ops:
            if op.kind != SEND or op.layer >= 0:
                continue
            ps, recv = self.pass_of[op.id], prog.ops[op.peer]
            out_sub, in_sub = (k - 1, 0) if ps[1] == "F" else (0, k - 1)
            src = self.pieces[op.device, ps, out_sub]
            if recv.id not in feeds:
                self.refuse(f"recv {recv.name!r} (rank {recv.device}) feeds no pass")
            dst = self.pieces[recv.device, feeds[recv.id], in_sub]
            stages = f"{ps[1]}{ps[2]} s{self.where[op.device][1] * k + out_sub}->s{self.where[recv.device][1] * k + in_sub}"
            s = self.add(op, out_sub, src[-1].key[:3] + (0,), name=f"send {stages}")
            r = self.add(recv, in_sub, dst[0].key[:3] + (0,), name=f"recv {stages}")
            s.deps, s.peer, r.peer = [src[-1]], r, s
            self.recv_of[recv.device, feeds[recv.id], in_sub] = r
        for rank, ps in ops_of:
            for i in range(k - 1 if ps[1] in "FB" else 0):  # (a W pass moves nothing)
                a, b = (i, i + 1) if ps[1] == "F" else (i + 1, i)
                self._transfer(rank, ps, a, b, size[ps[1]])

    def _transfer(self, rank: int, ps: tuple, a: int, b: int, nbytes: int) -> None:
        """A send from piece ``a`` of pass ``ps`` to piece ``b``, after ``a``'s last op, and
        its receive, which ``b`` waits for."""
        it, ph, mb = ps
        after, before = self.pieces[rank, ps, a][-1], self.pieces[rank, ps, b][0]
        p = self.where[rank][1]
        sa, sb = p * self.k + a, p * self.k + b
        name = f"{ph}{mb} s{sa}->s{sb}"
        common = {
            **_NO_MEMORY,
            "microbatch": mb,
            "phase": "",  # (as the compiler's sends: their pass is the one they wait for)
            "iteration": it,
            "layer": -1,
            "nbytes": nbytes,
            "duration": 0.0,
            "flops": 0.0,
            "group": (),
            "collective": "",
            "beside": (),
            "tag": f"split it{it} r{rank} {name}",
        }
        ends = []
        for sub, stage, lane, kind, key in (
            (a, sa, "send", SEND, after.key),
            (b, sb, "recv", RECV, before.key),
        ):
            fields = {"device": self.device(rank, sub), "stage": stage, "lane": lane, "kind": kind}
            ends.append(_Entry(after.src, {**common, **fields, "name": f"{kind} {name}"}, key[:3] + (0,)))
        send, recv = ends
        send.deps, send.peer, recv.peer = [after], recv, send
        self.entries += ends
        self.recv_of[rank, ps, b] = recv

    def steps(self, share: dict, layer_bytes: int, tied: int) -> None:
        """The ops around the passes, copied to each piece's GPU (module docstring):
        ``layer_bytes`` the fewest gradient bytes of a layer, ``tied`` those of the tied
        embedding (the table's)."""
        prog, k, depth, pass_of = self.prog, self.k, self.depth, self.pass_of
        first_pass = {}
        for op in prog.ops:
            if pass_of[op.id] is not None:
                first_pass.setdefault(op.device, op.id)
        outside = [op for op in prog.ops if pass_of[op.id] is None]
        for op in outside:
            p = self.where[op.device][1]
            key = (op.iteration, 0 if op.id < first_pass.get(op.device, -1) else 2, op.id)
            if op.kind != COLLECTIVE:
                for i in range(k):
                    f = share[p, i] if op.kind == COMPUTE else 1.0
                    self.add(op, i, key, duration=op.duration * f, flops=op.flops * f)
                continue
            spots = {self.where[m][1] for m in op.group}
            if (
                len(spots) == 1 and op.nbytes >= layer_bytes
            ):  # one stage's gradient reduction: each piece its share
                for i in range(k):
                    fields = {"group": tuple(self.device(m, i) for m in op.group), "tag": f"{op.tag} /{i}"}
                    self.add(op, i, key, nbytes=round(op.nbytes * share[p, i]), **fields)
            elif len(spots) == 1 or (spots == set(range(depth)) and op.nbytes != tied):
                # a scalar's reduction over every stage (the gradient-statistics group) spans every new one
                group = tuple(sorted(self.device(m, i) for m in op.group for i in range(k)))
                for i in range(k):
                    self.add(op, i, key, group=group)
            elif p in (0, depth - 1):  # the tied embedding's ends: the new stages holding them
                end = {0: 0, depth - 1: k - 1}
                group = tuple(self.device(m, end[self.where[m][1]]) for m in op.group)
                self.add(op, end[p], key, group=group)
        for op in outside:
            for i in range(k):
                e = self.copy.get((op.id, i))
                if e is not None:
                    e.deps = self._step_deps(op, i)

    def tied(self, nbytes: int, layer_bytes: int) -> None:
        """A trace of one stage holds no tied-embedding reduction to copy: each replica's
        new first and last stage all-reduce ``nbytes`` of it after their gradient reduction
        (after their passes without one) and before the rest of their step, as Megatron's
        ``_allreduce_word_embeddings_grads`` does (:mod:`clustersim.compilers.pipeline.step_work`)."""
        k = self.k
        reduction: dict[tuple[int, int], Op] = {}  # (rank, iteration) → its last gradient reduction
        for op in self.prog.ops:
            if self.pass_of[op.id] is None and op.kind == COLLECTIVE and op.nbytes >= layer_bytes:
                reduction[op.device, op.iteration] = op
        steps: dict[int, list[_Entry]] = {}  # new device → its entries after the passes
        for e in self.entries:
            if e.key[1] == 2:
                steps.setdefault(e.fields["device"], []).append(e)
        for rank, it, sub in sorted({(r, ps[0], i) for r, ps, _ in self.pieces for i in (0, k - 1)}):
            dev = self.device(rank, sub)
            if (rank, it) in reduction:
                anchor = self.copy[reduction[rank, it].id, sub]
                key = anchor.key + (1,)
            else:
                anchor, key = self.last[dev, it], (it, 2, -1)
            fields = {
                **_NO_MEMORY,
                "device": dev,
                "stage": sub,
                "lane": "comm",
                "kind": COLLECTIVE,
                "name": f"tied-embedding all-reduce s{sub}",
                "nbytes": nbytes,
                "group": (self.device(rank, 0), self.device(rank, k - 1)),
                "collective": "all_reduce",
                "algorithm": "auto",
                "tag": f"tied-embedding it{it} rank{rank}",
                "phase": "",
                "microbatch": -1,
                "iteration": it,
                "layer": -1,
                "duration": 0.0,
                "flops": 0.0,
                "beside": (),
            }
            e = _Entry(anchor.src, fields, key)
            e.deps = [anchor]
            for other in steps.get(dev, []):  # the rest of the step waits for it
                other.deps = [e if d is anchor else d for d in other.deps]
            steps.setdefault(dev, []).append(e)
            self.entries.append(e)

    def _step_deps(self, op: Op, i: int) -> list[_Entry]:
        """What the copy of ``op`` on piece ``i``'s GPU waits for: the copies of its waits
        there; for a wait on a pass, that GPU's last piece of the iteration; for a
        collective it does not join, what that waited for."""
        out = []
        for d in op.deps:
            if self.pass_of[d] is not None:
                e = self.last.get((self.device(op.device, i), self.pass_of[d][0]))
                out += [e] if e is not None else []
            elif (d, i) in self.copy:
                out.append(self.copy[d, i])
            else:
                out += self._step_deps(self.prog.ops[d], i)
        return list(dict.fromkeys(out))

    def chain(self) -> None:
        """Each piece after the op before it on its GPU (the previous piece, or the previous
        iteration's step) and after its receive."""
        by_device: dict[int, list[tuple]] = {}
        for (rank, ps, i), piece in self.pieces.items():
            by_device.setdefault(piece[0].fields["device"], []).append((piece[0].key, rank, ps, i))
        steps: dict[tuple[int, int], _Entry] = {}
        for e in self.entries:
            if e.key[1] == 2 and e.fields.get("lane", e.src.lane) == e.src.lane and e.src.kind == COMPUTE:
                at = (e.fields["device"], e.key[0])
                if at not in steps or steps[at].key < e.key:
                    steps[at] = e
        for dev, items in by_device.items():
            prev = None
            for _, rank, ps, i in sorted(items):
                head = self.pieces[rank, ps, i][0]
                if prev is not None and prev.key[0] != ps[0] and (dev, prev.key[0]) in steps:
                    prev = steps[dev, prev.key[0]]
                head.deps[:0] = [prev] if prev is not None else []
                if (rank, ps, i) in self.recv_of:
                    head.deps.append(self.recv_of[rank, ps, i])
                prev = self.pieces[rank, ps, i][-1]

    def program(self, devices: int) -> Program:
        """The new Program: each lane's entries in order, ids given, waits resolved."""
        entries = sorted(
            self.entries, key=lambda e: (e.fields["device"], e.fields.get("lane", e.src.lane), e.key)
        )
        ids = {id(e): i for i, e in enumerate(entries)}
        out = Program(devices)
        for i, e in enumerate(entries):
            op = Op.from_row(e.src.row())
            for name, value in e.fields.items():
                setattr(op, name, value)
            op.id = i
            op.deps = tuple(ids[id(d)] for d in e.deps)
            if op.kind in (SEND, RECV):
                op.peer = ids[id(e.peer)]
            out.append(op)
        return out
