"""How bytes move between GPUs: the fabric models behind one interface (:class:`Fabric`)."""

from .base import DirectFabric, Fabric

__all__ = ["DirectFabric", "Fabric"]
