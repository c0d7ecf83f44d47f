"""What a pipeline stage emits between its passes: the sends and recvs that carry a pass's
output to the stage consuming it, and the optimizer step.

Both pipeline compilers — the uniform one (:mod:`.compile`, :mod:`.stages`) and the
stage-replicated one (:mod:`clustersim.compilers.replicated`) — emit these ops through
this module, so a transfer and a step look the same in every pipeline Program: a send on
the producer's ``send`` lane after the producing pass, its recv on the consumer's ``recv``
lane, which the consuming pass waits for; an optimizer op on the ``compute`` lane that
creates the next weight version.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...program import COMPUTE, Op, Program


@dataclass(frozen=True)
class Wiring:
    """The transfers of a pipeline Program ``prog`` of ``m`` micro-batches per iteration."""

    prog: Program
    m: int

    def send(self, src: Op, label: str, s: int, to: int, j: int, nbytes: int, shadows: tuple = ()) -> Op:
        """The send of pass ``label`` of micro-batch ``j`` (counted over the run) from stage
        ``s`` to stage ``to``, after ``src`` (the pass's last op) on its device; ``shadows``:
        the folded twins' sends."""
        m = self.m
        return self.prog.add(
            src.device,
            "send",
            "send",
            f"send {label} s{s}->s{to}",
            stage=s,
            microbatch=j % m,
            iteration=j // m,
            nbytes=nbytes,
            deps=(src.id,),
            shadows=shadows,
        )

    def recv(self, dev: int, send: Op, s: int, j: int, consumer: Op) -> Op:
        """The recv of ``send`` on ``dev`` (stage ``s``, micro-batch ``j``), paired with it;
        ``consumer`` (the consuming pass's first op) waits for it."""
        m = self.m
        recv = self.prog.add(
            dev,
            "recv",
            "recv",
            "recv" + send.name[4:],
            stage=s,
            microbatch=j % m,
            iteration=j // m,
            nbytes=send.nbytes,
            peer=send.id,
        )
        send.peer = recv.id
        consumer.deps = consumer.deps + (recv.id,)
        return recv


def emit_optimizer(
    prog: Program, dev: int, s: int, it: int, label: str, seconds: float, deps, version: int
) -> Op:
    """The optimizer op of stage ``s`` on ``dev`` (iteration ``it``; ``label``: the update's,
    "" for a flushing schedule's one step per iteration), ``seconds`` long after ``deps``,
    creating weight ``version``."""
    return prog.add(
        dev,
        "compute",
        COMPUTE,
        f"optimizer{label}",
        stage=s,
        phase="O",
        iteration=it,
        duration=seconds,
        deps=deps,
        version=version,
    )
