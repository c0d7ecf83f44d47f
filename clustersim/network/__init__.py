"""How bytes move between GPUs: the fabric models behind one interface (:class:`Fabric`)."""

from .analytical import AnalyticalFabric
from .base import DirectFabric, Fabric, FabricOptions
from .factory import DEFAULT_NETWORK_MODEL, NETWORK_MODELS, build_fabric
from .packet import DEFAULT_CHUNK_SIZE, PacketFabric

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_NETWORK_MODEL",
    "NETWORK_MODELS",
    "AnalyticalFabric",
    "DirectFabric",
    "Fabric",
    "FabricOptions",
    "PacketFabric",
    "build_fabric",
]
