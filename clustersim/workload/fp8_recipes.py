"""Transformer Engine's low-precision recipes (``training.fp8_recipe``): what each one
writes when it quantizes a BF16 tensor, how many kernels that takes, how fast its GEMM
runs against a per-tensor FP8 GEMM, and which GPUs run it.

A tensor a TE linear quantizes is used twice: *rowwise* by one GEMM and *columnwise*
(transposed) by another — X by fprop and wgrad, dY by dgrad and wgrad, W by fprop and
dgrad (``transformer_engine/pytorch/module/linear.py``: ``input_quantizer.set_usage(rowwise,
columnwise=backward_needs_input)``). Per element, one quantization reads the BF16 tensor
(2 bytes), once more first where the scale needs the tensor's amax now, and writes its
copies (:func:`cast_bytes_per_element`)::

    bytes/element = 2 · (1 + amax pass) + copies · (element bytes + scale bytes / block)

* ``delayed`` (``DelayedScaling``; TE's default on Hopper): one per-tensor scale from the
  amax history, so one fused ``cast_transpose`` kernel writes the FP8 data and, on Hopper,
  whose FP8 GEMMs take only the TN layout, its FP8 transpose; Blackwell's FP8 GEMMs take
  any layout, so TE writes no transpose there (``csrc/quantizer.cpp``: ``with_transpose =
  columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``).
* ``current`` (``Float8CurrentScaling``): the scale of this tensor now — an amax kernel
  reads the tensor, a scale kernel, then the same cast: three kernels, the tensor read twice.
* ``block`` (``Float8BlockScaling``, DeepSeek-V3's recipe): FP32 scales per 1×128 block
  of activations and gradients (128×128 of weights); rowwise and columnwise scales differ,
  so both copies are quantized from BF16 (two FP8 copies, each with its scales); Hopper's
  cuBLAS block-scaled GEMM. On Blackwell TE emulates it by MXFP8, so it is priced as MXFP8.
* ``mxfp8`` (``MXFP8BlockScaling``; TE's default on Blackwell): an E8M0 scale per 1×32
  block; the same two copies; one quantize kernel and one that swizzles the scales into the
  GEMM's layout.
* ``nvfp4`` (``NVFP4BlockScaling``, Blackwell): E2M1 (½ byte) with an E4M3 scale per 16
  (16×16 for weights) and a per-tensor FP32 scale, so a per-tensor amax pass first (which
  also takes the amax after the random Hadamard transform of the wgrad operands); then the
  quantize (Hadamard transform and stochastic rounding fused into it) and the scale swizzle.

All three GEMMs of a linear (fprop, dgrad, wgrad) run in the recipe's format by default
(``backward_override=None``). The GEMM itself is the per-tensor FP8 GEMM of
:mod:`.calibration` times :func:`gemm_factor`, a ratio read from Transformer Engine's
published per-recipe GEMM benchmark (``data/te_fp8_recipe_gemms.csv``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..errors import ScenarioError
from ..hardware.datasheets import datasheets

RECIPES_CSV = Path(__file__).resolve().parent.parent / "data" / "te_fp8_recipe_gemms.csv"
#: bytes of the BF16 tensor each pass over it reads
SOURCE_BYTES = 2.0

#: CUDA compute capability of the catalog GPUs with FP8 tensor cores that TE's recipes check
#: (TE ``check_mxfp8_support``: 10.0+; Hopper 9.0); others (MI300X's ROCm TE) are taken
#: as :data:`UNLISTED_CAPABILITY`: per-tensor recipes only, with TN-only GEMMs
COMPUTE_CAPABILITY = {
    "H100-SXM5-80GB": 9.0,
    "H200-SXM-141GB": 9.0,
    "H200-NVL-141GB": 9.0,
    "H800-SXM5-80GB": 9.0,
    "B200-SXM-180GB": 10.0,
    "GB200-186GB": 10.0,
    # Blackwell Ultra is sm_103
    "B300-SXM-288GB": 10.3,
    "GB300-288GB": 10.3,
}
#: what an FP8 GPU :data:`COMPUTE_CAPABILITY` does not list is taken as (Ada's: delayed and
#: current scaling only)
UNLISTED_CAPABILITY = 8.9


@dataclass(frozen=True)
class Recipe:
    """What one TE recipe writes per quantized element, and the kernels it takes."""

    name: str
    #: bytes of one quantized element (FP8 1, FP4 ½)
    element_bytes: float
    #: elements sharing one scale along a row of activations/gradients (0: one per tensor)
    block: int
    #: bytes of one scale
    scale_bytes: float
    #: elements per scale of a weight (2-D blocks; 0: one per tensor)
    weight_block: int
    #: a pass that reads the tensor for its amax before the cast
    amax_pass: bool
    #: the columnwise copy is quantized from BF16 with its own scales (block scaling), not a
    #: transpose of the rowwise data (per-tensor scaling)
    own_columnwise: bool
    #: kernels per quantized tensor
    kernels: int
    #: the lowest compute capability TE runs it on
    min_capability: float
    #: what TE's norm kernel does for a ``LayerNormLinear`` / ``LayerNormMLP`` input
    #: (``csrc/extensions/normalization.cpp`` @d0067d0 l. 106–118): ``cast`` — writes the
    #: FP8 output itself (``FULLY_FUSED`` for ``Float8Quantizer``); ``amax`` — takes the amax
    #: as it writes BF16, then scale and cast (``FUSED_NORM_AMAX_FP8``); "" — norm, then the
    #: recipe's own quantize (MXFP8 and block: ``UNFUSED`` unless NVTE_NORM_FWD_USE_CUDNN;
    #: NVFP4's amax fusion is skipped with a post-Hadamard amax, priced unfused)
    norm_fusion: str = ""


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("delayed", 1.0, 0, 4.0, 0, False, False, 1, 8.9, norm_fusion="cast"),
        Recipe("current", 1.0, 0, 4.0, 0, True, False, 3, 8.9, norm_fusion="amax"),
        Recipe("block", 1.0, 128, 4.0, 128 * 128, False, True, 1, 9.0),
        Recipe("mxfp8", 1.0, 32, 1.0, 32, False, True, 2, 10.0),
        Recipe("nvfp4", 0.5, 16, 1.0, 16 * 16, True, True, 3, 10.0),
    )
}


def capability(gpu: str) -> float:
    """The compute capability TE sees on ``gpu`` (:data:`COMPUTE_CAPABILITY`, else
    :data:`UNLISTED_CAPABILITY`)."""
    return COMPUTE_CAPABILITY.get(gpu, UNLISTED_CAPABILITY)


def effective(recipe: str, gpu: str) -> Recipe:
    """The recipe ``gpu`` really runs: ``block`` on Blackwell is TE's MXFP8 emulation."""
    return RECIPES["mxfp8" if recipe == "block" and capability(gpu) >= 10.0 else recipe]


