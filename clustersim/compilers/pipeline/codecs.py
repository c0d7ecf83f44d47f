"""Activation and gradient codecs on the compiler's side: which pass (de)compresses how many
bytes, and the codec kernels it emits (:class:`clustersim.parallel.compression.Compression`
says what a scenario's compression means).
"""

from __future__ import annotations

from ...parallel.compression import Compression
from ...program import COMPUTE, Op, Program


def coded_activation_bytes(
    codec: Compression | None,
    schedule,
    plan,
    s: int,
    r: int,
    t: int,
    transfers: tuple[tuple[int, int] | None, ...],
) -> tuple[int, int]:
    """(bytes decompressed before, bytes compressed after) a pass on the device of (s, r, t)
    whose (received, sent) are ``transfers`` (:func:`clustersim.workload.pass_costs.pass_transfers`): a transfer's
    bytes where its neighbour chunk sits on another stage across a compressed link, else 0."""
    if codec is None:
        return 0, 0
    here = plan.device(s, r, t)

    def coded(transfer: tuple[int, int] | None) -> int:
        if transfer is None:
            return 0
        chunk, nbytes = transfer
        to = schedule.stage_of(chunk, plan.pp)
        return nbytes if to != s and codec.crosses(here, plan.device(to, r, t)) else 0

    received, sent = transfers
    return coded(received), coded(sent)


def emit_codec(prog: Program, dev: int, name: str, seconds: float, deps: tuple[int, ...], **labels) -> Op:
    """A (de)compression kernel of ``seconds`` on ``dev``'s compute lane, after ``deps``."""
    return prog.add(dev, "compute", COMPUTE, name, duration=seconds, deps=deps, **labels)
