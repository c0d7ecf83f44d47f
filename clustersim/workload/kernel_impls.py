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

* ``megatron_2021``: Apex ``FusedLayerNormAffineFunction`` (two passes over dy and x backward), TorchScript-fused ``bias_gelu``
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

A ReLU² MLP (``model.squared_relu``: Nemotron-4) runs ``squared_relu``: Megatron-LM's
``--squared-relu`` (2021–22: ``torch.pow(F.relu(x), 2)``, eager, two kernels), Megatron-Core's
``squared_relu`` under ``jit_fuser`` (megatron/core/activations.py: one kernel, GeLU's bytes),
Hugging Face's ``ReLUSquaredActivation`` (``relu`` then ``square``, eager) for DeepSpeed and
FSDP2.

The bytes are checked against kernel-level measurements of the same implementations
(``memory_kernel_measurements.csv``, :mod:`.memory_bandwidth`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .ops import MASK_BYTES, LayerOp, Work

#: a kernel's achieved-bandwidth curve (:mod:`.memory_bandwidth`): ``tuned`` — hand-written
#: CUDA or Triton kernels (Apex, Transformer Engine, Liger) and PyTorch's elementwise kernels
#: whose operands are all contiguous (vectorized loads); ``generic`` — PyTorch's row
#: reductions (max, sum, mean, softmax, its native norms) and elementwise kernels with a
#: strided or broadcast operand (``torch.chunk`` halves, ``rotate_half``, a per-row scale, a
#: cos/sin or complex table), which PyTorch runs without vectorized loads, and the kernel
#: ``torch.compile`` makes of such a chain — well below the tuned curve in the measurements
TUNED, GENERIC = "tuned", "generic"
#: (bytes per activation element, fixed bytes, kind) of one kernel, per element of the op's tensor
Kernel = tuple[float, float, str]


@dataclass(frozen=True)
class Impl:
    """One implementation of a memory-bound op: its forward and backward kernels in
    launch order (:data:`Kernel` each) and where its kernel list comes from."""

    fwd: tuple[Kernel, ...]
    bwd: tuple[Kernel, ...]
    source: str
    #: (bytes per activation element, fixed bytes) per element its own tensors hold at
    #: their most, forward or backward (the loss's working set, :mod:`.loss_memory`)
    held: tuple[float, float] = (0.0, 0.0)

    def bytes(self, e: float) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
        """(forward, backward) (HBM bytes per element, kind) of each kernel, activations of
        ``e`` bytes."""
        return [(a * e + c, k) for a, c, k in self.fwd], [(a * e + c, k) for a, c, k in self.bwd]


_M, T, G = float(MASK_BYTES), TUNED, GENERIC
#: op → implementation name → Impl. Per element of: the normalised tensor (norms,
#: residuals), the activation's input (the up projection's output, 2f per token when gated),
#: the query and key heads (RoPE), the vocab-parallel logits (cross-entropy)
IMPLS: dict[str, dict[str, Impl]] = {
    "norm": {
        # read x, write y; backward read dy and x, write dx with the γ/β partial sums of the
        # same pass (TE ln_bwd_tuned_kernel / rmsnorm_bwd: dgamma_part; its finalize kernel
        # sums a few rows per CTA: small)
        "fused": Impl(((2, 0, T),), ((3, 0, T),), "Transformer Engine LayerNorm/RMSNorm"),
        # Apex (and Megatron-LM 2021's copy, megatron/fused_kernels/layer_norm_cuda_kernel.cu,
        # HostLayerNormGradient): cuComputePartGradGammaBeta reads dy and x for the γ/β
        # partial sums, cuComputeGradInput reads them again and writes dx (the partials'
        # final sum, cuComputeGradGammaBeta, is small)
        "apex": Impl(((2, 0, T),), ((2, 0, T), (3, 0, T)), "Apex FusedLayerNorm / FusedRMSNorm"),
        # PyTorch's layer_norm_backward_cuda: layer_norm_grad_input_kernel (read dy, x, write
        # dx), then GammaBetaBackwardCUDAKernel reads dy and x again (a column reduction)
        "native": Impl(
            ((2, 0, G),), ((3, 0, G), (2, 0, G)), "nn.LayerNorm, nn.RMSNorm (PyTorch native kernels)"
        ),
        # LlamaRMSNorm: x.to(fp32), pow(2), mean, x·rsqrt (per-row broadcast), .to(e),
        # weight·x (broadcast weight); backward the autograd of each: weight-mul (dx, and the
        # dγ product and its sum over tokens), the cast, x·r (dx1 = g·r, dr = Σ g·x: product
        # and sum), pow's 2x·g (broadcast), the add of the two paths, the cast back
        "hf_eager": Impl(
            ((1, 4, T), (0, 8, T), (0, 4, G), (0, 8, G), (1, 4, T), (2, 0, G)),
            (
                (2, 0, G),
                (3, 0, T),
                (1, 0, G),
                (1, 4, T),
                (0, 8, G),
                (0, 12, T),
                (0, 4, G),
                (0, 8, G),
                (0, 12, T),
                (1, 4, T),
            ),
            "transformers LlamaRMSNorm.forward (eager, fp32 upcast)",
        ),
    },
    "act": {
        # bias + GeLU: read y, write h; backward read dh and y, write dy (the bias add recomputed)
        "fused": Impl(
            ((2, 0, T),),
            ((3, 0, T),),
            "Megatron bias_gelu (TorchScript / jit_fuser); F.gelu with bias in addmm",
        ),
        # an activation of two eager pointwise ops (relu, then square): each reads and writes;
        # backward square is pow(x, 2), whose autograd (pow_backward: grad · (2 · x.pow(1)))
        # runs three kernels — the x.pow(1) copy, the scalar multiply, the product with grad —
        # then relu's threshold_backward (read grad and the output, write)
        "two_pass": Impl(
            ((2, 0, T), (2, 0, T)),
            ((2, 0, T), (2, 0, T), (3, 0, T), (3, 0, T)),
            "torch.relu then torch.square, eager",
        ),
    },
    "gated_act": {
        # per input element (gate and up, 2f a token): read 2f, write f; backward read dh (f),
        # gate and up (2f), write their gradients (2f)
        "fused": Impl(((1.5, 0, T),), ((2.5, 0, T),), "Liger SwiGLU (Triton)"),
        # the same bytes in the one kernel torch.compile generates over the torch.chunk halves
        "jit": Impl(((1.5, 0, G),), ((2.5, 0, G),), "Megatron-Core bias_swiglu_impl (jit_fuser)"),
        # silu(gate) (read f, write f), · up (read 2f, write f); backward d_silu = dh·up, d_up =
        # dh·silu (each read 2f, write f) and silu_backward (read 2f, write f)
        "eager": Impl(
            ((1, 0, T), (1.5, 0, T)), ((1.5, 0, T), (1.5, 0, T), (1.5, 0, T)), "F.silu(w1(x)) * w3(x), eager"
        ),
        # the same kernels over the two torch.chunk halves of one [.., 2f] tensor (strided)
        "eager_chunked": Impl(
            ((1, 0, G), (1.5, 0, G)),
            ((1.5, 0, G), (1.5, 0, G), (1.5, 0, G)),
            "F.silu(y1) * y2 over torch.chunk",
        ),
    },
    "residual": {
        # read x and the residual, write the sum; backward read the gradient, write it (the
        # branch sum Megatron's fused kernel hands back)
        "fused": Impl(((3, 0, T),), ((2, 0, T),), "Megatron bias_dropout_add (fused, no dropout)"),
        # x + residual; backward the add of the residual stream's two gradients
        "eager": Impl(((3, 0, T),), ((3, 0, T),), "x + residual, eager"),
    },
    "dropout_residual": {
        # also writes (forward) and reads (backward) the uint8 mask
        "fused": Impl(((3, _M, T),), ((2, _M, T),), "Megatron bias_dropout_add_fused_train"),
        # dropout (read x, write y and the mask), add; backward the mask multiply and the add
        "eager": Impl(
            ((2, _M, T), (3, 0, T)), ((2, _M, T), (3, 0, T)), "nn.Dropout then residual add, eager"
        ),
    },
    "rope": {
        # read q/k, write them rotated (cos/sin tables: small), both directions
        "fused": Impl(
            ((2, 0, T),), ((2, 0, T),), "Transformer Engine fused_apply_rotary_pos_emb; Liger RoPE"
        ),
        # rotate_half: neg of one (strided) half (read ½, write ½), cat (read 1, write 1);
        # t·cos, rot·sin (read 1, write 1 each, broadcast tables), add (read 2, write 1);
        # backward the mirror: ·sin, neg, the halves' copy back, ·cos, the add of the two paths
        "rotate_half": Impl(
            ((1, 0, G), (2, 0, G), (2, 0, G), (2, 0, G), (3, 0, T)),
            ((2, 0, G), (1, 0, G), (2, 0, G), (2, 0, G), (3, 0, T)),
            "Megatron apply_rotary_pos_emb (unfused); transformers apply_rotary_pos_emb",
        ),
        # float() (read e, write 4), complex multiply by the broadcast freqs_cis (read 4,
        # write 4), type_as (read 4, write e); backward the same three in reverse
        "complex": Impl(
            ((1, 4, T), (0, 8, G), (1, 4, T)),
            ((1, 4, T), (0, 8, G), (1, 4, T)),
            "torchtitan apply_rotary_emb (eager)",
        ),
    },
    "cross_entropy": {
        # Megatron's vocab-parallel cross-entropy, one kernel a line: forward the cast to fp32
        # (read e, write 4), max over the row (read 4), sub_ of the row max (4 + 4), exp in
        # place (4 + 4), sum over the row (4), div_ by the row sum (4 + 4); backward mul_ by
        # the per-token loss gradient (4 + 4), the cast back (read 4, write e). Held at most:
        # the e-byte logits and their fp32 copy (forward), the fp32 softmax turned in place
        # into the gradient and its cast back (backward) — e + 4
        "megatron_unfused": Impl(
            ((1, 4, T), (0, 4, G), (0, 8, G), (0, 8, T), (0, 4, G), (0, 8, G)),
            ((0, 8, G), (1, 4, T)),
            "Megatron _VocabParallelCrossEntropy (cross_entropy_loss_fusion off)",
            held=(1, 4),
        ),
        # logits.float() (read e, write 4), log_softmax (read 4, write 4); backward
        # nll_loss_backward (writes a dense 4-byte gradient), log_softmax_backward (read 8,
        # write 4), the cast back (read 4, write e). Held at most: in log_softmax_backward the
        # saved fp32 log-probabilities, nll_loss's dense gradient and its own output — 12
        "eager": Impl(
            ((1, 4, T), (0, 8, G)),
            ((0, 4, T), (0, 12, G), (1, 4, T)),
            "F.cross_entropy(logits.float()), eager",
            held=(0, 12),
        ),
    },
}

#: the implementation each framework profile runs per op (module doc)
FRAMEWORK_KERNELS: dict[str, dict[str, str]] = {
    "megatron_2021": {
        "layernorm": "apex",
        "rmsnorm": "apex",
        "act": "fused",
        "squared_relu": "two_pass",
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
        "squared_relu": "fused",
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
        "squared_relu": "two_pass",
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
        "squared_relu": "two_pass",
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
    table = {"layernorm": "norm", "rmsnorm": "norm", "squared_relu": "act"}.get(op, op)
    return IMPLS[table][FRAMEWORK_KERNELS[framework][op]]


def memory_ops(
    name: str, impl: Impl, elements: float, e: float, *, params: float = 0.0, activation: float = 0.0
) -> list[LayerOp]:
    """One :class:`~.ops.LayerOp` per kernel of ``impl`` over ``elements`` values: the i-th
    forward and i-th backward kernel share an op (``name``, then ``name.1``, ``name.2``…),
    each :class:`~.ops.Work` of its kernel's kind; the first holds ``params`` and the kept
    ``activation``."""
    fwd, bwd = impl.bytes(e)
    n = max(len(fwd), len(bwd))
    none = [(0.0, TUNED)]
    fwd, bwd = fwd + none * (n - len(fwd)), bwd + none * (n - len(bwd))
    return [
        LayerOp(
            name if i == 0 else f"{name}.{i}",
            Work(0.0, elements * fb, memory_kind=fk),
            Work(0.0, elements * bb, memory_kind=bk),
            params=params if i == 0 else 0.0,
            activation=activation if i == 0 else 0.0,
        )
        for i, ((fb, fk), (bb, bk)) in enumerate(zip(fwd, bwd, strict=True))
    ]
