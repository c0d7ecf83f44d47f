"""What NCCL reads off the hardware to pick and run its algorithms: the GPU's generation
(NCCL's ``compCapIndex``: Volta, Ampere, Hopper, Blackwell) and whether the GPUs of a host
meet at an NVSwitch that reduces in the switch (NVLink SHARP, NCCL's NVLS algorithm).

The generation comes from the cluster's GPU model (the topology graph's ``gpu`` attribute,
:func:`clustersim.topology.build_topology`), by the catalog's names. NVLS needs a
third-generation NVSwitch (HGX/DGX H100, H200, H800; NVLink5 switches of B200, GB200, B300,
GB300: NVIDIA, "NVLink SHARP"), so an A100's NVSwitch, a PCIe switch or an NVLink bridge has
none.
"""

from __future__ import annotations

#: GPU model name prefixes → NCCL's generation (tuning.cc ``compCapIndex``); longest first
GENERATIONS: tuple[tuple[str, str], ...] = (
    ("GB300", "blackwell"),
    ("GB200", "blackwell"),
    ("B300", "blackwell"),
    ("B200", "blackwell"),
    ("GH200", "hopper"),
    ("H100", "hopper"),
    ("H200", "hopper"),
    ("H800", "hopper"),
    ("H20", "hopper"),
    ("A100", "ampere"),
    ("A800", "ampere"),
    ("V100", "volta"),
)

#: NVLS bandwidth over the NVLink bandwidth, per generation (NCCL src/graph/tuning.cc
#: ``nvlsEfficiency``: Volta 0, Ampere 0, Hopper 0.85, Blackwell 0.74)
NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}


def generation(gpu: str | None) -> str | None:
    """NCCL's generation of GPU model ``gpu`` (None: not a known NVIDIA data-centre GPU)."""
    for prefix, gen in GENERATIONS:
        if gpu and str(gpu).startswith(prefix):
            return gen
    return None


def nvls_efficiency(graph, path: tuple) -> float:
    """NVLS's efficiency between two GPUs of one host joined by ``path`` (its nodes): the
    generation's :data:`NVLS_EFFICIENCY` when the path meets at one NVSwitch, else 0."""
    if graph is None or len(path) != 3 or not str(path[1]).startswith("nvswitch"):
        return 0.0
    return NVLS_EFFICIENCY.get(generation(graph.graph.get("gpu")), 0.0)
