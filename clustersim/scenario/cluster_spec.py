"""The ``cluster`` section of a scenario: GPUs, nodes, links, topology, and what makes
devices differ (stragglers, degraded links, node groups of other GPU types)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
    model_validator,
)

from ..collectives import nccl_version
from ..errors import ScenarioError
from ..hardware.gpus import GPUS, GPUSpec
from .fields import Bandwidth, Bytes, Flops, Range, Time, _Spec, known


def _known_gpu(name: str) -> str:
    return known(name, GPUS, "GPU")


#: a GPU of the catalog (``clustersim list``); an unknown name lists the known ones
GpuName = Annotated[str, AfterValidator(_known_gpu)]


class CustomGPU(_Spec):
    """A GPU outside the catalog, written as a mapping under ``cluster.gpu``: its datasheet
    numbers, and ``like`` — the catalog GPU whose calibrated kernel efficiencies (GEMM,
    memory-bound, attention; fractions of peak) it borrows (unset: A100's, flagged as not
    calibrated for it). ``sms``: its SM count, for the default
    ``comm_compute_slowdown`` (clustersim.hardware.interference; unset: no default).
    FP8 needs a calibrated catalog GPU."""

    name: Annotated[str, Field(min_length=1, max_length=64)]
    peak_flops: Annotated[Flops, Range(1e9, 1e18)]
    hbm_bandwidth: Annotated[Bandwidth, Range(1e9, 1e15)]
    memory: Annotated[Bytes, Range(2**20, 2**50)]
    like: GpuName | None = None
    sms: Annotated[int | None, Range(17, 100_000)] = None

    @field_validator("name")
    @classmethod
    def _not_a_catalog_name(cls, name: str) -> str:
        if name in GPUS:
            raise ValueError(f"{name!r} is a catalog GPU; write cluster.gpu: {name} to use it")
        return name

    def spec(self) -> GPUSpec:
        """This GPU as a catalog entry (the cost model and the memory ledger read it so)."""
        line = f"{self.memory / 2**30:.0f} GiB, {self.peak_flops / 1e12:.0f} TFLOP/s, custom"
        return GPUSpec(
            self.name,
            line,
            memory_bytes=int(self.memory),
            peak_flops=self.peak_flops,
            hbm_bandwidth=self.hbm_bandwidth,
            source="the scenario's cluster.gpu",
        )


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
    per_node: Annotated[int | None, Range(1, 1024)] = None
    efficiency: float = Field(default=1.0, gt=0, le=1)


class PcieSpec(_Spec):
    """Optional PCIe link between a GPU and its NIC (an end-host bottleneck)."""

    bandwidth: Bandwidth
    latency: Time = 0.0


class ProtocolSpec(_Spec):
    """One NCCL protocol of the system (``cluster.collective_protocols``; see
    :mod:`clustersim.collectives.protocol`): ``latency`` once per all-reduce, on top of the
    per-step α; ``efficiency``, the fraction of the link bandwidth its payload gets;
    ``per_step``: the latency beyond NCCL's ``baseLat`` is paid per ring step (an all-gather
    or reduce-scatter pays half of it)."""

    latency: Annotated[Time, Range(0, 1)]
    efficiency: Annotated[float, Range(0, 1, open_lo=True)]
    per_step: bool = False


class NoiseSpec(_Spec):
    """Multiplicative noise on every compute op's time: ``lognormal`` with mean 1 and
    log-space standard deviation ``sigma``, or ``normal`` with mean 1 and standard
    deviation ``sigma`` (clipped at 0.05 so time never runs backwards)."""

    distribution: Literal["lognormal", "normal"] = "lognormal"
    sigma: Annotated[float, Range(0, 5)]


class StragglerSpec(_Spec):
    """Devices (indices 0..GPUs−1) whose every compute op takes ``slowdown`` × its time,
    times a random per-op factor of mean 1 when ``noise`` is given (a flaky GPU)."""

    gpus: list[int] = Field(min_length=1)
    slowdown: Annotated[float, Range(0, 10_000, open_lo=True)] = 1.0
    noise: NoiseSpec | None = None


class LinkDegradationSpec(_Spec):
    """From ``start`` to ``end`` the link between topology nodes ``between`` (both
    directions) carries ``factor`` × its bandwidth; 0 = down for the window
    (:mod:`clustersim.network.degradation`). Without ``end`` the window lasts for ever: a
    transfer that needs a link down for ever is a SimulationStall naming the link."""

    between: tuple[str, str]
    start: Time
    end: Time | None = None
    factor: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _ordered(self):
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end} s) must come after start ({self.start} s)")
        return self


class NodeGroupSpec(_Spec):
    """Consecutive nodes of one GPU type in a heterogeneous cluster (``cluster.node_groups``):
    ``gpu`` defaults to ``cluster.gpu``; ``speed`` divides every compute op's time on
    these GPUs (0.8 = 20 % slower than the cost model says; see docs/heterogeneous.md)."""

    nodes: Annotated[int, Range(1, 100_000)]
    gpu: GpuName | None = None
    speed: Annotated[float, Range(0, 1000, open_lo=True)] = 1.0


class ClusterSpec(_Spec):
    """GPUs, nodes, links and topology. ``preset`` fills defaults from a hardware preset."""

    preset: str | None = None
    nodes: Annotated[int, Range(1, 100_000)] = 1
    gpus_per_node: Annotated[int, Range(1, 1024)] = 8
    #: a catalog GPU's name, or a mapping describing one (:class:`CustomGPU`; after loading
    #: ``gpu`` holds its name and ``custom_gpu`` the mapping)
    gpu: str = "A100-SXM4-80GB"
    custom_gpu: CustomGPU | None = None
    intra_node: IntraNodeSpec = IntraNodeSpec()
    nic: NicSpec = NicSpec()
    pcie: PcieSpec | None = None
    topology: dict[str, Any] = Field(default_factory=lambda: {"kind": "auto"})
    #: per-step software latency of collectives ({intra_node, inter_node}); None = NCCL-derived defaults
    collective_alpha: dict[Literal["intra_node", "inter_node"], Time] | None = None
    #: how a ring across hosts pays its α's: overlapped (behind the busiest port's work) or
    #: nccl (in full, as NCCL's tuner; clustersim.collectives.cost)
    collective_latency: Literal["overlapped", "nccl"] = "overlapped"
    #: NCCL protocols the tuner chooses from per collective ({ll, ll128, simple}: latency,
    #: efficiency); None = Simple alone, no latency beyond α (presets carry a calibration)
    collective_protocols: dict[Literal["ll", "ll128", "simple"], ProtocolSpec] | None = Field(
        default=None, min_length=1
    )
    #: the NCCL release the system runs, 2.MINOR.PATCH (what depends on it:
    #: clustersim.collectives.nccl_version); None (presets too: it is software) = the newest
    #: mechanics modelled
    nccl_version: str | None = None
    #: compute slowdown while a collective runs on the same GPU (1.0 = no interference); unset,
    #: a profile that overlaps fills the GPU's default (clustersim.hardware.interference)
    comm_compute_slowdown: Annotated[float, Range(1, 100)] = 1.0
    #: GPUs whose compute runs ``slowdown`` times longer (thermal throttling, a bad node, …)
    stragglers: list[StragglerSpec] = Field(default_factory=list)
    #: windows of time in which a link runs at a fraction of its bandwidth
    link_degradations: list[LinkDegradationSpec] = Field(default_factory=list)
    #: cables that are down: each [a, b] names two topology nodes (e.g. [nic3, leaf0]); both
    #: directions are removed and routes go around them (set by ``link_fail`` faults)
    failed_links: list[tuple[str, str]] = Field(default_factory=list)
    #: mixed GPU types / speeds, in node order; ``nodes`` defaults to their sum (hardware.node_groups)
    node_groups: list[NodeGroupSpec] | None = Field(default=None, min_length=1)

    @field_validator("nccl_version")
    @classmethod
    def _nccl_version(cls, value: str | None) -> str | None:
        nccl_version.parse(value)  # ValueError names the accepted form
        return value

    @model_validator(mode="before")
    @classmethod
    def _nodes_from_groups(cls, raw: Any) -> Any:
        if not isinstance(raw, dict) or "nodes" in raw or not isinstance(raw.get("node_groups"), list):
            return raw
        groups = raw["node_groups"]
        if all(isinstance(g, dict) and isinstance(g.get("nodes"), int) for g in groups):
            return {**raw, "nodes": sum(g["nodes"] for g in groups)}
        return raw  # field validation names the bad group

    @model_validator(mode="before")
    @classmethod
    def _custom_gpu(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and isinstance(raw.get("gpu"), dict):
            custom = raw["gpu"]
            if "custom_gpu" in raw:
                raise ValueError("give the custom GPU once: as cluster.gpu or as cluster.custom_gpu")
            return {**raw, "gpu": custom.get("name"), "custom_gpu": custom}
        return raw

    def check_gpu_name(self) -> None:
        """A ScenarioError unless ``gpu`` names a catalog GPU or the custom one."""
        custom = self.custom_gpu
        if custom is not None and self.gpu != custom.name:
            raise ScenarioError(
                "cluster.gpu", self.gpu, f"the custom GPU is named {custom.name!r} (cluster.custom_gpu.name)"
            )
        if custom is None and self.gpu not in GPUS:
            raise ScenarioError(
                "cluster.gpu",
                self.gpu,
                f"not a known GPU; known: {', '.join(sorted(GPUS))} — or describe one: "
                "{name, peak_flops, hbm_bandwidth, memory, like}",
            )

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node
