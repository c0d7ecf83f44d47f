"""Time a real GPU at the cost model's own shapes and write the tables clustersim reads.

    python benchmarks/gpu_profile.py --out profile/                 # default configurations
    python benchmarks/gpu_profile.py --config gpt-22b:4:8 --attention standard --out profile/

Needs PyTorch ≥ 2.3 (``torch.nn.attention.sdpa_kernel``) with a CUDA (or ROCm) GPU; without
one it says so and exits with status 2.
For each configuration ``preset:micro_batch:tp`` the layer's ops come from
:func:`clustersim.workload.transformer_ops.layer_ops` — the ops the cost model prices — and

* every GEMM of every phase (forward F, backward-input B, backward-weight W) is timed as
  ``torch.mm`` / ``torch.bmm`` at its (batch, M, N, K) in bf16;
* the attention core at the shapes the layer uses: ``flash`` (torch SDPA on its
  FlashAttention backend, forward and backward) or ``standard`` (its GEMMs, as above, and
  the softmax and attention-dropout kernels, forward and backward);
* an HBM bandwidth, STREAM-like: copy (``c = a``, 2 arrays) and triad (``a = b + s·c``,
  3 arrays) on 2^28 fp32 elements.

Memory-bound ops other than softmax and dropout (norms, residuals, GeLU) are not timed:
the cost model keeps pricing them by its HBM term. Written under ``--out``:

* ``<preset>-b<b>-tp<tp>-<attention>.csv`` — a ``model.profile`` table (columns
  ``op,phase,m,n,k,time_us``, docs/models.md) for a scenario of that configuration, plus
  ``gpu`` (the catalog name), ``device`` (what the driver calls it) and ``source``;
* ``kernels.csv`` — the same timings as rows of ``clustersim/data/gpu_kernel_measurements.csv``
  (unbatched GEMMs in TFLOP/s, flash attention in FlashAttention's FLOP convention, STREAM
  in TB/s), ``gpu`` column included, which :func:`clustersim.workload.calibration.read_measurements`
  reads and its fits (``fit_gemm``) accept.

Timings are the mean of ``--iters`` runs after ``--warmup`` runs between CUDA events.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from clustersim.hardware.gpus import GPUS
from clustersim.workload.attention import FLASH_BACKWARD_FACTOR, flash_forward_flops
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.ops import LayerOp
from clustersim.workload.transformer_ops import layer_ops

#: the configurations profiled by default: Korthikanti's 22B layer (TP 8, b 4), an 8B
#: model on one GPU and a 70B model's TP-8 shard (preset:micro_batch:tp)
DEFAULT_CONFIGS = ("gpt-22b:4:8", "llama3-8b:1:1", "llama2-70b:1:8")
PROFILE_COLUMNS = ("op", "phase", "m", "n", "k", "time_us", "gpu", "device", "source")
KERNEL_COLUMNS = (
    "gpu",
    "kernel",
    "impl",
    "dtype",
    "m",
    "n",
    "k",
    "head_dim",
    "seq_len",
    "causal",
    "value",
    "unit",
    "role",
    "source",
    "verification",
    "note",
)
STREAM_ELEMENTS = 2**28  # fp32: 1 GiB per array, far beyond any L2
ATTENTION_DROPOUT = 0.1
#: driver device name fragment → GPU catalog name (``--gpu`` overrides)
DEVICE_NAMES = (
    ("A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("A100", "A100-SXM4-80GB"),
    ("H100", "H100-SXM5-80GB"),
    ("H200", "H200-SXM-141GB"),
    ("H800", "H800-SXM5-80GB"),
    ("GB200", "GB200-186GB"),
    ("B200", "B200-SXM-180GB"),
    ("MI300X", "MI300X-192GB"),
)


class NoGPU(RuntimeError):
    """No usable GPU (or no PyTorch) on this machine."""


class Timer(Protocol):
    """Seconds per kernel; ``device`` and ``software`` describe what ran them."""

    device: str
    software: str

    def matmul(self, batch: int, m: int, n: int, k: int) -> float: ...

    def flash(
        self, b: int, heads: int, kv_heads: int, s: int, d: int, causal: bool, backward: bool
    ) -> float: ...

    def elementwise(self, kind: str, shape: tuple[int, ...], backward: bool) -> float: ...

    def stream(self, kind: str, elements: int) -> float: ...


def parse_config(text: str) -> tuple[str, int, int]:
    """``preset:micro_batch:tp`` → (preset, b, tp); ValueError naming what is accepted."""
    try:
        preset, b, tp = text.split(":")
        b, tp = int(b), int(tp)
    except ValueError:
        raise ValueError(f"--config {text!r}: expected preset:micro_batch:tp, e.g. gpt-22b:4:8") from None
    if preset not in TRANSFORMER_PRESETS or b < 1 or tp < 1:
        raise ValueError(f"--config {text!r}: preset one of {', '.join(TRANSFORMER_PRESETS)}; b, tp ≥ 1")
    return preset, b, tp


def profile_ops(timer: Timer, preset: str, b: int, tp: int, attention: str) -> list[dict]:
    """One timed row per (op, phase) of the layer the cost model builds for this
    configuration: GEMMs at their shape, the attention core's kernels without one."""
    cfg = replace(TRANSFORMER_PRESETS[preset][0], attention=attention)
    heads, kv_heads = cfg.heads // tp, max(1, cfg.n_kv // tp)
    scores = (b * heads, cfg.seq_len, cfg.seq_len)
    rows = []
    for op in layer_ops(cfg, b, tp, False, 2):
        if not isinstance(op, LayerOp):
            continue  # a TP collective point
        for phase, work in (("F", op.fwd), ("B", op.bwd_input), ("W", op.bwd_weight)):
            back = phase != "F"
            if work.gemm is not None:
                m, n, k = work.gemm
                t = timer.matmul(round(work.flops / (2.0 * m * n * k)), m, n, k)
            elif work.attention is not None:
                t = timer.flash(b, heads, kv_heads, cfg.seq_len, cfg.head_dim, cfg.causal, back)
                m = n = k = ""
            elif op.name in ("softmax", "attn_dropout") and work.bytes:
                t = timer.elementwise(op.name, scores, back)
                m = n = k = ""
            else:
                continue
            rows.append({"op": op.name, "phase": phase, "m": m, "n": n, "k": k, "time_us": t * 1e6})
    return rows


