"""The typed scenario schema (pydantic v2): cluster, model, training, parallel, simulation.

Quantities accept base-unit numbers or unit strings (see :mod:`clustersim.units`) and
are stored in base units (s, bytes, bytes/s). Every model forbids unknown fields, so a
typo is an error, not a silently ignored setting. Cross-field rules (``tp × pp × dp`` =
GPUs, divisibility of layers and batch) live in :mod:`clustersim.scenario.rules`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

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


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntraNodeSpec(_Spec):
    """How GPUs inside one node are joined (NVSwitch or PCIe), per GPU per direction."""

    kind: Literal["nvswitch", "pcie"] = "nvswitch"
    bandwidth: Bandwidth = 300e9
    latency: Time = 1e-6
    efficiency: float = Field(default=1.0, gt=0, le=1)


class NicSpec(_Spec):
    """The network interface(s) of a node: bandwidth per NIC per direction."""

    bandwidth: Bandwidth = 25e9
    latency: Time = 1e-6
    per_node: int | None = Field(default=None, ge=1)
    efficiency: float = Field(default=1.0, gt=0, le=1)


class PcieSpec(_Spec):
    """Optional PCIe link between a GPU and its NIC (an end-host bottleneck)."""

    bandwidth: Bandwidth
    latency: Time = 0.0


class ClusterSpec(_Spec):
    """GPUs, nodes, links and topology. ``preset`` fills defaults from a hardware preset."""

    preset: str | None = None
    nodes: int = Field(default=1, ge=1)
    gpus_per_node: int = Field(default=8, ge=1)
    gpu: str = "A100-SXM4-80GB"
    intra_node: IntraNodeSpec = IntraNodeSpec()
    nic: NicSpec = NicSpec()
    pcie: PcieSpec | None = None
    topology: dict[str, Any] = Field(default_factory=lambda: {"kind": "auto"})
    #: per-step software latency of collectives ({intra_node, inter_node}); None = NCCL-derived defaults
    collective_alpha: dict[Literal["intra_node", "inter_node"], Time] | None = None
    #: compute slowdown while a collective runs on the same GPU (1.0 = no interference)
    comm_compute_slowdown: float = Field(default=1.0, ge=1.0)

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, name: str) -> str:
        from ..hardware.gpus import GPUS

        if name not in GPUS:
            raise ValueError(f"not a known GPU; known: {', '.join(sorted(GPUS))}")
        return name

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


class SyntheticModel(_Spec):
    """A model described by per-layer, per-micro-batch costs — for exact tests and what-ifs.

    ``forward``/``backward`` are times per layer per micro-batch (``backward`` is the whole
    backward, B + W; ``backward_weight`` is its weight-gradient part W). ``activation`` is
    the bytes sent between consecutive stages per micro-batch and also the activation
    memory a layer keeps per in-flight micro-batch. ``params`` is parameter bytes per
    layer (the static memory of the layer). ``optimizer`` is time per stage per iteration.
    """

    kind: Literal["synthetic"] = "synthetic"
    layers: int = Field(ge=1)
    forward: Time
    backward: Time
    backward_weight: Time = 0.0
    activation: Bytes = 0.0
    params: Bytes = 0.0
    optimizer: Time = 0.0


class TrainingSpec(_Spec):
    """Batch sizes, in samples. Micro-batches per iteration m = global / (micro × dp)."""

    global_batch: int = Field(ge=1)
    micro_batch: int = Field(default=1, ge=1)


def _dp_value(dp: object) -> int | str:
    if dp == "auto" or (isinstance(dp, int) and not isinstance(dp, bool) and dp >= 1):
        return dp
    raise ValueError("expected a whole number ≥ 1 or 'auto' (GPUs / (tp × pp))")


class ParallelSpec(_Spec):
    """The parallel plan: degrees of tensor, pipeline and data parallelism, and schedule."""

    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    dp: Annotated[int | str, BeforeValidator(_dp_value)] = "auto"
    schedule: str = "1f1b"
    virtual_stages: int = Field(default=1, ge=1)

    @field_validator("schedule")
    @classmethod
    def _known_schedule(cls, name: str) -> str:
        from ..schedules import SCHEDULES

        if name not in SCHEDULES:
            raise ValueError(f"not a known schedule; known: {', '.join(sorted(SCHEDULES))}")
        return name


class SimulationSpec(_Spec):
    """How to simulate: iterations, network model, packet chunk size, seed."""

    iterations: int = Field(default=1, ge=1)
    network: str = "packet"
    chunk_size: Bytes | None = None
    seed: int = 0
    #: collective kind → algorithm (``auto`` = the fastest by the α-β model, as NCCL's tuner)
    collectives: dict[str, str] = Field(default_factory=dict)

    @field_validator("collectives")
    @classmethod
    def _known_algorithms(cls, mapping: dict[str, str]) -> dict[str, str]:
        from ..collectives import ALGORITHMS, KINDS

        for kind, algo in mapping.items():
            if kind not in KINDS:
                raise ValueError(f"{kind!r} is not a collective kind; known: {', '.join(KINDS)}")
            if algo != "auto" and (algo not in ALGORITHMS or kind not in ALGORITHMS[algo].kinds):
                fits = sorted(a for a, spec in ALGORITHMS.items() if kind in spec.kinds)
                raise ValueError(f"{algo!r} is not an algorithm for {kind}; known: auto, {', '.join(fits)}")
        return mapping

    @field_validator("network")
    @classmethod
    def _known_network(cls, name: str) -> str:
        from ..engine.network_setup import NETWORK_MODEL_NAMES

        if name not in NETWORK_MODEL_NAMES:
            raise ValueError(f"not a known network model; known: {', '.join(NETWORK_MODEL_NAMES)}")
        return name


class ScenarioSpec(_Spec):
    """A whole scenario as validated field by field (before cross-field rules)."""

    name: str = "unnamed"
    cluster: ClusterSpec = ClusterSpec()
    model: SyntheticModel
    training: TrainingSpec
    parallel: ParallelSpec = ParallelSpec()
    simulation: SimulationSpec = SimulationSpec()
