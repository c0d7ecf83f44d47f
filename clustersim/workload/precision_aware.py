"""Megatron-Core's precision-aware optimizer: the optimizer states' bytes per parameter.

With ``--use-precision-aware-optimizer`` (``OptimizerConfig.use_precision_aware_optimizer``)
Megatron-Core hands the master weights and Adam's moments to Transformer Engine's
``FusedAdam`` (megatron/core/optimizer/__init__.py): the moments in ``exp_avg_dtype`` and
``exp_avg_sq_dtype`` (fp32 by default), and the fp32 master weight — with
``store_param_remainders`` (True by default, TE ≥ 2.1) and 16-bit BF16 parameters — as the
16 bits of the fp32 value the BF16 parameter does not already hold: an int16 a parameter
(distrib_optimizer.py allocates ``master_param`` as ``torch.int16`` then, its checkpoint
too). So Adam's 4 + 4 + 4 = 12 bytes/param become 2 + 4 + 4 = 10, and with BF16 moments
(DeepSeek-V3's Megatron-Bridge recipe) 2 + 2 + 2 = 6.

The remainder needs the BF16 parameter to hold the master's upper half: Megatron takes it
only where TE manages the master weight — no FP8, or FP8 with delayed scaling
(``use_precision_aware_optimizer_no_fp8_or_ds_fp8``); with another FP8 recipe Megatron-Core
keeps the fp32 master itself (4 bytes).
"""

from __future__ import annotations

from ..errors import ScenarioError

#: bytes per element of the dtypes ``exp_avg_dtype`` / ``exp_avg_sq_dtype`` accept here
MOMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
#: the master weight's bytes: fp32, or its 16-bit remainder beside a BF16 parameter
MASTER_BYTES, REMAINDER_BYTES = 4, 2


def optimizer_state_bytes(spec, precision: str, fp8_recipe: str, optimizer: str, framework: str) -> float:
    """Bytes per parameter of the optimizer states under ``spec`` (a
    ``PrecisionAwareOptimizerSpec``) for a run in ``precision`` (FP8 with ``fp8_recipe``);
    refused where Megatron-Core does not run it (module doc)."""
    field = "training.precision_aware_optimizer"
    if framework != "megatron_core" or optimizer != "adam":
        raise ScenarioError(
            field,
            spec.model_dump(),
            f"Megatron-Core's Adam (training.framework megatron_core, training.optimizer adam; "
            f"here {framework!r}, {optimizer!r}); leave it unset",
        )
    te_master = precision == "bf16" or (precision == "fp8" and fp8_recipe == "delayed")
    master = REMAINDER_BYTES if spec.store_param_remainders and te_master else MASTER_BYTES
    return master + MOMENT_BYTES[spec.exp_avg_dtype] + MOMENT_BYTES[spec.exp_avg_sq_dtype]


#: the Adam step's bytes a parameter besides its states': the gradient read and the 16-bit
#: weight written (:meth:`.cost_model.CostModel.optimizer_time`'s 32 = 2 · 12 + 4 + 4)
STEP_OTHER_BYTES = 8


def step_bytes(state_bytes: float | None) -> tuple[float, ...]:
    """``optimizer_time``'s bytes per parameter with ``state_bytes`` of optimizer states
    (each read and written once), or ``()`` — its own default — without a precision-aware
    optimizer."""
    return () if state_bytes is None else (2 * state_bytes + STEP_OTHER_BYTES,)
