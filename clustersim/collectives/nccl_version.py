"""The NCCL release a system runs (``cluster.nccl_version``), and what in NCCL's mechanics
depends on it.

NCCL's algorithms change between releases, and nccl-tests rows are measured with one: the
Azure ND H100 v5 curve with 2.18.5, the ND H200 v5 curve with 2.20.5 (their pages say so).
A row is compared at the release it was measured with; a preset carries the release of the
curve it was calibrated on (:mod:`clustersim.hardware.presets`); unset, the newest mechanics
modelled here. What depends on the release, each from NCCL's source at its tag:

* NVLS (NVLink SHARP) all-reduce exists from 2.17.1 (``NCCL_ALGO_NVLS`` first in
  ``src/graph/tuning.cc``); NVLS reduce-scatter and all-gather from 2.19.1 (2.18's tuner
  runs them as ring whatever ``NCCL_ALGO`` says).
* How an NVLS call's bytes are dealt to its channels (:func:`clustersim.collectives.nvls.steps`).
  Up to 2.19.x the kernel strides over the whole buffer (``src/collectives/device/all_reduce.h``
  2.18.5, ``RunWorkElement<…, NCCL_ALGO_NVLS, …>``): a loop is ``nChannels · nHeads · chunk``
  bytes and channel ``bid`` takes the ``bid``-th ``nHeads · chunk`` of it, so a call smaller
  than one loop leaves channels idle (1 MiB on 16 channels × 8 heads × 16 KiB chunks: 8 of
  16) and a last partial loop lands on the first channels. From 2.20.3 ("Optimize aggregated
  operations to better utilize all channels"; ``src/enqueue.cc`` ``addCBDCollToPlan`` and the
  ``oneNode`` path of ``src/device/all_reduce.h``) one host's call is cut into one contiguous
  ``bytes / nChannels`` share per channel, each walked in loops of ``nHeads · chunk``, the
  last loop's chunk cut to its remainder over the heads (``computeCollLastChunkInfo``): every
  channel works, and equally.
* NCCL's chunk rule (``enqueue.cc``: 128 → 64 → 32 → 16 KiB as calls shrink), the NVLS
  channel count (16 on Hopper) and the tuner's NVLS latency (2.18.5 ``baseLat`` 23 µs, 2.20.5
  NVLink ``hwLat`` 23 µs) are the same in both; the NVLS kernels' warp split differs only
  with user-registered buffers, which nccl-tests does not register by default.
"""

from __future__ import annotations

import re

#: NVLS all-reduce's first release (tuning.cc)
NVLS_SINCE = (2, 17, 1)
#: NVLS reduce-scatter and all-gather's first release (tuning.cc 2.18.5 still runs them as
#: ring only: ``if (coll == ncclFuncAllGather && a != NCCL_ALGO_RING) continue``; 2.19.1
#: admits ``NCCL_ALGO_NVLS``)
NVLS_SCATTER_GATHER_SINCE = (2, 19, 1)
#: the first release that deals one host's NVLS call to its channels in contiguous shares
CONTIGUOUS_SINCE = (2, 20, 3)
#: what an unset ``cluster.nccl_version`` runs: the newest mechanics modelled
NEWEST = (2, 20, 5)
_FORM = re.compile(r"^2\.(\d{1,2})\.(\d{1,2})$")


def parse(version: str | None) -> tuple[int, int, int]:
    """``"2.20.5"`` → (2, 20, 5); None → :data:`NEWEST`. Raises ValueError on another form."""
    if version is None:
        return NEWEST
    match = _FORM.match(str(version))
    if not match:
        raise ValueError(f"an NCCL release as 2.MINOR.PATCH (e.g. 2.18.5, 2.20.5), not {version!r}")
    return 2, int(match.group(1)), int(match.group(2))


def contiguous_split(version: str | None) -> bool:
    """Whether ``version`` deals one host's NVLS call to its channels in contiguous shares
    (2.20.3 on) rather than striding over the buffer (module doc)."""
    return parse(version) >= CONTIGUOUS_SINCE


def has_nvls(version: str | None, kind: str) -> bool:
    """Whether ``version`` runs collective ``kind`` by NVLS: an all-reduce from 2.17.1, a
    reduce-scatter or an all-gather from 2.19.1 (module doc)."""
    return parse(version) >= (NVLS_SINCE if kind == "all_reduce" else NVLS_SCATTER_GATHER_SINCE)


def release_name(version: str | None) -> str:
    """The release ``version`` names, as written (None: :data:`NEWEST`'s, "2.20.5")."""
    return ".".join(map(str, parse(version)))
