"""What the host spends issuing each op, and the small kernels eager frameworks add to it.

An op of :mod:`.transformer_ops` is priced as the kernels its work needs (a GEMM, a norm,
the attention kernel); eager PyTorch issues more around them, per ``training.framework``
(``clustersim/data/host_kernels.csv``, each row read from the framework's source, op by
op): the norm backward's dγ reduction kernels (TE, Apex), the cat that autograd makes of
a split's gradients, the fused attention backward's pre/post kernels, the autograd sum of
a tensor's gradients where it has two consumers (the residual stream), the separate q/k/v
and gate/up projections of Hugging Face and torchtitan, RoPE run on query and key apart.
Each extra kernel costs its launch latency on the GPU and, where the row says, HBM passes
over the [tokens, hidden] activation (``hidden_passes``); on the host it costs a dispatch.

The host's time per op and phase (:meth:`HostModel.issue`):

    host = modules · module_s + max(0, kernels − modules) · dispatch(phase)

(under FP8 a Transformer Engine module's forward costs its FP8 host time, ``module_fp8``:
TE issue #761 measured it over twice the BF16 module's, and it covers the casts the module
launches, so they are not dispatched again)

``dispatch`` is the forward's (Python eager with autograd recording: ``pytorch_eager``) or
the backward's (the autograd engine's C++ nodes: ``autograd_engine``) per kernel; a
``module`` — a Transformer Engine or ``nn.Linear`` module the row names — costs its measured
forward host time instead (``te_module``, ``torch_module``; its GEMM's dispatch inside),
all rows of ``clustersim/data/host_dispatch.csv``. :mod:`.host` races that host time
against the GPU's.

``training.fixed_costs.small_kernels: false`` leaves the extra kernels out;
``training.fixed_costs.host_dispatch`` sets every kernel's dispatch, modules included (0:
no host); ``training.cuda_graphs`` replays the kernels without the host (the extra kernels
still run).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from functools import cache

from .host import HOST_CSV, dispatch_s

KERNELS_CSV = HOST_CSV.parent / "host_kernels.csv"
#: the stack whose module host time each profile's linears cost (None: no module is measured)
MODULE_STACKS = {
    "megatron_2021": None,
    "megatron_core": "te_module",
    "deepspeed": "torch_module",
    "fsdp2": "torch_module",
}
#: phases the backward's dispatch prices (the autograd engine issues them)
BACKWARD_PHASES = ("B", "W")


@cache
def _host_row(stack: str, quantity: str) -> float:
    """Seconds of the ``calibrate`` row (stack, quantity) of ``host_dispatch.csv``."""
    with HOST_CSV.open() as fh:
        (row,) = [
            r
            for r in csv.DictReader(fh)
            if (r["stack"], r["quantity"], r["role"]) == (stack, quantity, "calibrate")
        ]
    return float(row["value_us"]) * 1e-6


@cache
def extra_kernels(framework: str) -> dict[tuple[str, str], tuple[int, float, int]]:
    """(op, phase) → (extra kernels, HBM passes over the [tokens, hidden] activation, modules)
    of ``framework``'s rows in ``host_kernels.csv``."""
    with KERNELS_CSV.open() as fh:
        return {
            (r["op"], r["phase"]): (int(r["kernels"]), float(r["hidden_passes"]), int(r["modules"]))
            for r in csv.DictReader(fh)
            if r["framework"] == framework
        }


@dataclass(frozen=True)
class HostModel:
    """One scenario's host: seconds per kernel the forward and the backward issue, per
    module, the framework's extra kernels and the bytes of one pass over its
    [tokens, hidden] activation on this GPU."""

    forward_s: float
    backward_s: float
    module_s: float = 0.0
    extras: dict = field(default_factory=dict)
    hidden_bytes: float = 0.0
    #: a module's host time covers every kernel its op's work issues (FP8: the casts TE
    #: launches in its forward), not its GEMM's alone
    module_covers_work: bool = False

    def __hash__(self) -> int:
        # (frozen, so its fields never change; the dict hashed by its items: a pass's segments
        # are cached by the fixed costs that hold this, stage_builder.cached_pass_segments)
        return hash(
            (
                self.forward_s,
                self.backward_s,
                self.module_s,
                tuple(sorted(self.extras.items())),
                self.hidden_bytes,
                self.module_covers_work,
            )
        )

    @classmethod
    def of(
        cls,
        framework: str,
        override: float | None,
        graphs: bool,
        small: bool,
        hidden_bytes: float,
        fp8: bool = False,
    ) -> HostModel:
        """The host of ``framework`` (``override``: ``fixed_costs.host_dispatch``; ``graphs``:
        ``training.cuda_graphs``; ``small``: ``fixed_costs.small_kernels``; ``fp8``: the
        linears run in FP8 — a Transformer Engine module then costs its FP8 forward,
        ``te_module`` ``module_fp8``, which covers the casts it launches)."""
        extras = extra_kernels(framework) if small else {}
        if graphs:
            return cls(0.0, 0.0, 0.0, extras, hidden_bytes)
        if override is not None:
            return cls(override, override, override, extras, hidden_bytes)
        stack = MODULE_STACKS[framework]
        te_fp8 = fp8 and stack == "te_module"
        module = _host_row(stack, "module_fp8" if te_fp8 else "module") if stack else 0.0
        return cls(
            dispatch_s(framework),
            _host_row("autograd_engine", "dispatch"),
            module,
            extras,
            hidden_bytes,
            te_fp8,
        )

    def dispatch(self, phase: str) -> float:
        """Host seconds per kernel issued in ``phase`` (``F``, or ``B``/``W``: the backward)."""
        return self.backward_s if phase in BACKWARD_PHASES else self.forward_s

    def issue(self, op: str, phase: str, kernels: int) -> tuple[int, float, float]:
        """(extra kernels, their HBM bytes, host seconds of all) of ``op``'s ``phase`` whose
        priced work is ``kernels`` kernels (0: no work there, and nothing extra)."""
        if not kernels:
            return 0, 0.0, 0.0
        extra, passes, modules = self.extras.get((op, phase), (0, 0.0, 0))
        issued = kernels + extra
        inside = modules * (kernels if self.module_covers_work else 1)  # issued within the modules
        host = modules * self.module_s + max(0, issued - inside) * self.dispatch(phase)
        return extra, passes * self.hidden_bytes, host
