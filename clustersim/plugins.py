"""The registry shape every plugin kind shares: schedules, topologies, collective algorithms,
network models and GPUs (``clustersim list`` prints them all).

A plugin is a name (the word a scenario uses), a one-line description, a typed pydantic
options model (None: the plugin takes no options) and a factory (what its users call: an
order function, a graph builder, a collective builder, a fabric class; None for pure data
such as a GPU spec). A plugin kind subclasses :class:`Plugin` with the metadata its users
read (a schedule's chunk count, an algorithm's kinds and cost, a topology's placement
levels); tests iterate that metadata, never the names. A :class:`Registry` is a dict from
name to plugin that knows the scenario field its names are typed in, so a lookup of an
unknown name is a ScenarioError naming that field and the accepted names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pydantic import BaseModel

from .errors import ScenarioError


@dataclass(frozen=True)
class Plugin:
    """One registered plugin: ``name``, one-line ``description``, ``options`` model, ``factory``."""

    name: str
    description: str
    factory: Callable | None = field(default=None, kw_only=True)
    options: type[BaseModel] | None = field(default=None, kw_only=True)


P = TypeVar("P", bound=Plugin)


class Registry(dict[str, P], Generic[P]):
    """Plugins of one kind by name; ``what`` names the kind, ``field`` the scenario field."""

    def __init__(self, what: str, field: str, order: Callable[[P], object] | None = None) -> None:
        super().__init__()
        self.what, self.field, self._order = what, field, order

    def add(self, plugin: P) -> P:
        """Register ``plugin`` under its name (replacing any plugin of that name); with an
        ``order`` key the registry stays sorted by it (stable), whatever the import order."""
        self[plugin.name] = plugin
        if self._order is not None:
            ordered = sorted(self.values(), key=self._order)
            self.clear()
            self.update((p.name, p) for p in ordered)
        return plugin

    def lookup(self, name: str, field: str | None = None) -> P:
        """The plugin ``name``; a ScenarioError on ``field`` (default: the registry's) listing
        the accepted names when there is none."""
        if name not in self:
            raise ScenarioError(field or self.field, name, f"known {self.what}s: {', '.join(self)}")
        return self[name]

    def table(self) -> list[tuple[str, str]]:
        """``(name, description)`` of every plugin, in registration order."""
        return [(p.name, p.description) for p in self.values()]
