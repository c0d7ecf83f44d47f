"""The schedule registry: the names users type in ``parallel.schedule``.

A schedule is, for each pipeline stage, the order in which that stage runs its
micro-batches' passes — a function ``order(stage, p, m) -> list of items``. An item is

* ``("F", j)`` / ``("B", j)``: forward / backward of micro-batch ``j`` (the basic
  vocabulary; a backward without a ``W`` item is the whole backward, B + W);
* ``("W", j)``: the weight-gradient part of micro-batch ``j``'s backward — when an
  order holds it, that micro-batch's ``B`` is the input-gradient part only;
* ``(phase, j, k)``: the same on model chunk ``k`` (for schedules with several model
  chunks per stage; a 2-item form means the stage's only chunk);
* ``("O", i)``: an optimizer step (only in flush-free schedules, which place their own
  updates; flushing schedules get one step appended after every iteration);
* ``("F&B", j, k, j2, k2)``: the forward of micro-batch ``j`` on chunk ``k`` overlapped
  with the backward of micro-batch ``j2`` on chunk ``k2`` (DualPipe's pair; the compiler
  interleaves their compute and communication, :mod:`.overlap`).

The pipeline compiler turns those orders into a Program (sends, receives, memory,
weight versions, optimizer steps); the engine never knows which schedule produced it.
Register your own with :func:`register_schedule` (see ``docs/schedules.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ScenarioError
from ..plugins import Plugin, Registry

Item = tuple
OrderFn = Callable[..., list[Item]]

#: how model chunk k (of p·v) maps to a pipeline stage
PLACEMENTS = ("loop", "vee")


@dataclass(frozen=True)
class Schedule(Plugin):
    """A registered schedule and the rules the compiler follows for it; its ``factory`` is
    the order function (also :attr:`order`).

    ``chunks``: model chunks per stage — an int, or ``None`` for ``parallel.virtual_stages``
    (the order function then receives ``v=`` as a keyword). ``placement``: ``"loop"`` puts
    chunk ``k`` on stage ``k % p`` (Megatron-LM); ``"vee"`` puts chunk ``k < p`` on stage
    ``k`` and chunk ``k ≥ p`` on stage ``2p − 1 − k``. ``flush``: False for asynchronous
    schedules, whose order function receives ``iterations=`` and returns the whole run
    (micro-batches ``0 .. m·iterations − 1``) with its own ``("O", i)`` steps. ``weights``:
    ``"single"`` (one copy), ``"stash"`` (one stashed version per in-flight micro-batch,
    PipeDream) or ``"double"`` (two buffers, PipeDream-2BW). ``check(p, m, v)`` raises
    :class:`ScenarioError` when the schedule cannot run that shape. ``directions``: 2 for a
    bidirectional schedule (DualPipe): the p·v chunks are the model's p·v/2 chunks twice —
    chunks ``0 .. p·v/2 − 1`` carry the first half of the micro-batches, the copy
    ``p·v/2 ..`` the second half, and every stage sums the gradients of its two copies
    with the stage holding their twins before each optimizer step. ``inference``: an
    inference pipeline may use this schedule (its forward-only order is request order).
    ``search_rank``: where a plan search's default schedule list puts it (None: not in it).
    """

    chunks: int | None = 1
    placement: str = "loop"
    flush: bool = True
    weights: str = "single"
    check: Callable[[int, int, int], None] | None = None
    #: 2: micro-batches enter from both ends over two copies of the model (DualPipe)
    directions: int = 1
    #: whether an inference pipeline may order its requests' forwards by this schedule
    inference: bool = False
    #: position among the schedules a plan search tries by default (None: only when asked)
    search_rank: int | None = None

    @property
    def order(self) -> OrderFn:
        """``order(stage, p, m, …) -> list of items`` (module docstring)."""
        return self.factory

    def model_chunks(self, p: int, v: int) -> int:
        """How many distinct model chunks the model is cut into (p·v, or p·v/2 when each
        chunk is held twice by a bidirectional schedule)."""
        return p * v // self.directions

    def route(self, chunk: int, chunks: int) -> range:
        """The chunks (of ``chunks``) a micro-batch passing ``chunk`` runs through, in order."""
        n = chunks // self.directions
        return range(chunk // n * n, chunk // n * n + n)

    def stage_of(self, chunk: int, p: int) -> int:
        """The pipeline stage that holds model chunk ``chunk``."""
        if self.placement == "vee":
            return chunk if chunk < p else 2 * p - 1 - chunk
        return chunk % p

    def validate(self, p: int, m: int, v: int) -> None:
        """Raise ScenarioError if this schedule cannot run p stages, m micro-batches, v chunks."""
        if self.chunks is not None and v != self.chunks:
            raise ScenarioError(
                "parallel.virtual_stages",
                v,
                f"schedule {self.name!r} runs {self.chunks} model chunk(s) per stage; accepted: {self.chunks}",
            )
        if self.check is not None:
            self.check(p, m, v)


SCHEDULES: Registry[Schedule] = Registry("schedule", "parallel.schedule")


def register_schedule(
    name: str,
    description: str = "",
    *,
    chunks: int | None = 1,
    placement: str = "loop",
    flush: bool = True,
    weights: str = "single",
    check: Callable[[int, int, int], None] | None = None,
    inference: bool = False,
    search_rank: int | None = None,
    directions: int = 1,
) -> Callable[[OrderFn], OrderFn]:
    """Decorator: register ``order(stage, p, m)`` under ``name`` (replacing any same name).

    The keyword options are the :class:`Schedule` fields. Example — a schedule that runs
    all forwards, then backwards in the same order::

        @cs.register_schedule("gpipe_fifo", "GPipe with first-in-first-out backwards")
        def gpipe_fifo(stage, p, m):
            return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r}: accepted {', '.join(PLACEMENTS)}")
    if weights not in ("single", "stash", "double"):
        raise ValueError(f"weights {weights!r}: accepted single, stash, double")
    if directions not in (1, 2) or (directions == 2 and not flush):
        raise ValueError(f"directions {directions!r}: accepted 1, or 2 for a flushing schedule")

    def wrap(fn: OrderFn) -> OrderFn:
        doc = description or "".join((fn.__doc__ or "").strip().splitlines()[0:1])
        SCHEDULES.add(
            Schedule(
                name,
                doc,
                chunks=chunks,
                placement=placement,
                flush=flush,
                weights=weights,
                check=check,
                directions=directions,
                inference=inference,
                search_rank=search_rank,
                factory=fn,
            )
        )
        return fn

    return wrap


def replicable_schedules() -> list[str]:
    """Registered schedules that can run with ``stage_replicas`` (one chunk per stage)."""
    return sorted(n for n, s in SCHEDULES.items() if s.chunks == 1 and s.placement == "loop")
