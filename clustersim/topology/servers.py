"""The inside of a server (a "node" of the cluster): its GPUs, intra-node switch and NICs.

Every multi-node builder starts here and then wires the NICs to its own network. Naming:

* GPU ``i`` of the cluster is ``gpu{i}`` (``host = i // gpus_per_node``);
* server ``n``'s intra-node switch is ``nvswitch{n}`` (or ``pcie{n}`` for a PCIe node);
* server ``n``'s NIC ``k`` is ``node{n}.nic{k}``.

Latency convention: ``intra_node.latency`` is the GPU→GPU latency through the intra-node
switch, so each GPU↔switch link gets half of it; likewise ``nic.latency`` is NIC→NIC
through one switch, so each NIC↔switch link gets half. ``efficiency`` multiplies the
nominal bandwidth (protocol overhead). GPU ``j`` of a server uses NIC
``j * per_node // gpus_per_node`` (one NIC per GPU "rail" when ``per_node == gpus_per_node``);
the GPU↔NIC link is the configured PCIe link, or a free wire when ``cluster.pcie`` is unset.

:func:`server_node`, :func:`server_link` and :func:`gpu_successors` answer for a server's
nodes and links from those names alone, without the graph (:mod:`.lazy`).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..errors import ScenarioError
from .graph import (
    WIRE,
    add_link,
    add_node,
    add_wire,
    bandwidth_field,
    count_field,
    latency_field,
    link_attrs,
    positive_number,
)


def nics_per_node(per_node: int | None, gpus_per_node: int) -> int:
    """The NICs of a server: ``nic.per_node``, or one per GPU when it is unset. The one
    place this default is decided — the planner prices servers with the same count."""
    return gpus_per_node if per_node is None else per_node


@dataclass(frozen=True)
class ServerSpec:
    """The resolved per-server hardware of a cluster dict (all quantities in base units)."""

    nodes: int
    gpus_per_node: int
    intra_kind: str
    intra_bandwidth: float
    intra_latency: float
    nic_bandwidth: float
    nic_latency: float
    nics_per_node: int
    pcie_bandwidth: float | None
    pcie_latency: float

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @classmethod
    def from_cluster(cls, cluster: dict, field: str = "cluster") -> ServerSpec:
        """Read and check ``nodes``, ``gpus_per_node``, ``intra_node``, ``nic`` and ``pcie``."""
        nodes = count_field(cluster.get("nodes", 1), f"{field}.nodes")
        gpn = count_field(cluster.get("gpus_per_node", 8), f"{field}.gpus_per_node")
        intra = cluster.get("intra_node") or {}
        nic = cluster.get("nic") or {}
        kind = intra.get("kind", "nvswitch")
        if kind not in ("nvswitch", "pcie"):
            raise ScenarioError(f"{field}.intra_node.kind", kind, "known: nvswitch, pcie")
        intra_eff = positive_number(intra.get("efficiency", 1.0), f"{field}.intra_node.efficiency")
        nic_eff = positive_number(nic.get("efficiency", 1.0), f"{field}.nic.efficiency")
        per_node = nic.get("per_node")
        per_node = nics_per_node(
            None if per_node is None else count_field(per_node, f"{field}.nic.per_node"), gpn
        )
        if per_node > gpn:
            raise ScenarioError(
                f"{field}.nic.per_node", per_node, f"at most gpus_per_node ({gpn}) NICs per node"
            )
        pcie = cluster.get("pcie")
        return cls(
            nodes=nodes,
            gpus_per_node=gpn,
            intra_kind=kind,
            intra_bandwidth=bandwidth_field(intra.get("bandwidth", 3.0e11), f"{field}.intra_node.bandwidth")
            * intra_eff,
            intra_latency=latency_field(intra.get("latency", 1e-6), f"{field}.intra_node.latency"),
            nic_bandwidth=bandwidth_field(nic.get("bandwidth", 2.5e10), f"{field}.nic.bandwidth") * nic_eff,
            nic_latency=latency_field(nic.get("latency", 1e-6), f"{field}.nic.latency"),
            nics_per_node=per_node,
            pcie_bandwidth=None
            if pcie is None
            else bandwidth_field(pcie.get("bandwidth"), f"{field}.pcie.bandwidth"),
            pcie_latency=0.0
            if pcie is None
            else latency_field(pcie.get("latency", 0.0), f"{field}.pcie.latency"),
        )


def add_server(g: nx.DiGraph, spec: ServerSpec, n: int) -> list[str]:
    """Add server ``n`` (GPUs, intra-node switch, NICs) to ``g``; return its NIC names."""
    gpn = spec.gpus_per_node
    gpus = [f"gpu{n * gpn + j}" for j in range(gpn)]
    for gpu in gpus:
        add_node(g, gpu, kind="gpu", host=n)
    if gpn > 1:
        switch = f"{_switch_name(spec)}{n}"
        add_node(g, switch, kind="switch", host=n)
        for gpu in gpus:
            add_link(g, gpu, switch, spec.intra_bandwidth, spec.intra_latency / 2, _intra_link_kind(spec))
    nics = [f"node{n}.nic{k}" for k in range(spec.nics_per_node)]
    for nic in nics:
        add_node(g, nic, kind="nic", host=n)
    for j, gpu in enumerate(gpus):
        nic = nics[j * spec.nics_per_node // gpn]
        if spec.pcie_bandwidth is None:
            add_wire(g, gpu, nic)
        else:
            add_link(g, gpu, nic, spec.pcie_bandwidth, spec.pcie_latency, "pcie")
    return nics


def number(name: str, prefix: str) -> int | None:
    """``N`` for a name written ``f"{prefix}{N}"``, else None (also for names not strings,
    which networkx allows and no builder makes)."""
    if type(name) is str and name.startswith(prefix):
        digits = name[len(prefix) :]  # written as str(N) writes it: ASCII, no leading zero
        if digits.isdecimal() and digits.isascii() and (digits[0] != "0" or digits == "0"):
            return int(digits)
    return None


def numbered(name: str, prefix: str, count: int) -> bool:
    """Whether ``name`` is ``f"{prefix}{i}"`` for some ``i < count``."""
    i = number(name, prefix)
    return i is not None and i < count


def nic_number(name: str) -> tuple[int, int] | None:
    """``(n, k)`` for the name ``node{n}.nic{k}``, else None."""
    if not isinstance(name, str):
        return None
    head, dot, tail = name.partition(".")
    n, k = number(head, "node"), number(tail, "nic")
    return None if n is None or k is None or not dot else (n, k)


def _switch_name(spec: ServerSpec) -> str:
    return "nvswitch" if spec.intra_kind == "nvswitch" else "pcie"


def _intra_link_kind(spec: ServerSpec) -> str:
    return "nvlink" if spec.intra_kind == "nvswitch" else "pcie"


def server_node(spec: ServerSpec, name: str) -> dict | None:
    """The attributes :func:`add_server` gives node ``name`` on a cluster of ``spec``'s
    servers, None for a name it does not add."""
    gpu = number(name, "gpu")
    if gpu is not None:
        return {"kind": "gpu", "host": gpu // spec.gpus_per_node} if gpu < spec.num_gpus else None
    host = number(name, _switch_name(spec))
    if host is not None:
        return {"kind": "switch", "host": host} if spec.gpus_per_node > 1 and host < spec.nodes else None
    nic = nic_number(name)
    if nic is not None and nic[0] < spec.nodes and nic[1] < spec.nics_per_node:
        return {"kind": "nic", "host": nic[0]}
    return None


def server_link(spec: ServerSpec, u: str, v: str) -> dict | None:
    """The attributes :func:`add_server` gives the link ``u → v`` (either end a GPU), None
    for a pair it does not link. Both directions of a server's links are alike."""
    for gpu, other in ((u, v), (v, u)):
        i = number(gpu, "gpu")
        if i is None or i >= spec.num_gpus:
            continue
        host, j = divmod(i, spec.gpus_per_node)
        if spec.gpus_per_node > 1 and other == f"{_switch_name(spec)}{host}":
            return link_attrs(spec.intra_bandwidth, spec.intra_latency / 2, _intra_link_kind(spec))
        if other == f"node{host}.nic{j * spec.nics_per_node // spec.gpus_per_node}":
            if spec.pcie_bandwidth is None:
                return link_attrs(*WIRE)
            return link_attrs(spec.pcie_bandwidth, spec.pcie_latency, "pcie")
    return None


def gpu_successors(spec: ServerSpec, name: str) -> list[str] | None:
    """What GPU ``name`` links to, in :func:`add_server`'s order; None for other names."""
    i = number(name, "gpu")
    if i is None or i >= spec.num_gpus:
        return None
    host, j = divmod(i, spec.gpus_per_node)
    nic = f"node{host}.nic{j * spec.nics_per_node // spec.gpus_per_node}"
    return [f"{_switch_name(spec)}{host}", nic] if spec.gpus_per_node > 1 else [nic]
