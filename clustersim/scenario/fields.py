"""Building blocks of the scenario schema: quantity types in base units, the frozen
extra-forbidding base model, and :func:`known` for names that must come from a registry."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
)

from .. import units
from ..errors import ScenarioError


def _quantity(kind: str):
    def check(value: object) -> float:
        try:
            return units.parse(value, kind)
        except ScenarioError as exc:  # pydantic adds the field path
            raise ValueError(exc.expected) from None

    return BeforeValidator(check)


Time = Annotated[float, _quantity("time"), Field(ge=0)]
Bytes = Annotated[float, _quantity("bytes"), Field(ge=0)]
Bandwidth = Annotated[float, _quantity("bandwidth"), Field(gt=0)]


def known(name, registry, what: str, listed=None):
    """``name`` if ``registry`` holds it, else the ValueError the loader turns into a
    ScenarioError: "not a known <what>; known: …" (``listed`` overrides the list shown)."""
    if not isinstance(name, str) or name not in registry:
        raise ValueError(f"not a known {what}; known: {', '.join(listed or sorted(registry))}")
    return name


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
