"""Where a sweep's rows go as runs finish, and where a restarted sweep finds them.

Two files per output ``runs.csv`` (or ``runs.parquet``):

* ``runs.csv.journal.jsonl`` — the source of truth: one JSON line per finished run,
  appended and flushed as each run finishes, so a crash (or ``kill -9``) at run 900 keeps
  the first 899. JSON keeps every value's type, so resumed rows equal fresh ones. A torn
  last line (killed mid-write) is cut off when the journal is loaded — that run simply
  runs again, and the next row starts on a line of its own.
* the table itself — a CSV gets each row appended as it arrives (rewritten whole only when
  a row brings a new column); a Parquet file is rewritten at most every ``flush_s``
  seconds and at the end (Parquet cannot be appended to).

On restart, :meth:`RunStore.load` returns the finished rows keyed by run id; the sweep
skips those runs. A journal written for a different base scenario is refused rather than
silently mixed.
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import ScenarioError
from ..output import atomic_path, open_append, open_update


def _jsonable(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    return item() if callable(item) else str(value)


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    """A row as it reads back from the journal (JSON round trip), so fresh and resumed
    rows are identical."""
    return json.loads(json.dumps(row, default=_jsonable))


def frame(rows: Iterable[dict[str, Any]], columns: list[str] | None = None) -> pd.DataFrame:
    """A DataFrame of rows with a stable column order (first-seen order unless given)."""
    rows = list(rows)
    if columns is None:
        columns = []
        for row in rows:
            columns += [k for k in row if k not in columns]
    return pd.DataFrame.from_records(rows, columns=columns)


class RunStore:
    """Finished rows of one sweep, mirrored to a journal and a CSV/Parquet table."""

    def __init__(self, out: str | Path | None, base: str, flush_s: float = 2.0):
        self.out = Path(out) if out is not None else None
        self.base = base
        self.flush_s = flush_s
        self.rows: dict[str, dict[str, Any]] = {}
        self._columns: list[str] = []
        self._last_write = 0.0
        self._dirty = False
        if self.out is not None:
            suffix = self.out.suffix.lower()
            if suffix not in (".csv", ".parquet"):
                raise ScenarioError("out", str(out), "expected a file name ending in .csv or .parquet")
            self.parquet = suffix == ".parquet"
            self.journal = self.out.with_name(self.out.name + ".journal.jsonl")

    def load(self) -> dict[str, dict[str, Any]]:
        """Rows finished by an earlier (possibly killed) run of the same sweep, by run id."""
        if self.out is None:
            return {}
        if self.journal.exists():
            entries = self._read_journal()
        elif self.out.exists():
            entries = self._read_table()
        else:
            entries = []
        for row in entries:
            if row.get("base_id") not in (None, self.base):
                raise ScenarioError(
                    "out",
                    str(self.out),
                    f"holds runs of a different base scenario (base_id {row.get('base_id')} ≠ {self.base}); "
                    "choose another output file or delete this one and its .journal.jsonl",
                )
            self.rows[row["run_id"]] = row
        return dict(self.rows)

    def _read_journal(self) -> list[dict[str, Any]]:
        """The journal's complete lines; a torn last line is cut off the file, so the next
        append cannot be glued onto it (which would lose that row as well)."""
        with open_update(self.journal) as fh:
            data = fh.read()
            complete = data.rfind(b"\n") + 1
            if complete < len(data):  # killed mid-write
                fh.truncate(complete)
        entries = []
        for line in data[:complete].decode("utf-8", "replace").splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a damaged line: that run runs again
        return entries

    def _read_table(self) -> list[dict[str, Any]]:
        df = pd.read_parquet(self.out) if self.parquet else pd.read_csv(self.out)
        if "run_id" not in df.columns:
            raise ScenarioError("out", str(self.out), "exists but is not a sweep table (no run_id column)")
        return [normalize({k: v for k, v in rec.items() if not pd.isna(v)}) for rec in df.to_dict("records")]

    def add(self, row: dict[str, Any]) -> None:
        """Record one finished row: journal first (durable), then the table."""
        self.rows[row["run_id"]] = row
        if self.out is None:
            return
        with open_append(self.journal) as fh:
            fh.write(json.dumps(row, default=_jsonable) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if not self.parquet and self._columns and set(row) <= set(self._columns) and self.out.exists():
            with open_append(self.out, newline="") as fh:
                csv.DictWriter(fh, self._columns, restval="").writerow(row)
            return
        self._dirty = True
        if not self.parquet or time.monotonic() - self._last_write >= self.flush_s:
            self.write()

    def write(self, order: list[str] | None = None) -> None:
        """Rewrite the table from every row held (rows of ``order`` first, in that order)."""
        if self.out is None or not self.rows:
            return
        ids = [i for i in (order or []) if i in self.rows]
        ids += [i for i in self.rows if i not in set(ids)]
        df = frame(self.rows[i] for i in ids)
        save_table(df, self.out)
        self._columns = list(df.columns)
        self._last_write = time.monotonic()
        self._dirty = False


def save_table(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a table as Parquet (``.parquet``) or CSV (anything else), atomically. CSV
    uses nullable dtypes, so an int column with a failed run's blank stays ints."""
    out = Path(path)
    with atomic_path(out) as tmp:
        if out.suffix.lower() == ".parquet":
            _for_parquet(df).to_parquet(tmp, index=False)
        else:
            df.convert_dtypes().to_csv(tmp, index=False)
    return out


def _for_parquet(df: pd.DataFrame) -> pd.DataFrame:
    """Parquet needs one type per column: a column mixing e.g. 2 and 'auto' becomes text."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object:
            kinds = {type(v) for v in out[col] if v is not None and not (isinstance(v, float) and pd.isna(v))}
            if len(kinds) > 1:
                out[col] = out[col].map(lambda v: None if v is None else str(v))
    return out
