"""NVLS: NCCL's in-switch reduction on an NVSwitch with NVLink SHARP (``NCCL_ALGO=NVLS``;
NCCL ``src/device/all_reduce.h`` ``runRing``'s NVLS sibling, multimem ``ld_reduce`` /
``st``), one host (HGX/DGX H100, H200, H800, B200; an NVL72 rack).

The switch does the arithmetic. An all-reduce of S bytes over the m GPUs of a host, cut into
k chunks of m shards: for each chunk every GPU sends each shard to the switch, which adds
the m copies of shard j and hands the sum to GPU j (the reduce-scatter, ``ld_reduce``); GPU
j sends its reduced shard back to the switch, which writes it to every GPU (the multicast
all-gather, ``st``). A GPU's link to the switch carries S + S/m out and S/m + S in, against
a ring's 2(m − 1)/m · S each way, and the two halves overlap chunk by chunk — why NVLS's
bus bandwidth passes the ring's (~480 against ~370 GB/s on 8 × H100: nccl-tests #212). The
switch's multicast objects span every GPU's memory, its own included, so a GPU's own shard
crosses its link too. NCCL's tuner rates NVLS at ``nvlsEfficiency`` of the NVLink bandwidth
(tuning.cc: Hopper 0.85, Blackwell 0.74); its messages take their bytes / that efficiency
of link time (:attr:`~.cost.Shape.nvls`). A reduce-scatter is the first half, an all-gather
the second. NVLS across hosts (NVLSTree, CollNet) is not modelled: one host only. It runs
the Simple protocol only (NCCL: ``NVLS && p != NCCL_PROTO_SIMPLE`` is skipped).

Latency: NCCL's tuner counts NVLS's latency once per call, with no per-step term (tuning.cc
2.18.5: ``baseLat`` 23 µs and NVLink ``hwLat`` 0; 2.20.5: NVLink ``hwLat`` 23 µs; master:
``intraLat`` 25 µs), and the messages carry no step α: the switch's steps are pipelined, not
a chain of handshakes. The latency paid is the system's Simple latency, except where the
system states one (a calibrated preset) and runs an NCCL release (``cluster.nccl_version``,
:mod:`.nccl_version`) with a row in ``clustersim/data/nvls_latency.csv``: NVLS's own, fitted
once per release on that release's curve (least squares on log time of this schedule plus
the latency: 2.18.5 28.2 µs on Azure's ND H100 v5 curve, 2.20.5 24.7 µs on ND H200 v5's;
the ring-priced Simple fit of the H100 curve is 33 µs). The tuner's 23 µs is the same in both
releases, so the 3.5 µs between them is measured, not read off the source.

How NCCL cuts the data (``src/enqueue.cc``, the same rule in 2.18.5, 2.20.5 and master):
``nvlsChannels`` channels (``src/transport/nvls.cc``: 16 on Hopper, 24 on one Blackwell
NVLink domain) each take one chunk per head (the m GPUs) per step, the chunk 128 KiB, cut to
64 KiB below 64·C, 32 KiB below 8·C and 16 KiB below 2·C bytes (C = channels·m·chunk, the
bytes of one step over all channels); each channel keeps ``NCCL_STEPS`` = 8 steps in flight.
A channel's step costs its bytes on its share of the link plus the step latency α (the
group's NVLink α, tuning.cc ``hwLat`` 3.4 µs: the channel's thread block waits for its
peers' flags before it moves the next chunk; the slopes below put it at ~4 µs), which is
why NVLS reaches its plateau only with large chunks: on 8 × H100 the nccl-tests curves' slope
is ~150–190 GB/s algbw with 16 KiB chunks, ~210–230 with 32 KiB, ~258 with 64 KiB and ~275
with 128 KiB (Azure ND H100 v5 / H200 v5, nccl_collective_measurements.csv). That step
latency is folded into the link time here: a message takes its bytes / ``efficiency`` of link
time, the busiest channel's steps (:func:`steps`, as the system's NCCL release deals the
call to its channels: :mod:`.nccl_version`) each ``w·c`` bytes on its ``1/channels`` of
``e·B`` plus α, over the call's bytes on the whole link — w = m + 1 chunks through a GPU's
busier direction per all-reduce step (m up and its reduced shard back; m of the multicast
in), m for a reduce-scatter or an all-gather. Where every channel takes whole steps this is
``1/e_c = 1/e + α·B/(channels·c·w)``; a call of less than one loop on 2.18.5 leaves channels
idle (1 MiB: 8 of 16, each one 128 KiB step, where 2.20.5 runs 16 with one 64 KiB step) —
why 2.18.5's 1 MiB row lies above the line through its 2–16 MiB rows and 2.20.5's does not.

Idle time on link bandwidth B, efficiency e at the call's size, k pipeline chunks (before
the latency):
``T_AR = (1 + 1/k) · S·(1 + 1/m)/(e·B)``; ``T_RS = T_AG = (1 + 1/k) · S/(e·B)``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from functools import cache
from pathlib import Path

from .algorithm import ALGORITHMS, Algorithm, never
from .cost import Shape
from .nccl_hardware import NVLS_EFFICIENCY
from .nccl_version import contiguous_split, has_nvls, release_name
from .ring import pipeline_chunks
from .schedule import Msg, all_of, split

#: chunks a GPU's reduce-scatter may run ahead of its all-gather: NCCL's buffer slots per
#: connection (src/include/device.h ``NCCL_STEPS``), so neither half starves the other
NCCL_STEPS = 8
#: NVLS channels per generation on one host (src/transport/nvls.cc ``NVLS_NCHANNELS_SM90``
#: 16, ``NVLS_NCHANNELS_SM100_NVL`` 24)
CHANNELS = {"hopper": 16, "blackwell": 24}
#: the generation of an NVLS efficiency (the group's Shape carries the efficiency only)
_GENERATION = {e: g for g, e in NVLS_EFFICIENCY.items() if e > 0}
#: NCCL's NVLS chunk sizes, largest first (``nvlsChunkSize`` 128 KiB), and the multiple of
#: one step's bytes over all channels below which each next smaller one is taken (enqueue.cc)
CHUNKS = ((131072, 64), (65536, 8), (32768, 2), (16384, 0))
#: NVLS's per-call latency per NCCL release, fitted once on each release's curve
LATENCY_CSV = Path(__file__).resolve().parent.parent / "data" / "nvls_latency.csv"


def chunk_size(nbytes: float, m: int, channels: int) -> int:
    """NCCL's NVLS chunk (bytes per head per channel step) for an ``nbytes`` call on ``m``
    GPUs over ``channels`` channels (enqueue.cc; module doc)."""
    for c, times in CHUNKS:
        if nbytes >= times * channels * m * c:
            return c
    return CHUNKS[-1][0]


def steps(nbytes: float, m: int, channels: int, version: str | None) -> list[float]:
    """The data bytes of each step of the busiest channel of an ``nbytes`` NVLS call on ``m``
    heads over ``channels`` channels, as NCCL release ``version`` deals them
    (:mod:`.nccl_version`): up to 2.19 loops of ``channels·m·c`` strided over the buffer, the
    first channel taking the first ``m·c`` of each (and of the last, partial, loop); from
    2.20.3 one contiguous ``nbytes/channels`` per channel in loops of ``m·c``, the last cut to
    its remainder."""
    step = m * chunk_size(nbytes, m, channels)
    if contiguous_split(version):
        loops, rest = divmod(nbytes / channels, step)
    else:
        loops, rest = divmod(nbytes, step * channels)
    return [step] * int(loops) + ([min(step, rest)] if rest > 0 else [])


def efficiency(sh: Shape, kind: str, nbytes: float) -> float:
    """NVLS's link efficiency for ``nbytes``: the busiest channel's steps (:func:`steps`), each
    its bytes on the channel's share of ``nvlsEfficiency`` of the link plus the step latency α,
    as a fraction of the whole call's bytes on the whole link (module doc)."""
    m, channels = sh.n, CHANNELS[_GENERATION[sh.nvls]]
    per_byte = (m + 1) / m if kind == "all_reduce" else 1.0  # link bytes per data byte
    busy = steps(nbytes, m, channels, sh.nccl_version)
    t = sum(per_byte * d * channels / (sh.nvls * sh.bw) + sh.alpha for d in busy)
    return nbytes * per_byte / (sh.bw * t) if t > 0 else sh.nvls  # nothing to move: any