def kernel_rows(timer: Timer, gpu: str, configs: list[tuple[str, int, int]], source: str) -> list[dict]:
    """The timings as gpu_kernel_measurements.csv rows: each distinct unbatched GEMM
    shape, flash attention forward/backward per configuration, STREAM copy and triad."""
    base = {c: "" for c in KERNEL_COLUMNS} | {"gpu": gpu, "source": source, "verification": "MEASURED"}
    out, seen = [], set()
    for preset, b, tp in configs:
        cfg = replace(TRANSFORMER_PRESETS[preset][0], attention="flash")
        for op in layer_ops(cfg, b, tp, False, 2):
            for work in (op.fwd, op.bwd_input, op.bwd_weight) if isinstance(op, LayerOp) else ():
                if work.gemm is None or work.gemm in seen or work.flops != 2.0 * math.prod(work.gemm):
                    continue
                seen.add(work.gemm)
                m, n, k = work.gemm
                tflops = work.flops / timer.matmul(1, m, n, k) / 1e12
                out.append(base | _gemm_cells(m, n, k, tflops))
        heads, kv_heads = cfg.heads // tp, max(1, cfg.n_kv // tp)
        fwd = flash_forward_flops(b, cfg.seq_len, heads, cfg.head_dim, cfg.causal)
        for kernel, flops, back in (
            ("attention_fwd", fwd, False),
            ("attention_bwd", FLASH_BACKWARD_FACTOR * fwd, True),
        ):
            t = timer.flash(b, heads, kv_heads, cfg.seq_len, cfg.head_dim, cfg.causal, back)
            out.append(
                base
                | {
                    "kernel": kernel,
                    "impl": "fa2",  # SDPA's FLASH backend: FlashAttention-2 (an fa2 row)
                    "dtype": "bf16",
                    "head_dim": cfg.head_dim,
                    "seq_len": cfg.seq_len,
                    "causal": "true" if cfg.causal else "false",
                    "value": flops / t / 1e12,
                    "unit": "TFLOP/s",
                    "role": "check",
                    "note": f"{preset}, b {b}, {heads} heads per GPU (tp {tp}); FLOPs as FlashAttention counts them",
                }
            )
    for kind, arrays in (("copy", 2), ("triad", 3)):
        t = timer.stream(kind, STREAM_ELEMENTS)
        out.append(
            base
            | {
                "kernel": f"stream_{kind}",
                "impl": "torch (gpu_profile)",
                "value": arrays * 4 * STREAM_ELEMENTS / t / 1e12,
                "unit": "TB/s",
                "role": "calibrate",
                "note": f"fp32, {STREAM_ELEMENTS} elements; bytes counted as {arrays} arrays",
            }
        )
    return out


