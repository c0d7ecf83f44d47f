"""A chunk's passes by phase, each built when first read (issue 38 item 8).

A real model's :class:`~.stage_cost.StageCost` carries its forward, backward and the two
halves of a split backward (``"Bi"``, ``"W"``) as segments; a schedule that does not split
the backward (1F1B, GPipe, interleaved) never reads ``"Bi"``, and the plan estimate of
such a plan is mostly the pricing of its passes. :class:`LazyPasses` holds the passes
already built and, for the others, how to build them: a pass is built on its first read
and kept, so each is built at most once and reads the same object after. A pass is a pure
function of the chunk's items and fixed costs, so when it is built changes nothing it
holds: the mapping equals, compares, iterates (its keys, in their order), prints and
pickles as the dict of every pass built at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping


class LazyPasses(Mapping):
    """Phase → segments, ``made`` built already, ``make`` the rest's builders (no
    arguments; each called at most once), keys in ``order``."""

    __slots__ = ("_order", "_made", "_make")

    def __init__(self, order: tuple[str, ...], made: dict, make: dict[str, Callable[[], tuple]]) -> None:
        if set(order) != set(made) | set(make) or set(made) & set(make):
            raise ValueError(f"phases {order} are not those built {list(made)} and to build {list(make)}")
        self._order, self._made, self._make = order, dict(made), dict(make)

    def __getitem__(self, phase: str) -> tuple:
        made = self._made.get(phase)
        if made is None:
            made = self._made[phase] = self._make[phase]()  # KeyError: not a phase of this chunk
            del self._make[phase]
        return made

    def __contains__(self, phase: object) -> bool:  # without building it (Mapping's would)
        return phase in self._made or phase in self._make

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self) -> tuple:  # a copy holds every pass, built
        return dict, (dict(self),)
