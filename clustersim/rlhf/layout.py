"""Who holds which parameters in the training layout and in the generation layout, and the
transfers that take the weights from one to the other (docs/rlhf.md, "Weight transfer").

The parameters are units in model order — the embedding, each layer, the output layer —
of known sizes (:func:`param_units`). Pipeline stage s of pp holds a contiguous run of
layers (the even split), the first stage the embedding too, the last the output layer;
TP rank k of tp holds the fraction [k/tp, (k+1)/tp) of every unit of its stage. A GPU's
*role* is its (stage, tp rank) in a layout; data-parallel replicas and generation replicas
hold the same role's bytes.

A GPU of the generation layout needs, of every training role, the bytes both roles hold
(:func:`overlap`, exact in fractions); it receives them unless it holds that training
role itself (colocated: resharding in place moves exactly the bytes whose owner changes),
from a holder on its own node where there is one, the holders taken in turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..errors import ScenarioError


@dataclass(frozen=True)
class Layout:
    """``gpus`` (physical indices) and the (stage, tp rank) each one holds, of a model cut
    into ``pp`` stages and ``tp`` shards."""

    gpus: tuple[int, ...]
    roles: tuple[tuple[int, int], ...]
    tp: int
    pp: int


def training_layout(plan, first_gpu: int = 0) -> Layout:
    """The training job's layout: roles as its plan places them (:meth:`Plan.coords`)."""
    n = plan.num_devices
    roles = tuple((s, k) for s, _, k in (plan.coords(d) for d in range(n)))
    return Layout(tuple(range(first_gpu, first_gpu + n)), roles, plan.tp, plan.pp)


def generation_layout(gpus: int, tp: int, pp: int, first_gpu: int = 0) -> Layout:
    """``gpus // (tp × pp)`` generation replicas side by side from ``first_gpu``; inside a
    replica the TP rank varies fastest (vLLM's workers)."""
    size = tp * pp
    roles = tuple(((i % size) // tp, i % tp) for i in range(gpus - gpus % size))
    return Layout(tuple(range(first_gpu, first_gpu + len(roles))), roles, tp, pp)


def param_units(cfg) -> list[int]:
    """Parameters of each unit in model order: embedding, the layers, the output layer
    (a dense transformer ``cfg``, :class:`~clustersim.workload.transformer.TransformerConfig`)."""
    return [cfg.embedding_params(), *[cfg.layer_params()] * cfg.layers, cfg.output_params()]


def stage_units(units: int, pp: int) -> list[range]:
    """The units each of ``pp`` stages holds (module doc): ``units − 2`` layers split evenly."""
    layers = units - 2
    if layers % pp:
        raise ScenarioError("rlhf.rollout.pp", pp, f"the {layers} layers must split evenly over the stages")
    per = layers // pp
    out = [range(1 + s * per, 1 + (s + 1) * per) for s in range(pp)]
    out[0] = range(0, out[0].stop)
    out[-1] = range(out[-1].start, units)
    return out


def _share(k: int, tp: int, j: int, tq: int) -> Fraction:
    """Length of [k/tp, (k+1)/tp) ∩ [j/tq, (j+1)/tq)."""
    lo = max(Fraction(k, tp), Fraction(j, tq))
    hi = min(Fraction(k + 1, tp), Fraction(j + 1, tq))
    return max(hi - lo, Fraction(0))


def overlap(sizes: list[int], a: Layout, ra: tuple[int, int], b: Layout, rb: tuple[int, int]) -> Fraction:
    """Parameters held both by role ``ra`` of layout ``a`` and by role ``rb`` of ``b``."""
    ua, ub = stage_units(len(sizes), a.pp)[ra[0]], stage_units(len(sizes), b.pp)[rb[0]]
    common = range(max(ua.start, ub.start), min(ua.stop, ub.stop))
    return sum((sizes[u] for u in common), 0) * _share(ra[1], a.tp, rb[1], b.tp)


def held(sizes: list[int], layout: Layout, role: tuple[int, int]) -> Fraction:
    """Parameters one GPU of ``role`` holds."""
    return overlap(sizes, layout, role, layout, role)


def weight_moves(
    sizes: list[int], train: Layout, gen: Layout, nbytes: int, gpus_per_node: int
) -> list[tuple[int, int, Fraction]]:
    """(src GPU, dst GPU, bytes) taking every GPU of ``gen`` the parameters its role needs
    from ``train``, ``nbytes`` a parameter (module doc)."""
    holders: dict[tuple[int, int], list[int]] = {}
    for gpu, role in zip(train.gpus, train.roles):
        holders.setdefault(role, []).append(gpu)
    mine = dict(zip(train.gpus, train.roles))
    turn: dict[tuple[tuple[int, int], int], int] = {}
    moves = []
    for dst, need in zip(gen.gpus, gen.roles):
        for role, srcs in holders.items():
            if mine.get(dst) == role:
                continue
            amount = overlap(sizes, gen, need, train, role)
            if not amount:
                continue
            near = [g for g in srcs if g // gpus_per_node == dst // gpus_per_node] or srcs
            key = (role, near[0] // gpus_per_node)
            i = turn.get(key, 0)
            turn[key] = i + 1
            moves.append((near[i % len(near)], dst, amount * nbytes))
    return moves
