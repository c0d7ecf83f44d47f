"""A bundle's CSV files are written a column at a time (trace/csv_text.py): the same bytes as
``df.to_csv(index=False)``, checked on real result tables, on awkward values and on random
tables; kinds left to pandas still go through pandas."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.trace.bundle import _write_csv
from clustersim.trace.csv_text import csv_text
from tests.conftest import synthetic


@pytest.fixture(scope="module")
def result():
    sc = synthetic(3, 5, 1e-3, 2e-3, latency=1e-5, activation=2**22, params=2**22, dp=2, network="packet")
    return cs.simulate(sc, progress=False)


@pytest.fixture(scope="module")
def runs():
    """A run with a job timeline (faults) and an inference run (requests)."""
    return [
        cs.simulate(cs.load_scenario(f"scenarios/{name}.yaml"), progress=False)
        for name in ("gpt-7.5b-32gpu-gpu-fail", "edgepipe-vit-large-4xT4-1GbE")
    ]


def test_result_tables_are_pandas_bytes(result, runs):
    faults, inference = runs
    tables = [result.spans, result.devices, result.waits, result.memory]
    tables += [faults.spans, faults.devices, faults.job]  # job: a nullable Int64 iteration, bools
    tables += [inference.requests]
    for df in tables:
        assert csv_text(df) == df.to_csv(index=False)


def test_awkward_values_are_pandas_bytes():
    nan, inf = float("nan"), float("inf")
    df = pd.DataFrame(
        {
            "name": ["plain", "a,comma", 'a "quote"', "line\nbreak", "cr\rhere", "", " lead", "é ☃", None],
            "f": [0.0, -0.0, nan, inf, -inf, 1e16, 1e-5, 0.1 + 0.2, 123456789.123],
            "f32": np.array([0.1, -0.0, nan, 1e20, 3.5, 7, 1e-8, 2.5e-45, 0.3], dtype=np.float32),
            "i": [0, -1, 2**62, 5, 5, 5, -(2**63), 7, 8],
            "u": np.array([0, 1, 2**64 - 1, 3, 4, 5, 6, 7, 8], dtype=np.uint64),
            "b": [True, False, True, True, False, False, True, True, False],
            "nullable": pd.array([1, None, 3, 4, None, 6, 7, 8, 9], dtype="Int64"),
            "nb": pd.array([True, None, False, True, None, False, True, True, False], dtype="boolean"),
            "obj": pd.Series(["x", None, "y,z", nan, "x", "x", "", "q", "r"], dtype=object),
        }
    )
    assert csv_text(df) == df.to_csv(index=False)
    assert csv_text(df.iloc[:0]) == df.iloc[:0].to_csv(index=False)


@pytest.mark.parametrize(
    "df",
    [
        pd.DataFrame({"only": ["", "a"]}),  # one column: csv writes an empty field as ""
        pd.DataFrame({"t": pd.to_datetime(["2026-01-01", None]), "x": [1, 2]}),
        pd.DataFrame({"c": pd.Categorical(["a", "b"]), "x": [1, 2]}),
        pd.DataFrame({"f": pd.array([1.5, None], dtype="Float64"), "x": [1, 2]}),
        pd.DataFrame({"mixed": pd.Series([1, "a"], dtype=object), "x": [1, 2]}),
        pd.DataFrame({0: [1, 2], 1: [3, 4]}),  # labels that are not strings
    ],
)
def test_other_kinds_are_left_to_pandas(df, tmp_path):
    assert csv_text(df) is None
    _write_csv(df, tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_bytes() == df.to_csv(index=False).encode()


def test_written_file_is_to_csv_bytes(result, tmp_path):
    _write_csv(result.spans, tmp_path / "spans.csv")
    result.spans.to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "spans.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(allow_nan=True, allow_infinity=True),
            st.floats(width=32),
            st.integers(-(2**63), 2**63 - 1),
            st.text(max_size=6),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_random_tables_are_pandas_bytes(rows):
    df = pd.DataFrame(rows, columns=["f", "f32", "i", "s"]).astype({"f32": np.float32})
    assert csv_text(df) == df.to_csv(index=False)
