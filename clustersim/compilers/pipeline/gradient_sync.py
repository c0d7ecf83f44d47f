"""The data-parallel gradient all-reduce of one stage, optionally with gradient compression.

The compiler (:mod:`.compiler`) calls :func:`emit_gradient_allreduce` at every optimizer
step of a stage with dp > 1. What it emits on the device, in order, depends on
``parallel.gradient_compression`` (a :class:`~.compression.Compression`):

* none: one all-reduce of the gradient bytes S over the stage's DP group;
* ``links: all``: ``compress`` (compute lane, S·c/2) → all-reduce of S/k → ``decompress``
  (S·c/2), with k the ratio and c the codec time per uncompressed byte;
* ``links: inter_site`` / ``inter_node``: the group is split into its *domains* (sites of
  a ``wan`` topology, or servers) in group order. A group inside one domain runs the plain
  all-reduce, uncompressed. A group over D domains of L members each runs the exact
  hierarchical decomposition of an all-reduce: reduce-scatter of S inside each domain
  (uncompressed; member i keeps shard i of S/L bytes) → ``compress`` (S/L·c/2) →
  all-reduce of the compressed shard S/(L·k) among the D members holding shard i, one
  per domain → ``decompress`` (S/L·c/2) → all-gather of S inside each domain. Only the
  cross-domain step is compressed, and each GPU codes only its own shard. With L = 1 the
  intra-domain steps vanish. Domains holding different numbers of the group's members
  are an error (the shards would not line up).

The cross-domain collectives are tagged per shard index, the intra-domain ones per
domain, so every member of a sub-group meets the same rendezvous. Folding (one
representative per stage) keeps only the plain and ``all`` forms; ``inter_site`` and
``inter_node`` are refused by :mod:`clustersim.resolve.fold`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ProgramError
from ...parallel.compression import Compression
from ...program import COLLECTIVE, Program
from .codecs import emit_codec


def emit_gradient_allreduce(
    emit: GradientEmitter,
    group: tuple[int, ...],
    grad: int,
    *,
    tag: str,
    deps: tuple[int, ...],
    compression: Compression | None,
) -> tuple[int, ...]:
    """Emit ``emit.dev``'s ops of the gradient all-reduce of ``grad`` bytes over ``group``
    (module docstring); return the deps the optimizer op waits on. ``tag`` names this
    all-reduce (sub-collectives extend it)."""
    stage, fold, dev = emit.stage, emit.fold, emit.dev
    if compression is None:
        return emit.collective("all-reduce", "all_reduce", group, grad, tag, deps)
    if compression.domains is None:
        deps = emit.codec("compress", compression.half_seconds(grad), deps)
        deps = emit.collective("all-reduce", "all_reduce", group, compression.shrunk(grad), tag, deps)
        return emit.codec("decompress", compression.half_seconds(grad), deps)
    if fold:
        raise ProgramError(f"gradient compression on {compression.links} links cannot be folded")
    parts: dict[int, list[int]] = {}
    for d in group:
        parts.setdefault(compression.domains[d], []).append(d)
    if len(parts) == 1:  # the group stays inside one site / server: nothing crosses a compressed link
        return emit.collective("all-reduce", "all_reduce", group, grad, tag, deps)
    if len({len(members) for members in parts.values()}) > 1:  # the scenario rules refuse this
        raise ProgramError(f"stage {stage}'s data-parallel group is uneven over {compression.links} domains")
    domain = compression.domains[dev]
    local = parts[domain]
    width = len(local)
    shard = grad / width
    if width > 1:
        deps = emit.collective(
            "reduce-scatter", "reduce_scatter", tuple(local), grad, f"{tag} rs d{domain}", deps
        )
    deps = emit.codec("compress", compression.half_seconds(shard), deps)
    i = local.index(dev)
    across = tuple(members[i] for members in parts.values())
    deps = emit.collective("all-reduce", "all_reduce", across, compression.shrunk(shard), f"{tag} x{i}", deps)
    deps = emit.codec("decompress", compression.half_seconds(shard), deps)
    if width > 1:
        deps = emit.collective("all-gather", "all_gather", tuple(local), grad, f"{tag} ag d{domain}", deps)
    return deps


@dataclass(frozen=True)
class GradientEmitter:
    """The ops of one device's gradient all-reduce (:func:`emit_gradient_allreduce`):
    collectives on ``comm``, codecs on ``compute``, on ``dev`` of ``prog``, labelled with
    ``stage``, ``iteration`` and ``label``. ``fold``: one GPU per stage is emitted, its
    collectives expecting ``arrivals`` members (2 where two stages share the group) and
    carrying the folded twins' groups as ``shadows``."""

    prog: Program
    dev: int
    stage: int
    iteration: int
    label: str
    fold: bool = False
    shadows: tuple = ()
    arrivals: int = 1

    def collective(
        self, what: str, kind: str, group: tuple[int, ...], nbytes: int, tag: str, deps: tuple[int, ...]
    ) -> tuple[int]:
        op = self.prog.add(
            self.dev,
            "comm",
            COLLECTIVE,
            f"dp {what} s{self.stage}{self.label}",
            stage=self.stage,
            iteration=self.iteration,
            nbytes=nbytes,
            deps=deps,
            group=group,
            collective=kind,
            tag=tag,
            arrivals=self.arrivals if self.fold else 0,
            shadows=self.shadows,
        )
        return (op.id,)

    def codec(self, name: str, seconds: float, deps: tuple[int, ...]) -> tuple[int]:
        return (
            emit_codec(
                self.prog,
                self.dev,
                name,
                seconds,
                deps,
                stage=self.stage,
                phase="O",
                iteration=self.iteration,
            ).id,
        )
