"""The layout ``fat_tree`` and ``rail`` share: servers whose NICs each link to one switch of
a lower tier (a leaf, a rail), every lower switch linked to every spine.

:class:`TwoTierLayout` answers for such a build's nodes and links from their names (a
:class:`.lazy.Layout`); each builder's subclass says which lower switch a NIC links to
and writes the graph in its own order (:mod:`.clos`, :mod:`.rail`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from .graph import link_attrs
from .servers import ServerSpec, gpu_successors, nic_number, numbered, server_link, server_node


@dataclass(frozen=True)
class TwoTierLayout(ABC):
    """Servers of ``spec`` under switches ``{lower}{i}``, ``i < lower_switches``, each joined
    to spines ``spine0 … spine{spines-1}`` by a link of ``uplink_bandwidth`` (bytes/s) and
    ``uplink_latency`` (s); every NIC↔lower link has half the NIC latency."""

    spec: ServerSpec
    spines: int
    uplink_bandwidth: float
    uplink_latency: float

    #: the name of the lower tier's switches, without their number
    lower = ""

    @property
    @abstractmethod
    def lower_switches(self) -> int:
        """How many lower switches there are."""

    @abstractmethod
    def lower_of(self, host: int, k: int) -> int:
        """The lower switch that NIC ``k`` of server ``host`` links to."""

    def node(self, name: str) -> dict | None:
        """As :meth:`.lazy.Layout.node`."""
        data = server_node(self.spec, name)
        if data is None and (
            numbered(name, self.lower, self.lower_switches) or numbered(name, "spine", self.spines)
        ):
            return {"kind": "switch"}
        return data

    def link(self, u: str, v: str) -> dict | None:
        """As :meth:`.lazy.Layout.link`."""
        return server_link(self.spec, u, v) or self._up(u, v) or self._up(v, u)

    def _up(self, a: str, b: str) -> dict | None:
        """A NIC↔lower or lower↔spine link from the lower end ``a`` to ``b`` (both
        directions of a link are alike)."""
        nic = nic_number(a)
        if nic is not None:
            host, k = nic
            if (
                host < self.spec.nodes
                and k < self.spec.nics_per_node
                and b == f"{self.lower}{self.lower_of(host, k)}"
            ):
                return link_attrs(self.spec.nic_bandwidth, self.spec.nic_latency / 2, "nic")
        elif numbered(a, self.lower, self.lower_switches) and numbered(b, "spine", self.spines):
            return link_attrs(self.uplink_bandwidth, self.uplink_latency, "fabric")
        return None

    def successors(self, name: str) -> list[str] | None:
        """As :meth:`.lazy.Layout.successors`: a GPU's, else None."""
        return gpu_successors(self.spec, name)