def _gemm_cells(m: int, n: int, k: int, tflops: float) -> dict:
    return {
        "kernel": "gemm",
        "impl": "torch.mm (gpu_profile)",
        "dtype": "bf16",
        "m": m,
        "n": n,
        "k": k,
        "value": tflops,
        "unit": "TFLOP/s",
        "role": "calibrate",
        "note": "a GEMM shape of the cost model's layer ops",
    }


def write_table(path: Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    """Write ``rows`` as CSV with ``columns`` (floats at full precision: ``repr``)."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({c: repr(v) if isinstance(v, float) else v for c, v in r.items()})


def catalog_name(device: str) -> str | None:
    """The GPU catalog name a driver device name stands for, or None when unknown."""
    return next((name for frag, name in DEVICE_NAMES if frag in device), None)


class TorchTimer:
    """CUDA-event timing with PyTorch on GPU 0 (bf16 kernels, fp32 STREAM arrays)."""

    def __init__(self, warmup: int, iters: int):
        try:
            import torch
        except ImportError:
            raise NoGPU("PyTorch is not installed") from None
        if not torch.cuda.is_available():
            raise NoGPU("PyTorch finds no CUDA/ROCm GPU (torch.cuda.is_available() is False)")
        self.torch, self.warmup, self.iters = torch, warmup, iters
        self.device = torch.cuda.get_device_name(0)
        self.software = f"torch {torch.__version__}, CUDA {torch.version.cuda or torch.version.hip}"

    def _seconds(self, fn) -> float:
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(self.iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / self.iters

    def _randn(self, *shape):
        return self.torch.randn(*shape, device="cuda", dtype=self.torch.bfloat16)

    def matmul(self, batch: int, m: int, n: int, k: int) -> float:
        torch = self.torch
        if batch == 1:
            a, b, c = self._randn(m, k), self._randn(k, n), self._randn(m, n)
            return self._seconds(lambda: torch.mm(a, b, out=c))
        a, b, c = self._randn(batch, m, k), self._randn(batch, k, n), self._randn(batch, m, n)
        return self._seconds(lambda: torch.bmm(a, b, out=c))

    def flash(self, b: int, heads: int, kv_heads: int, s: int, d: int, causal: bool, backward: bool) -> float:
        torch = self.torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        q = self._randn(b, heads, s, d).requires_grad_(backward)
        # grouped-query K/V repeated to the query heads: same FLOPs, a little more K/V read
        k, v = (self._randn(b, kv_heads, s, d).repeat_interleave(heads // kv_heads, 1) for _ in range(2))
        k.requires_grad_(backward)
        v.requires_grad_(backward)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            if not backward:
                return self._seconds(lambda: sdpa(q, k, v, is_causal=causal))
            o, g = sdpa(q, k, v, is_causal=causal), self._randn(b, heads, s, d)
            return self._seconds(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))

    def elementwise(self, kind: str, shape: tuple[int, ...], backward: bool) -> float:
        torch = self.torch
        x, g = self._randn(*shape), self._randn(*shape)
        if kind == "softmax":
            y = torch.softmax(x, -1)
            if backward:
                return self._seconds(lambda: torch.ops.aten._softmax_backward_data(g, y, -1, x.dtype))
            return self._seconds(lambda: torch.softmax(x, -1))
        if backward:  # the gradient through the kept elements, rescaled: one multiply
            keep = (torch.rand(shape, device="cuda") > ATTENTION_DROPOUT).to(x.dtype) / (
                1 - ATTENTION_DROPOUT
            )
            return self._seconds(lambda: torch.mul(g, keep, out=x))
        return self._seconds(lambda: torch.nn.functional.dropout(x, ATTENTION_DROPOUT, training=True))

    def stream(self, kind: str, elements: int) -> float:
        torch = self.torch
        a, b, c = (torch.rand(elements, device="cuda") for _ in range(3))
        if kind == "copy":
            return self._seconds(lambda: c.copy_(a))
        return self._seconds(lambda: torch.add(b, c, alpha=0.4, out=a))


class Memo:
    """A :class:`Timer` that runs each distinct kernel once (the profile and the kernel
    rows share shapes)."""

    def __init__(self, timer: Timer):
        self.timer, self.device, self.software, self.seen = timer, timer.device, timer.software, {}

    def __getattr__(self, name: str):
        method = getattr(self.timer, name)

        def timed(*args):
            if (name, *args) not in self.seen:
                self.seen[(name, *args)] = method(*args)
            return self.seen[(name, *args)]

        return timed


def run(
    timer: Timer, gpu: str, configs: list[tuple[str, int, int]], attentions: list[str], out: Path
) -> list[Path]:
    """Profile every configuration and attention kind with ``timer``; write the tables
    under ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    timer = Memo(timer)
    source = f"benchmarks/gpu_profile.py on {timer.device} ({timer.software})"
    written = []
    for preset, b, tp in configs:
        for attention in attentions:
            rows = [
                r | {"gpu": gpu, "device": timer.device, "source": source}
                for r in profile_ops(timer, preset, b, tp, attention)
            ]
            path = out / f"{preset}-b{b}-tp{tp}-{attention}.csv"
            write_table(path, PROFILE_COLUMNS, rows)
            written.append(path)
    path = out / "kernels.csv"
    write_table(path, KERNEL_COLUMNS, kernel_rows(timer, gpu, configs, source))
    return [*written, path]


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, profile the GPU, write the tables; 2 when there is no GPU."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--config", action="append", help=f"preset:micro_batch:tp (default {' '.join(DEFAULT_CONFIGS)})"
    )
    ap.add_argument("--attention", default="flash,standard", help="flash, standard or both (comma-separated)")
    ap.add_argument(
        "--gpu", choices=sorted(GPUS), help="catalog name of the GPU (default: from its device name)"
    )
    ap.add_argument(
        "--out", type=Path, default=Path("gpu_profile"), help="output folder (default gpu_profile/)"
    )
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args(argv)
    try:
        configs = [parse_config(c) for c in args.config or DEFAULT_CONFIGS]
        attentions = args.attention.split(",")
        if not set(attentions) <= {"flash", "standard"}:
            raise ValueError(f"--attention {args.attention!r}: flash, standard or flash,standard")
        timer = TorchTimer(args.warmup, args.iters)
    except ValueError as exc:
        ap.error(str(exc))
    except NoGPU as exc:
        print(
            f"gpu_profile: no GPU to profile: {exc}. Run it on a machine with a CUDA/ROCm GPU.",
            file=sys.stderr,
        )
        return 2
    gpu = args.gpu or catalog_name(timer.device)
    if gpu is None:
        print(f"gpu_profile: device {timer.device!r} is not in the catalog; pass --gpu NAME", file=sys.stderr)
        return 2
    for path in run(timer, gpu, configs, attentions, args.out):
        print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
