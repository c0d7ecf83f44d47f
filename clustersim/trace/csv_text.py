"""A DataFrame as the CSV text ``df.to_csv(path, index=False)`` writes, made a column at a time.

pandas formats a table's cells row by row through the ``csv`` module; a result bundle's
tables repeat few distinct values per column (device, lane and op names, a handful of
stages and byte counts, times shared by the spans that meet there), so here each
distinct value of a column is formatted once, by the rule pandas applies to its type,
and the rows are joined from the formatted columns: the quickstart's spans.csv (42,472
rows) in a quarter of pandas' time, the same bytes (tests/test_csv_text.py).

The rules pandas follows (``to_csv``'s defaults: no float format, missing values as the
empty string, minimal quoting, ``os.linesep`` between lines):

* floats (NumPy float dtypes): NumPy's ``astype(str)`` of the value, NaN empty;
* integers (NumPy or nullable) and booleans (NumPy or nullable): ``str`` of the value,
  a missing one empty;
* strings (pandas' string dtypes, or object columns holding only strings and missing
  values): the string, a missing one empty;
* every field then as the ``csv`` module quotes it in a row of several fields.

Any other column (dates, categories, nullable floats, objects of mixed types), a table of
one column (the ``csv`` module writes an empty single field as ``""``) or column labels
that are not strings: :func:`csv_text` returns None and the caller writes the table with
pandas.
"""

from __future__ import annotations

import csv
import io
import os

import numpy as np
import pandas as pd
from pandas.api import types


def csv_text(df: pd.DataFrame) -> str | None:
    """``df.to_csv(index=False)``'s text, or None where a column or label is of a kind
    this module leaves to pandas (see the module docstring)."""
    if len(df.columns) < 2 or not all(isinstance(c, str) for c in df.columns):
        return None
    cols = []
    for _, column in df.items():
        col = _column_text(column)
        if col is None:
            return None
        cols.append(col)
    lines = [",".join(_quoted(list(df.columns)))]
    lines += map(",".join, zip(*cols))
    return os.linesep.join(lines) + os.linesep


def _column_text(s: pd.Series) -> list[str] | None:
    """Each cell of ``s`` as its CSV field (None: a column kind left to pandas)."""
    dtype = s.dtype
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        # distinct by bit pattern: 0.0 and -0.0 are equal but written apart
        codes, bits = pd.factorize(np.ascontiguousarray(s.to_numpy()).view(f"i{dtype.itemsize}"))
        values = bits.view(dtype)
        texts = values.astype(str).astype(object)
        texts[np.isnan(values)] = ""
    elif types.is_bool_dtype(dtype) or types.is_integer_dtype(dtype):
        codes, uniq = pd.factorize(s, use_na_sentinel=True)
        texts = np.array([str(v) for v in uniq], dtype=object)
    elif isinstance(dtype, pd.StringDtype) or (
        types.is_object_dtype(dtype) and types.infer_dtype(s, skipna=True) in ("string", "empty")
    ):
        codes, uniq = pd.factorize(s, use_na_sentinel=True)
        texts = np.array(_quoted(list(uniq)), dtype=object)
    else:
        return None
    # a missing value's code is -1: the empty field appended last
    return np.append(texts, "")[codes].tolist()


def _quoted(fields: list[str]) -> list[str]:
    """Each string as the ``csv`` module writes it as one field of a row of several
    (quoted where it holds a comma, a quote or a line break, quotes doubled)."""
    buf = io.StringIO()
    row = csv.writer(buf, lineterminator=os.linesep).writerow
    out = []
    for f in fields:
        buf.seek(0)
        buf.truncate()
        row((f, ""))
        out.append(buf.getvalue()[: -1 - len(os.linesep)])
    return out
