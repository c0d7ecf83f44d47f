"""Building blocks of the scenario schema: quantity types in base units, the frozen
extra-forbidding base model, :class:`Range` for the accepted range of a number, and
:func:`known` for names that must come from a registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)
from pydantic_core import core_schema

from ..units import quantity

Time = Annotated[float, quantity("time"), Field(ge=0)]
Bytes = Annotated[float, quantity("bytes"), Field(ge=0)]
Bandwidth = Annotated[float, quantity("bandwidth"), Field(gt=0)]
Flops = Annotated[float, quantity("flops"), Field(gt=0)]


def known(name, registry, what: str, listed=None):
    """``name`` if ``registry`` holds it, else the ValueError the loader turns into a
    ScenarioError: "not a known <what>; known: …" (``listed`` overrides the list shown)."""
    if not isinstance(name, str) or name not in registry:
        raise ValueError(f"not a known {what}; known: {', '.join(listed or sorted(registry))}")
    return name


@dataclass(frozen=True)
class Range:
    """The accepted range of a number field, ``lo`` … ``hi`` (``lo`` excluded when
    ``open_lo``), as ``Annotated[int, Range(1, 100_000)]``. The bounds are generous — far
    past any real cluster or model — and exist so that a typo of a few digits is an error
    naming the range, not a run that never ends. ``None`` (an unset optional) passes;
    docs/limits.md lists every field's range (a test keeps them equal)."""

    lo: float
    hi: float
    open_lo: bool = False

    def __str__(self) -> str:
        if self.open_lo:
            return f"above {_num(self.lo)} and at most {_num(self.hi)}"
        return f"from {_num(self.lo)} to {_num(self.hi)}"

    def check(self, value: Any) -> Any:
        if value is None:
            return value
        above_lo = self.lo < value if self.open_lo else self.lo <= value
        if not (above_lo and value <= self.hi):
            raise ValueError(f"expected a value {self}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


class _Spec(BaseModel):
    # allow_inf_nan: no float field of a scenario may be infinite or NaN
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
