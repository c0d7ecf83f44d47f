"""The GPU catalog's one source: ``clustersim/data/gpu_datasheets.csv``, one row per GPU.

Each row holds a GPU's published numbers — dense 16-bit and FP8 tensor peaks, memory as
marketed and as the driver reports it, HBM bandwidth, the scale-up link (NVLink /
Infinity Fabric) per direction, the SM (CU) count — with the source of each. Everything
that needs a GPU's numbers reads them here: :mod:`.gpus` (the catalog the simulator runs
on), :mod:`.interference` (SM counts) and the cost model's calibration. Adding a GPU is
adding a row; one without kernel measurements of its own is priced with the efficiencies
of the nearest calibrated GPU (:func:`clustersim.workload.calibration.calibrated_as`).

``CLUSTERSIM_GPU_DATASHEETS`` names another table in the same columns (read at import),
e.g. the shipped one with a site's own rows added.

Memory: vendors' "80 GB" is the HBM's binary capacity — nvidia-smi shows 81920 MiB
(A100) and 81559 MiB (H100, after the driver's reservation). ``memory_usable_bytes`` is
that driver-reported total, the figure the memory ledger compares against (what a
framework's allocator can hand out, less its CUDA context). Numbers are parsed as the
decimals they are written as (``0.9`` TB/s is exactly ``900e9`` bytes/s).
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache
from pathlib import Path

from ..errors import ScenarioError

SHIPPED_CSV = Path(__file__).resolve().parent.parent / "data" / "gpu_datasheets.csv"
#: the table read: the shipped one unless ``CLUSTERSIM_GPU_DATASHEETS`` names another
DATASHEETS_CSV = Path(os.environ.get("CLUSTERSIM_GPU_DATASHEETS") or SHIPPED_CSV)


@dataclass(frozen=True)
class Datasheet:
    """One GPU's published numbers. Units: FLOP/s, bytes, bytes/s; ``fp8_flops`` is 0
    where the GPU has no FP8 tensor cores, ``memory_usable_bytes`` 0 where unrecorded;
    ``sms``: streaming multiprocessors (AMD: compute units)."""

    gpu: str
    dense16_flops: float
    fp8_flops: float
    memory_marketed_bytes: int
    memory_usable_bytes: int
    hbm_bandwidth: float
    scale_up: str
    scale_up_bandwidth: float
    sms: int
    sms_source: str
    spec_source: str
    memory_source: str
    verification: str

    @property
    def memory_bytes(self) -> int:
        """The memory the ledger holds: the driver-reported total where recorded, else the
        marketed decimal figure."""
        return self.memory_usable_bytes or self.memory_marketed_bytes


#: numeric column → (Datasheet field, unit scale to base units, type, whether required)
_NUMBERS = {
    "bf16_fp16_dense_tflops": ("dense16_flops", "1e12", float, True),
    "fp8_dense_tflops": ("fp8_flops", "1e12", float, False),
    "memory_marketed_GB": ("memory_marketed_bytes", "1e9", int, True),
    "memory_usable_bytes": ("memory_usable_bytes", "1", int, False),
    "hbm_TBps": ("hbm_bandwidth", "1e12", float, True),
    "scale_up_GBps_per_dir": ("scale_up_bandwidth", "1e9", float, True),
    "sms": ("sms", "1", int, True),
}
#: text column → Datasheet field
_TEXTS = {
    "gpu": "gpu",
    "scale_up": "scale_up",
    "sms_source": "sms_source",
    "spec_source": "spec_source",
    "memory_usable_source": "memory_source",
    "verification": "verification",
}


def _number(path: Path, row: dict[str, str], column: str) -> float | int:
    """The cell ``column`` of ``row`` in base units, parsed as the decimal it is written
    as (0 where optional and blank); a ScenarioError naming the table, row and column."""
    _, scale, kind, required = _NUMBERS[column]
    text = (row.get(column) or "").strip()
    if not text and not required:
        return kind(0)
    try:
        value = Decimal(text) * Decimal(scale)
    except InvalidOperation:
        value = Decimal(-1)
    whole = kind is not int or (value.is_finite() and value == value.to_integral_value())
    if not value.is_finite() or value < 0 or (required and value == 0) or not whole:
        need = "a whole number" if kind is int else "a number"
        need += " > 0" if required else " ≥ 0, or blank"
        raise ScenarioError(f"{path.name} row {row.get('gpu')!r}, column {column}", text, f"expected {need}")
    return kind(value)


def _sheet(path: Path, row: dict[str, str]) -> Datasheet:
    missing = [c for c in (*_NUMBERS, *_TEXTS) if c not in row]
    if missing:
        raise ScenarioError(f"{path.name} columns", sorted(row), f"missing {', '.join(missing)}")
    numbers = {field: _number(path, row, column) for column, (field, *_) in _NUMBERS.items()}
    return Datasheet(**numbers, **{field: row[column] for column, field in _TEXTS.items()})


def read_datasheets(path: str | Path) -> dict[str, Datasheet]:
    """GPU name → its row, in table order, of a CSV in ``gpu_datasheets.csv``'s columns."""
    path = Path(path)
    with path.open(newline="") as fh:
        sheets = [_sheet(path, row) for row in csv.DictReader(fh)]
    names = [s.gpu for s in sheets]
    for name in names:
        if not name or names.count(name) > 1:
            raise ScenarioError(f"{path.name} column gpu", name, "expected a non-empty name, once per table")
    return {s.gpu: s for s in sheets}


@cache
def datasheets() -> dict[str, Datasheet]:
    """Catalog GPU name → its datasheet row, in table order (read once)."""
    return read_datasheets(DATASHEETS_CSV)


def datasheet(gpu: str) -> Datasheet:
    """The datasheet of ``gpu``; a ScenarioError on ``cluster.gpu`` listing known names."""
    sheets = datasheets()
    if gpu not in sheets:
        raise ScenarioError("cluster.gpu", gpu, f"GPUs with a datasheet: {', '.join(sorted(sheets))}")
    return sheets[gpu]
