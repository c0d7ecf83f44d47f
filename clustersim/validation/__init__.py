"""Validation against published measurements: Megatron-LM 2021 Table 1 (end-to-end
TFLOP/s), Korthikanti et al. 2022 Table 4 (one layer's times) and Figures 1/7 (memory).
Kernel- and collective-level tables (:mod:`.kernels`, :mod:`.collectives`) complete the report;
``clustersim validate`` runs them and writes ``docs/validation.md``."""

from .korthikanti import layer_times, memory_check
from .megatron import MICRO_BATCH_RULE, megatron_rows, megatron_scenario, run_rows

__all__ = [
    "MICRO_BATCH_RULE",
    "layer_times",
    "megatron_rows",
    "megatron_scenario",
    "memory_check",
    "run_rows",
]