@cache
def release_latencies() -> dict[str, float]:
    """NCCL release → NVLS's per-call latency (s), fitted once per release on its nccl-tests
    curve (``clustersim/data/nvls_latency.csv``; module doc)."""
    with open(LATENCY_CSV, newline="") as fh:
        return {r["nccl_version"]: float(r["latency_us"]) * 1e-6 for r in csv.DictReader(fh)}


def pays(sh: Shape, protocol):
    """Simple as NVLS pays it: where the system states a latency (a calibrated preset) and runs
    a release with a fitted NVLS latency, that latency (module doc); else as stated."""
    fitted = release_latencies().get(release_name(sh.nccl_version))
    if fitted is None or protocol.latency <= 0:
        return protocol
    return replace(protocol, latency=fitted)


def build(group, kind: str, nbytes: int, options):
    """The NVLS schedule of ``kind`` on ``group`` (one host; module doc)."""
    env, members = group.env, group.members
    sh = group.shape()
    m, eff = len(members), efficiency(sh, kind, nbytes)
    switch = group.path(members[0], members[1])[2][1]
    k = pipeline_chunks(-(-int(nbytes) // m), options.chunks)
    wire = [[math.ceil(b / eff) for b in split(part, m)] for part in split(nbytes, k)]
    ups = {r: [] for r in members}  # engine: a GPU's copies to the switch, in order
    gathers = {r: [] for r in members}  # engine: a GPU's reduced shards back to the switch
    sums = {r: [] for r in members}  # engine: the switch's reduced shards to GPU r
    casts = {r: [] for r in members}  # engine: the switch's multicast writes to GPU r
    have = {}  # (chunk, shard j) → the event after which GPU j holds the shard to spread
    for q, shards in enumerate(wire):
        if kind in ("all_reduce", "reduce_scatter"):
            copies = {}  # shard j → every GPU's copy of it on its way to the switch
            for r in members:  # shard by shard, so the first sums are ready soonest
                slot = gathers[r][q - NCCL_STEPS].done if q >= NCCL_STEPS and gathers[r] else None
                for j in range(m):
                    msg = Msg(env, r, switch, shards[j], (slot,) if slot is not None else ())
                    ups[r].append(msg)
                    copies.setdefault(j, []).append(msg.done)
            for j, r in enumerate(members):
                msg = Msg(env, switch, r, shards[j], all_of(copies[j]))  # one readiness, not m deps
                sums[r].append(msg)
                have[q, j] = (msg.done,)
        if kind in ("all_reduce", "all_gather"):
            for j, r in enumerate(members):
                msg = Msg(env, r, switch, shards[j], have.get((q, j), ()))
                gathers[r].append(msg)
                for dst in members:
                    casts[dst].append(Msg(env, switch, dst, shards[j], (msg.done,)))
    engines = [prog for prog in (*ups.values(), *sums.values(), *gathers.values(), *casts.values()) if prog]
    for prog in engines:  # no step latency: NCCL counts NVLS's latency once per call (module doc)
        for msg in prog:
            msg.alpha = 0.0
    return engines, {}


def fits(kind: str, n: int, per_host: tuple[int, ...]) -> str | None:
    """NVLS reduces inside one host's switch (across hosts NCCL runs NVLSTree/CollNet, not
    modelled)."""
    if len(per_host) > 1:
        return f"nvls runs inside one host's NVSwitch; the group spans {len(per_host)} hosts"
    return None


def hardware(sh: Shape, kind: str) -> str | None:
    """NVLS needs an NVSwitch with NVLink SHARP (Hopper or Blackwell systems)."""
    if sh.nvls <= 0:
        return "nvls needs the GPUs to meet at an NVSwitch with NVLink SHARP (Hopper or Blackwell HGX/DGX, NVL72)"
    if not has_nvls(sh.nccl_version, kind):
        since = "2.19.1" if kind != "all_reduce" else "2.17.1"
        return f"nvls {kind} needs NCCL {since} or later (cluster.nccl_version: {sh.nccl_version})"
    return None


def cost(sh: Shape, kind: str, s: float, _servers: int) -> float:
    """Idle-network α-β time (s) of ``kind`` on ``s`` bytes by NVLS (module doc)."""
    m, eff = sh.n, efficiency(sh, kind, s)
    k = pipeline_chunks(-(-int(s) // m))
    if kind == "all_reduce":
        return (1 + 1 / k) * s * (1 + 1 / m) / (eff * sh.bw)
    return (1 + 1 / k) * s / (eff * sh.bw)


ALGORITHMS.add(
    Algorithm(
        "nvls",
        "NVLink SHARP: reduction in the NVSwitch (one host)",
        kinds=frozenset({"all_reduce", "reduce_scatter", "all_gather"}),
        factory=build,
        cost=cost,
        rank=7,
        fits=fits,
        in_auto=never,
        hardware=hardware,
        protocols=frozenset({"simple"}),
        pays=pays,
    )
)
