"""Executors a sweep runs on, all behind :class:`concurrent.futures.Executor`.

* ``"local"`` (default) — a :class:`~concurrent.futures.ProcessPoolExecutor` of
  ``workers`` processes (default: the machine's CPU count); ``workers=1`` runs every
  simulation in this process, in order (easy to debug, no pickling).
* ``"dask"`` — a Dask ``distributed`` cluster through ``Client.get_executor()``: pass
  ``scheduler="tcp://host:8786"`` for an existing cluster, a ``distributed.Client`` as
  ``executor``, or neither for a local Dask cluster of ``workers`` processes. Needs the
  optional extra: ``pip install 'clustersim[dask]'``.
* any ``concurrent.futures.Executor`` you built yourself.

Simulations are independent and deterministic, so the executor changes only how fast the
rows arrive, never what they hold.

Local workers never outlive the sweep: each starts in a process group of its own (a
Ctrl-C at the terminal reaches only the sweep, which then kills them rather than waiting
for their runs) and watches its parent, exiting within :data:`WATCH_S` seconds of it
dying — even by ``kill -9``, which gives the parent no chance to clean up.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor

from ..errors import ScenarioError

EXECUTOR_NAMES = ("local", "dask")
#: how often a local worker checks that the sweep that started it is still alive
WATCH_S = 0.2


def _worker_start(parent: int) -> None:
    """Initializer of a local worker: own process group, and exit once orphaned."""
    os.setpgid(0, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_S)
        os._exit(1)  # the sweep is gone; nobody will read this worker's rows

    threading.Thread(target=watch, name="clustersim-parent-watch", daemon=True).start()


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """Kill a pool's worker processes now (they are in their own process groups, so an
    interrupt of the sweep does not reach them). ``_processes`` is the pool's own table of
    them; ProcessPoolExecutor has no public way to stop a running call."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(ProcessLookupError, AttributeError):
            proc.kill()


class InProcessExecutor(Executor):
    """Runs each submitted call at once, in this process (``workers=1``).

    A ``KeyboardInterrupt`` (or any BaseException that is not an Exception) propagates
    from ``submit`` — Ctrl-C stops a sweep here exactly as it would a plain loop.
    """

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:
            fut.set_exception(exc)
        return fut


def _is_dask_client(obj) -> bool:
    return type(obj).__name__ == "Client" and type(obj).__module__.startswith("distributed")


@contextlib.contextmanager
def make_executor(
    executor="local", workers: int | None = None, scheduler: str | None = None, runs: int | None = None
) -> Iterator[Executor]:
    """A context manager yielding the Executor named by ``executor`` (see module doc).

    Executors this function creates are shut down on exit; ones passed in are left open.
    ``runs`` caps the local pool at the number of runs (no idle processes).
    """
    if isinstance(executor, Executor):
        yield executor
        return
    if _is_dask_client(executor):
        yield executor.get_executor(pure=False)
        return
    if executor == "local":
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ScenarioError("workers", workers, "expected a whole number ≥ 1 (or None for all CPUs)")
        n = workers or os.cpu_count() or 1
        if runs is not None:
            n = max(1, min(n, runs))
        if n == 1:
            yield InProcessExecutor()
            return
        pool = ProcessPoolExecutor(max_workers=n, initializer=_worker_start, initargs=(os.getpid(),))
        try:
            yield pool
        except BaseException:  # interrupted or failed: do not wait for the runs in flight
            _kill_workers(pool)
            # nor for the pool's threads: one may be writing to a pipe a killed worker no
            # longer reads (a ctrl-C then hung in shutdown(wait=True) in fresh-clone runs)
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True, cancel_futures=True)
        return
    if executor == "dask":
        with _dask_client(workers, scheduler) as client:
            yield client.get_executor(pure=False)
        return
    raise ScenarioError(
        "executor",
        executor,
        f"known executors: {', '.join(EXECUTOR_NAMES)}, a concurrent.futures.Executor "
        "or a dask.distributed.Client",
    )


@contextlib.contextmanager
def _dask_client(workers: int | None, scheduler: str | None):
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ScenarioError(
            "executor", "dask", "needs Dask distributed: pip install 'clustersim[dask]'"
        ) from None
    if scheduler:
        client = Client(scheduler)
        try:
            yield client
        finally:
            client.close()
        return
    n = workers or os.cpu_count() or 1
    with (
        LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        yield client
