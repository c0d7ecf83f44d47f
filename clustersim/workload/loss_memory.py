"""The loss's working set: what the cross-entropy holds, for a moment, beyond what it keeps.

The output layer keeps the fp32 softmax (or log-probabilities) of its local logits for
the backward — 4 bytes per element, an activation (:func:`.transformer_ops.output_ops`).
Around that the loss holds more while every activation of the micro-batch is still held
(at the end of the forward and the start of the backward), as its implementation
(:mod:`.kernel_impls`, ``held``) allocates:

* Megatron's vocab-parallel cross-entropy: the e-byte logits and their fp32 copy in the
  forward; in the backward the fp32 gradient (written in place over the softmax) and its
  cast back to e bytes — e + 4 bytes per element;
* ``F.cross_entropy(logits.float())`` (torchtitan, Hugging Face models): in
  ``log_softmax_backward`` the saved fp32 log-probabilities, the dense fp32 gradient
  ``nll_loss_backward`` wrote and its own fp32 output — 12 bytes per element.

Both are checked against kernel-level peak-memory measurements
(``clustersim/data/loss_memory_measurements.csv``). The working set is counted with the
stage's ``buffers`` (as the recompute working set is, which comes later in the backward:
a stage holds the larger of the two).
"""

from __future__ import annotations

from .kernel_impls import Impl, impl_of
from .transformer import TransformerConfig

#: bytes per local logit the loss keeps for the backward (the fp32 softmax): an activation
SAVED_BYTES = 4


def held_per_logit(impl: Impl, e: int) -> float:
    """Bytes per logit of ``e`` bytes the cross-entropy ``impl`` holds at its most."""
    a, c = impl.held
    return a * e + c


def loss_working_bytes(cfg: TransformerConfig, b: int, tp: int, e: int, kernels: str) -> float:
    """Bytes the loss holds beyond its kept softmax over ``b`` sequences of ``cfg`` on one
    of ``tp`` vocab-parallel ranks (module doc)."""
    held = held_per_logit(impl_of(kernels, "cross_entropy"), e)
    return max(0.0, held - SAVED_BYTES) * b * cfg.seq_len * cfg.vocab / tp