def copies(recipe: Recipe, gpu: str, both_usages: bool = True) -> int:
    """Quantized copies written for a tensor used rowwise and columnwise (``both_usages``)
    or rowwise only: two where the columnwise copy is its own, or a transpose TN-only
    GEMMs need (Hopper); one where a per-tensor FP8 GEMM takes any layout (Blackwell)."""
    if not both_usages:
        return 1
    return 2 if recipe.own_columnwise or capability(gpu) < 10.0 else 1


def cast_bytes_per_element(recipe: Recipe, gpu: str, both_usages: bool = True) -> float:
    """HBM bytes per element of quantizing one BF16 tensor (module doc's closed form)."""
    reads = SOURCE_BYTES * (2 if recipe.amax_pass else 1)
    scales = recipe.scale_bytes / recipe.block if recipe.block else 0.0
    return reads + copies(recipe, gpu, both_usages) * (recipe.element_bytes + scales)


def weight_copy_bytes(recipe: Recipe) -> float:
    """Bytes per parameter of one cached quantized copy of a weight (data + its scales)."""
    return recipe.element_bytes + (recipe.scale_bytes / recipe.weight_block if recipe.weight_block else 0.0)


def saved_input_fraction(recipe: Recipe) -> float:
    """A saved GEMM input's bytes against its BF16 original: TE keeps only the columnwise
    copy the wgrad GEMM reads (``inputmat.update_usage(rowwise_usage=False)``)."""
    scales = recipe.scale_bytes / recipe.block if recipe.block else 0.0
    return (recipe.element_bytes + scales) / SOURCE_BYTES


