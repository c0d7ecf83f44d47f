"""The planner's inputs: per-layer costs and the bandwidths between workers.

A :class:`LayerProfile` is what PipeDream's profiler measures per layer for one
micro-batch (its minibatch): forward and backward time, the bytes of the layer's output
(sent to the next stage, and the same gradient size back), its parameter bytes (the
data-parallel all-reduce), the activation memory it keeps per in-flight micro-batch, and
its static bytes and weight bytes (one stashed version) from the cost model's kinds.
:func:`layer_profiles` reads them from any scenario model through ``chunk_costs`` with
one layer per chunk, so synthetic, CNN and transformer models all feed the planner.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..topology.servers import nics_per_node
from ..workload.rules import model_layers
from ..workload.stage_cost import chunk_costs


@dataclass(frozen=True)
class LayerProfile:
    """Costs of one layer per micro-batch on one GPU (seconds, bytes)."""

    forward: float
    backward: float
    activation_bytes: float
    param_bytes: float
    activation_memory: float = 0.0
    #: bytes resident for the whole run (weights, gradients, optimizer state); default 3 × params
    static_bytes: float | None = None
    #: bytes of one copy of the weights (a stashed version); default the parameter bytes
    weight_bytes: float | None = None

    @property
    def resident(self) -> float:
        return 3 * self.param_bytes if self.static_bytes is None else self.static_bytes

    @property
    def stashed(self) -> float:
        """Bytes of the weight version stashed per in-flight micro-batch."""
        return self.param_bytes if self.weight_bytes is None else self.weight_bytes

    @property
    def compute(self) -> float:
        return self.forward + self.backward


@dataclass(frozen=True)
class Network:
    """Bandwidths (bytes/s) the planner prices transfers with, PipeDream-style: within a
    server (``intra``) for groups that fit in one, across servers (``inter``) otherwise."""

    intra: float
    inter: float
    gpus_per_node: int

    def bandwidth(self, gpus: int) -> float:
        """Bandwidth available to a group spanning ``gpus`` workers."""
        return self.intra if gpus <= self.gpus_per_node else self.inter


def layer_profiles(sc) -> list[LayerProfile]:
    """Per-layer profiles of a scenario's model (one ``chunk_costs`` chunk per layer)."""
    n = model_layers(sc.model)
    return [
        LayerProfile(
            c.forward,
            c.backward,
            float(c.activation_bytes),
            float(c.gradient_bytes),
            float(c.activation_memory),
            float(c.static.total),
            float(c.static.weights),
        )
        for c in chunk_costs(sc, n, [1] * n)
    ]


def network_of(sc) -> Network:
    """The planner's view of a scenario's cluster: NVSwitch/PCIe inside a server, the NIC
    bandwidth (all of a server's NICs, as many as the topology builds) between servers."""
    cl = sc.cluster
    intra = cl.intra_node.bandwidth * cl.intra_node.efficiency
    inter = cl.nic.bandwidth * cl.nic.efficiency * nics_per_node(cl.nic.per_node, cl.gpus_per_node)
    return Network(intra, min(intra, inter) if cl.nodes > 1 else intra, cl.gpus_per_node)
