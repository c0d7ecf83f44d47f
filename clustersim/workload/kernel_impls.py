"""The memory-bound kernels of a transformer step as each framework runs them, with their bytes.

Norms, the MLP activation, the bias-dropout-residual add, RoPE and the cross-entropy loss
move every element of their tensor through HBM once per kernel; a fused implementation is
one kernel per direction, an unfused one (PyTorch eager) several, each reading and writing
its own intermediates. An :class:`Impl` lists its kernels, forward and backward, each as
HBM bytes per element of the op's tensor ``a·e + c`` — ``e`` the bytes of an activation
element (16-bit: 2), ``c`` the bytes of fp32 intermediates and uint8 dropout masks. Small
per-row terms (norm statistics, RoPE's cos/sin tables, the loss's target gather) are left
out. :func:`memory_ops` turns one into :class:`~.ops.LayerOp` s, one per kernel, priced by
:mod:`.cost_model` at the achieved bandwidth of :mod:`.memory_bandwidth`.

Which implementation runs is the framework's (``training.framework``, overridable by
``training.memory_kernels``), :data:`FRAMEWORK_KERNELS`, from the sources:

* ``megatron_2021``: Apex ``FusedLayerNormAffineFunction``, TorchScript-fused ``bias_gelu``
  and ``bias_dropout_add`` (Megatron-LM 2021 ``megatron/model/fused_*.py``), the unfused
  vocab-parallel cross-entropy (``mpu/cross_entropy.py``); it had no RoPE: a rotary model
  runs Megatron's first, unfused ``apply_rotary_pos_emb`` (``t·cos + rotate_half(t)·sin``);
* ``megatron_core``: Transformer Engine norms, ``bias_swiglu_impl`` / ``bias_gelu_impl`` and
  ``bias_dropout_add`` under ``jit_fuser`` (``torch.compile`` from PyTorch 2.2,
  megatron/core/jit.py), TE's fused RoPE — Megatron-LM's ``--no-rope-fusion``,
  ``--no-bias-swiglu-fusion`` and ``--no-bias-dropout-fusion`` are opt-outs
  (megatron/training/arguments.py) — and the unfused vocab-parallel cross-entropy:
  ``--cross-entropy-loss-fusion`` is opt-in (``cross_entropy_loss_fusion = False``,
  megatron/core/model_parallel_config.py);
* ``deepspeed``: DeepSpeed trains the unmodified PyTorch model (Hugging Face modules):
  ``nn.LayerNorm`` (one native kernel per direction), ``LlamaRMSNorm``'s fp32 chain
  (cast, pow, mean, rsqrt-mul, cast, weight-mul), GELU with its bias in the GEMM
  (``addmm``), eager SwiGLU (``silu`` then ``mul``), dropout and residual add as two
  kernels, ``rotate_half`` RoPE, ``F.cross_entropy`` on fp32 logits;
* ``fsdp2`` (torchtitan): ``nn.RMSNorm`` / ``nn.LayerNorm`` (one native kernel), eager
  SwiGLU (``F.silu(w1(x)) * w3(x)``, torchtitan/models/llama3/model.py), the residual add,
  RoPE through complex multiplication (``apply_rotary_emb``: ``float()``,
  ``view_as_complex`` × ``freqs_cis``, ``type_as``) and ``F.cross_entropy`` on
  ``pred.float()`` (torchtitan/components/loss.py); ``torch.compile`` is off by default.

The bytes are checked against kernel-level measurements of the same implementations
(``memory_kernel_measurements.csv``, :mod:`.memory_bandwidth`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .ops import MASK_BYTES, LayerOp, elementwise

#: (bytes per activation element, fixed bytes) of one kernel, per element of the op's tensor
Kernel = tuple[float, float]


@dataclass(frozen=True)
class Impl:
    """One implementation of a memory-bound op: its forward and backward kernels in
    launch order (:data:`Kernel` each), where its kernel list comes from, and the
    achieved-bandwidth curve its kernels run at (``kind``, :mod:`.memory_bandwidth`):
    ``tuned`` — hand-written CUDA or Triton kernels (Apex, Transformer Engine, Liger) and
    PyTorch's elementwise kernels over contiguous tensors; ``generic`` — PyTorch's native
    norms, fp32 reduction chains, and elementwise kernels over strided or broadcast views
    (``torch.chunk`` halves, ``rotate_half``, complex multiplies), which the measurements
    show well below the tuned curve."""

    fwd: tuple[Kernel, ...]
    bwd: tuple[Kernel, ...]
    source: str
    kind: str = "tuned"

    def bytes(self, e: float) -> tuple[list[float], list[float]]:
        """(forward, backward) HBM bytes per element of each kernel, activations of ``e`` bytes."""
        return [a * e + c for a, c in self.fwd], [a * e + c for a, c in self.bwd]


_M = float(MASK_BYTES)
#: op → implementation name → Impl. Per element of: the normalised tensor (norms,
#: residuals), the activation's input (the up projection's output, 2f per token when gated),
#: the query and key heads (RoPE), the vocab-parallel logits (cross-entropy)
IMPLS: dict[str, dict[str, Impl]] = {
    "norm": {
        # read x, write y; backward read dy and x, write dx (γ/β partial sums per block: small)
        "fused": Impl(((2, 0),), ((3, 0),), "Apex FusedLayerNorm, Transformer Engine LayerNorm/RMSNorm"),
        "native": Impl(((2, 0),), ((3, 0),), "nn.LayerNorm, nn.RMSNorm (PyTorch native kernels)", "generic"),
        # LlamaRMSNorm: x.to(fp32), pow(2), mean, x·rsqrt, .to(e), weight·x; backward the
        # autograd of each: weight-mul (dx, dγ product and its sum), the cast, x·r (both
        # factors, the sum for dr), pow's 2x·g, the add of the two paths, the cast back
        "hf_eager": Impl(
            ((1, 4), (0, 8), (0, 4), (0, 8), (1, 4), (2, 0)),
            ((2, 0), (3, 0), (1, 0), (1, 4), (0, 8), (0, 12), (0, 4), (0, 8), (0, 12), (1, 4)),
            "transformers LlamaRMSNorm.forward (eager, fp32 upcast)",
            "generic",
        ),
    },
    "act": {
        # bias + GeLU: read y, write h; backward read dh and y, write dy (the bias add recomputed)
        "fused": Impl(
            ((2, 0),), ((3, 0),), "Megatron bias_gelu (TorchScript / jit_fuser); F.gelu with bias in addmm"
        ),
        # an activation of two eager pointwise ops (relu, then square): each reads and writes
        "two_pass": Impl(((2, 0), (2, 0)), ((3, 0), (3, 0)), "torch.relu then torch.square, eager"),
    },
    "gated_act": {
        # per input element (gate and up, 2f a token): read 2f, write f; backward read dh (f),
        # gate and up (2f), write their gradients (2f)
        "fused": Impl(((1.5, 0),), ((2.5, 0),), "Liger SwiGLU (Triton)"),
        # the same bytes in the one kernel torch.compile generates over the torch.chunk halves
        "jit": Impl(((1.5, 0),), ((2.5, 0),), "Megatron-Core bias_swiglu_impl (jit_fuser)", "generic"),
        # silu(gate) (read f, write f), · up (read 2f, write f); backward d_silu = dh·up, d_up =
        # dh·silu (each read 2f, write f) and silu_backward (read 2f, write f)
        "eager": Impl(((1, 0), (1.5, 0)), ((1.5, 0), (1.5, 0), (1.5, 0)), "F.silu(w1(x)) * w3(x), eager"),
        # the same kernels over the two torch.chunk halves of one [.., 2f] tensor (strided)
        "eager_chunked": Impl(
            ((1, 0), (1.5, 0)), ((1.5, 0), (1.5, 0), (1.5, 0)), "F.silu(y1) * y2 over torch.chunk", "generic"
        ),
    },
    "residual": {
        # read x and the residual, write the sum; backward read the gradient, write it (the
        # branch sum Megatron's fused kernel hands back)
        "fused": Impl(((3, 0),), ((2, 0),), "Megatron bias_dropout_add (fused, no dropout)"),
        # x + residual; backward the add of the residual stream's two gradients
        "eager": Impl(((3, 0),), ((3, 0),), "x + residual, eager"),
    },
    "dropout_residual": {
        # also writes (forward) and reads (backward) the uint8 mask
        "fused": Impl(((3, _M),), ((2, _M),), "Megatron bias_dropout_add_fused_train"),
        # dropout (read x, write y and the mask), add; backward the mask multiply and the add
        "eager": Impl(((2, _M), (3, 0)), ((2, _M), (3, 0)), "nn.Dropout then residual add, eager"),
    },
    "rope": {
        # read q/k, write them rotated (cos/sin tables: small), both directions
        "fused": Impl(((2, 0),), ((2, 0),), "Transformer Engine fused_apply_rotary_pos_emb; Liger RoPE"),
        # rotate_half: neg of one half (read ½, write ½), cat (read 1, write 1); t·cos, rot·sin
        # (read 1, write 1 each), add (read 2, write 1); backward the mirror: ·sin, neg,
        # the halves' copy back, ·cos, the add of the two paths
        "rotate_half": Impl(
            ((1, 0), (2, 0), (2, 0), (2, 0), (3, 0)),
            ((2, 0), (1, 0), (2, 0), (2, 0), (3, 0)),
            "Megatron apply_rotary_pos_emb (unfused); transformers apply_rotary_pos_emb",
            "generic",
        ),
        # float() (read e, write 4), complex multiply by freqs_cis (read 4, write 4), type_as
        # (read 4, write e); backward the same three in reverse
        "complex": Impl(
            ((1, 4), (0, 8), (1, 4)),
            ((1, 4), (0, 8), (1, 4)),
            "torchtitan apply_rotary_emb (eager)",
            "generic",
        ),
    },
    "cross_entropy": {
        # Megatron's vocab-parallel cross-entropy, one kernel a line: forward the cast to fp32
        # (read e, write 4), max (read 4), sub_ (4 + 4), exp in place (4 + 4), sum (4),
        # div_ (4 + 4); backward mul_ by the loss gradient (4 + 4), the cast back (read 4, write e)
        "megatron_unfused": Impl(
            ((1, 4), (0, 4), (0, 8), (0, 8), (0, 4), (0, 8)),
            ((0, 8), (1, 4)),
            "Megatron _VocabParallelCrossEntropy (cross_entropy_loss_fusion off)",
            "generic",
        ),
        # logits.float() (read e, write 4), log_softmax (read 4, write 4); backward
        # nll_loss_backward (writes a dense 4-byte gradient), log_softmax_backward (read 8,
        # write 4), the cast back (read 4, write e)
        "eager": Impl(
            ((1, 4), (0, 8)), ((0, 4), (0, 12), (1, 4)), "F.cross_entropy(logits.float()), eager", "generic"
        ),
    },
}

#: the implementation each framework profile runs per op (module doc)
FRAMEWORK_KERNELS: dict[str, dict[str, str]] = {
    "megatron_2021": {
        "layernorm": "fused",
        "rmsnorm": "fused",
        "act": "fused",
        "gated_act": "fused",
        "residual": "fused",
        "dropout_residual": "fused",
        "rope": "rotate_half",
        "cross_entropy": "megatron_unfused",
    },
    "megatron_core": {
        "layernorm": "fused",
        "rmsnorm": "fused",
        "act": "fused",
        "gated_act": "jit",
        "residual": "fused",
        "dropout_residual": "fused",
        "rope": "fused",
        "cross_entropy": "megatron_unfused",
    },
    "deepspeed": {
        "layernorm": "native",
        "rmsnorm": "hf_eager",
        "act": "fused",
        "gated_act": "eager",
        "residual": "eager",
        "dropout_residual": "eager",
        "rope": "rotate_half",
        "cross_entropy": "eager",
    },
    "fsdp2": {
        "layernorm": "native",
        "rmsnorm": "native",
        "act": "fused",
        "gated_act": "eager",
        "residual": "eager",
        "dropout_residual": "eager",
        "rope": "complex",
        "cross_entropy": "eager",
    },
}
DEFAULT_KERNELS = "megatron_2021"


def impl_of(framework: str, op: str) -> Impl:
    """The implementation of ``op`` (a key of :data:`FRAMEWORK_KERNELS`' rows; ``layernorm``
    and ``rmsnorm`` are both :data:`IMPLS` ``norm``) under ``framework``'s kernels."""
    table = "norm" if op in ("layernorm", "rmsnorm") else op
    return IMPLS[table][FRAMEWORK_KERNELS[framework][op]]


def memory_ops(
    name: str, impl: Impl, elements: float, e: float, *, params: float = 0.0, activation: float = 0.0
) -> list[LayerOp]:
    """One :class:`~.ops.LayerOp` per kernel of ``impl`` over ``elements`` values: the i-th
    forward and i-th backward kernel share an op (``name``, then ``name.1``, ``name.2``…); the
    first holds ``params`` and the kept ``activation``."""
    fwd, bwd = impl.bytes(e)
    n = max(len(fwd), len(bwd))
    fwd, bwd = fwd + [0.0] * (n - len(fwd)), bwd + [0.0] * (n - len(bwd))
    return [
        elementwise(
            name if i == 0 else f"{name}.{i}",
            elements,
            f,
            b,
            params=params if i == 0 else 0.0,
            activation=activation if i == 0 else 0.0,
            kind=impl.kind,
        )
        for i, (f, b) in enumerate(zip(fwd, bwd, strict=True))
    ]
