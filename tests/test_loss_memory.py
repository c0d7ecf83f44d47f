"""The loss's working set (:mod:`clustersim.workload.loss_memory`): against kernel-level
peak-memory measurements, and held by the last pipeline stage as its closed form."""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.resolve import resolve
from clustersim.validation.data import read_table
from clustersim.workload.kernel_impls import IMPLS
from clustersim.workload.loss_memory import held_per_logit

MIB = 2**20
ELEMENT = {"bf16": 2, "fp32": 4}


@pytest.mark.parametrize(
    "row", read_table("loss_memory_measurements"), ids=lambda r: f"{r['impl']}-{r['vocab']}"
)
def test_the_loss_holds_what_the_benchmarks_measured(row):
    # max_memory_allocated of one forward + backward of the loss over N × V logits: the
    # implementation's own peak per element plus what the benchmark holds around it (its
    # logits leaf; Liger 0.2.1 also kept the previous repetition's .grad), within the
    # targets and the scalar loss (under 1 MiB)
    n, v = int(row["tokens"]), int(row["vocab"])
    per_element = held_per_logit(IMPLS["cross_entropy"][row["impl"]], ELEMENT[row["logits_dtype"]]) + float(
        row["benchmark_held_bytes_per_element"]
    )
    assert per_element * n * v / MIB == pytest.approx(float(row["memory_mib"]), abs=1.0)


def _llama(framework: str, tp: int, pp: int, recompute: str = "none") -> cs.Scenario:
    return cs.load_scenario(
        {
            "name": "loss-working-set",
            "cluster": {"preset": "dgx_h100", "nodes": 1},
            "model": {"hf_config": "llama-3-8b", "seq_len": 4096},
            "training": {
                "framework": framework,
                "global_batch": 16,
                "micro_batch": 2,
                "precision": "bf16",
                "recompute": recompute,
            },
            "parallel": {"tp": tp, "pp": pp, "dp": 8 // (tp * pp)},
            "simulation": {"network": "analytical"},
        }
    )


@pytest.mark.parametrize(
    "framework, tp, pp, per_logit",
    [
        # Megatron's vocab-parallel loss: bf16 logits + their fp32 copy, then the fp32
        # gradient + its bf16 cast: 6 bytes a logit, of which the kept fp32 softmax is 4
        ("megatron_core", 2, 2, 2),
        # F.cross_entropy(pred.float()) in log_softmax_backward: three fp32 tensors, 12 - 4
        ("fsdp2", 1, 1, 8),
    ],
)
def test_the_last_stage_holds_the_loss_working_set(framework, tp, pp, per_logit):
    # no recompute working set and no send buffer on the last chunk: its buffers are the
    # loss's, (held - 4) bytes over the b·s·V/tp local logits
    last = resolve(_llama(framework, tp, pp)).chunk_costs[-1]
    assert last.static.buffers == int(per_logit * 2 * 4096 * 128256 / tp)


def test_the_last_stage_holds_the_larger_of_the_loss_and_the_recompute_working_sets():
    # full recompute re-creates one layer's activations after the loss's tensors are gone:
    # the last chunk holds the larger of the two, not their sum. The first chunk's buffers
    # are that working set and its send + recv buffers (b·s·h/tp bf16 each)
    first, last = resolve(_llama("megatron_core", 2, 2, "full")).chunk_costs
    work = first.static.buffers - 2 * (2 * 4096 * 4096 * 2 // 2)
    loss = int(2 * 2 * 4096 * 128256 / 2)
    assert min(work, loss) > 0 and last.static.buffers == max(work, loss)
