"""The published tables shipped as package data (``clustersim/data/*.csv``), each row with
its ``source`` and ``verification`` columns (copied from the project's reference data)."""

from __future__ import annotations

import csv
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"


def read_table(name: str) -> list[dict[str, str]]:
    """Rows of ``clustersim/data/<name>.csv`` as dicts of strings."""
    with (DATA / f"{name}.csv").open() as fh:
        return list(csv.DictReader(fh))
