"""Double binary tree all-reduce (NCCL's ``TREE``; Sanders, Speck & Träff 2009).

Two binary trees span the group; a rank that is a leaf in one is (mostly) an inner node
in the other. Each tree carries half the buffer, cut into k chunks: the chunks are reduced up
the tree (pipelined), then broadcast back down (pipelined). Both trees run at once, so
every rank's port carries two flows of S/2 in each phase, each at B/2. The idle-fabric
time is the textbook pipelined-tree form, twice (reduce, then broadcast):
``T = 2·[d·α + (k + d − 1)·S/(k·B)]`` with d = ⌊log2 n⌋ the depth in hops and k chunks
per tree — for large k, ``2·d·α + 2·S/B``, NCCL's tree model (algbw = busbw / 2).
"""

from __future__ import annotations

import math

from .algorithm import ALGORITHMS, Algorithm
from .cost import Shape
from .ring import pipeline_chunks
from .schedule import Msg, all_of, split


def binary_tree(n: int) -> list[int]:
    """Parent position of each of ``n`` positions in an in-order binary tree (root: -1).

    Position i is node x = i+1; x's height is its lowest set bit. A node whose parent
    would lie beyond n hangs from the nearest existing ancestor instead."""
    parent = [-1] * n
    for i in range(n):
        x, low = i + 1, (i + 1) & -(i + 1)
        while True:
            q = x - low if x & (2 * low) else x + low
            if low * 2 > n and q > n:
                break  # x is the root
            x, low = q, low * 2
            if q <= n:
                parent[i] = q - 1
                break
    return parent


def double_trees(order: list[str]) -> list[dict[str, list]]:
    """Two trees over ``order``: ``{"parent": {rank: parent|None}, "children": {...}}``.

    The second is the first shifted by one rank, so leaves and inner nodes swap (n even)."""
    n = len(order)
    par = binary_tree(n)
    trees = []
    for shift in (0, 1):
        rank = [order[(q + shift) % n] for q in range(n)]
        parent = {rank[q]: (rank[par[q]] if par[q] >= 0 else None) for q in range(n)}
        children = {r: [] for r in rank}
        for r, p in parent.items():
            if p is not None:
                children[p].append(r)
        trees.append({"parent": parent, "children": children})
    return trees


def build_tree(env, kind: str, order: list[str], nbytes: int, ready: dict, root=None, chunks=None):
    """Double-binary-tree all-reduce schedule; returns (engines, done events per rank)."""
    if kind != "all_reduce":
        raise ValueError(kind)
    if len(order) == 1:
        return [], {m: all_of(ready.get(m, ())) for m in order}
    trees = list(zip(double_trees(order), split(nbytes, 2), strict=True))
    return pipelined_trees(env, order, trees, ready, chunks, lambda src, dst: 0.5)


def pipelined_trees(env, order: list[str], trees: list, ready: dict, chunks, share_of, through: bool = False):
    """All-reduce over several trees at once, each ``({"parent", "children"}, bytes)`` over
    ``order``'s ranks carrying its bytes in pipeline chunks: reduced up the tree, then
    broadcast down from its root. The up-engine ``src → dst`` paces itself at
    ``share_of(src, dst)`` of its port: a rank sends up several trees at once, and a flow
    that injects at full rate floods the FIFO ahead of another tree's critical path.
    ``through``: the root broadcasts each chunk once that chunk is reduced (NCCL's tree, a
    chunk goes up and straight back down), else once its whole part is. Returns (engines,
    done events per rank)."""
    ready = {m: all_of(ready.get(m, ())) for m in order}
    done = {m: () for m in order}
    # one engine per rank, tree and phase
    ups = {m: [] for m in order}
    downs = {m: [] for m in order}
    for tree, part in trees:
        parent, children = tree["parent"], tree["children"]
        top = next(r for r, p in parent.items() if p is None)
        sizes = split(part, pipeline_chunks(part, chunks))
        up = {m: [] for m in order}  # up[m][j]: message m -> parent carrying chunk j
        down = {m: [] for m in order}  # down[m][j]: message parent -> m carrying chunk j
        for m in _post_order(children, top):  # children's messages exist before parents'
            if parent[m] is None:
                continue
            for j, size in enumerate(sizes):
                deps = ready[m] + tuple(up[c][j].done for c in children[m])
                up[m].append(Msg(env, m, parent[m], size, deps, share=share_of(m, parent[m])))
        reduced = tuple(up[c][-1].done for c in children[top]) + ready[top]
        for m in _pre_order(children, top):
            for j, size in enumerate(sizes):
                if m != top:
                    have = (down[m][j].done,)
                elif through:
                    have = tuple(up[c][j].done for c in children[top]) + ready[top]
                else:  # the root broadcasts once its whole part is reduced
                    have = reduced
                for c in children[m]:
                    down[c].append(Msg(env, m, c, size, have))
        for m in order:
            ups[m].append(up[m])
            downs[m].append(_interleave(down, children[m], len(sizes)))
            # a rank has its part when the last chunk came down (the root: came up)
            done[m] += reduced if m == top else (down[m][-1].done,)
    engines = [prog for m in order for prog in ups[m]]
    engines += [[msg for group in prog for msg in group] for m in order for prog in downs[m]]
    return engines, {m: all_of(evs) for m, evs in done.items()}


def _interleave(down, kids, k):
    """Down-messages of one parent, one list entry per chunk: [chunk j to each child]."""
    return [[down[c][j] for c in kids] for j in range(k)] if kids else []


def _post_order(children, top):
    out, stack = [], [(top, False)]
    while stack:
        node, seen = stack.pop()
        if seen:
            out.append(node)
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children[node])
    return out


def _pre_order(children, top):
    out, stack = [], [top]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(children[node])
    return out


def cost(sh: Shape, kind: str, s: float, _servers: int) -> float:
    """Idle-network α-β time (s) of ``kind`` on ``s`` bytes by tree (symbols: :mod:`.cost`)."""
    depth = max(1, int(math.log2(sh.n)))
    a_n, b_n = sh.net
    a = max(sh.alpha, a_n)
    b = sh.bw if sh.nodes <= 1 else min(sh.bw, b_n)
    k = pipeline_chunks(int(s / 2))
    return 2 * (depth * a + (k + depth - 1) * s / (k * b))


ALGORITHMS.add(
    Algorithm(
        "tree",
        "double binary tree, pipelined",
        kinds=frozenset({"all_reduce", "barrier"}),
        factory=lambda g, k, s, o: build_tree(g.env, k, g.members, s, {}, o.root, o.chunks),
        cost=cost,
        rank=1,
    )
)