@cache
def _layer_ms() -> dict[tuple[str, str, str], float]:
    """Per-layer milliseconds of TE's benchmark: (gpu, recipe, mode) → ms."""
    with RECIPES_CSV.open(newline="") as fh:
        return {
            (r["gpu"], r["recipe"], r["mode"]): float(r["ms"])
            for r in csv.DictReader(fh)
            if r["gemms"] == "layer"
        }


@cache
def gemm_factor(recipe: str) -> float:
    """A recipe's GEMM time against a per-tensor FP8 GEMM on the same GPU, from TE's
    benchmark of one 5B layer's 12 GEMMs (``data/te_fp8_recipe_gemms.csv``): MXFP8 and NVFP4
    pre-quantized against current scaling pre-quantized on B300; block scaling on H200 NVL,
    which has no pre-quantized block row, from its autocast time less delayed scaling's —
    both write two FP8 copies per tensor there, so the difference is the GEMMs'."""
    ms = _layer_ms()
    if recipe in ("delayed", "current"):
        return 1.0
    if recipe == "block":
        h = "H200 NVL"
        per_tensor = ms[h, "current", "prequantized"]
        return (per_tensor + ms[h, "block", "autocast"] - ms[h, "delayed", "autocast"]) / per_tensor
    return ms["B300 SXM6 AC", recipe, "prequantized"] / ms["B300 SXM6 AC", "current", "prequantized"]


def default_recipe(framework: str, gpu: str) -> str:
    """The recipe a framework profile runs under ``training.precision: fp8`` on ``gpu``:
    Blackwell ``mxfp8`` everywhere (TE's ``get_default_fp8_recipe``; Megatron-Bridge's
    ``*_FP8_MX`` performance presets); on Hopper ``megatron_core`` runs ``current`` — the
    only FP8 presets Megatron-Bridge's performance recipes ship for H100 are ``*_FP8_CS``
    (scripts/performance/configs/llama/llama3_workload_base_configs.py; NeMo 2's older
    scripts/performance/argument_parser.py defaulted to ``ds``) — and every other profile
    TE's default, ``delayed`` (Megatron-Core's own ``TransformerConfig.fp8_recipe`` default)."""
    if capability(gpu) >= 10.0:
        return "mxfp8"
    return "current" if framework == "megatron_core" else "delayed"


def check_recipe(recipe: str, gpu: str) -> None:
    """A ScenarioError unless TE runs ``recipe`` on ``gpu``."""
    if recipe not in RECIPES:
        raise ScenarioError("training.fp8_recipe", recipe, f"one of {', '.join(RECIPES)}")
    need = RECIPES[recipe].min_capability
    if capability(gpu) < need:
        runs = sorted(g for g in datasheets() if COMPUTE_CAPABILITY.get(g, 0.0) >= need)
        here = [name for name, r in RECIPES.items() if r.min_capability <= capability(gpu)]
        arch = "Blackwell" if need >= 10.0 else "Hopper or newer"
        raise ScenarioError(
            "training.fp8_recipe",
            recipe,
            f"{recipe} needs {arch} (compute capability {need}); on {gpu} use {' or '.join(here)},"
            f" or a GPU that runs it: {', '.join(runs)}",
        )
