"""Write tests/data/kineto_sample.json: a tiny PyTorch profiler (Kineto) trace, made by hand.

It has the structure ``torch.profiler``'s ``export_chrome_trace`` writes — ``cpu_op``
events with ``Input Dims`` / ``Input type`` / ``External id``, ``cuda_runtime`` launches
and ``kernel`` events linked by ``correlation`` — for one layer of the small transformer
tests/test_kineto.py uses (hidden 256, 4 heads, seq 128, micro-batch 2, bf16), with kernel
times chosen here (µs), so the tests know every expected number:

* qkv ``aten::addmm`` (256×768×256) inside ``aten::linear``, twice: 9 and 11 µs;
* attention scores ``aten::bmm`` (8 × 128×128×64): 4 µs;
* ``aten::_softmax`` (not a GEMM): 3 µs;
* attn_out ``aten::addmm`` (256×256×256): 5 µs;
* mlp_up ``aten::addmm`` (256×1024×256): two kernels, 10 + 2 µs;
* a backward ``aten::mm`` (256×1024×256) whose launch carries no External id (charged to the
  op whose span holds it): 11 µs;
* a kernel whose correlation no launch has, a memcpy and a python_function: not charged.

Run ``python tests/data/make_kineto_sample.py`` to rewrite it.
"""

from __future__ import annotations

import json
from pathlib import Path

BF16 = "c10::BFloat16"
OUT = Path(__file__).with_name("kineto_sample.json")


def build() -> dict:
    events, clock, ids = [], [100.0], iter(range(1, 1000))

    def op(name, dims, kernels, parent=None, external=True, tid=1):
        """A cpu_op (in ``parent``'s span when given) launching ``kernels`` (name, µs)."""
        ext = next(ids)
        start = clock[0]
        body = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": tid, "ts": start}
        body["args"] = {"External id": ext, "Input Dims": dims, "Input type": [BF16] * len(dims)}
        events.append(body)
        for kname, us in kernels:
            corr = next(ids)
            launch = {"correlation": corr, **({"External id": ext} if external else {})}
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 7,
                    "tid": tid,
                    "ts": clock[0] + 1,
                    "dur": 4,
                    "args": launch,
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": kname,
                    "pid": 0,
                    "tid": 7,
                    "ts": clock[0] + 20,
                    "dur": us,
                    "args": {
                        "correlation": corr,
                        "External id": ext if external else 0,
                        "device": 0,
                        "stream": 7,
                    },
                }
            )
            clock[0] += 10
        clock[0] += 5
        body["dur"] = clock[0] - start
        return body

    gemm = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"
    for us in (9.0, 11.0):
        outer = {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 7, "tid": 1, "ts": clock[0] - 1}
        outer["args"] = {"External id": next(ids), "Input Dims": [[2, 128, 256], [768, 256], [768]]}
        events.append(outer)
        op("aten::addmm", [[768], [256, 256], [256, 768]], [(gemm, us)])
        outer["dur"] = clock[0] - outer["ts"] + 1
    op("aten::bmm", [[8, 128, 64], [8, 64, 128]], [("ampere_bf16_s16816gemm_bf16_64x64_nn", 4.0)])
    op("aten::_softmax", [[2, 4, 128, 128], [], []], [("softmax_warp_forward", 3.0)])
    op("aten::addmm", [[256], [256, 256], [256, 256]], [(gemm, 5.0)])
    op("aten::addmm", [[1024], [256, 256], [256, 1024]], [(gemm, 10.0), ("splitKreduce_kernel", 2.0)])
    op("aten::mm", [[256, 256], [256, 1024]], [(gemm, 11.0)], external=False, tid=2)
    events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "orphan_kernel",
            "pid": 0,
            "tid": 7,
            "ts": 900,
            "dur": 50,
            "args": {"correlation": 999},
        }
    )
    events.append(
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD",
            "pid": 0,
            "tid": 8,
            "ts": 950,
            "dur": 7,
            "args": {"correlation": 998},
        }
    )
    events.append(
        {
            "ph": "X",
            "cat": "python_function",
            "name": "torch/nn/modules/module.py(1527): _call_impl",
            "pid": 7,
            "tid": 1,
            "ts": 90,
            "dur": 900,
        }
    )
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85899345920}],
        "traceEvents": events,
    }


if __name__ == "__main__":
    OUT.write_text(json.dumps(build(), indent=1) + "\n")
    print(f"wrote {OUT}")
