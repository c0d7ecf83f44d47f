"""What a collective algorithm plugin declares (one module per algorithm registers one).

Each algorithm module of this package holds its builder, its α-β cost and its static
shape rules, and adds its :class:`Algorithm` to :data:`ALGORITHMS` when imported;
:mod:`.registry` imports them all, so a new algorithm is one new file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..plugins import Plugin, Registry

#: collective kinds (send/recv are the engine's own point-to-point ops)
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "barrier")


@dataclass(frozen=True)
class Options:
    """Per-call knobs of a build: the root (broadcast/reduce; the parameter server),
    ring channels, pipeline chunks, parameter servers, an uneven all-to-all's byte matrix."""

    root: str | None = None
    channels: int | None = None
    chunks: int | None = None
    servers: list[str] | None = None
    split: tuple | None = None


#: a call without per-call knobs
NO_OPTIONS = Options()


@dataclass(frozen=True)
class Tuning:
    """The system's collective settings, alike for every call of a run: ``alpha``, the
    per-step latency (``cluster.collective_alpha``: seconds, ``{"intra_node": s,
    "inter_node": s}`` or None for NCCL-derived defaults); ``latency``, how a ring across
    hosts pays its α's (``cluster.collective_latency``: overlapped | nccl, :mod:`.cost`);
    ``protocols``, the NCCL protocols the tuner picks from (``cluster.collective_protocols``,
    :mod:`.protocol`; None: Simple alone)."""

    alpha: float | Mapping[str, float] | None = None
    latency: str = "overlapped"
    protocols: Mapping | None = None


#: NCCL-derived α, overlapped ring latency, Simple alone
DEFAULT_TUNING = Tuning()


def fits_any(kind: str, n: int, per_host: tuple[int, ...]) -> str | None:
    """The ``fits`` of an algorithm that runs any group shape."""
    return None


def always(n: int, per_host: tuple[int, ...]) -> bool:
    """The ``in_auto`` of an algorithm ``auto`` may always choose."""
    return True


def never(n: int, per_host: tuple[int, ...]) -> bool:
    """The ``in_auto`` of an algorithm ``auto`` never chooses: NCCL's own algorithms, which
    the ``nccl`` choice (:mod:`.nccl_tuner`) or a scenario names, so ``auto``'s choices — and
    every run that relies on them — stay as they were."""
    return False


def any_hardware(shape, kind: str) -> str | None:
    """The ``hardware`` of an algorithm that runs on any links."""
    return None


def as_stated(shape, protocol):
    """The ``pays`` of an algorithm that pays a protocol as the system states it."""
    return protocol


@dataclass(frozen=True)
class Algorithm(Plugin):
    """A registered algorithm: its name, one-line description, the ``kinds`` it implements,
    ``factory(group, kind, nbytes, options) -> (engines, done)`` (see :mod:`.schedule`; also
    :attr:`build`), ``cost(shape, kind, nbytes, servers) -> seconds`` on an idle network
    (:class:`.cost.Shape`), and two static shape rules over ``n`` members with
    ``per_host[h]`` of them on host ``h`` — no live group needed: ``fits(kind, n,
    per_host) -> reason | None`` for shapes it cannot run, and ``in_auto(n, per_host) ->
    bool``: whether ``auto`` may choose it there; ``hardware(shape, kind) -> reason | None``
    for links (or an NCCL release) it cannot run ``kind`` on (:class:`.cost.Shape`, e.g. no NVLink SHARP), ``protocols``,
    the NCCL protocols it runs (None: all), and ``across_hosts``, the kinds ``auto`` may
    choose it for on a group spanning hosts (None: all it implements); ``pays(shape,
    protocol) -> Protocol``, the protocol as it pays it (NVLS: its NCCL release's latency)."""

    kinds: frozenset = frozenset()
    cost: Callable = None
    fits: Callable[[str, int, tuple[int, ...]], str | None] = fits_any
    in_auto: Callable[[int, tuple[int, ...]], bool] = always
    hardware: Callable = any_hardware
    protocols: frozenset | None = None
    pays: Callable = as_stated
    #: the kinds ``auto`` may choose it for on a group spanning several hosts (None: every
    #: kind it implements)
    across_hosts: frozenset | None = None
    #: position in the registry, which is the order ``auto`` breaks cost ties in (lowest first)
    rank: int = 100

    @property
    def build(self) -> Callable:
        """``build(group, kind, nbytes, options) -> (engines, done)``: the factory."""
        return self.factory


#: algorithm name (``simulation.collectives`` values) → :class:`Algorithm`, kept in ``rank``
#: order: the order ``auto`` breaks cost ties in
ALGORITHMS: Registry[Algorithm] = Registry(
    "collective algorithm", "simulation.collectives", order=lambda a: a.rank
)
