"""The host's issue rate: a GPU stream cannot run ahead of the CPU that issues its kernels.

In eager PyTorch (every ``training.framework`` profile) the CPU issues each kernel of a pass
in turn — Python, the dispatcher, autograd, the driver's launch in the forward; the autograd
engine's C++ nodes in the backward; a framework module's own Python around its GEMM
(:mod:`.host_kernels` says what each op costs the host) — and the kernels queue on the GPU
stream asynchronously, so the CPU runs ahead while kernels are long and the GPU waits — is
host-bound — while they are shorter than their issue. Per pass, with the host clock ``h``
(when the host has issued what came before) and the stream's clock ``g`` both 0 at the
pass's start (Megatron synchronises the device after each pipeline receive, and the pass's
``framework`` op stands for the host's own gap before it), an item of k kernels whose GPU
time is t (their launch latency included) and whose issue costs the host H seconds runs as
k equal kernels issued H/k apart, each starting when both the stream is free and the host
has issued it:

    start = max(g, h + H/k)                              (the first kernel is issued)
    end   = max(start + t, h + H + t/k)                  (the last one, issued H in)
    h    += H

exact for k equal kernels (the GPU waits for the host only once the kernels are shorter
than their issue). An item without its own H (a cost model without a host) pays the pass's
``dispatch`` a kernel. A collective is one host call (``h += dispatch``, one NCCL launch)
and takes no GPU time in this race: its duration is the fabric's, unknown when the pass is
compiled, so the race charges the host's lag as if the collective were instant — an upper
bound on the wait (a long collective lets a lagging host catch up), exact for passes without
collectives (TP 1, where small, host-bound models usually run). The wait, ``end − g − t``
summed, is added to the pass's ``launch`` op (with the kernels' GPU launch latency,
``Efficiency.launch_s``): no op or event is added — the pass's ops are those it had; the
summary reports it per GPU and iteration as ``host_bound_s``.

A **device→host synchronisation** (a collective marked ``host_sync``: Megatron-Core's
alltoall token dispatcher copies the all-to-all's split sizes to the host — ``.to("cpu")``
then a stream synchronise at its ``cuda_sync_point`` ``before_ep_alltoall`` — every MoE
layer's forward, dropless; :mod:`.moe_dispatch`) makes the host wait until the stream has run
everything issued so far: ``h = max(h, g)`` before the collective's own call. Whatever lead
the host had is lost there, so the kernels after it wait the host's full dispatch lag again
(k kernels each shorter than a dispatch after a sync: the GPU idles ``dispatch`` before each).

``training.cuda_graphs`` (Megatron-LM ``--cuda-graph-impl local|transformer_engine``, default
``none`` in megatron/training/arguments.py; NeMo's CUDA-graph option likewise opt-in: no
profile turns it on) removes the host's time: the GPU launch latency stays.
``training.fixed_costs.host_dispatch`` overrides the measured dispatch, modules included
(0: the host never holds the GPU back).

``dispatch_s`` is a host-level measurement per software stack, a row of
``clustersim/data/host_dispatch.csv`` with its source (never fitted to training throughput).
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from ..accel import load

HOST_CSV = Path(__file__).resolve().parent.parent / "data" / "host_dispatch.csv"
_accel = load("clustersim.workload._chost")  # built by setup.py where a C compiler works

#: the software stack whose per-kernel dispatch each ``training.framework`` profile pays: all
#: four issue their kernels from eager PyTorch (CUDA graphs are opt-in everywhere)
STACKS = {
    "megatron_2021": "pytorch_eager",
    "megatron_core": "pytorch_eager",
    "deepspeed": "pytorch_eager",
    "fsdp2": "pytorch_eager",
}


@cache
def dispatch_s(framework: str) -> float:
    """Seconds of host time per kernel the stack of ``framework`` issues: the ``calibrate``
    row of its stack in ``host_dispatch.csv``."""
    stack = STACKS[framework]
    with HOST_CSV.open() as fh:
        (row,) = [
            r
            for r in csv.DictReader(fh)
            if r["stack"] == stack and r["quantity"] == "dispatch" and r["role"] == "calibrate"
        ]
    return float(row["value_us"]) * 1e-6


def _work(item: tuple, launch_s: float, dispatch: float) -> tuple[float, int, float]:
    """(GPU seconds with the launch latency, kernels the host issues, host seconds of
    issuing them) of a pass item (:mod:`.segments`; its own host seconds where it carries
    them, else ``dispatch`` a kernel); (0, 0, 0) for a collective."""
    kind = item[0]
    if kind in ("c", "p", "e"):
        t = max(item[1]) if kind == "e" else item[1]  # "e": the slowest expert rank's kernels
        host = item[4] * dispatch if item[5] is None else item[5]
        return t + item[3] * launch_s, item[4], host
    if kind == "o":  # a GEMM pipelined with a TP collective: one GEMM kernel per chunk
        return item[4] + item[10] * launch_s, item[7], item[7] * dispatch if item[9] is None else item[9]
    if kind == "r":  # ring attention: one attention kernel per step
        return sum(item[1]), len(item[1]), len(item[1]) * dispatch
    return 0.0, 0, 0.0


def host_waits(pieces: list[list[tuple]], launch_s: float, dispatch: float) -> list[float]:
    """:func:`_host_waits`, in C where the accelerator is built (``_chost.c``: the same floats)."""
    if _accel is not None:
        return _accel.host_waits(pieces, launch_s, dispatch)
    return _host_waits(pieces, launch_s, dispatch)


def _host_waits(pieces: list[list[tuple]], launch_s: float, dispatch: float) -> list[float]:
    """Seconds the GPU stream waits for the host in each piece of one pass — ``pieces``
    the pass's items in order, split as its ops will be (one piece, or one per layer), the
    race carried across pieces (module doc); ``dispatch`` the host seconds per kernel of
    the items that carry none, and of a collective's call. An item of k kernels and H host
    seconds races as k kernels issued H/k apart. All 0 when no item costs host time."""
    g = h = 0.0
    waits = []
    # an item's work by its identity: a pass repeats its layers' item tuples, so each is read
    # once (the race itself runs item by item: its sums round as they go)
    works: dict[int, tuple] = {}
    for items in pieces:
        wait = 0.0
        for item in items:
            work = works.get(id(item))
            if work is None:
                t, k, host = _work(item, launch_s, dispatch)
                work = works[id(item)] = (t, k, host, host / k, t / k) if k else (t, 0)
            if work[1] == 0:
                if item[0] == "x":
                    if item[6:7] == (True,) and g > h:  # the host blocks until the stream drains
                        h = g
                    h += dispatch  # the host enqueues the collective
                continue
            t, _, host, host_k, t_k = work
            # each term ≥ 0 on its own, so a zero host time adds exactly nothing (a
            # comparison, not max(0.0, x): the same number, without the call)
            first = h + host_k - g
            if not first > 0.0:
                first = 0.0
            last = h + host + t_k - (g + first + t)
            if not last > 0.0:
                last = 0.0
            wait += first + last
            g += first + t + last
            h += host
        waits.append(wait)
    if waits and h - g > 0.0:  # a trailing collective starts once the host has issued it
        waits[-1] += h - g
    return waits
