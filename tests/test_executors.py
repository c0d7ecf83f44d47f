"""Executors: the same sweep gives identical rows in-process, on a process pool and on
Dask; bad executor names are clear errors."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

import clustersim as cs
from clustersim.experiments import InProcessExecutor, make_executor, sweep
from tests.conftest import synthetic

GRID = {"parallel.pp": [1, 2, 4], "parallel.schedule": ["1f1b", "gpipe"]}
ZIP = {"training.global_batch": [8, 16]}


def base() -> dict:
    sc = synthetic(p=4, m=8, activation=2**20, params=2**24, network="packet")
    sc["parallel"]["dp"] = "auto"
    return sc


@pytest.fixture(scope="module")
def in_process() -> pd.DataFrame:
    return sweep(base(), GRID, ZIP, workers=1)


def test_one_and_two_local_workers_give_identical_rows(in_process):
    assert len(in_process) == 12 and (in_process["status"] == "ok").all()
    pd.testing.assert_frame_equal(sweep(base(), GRID, ZIP, workers=2), in_process)


def test_any_concurrent_futures_executor_works(in_process):
    with ThreadPoolExecutor(2) as ex:
        pd.testing.assert_frame_equal(sweep(base(), GRID, ZIP, executor=ex), in_process)


def test_dask_client_gives_identical_rows(in_process):
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        pd.testing.assert_frame_equal(sweep(base(), GRID, ZIP, executor=client), in_process)
        # the --scheduler route: connect to a running cluster by address
        by_address = sweep(base(), GRID, ZIP, executor="dask", scheduler=cluster.scheduler_address)
        pd.testing.assert_frame_equal(by_address, in_process)


def test_workers_one_runs_in_process():
    with make_executor("local", workers=1) as ex:
        assert isinstance(ex, InProcessExecutor)
        assert ex.submit(pow, 2, 10).result() == 1024
        assert isinstance(ex.submit(int, "x").exception(), ValueError)


@pytest.mark.parametrize("executor, workers, field", [("spark", None, "executor"), ("local", 0, "workers")])
def test_bad_executor_settings_are_scenario_errors(executor, workers, field):
    with pytest.raises(cs.ScenarioError, match=f"^{field}: "):
        sweep(base(), {"parallel.pp": [1]}, executor=executor, workers=workers)
