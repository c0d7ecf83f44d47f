"""Progress bars for long simulations and sweeps (tqdm), silent when nobody is watching.

``simulate(sc, progress=...)`` attaches a :class:`SimProgress` to the SimPy environment:
a side process that wakes every ``dt`` simulated seconds and moves a bar to the number
of ops finished so far (``Engine.finished_count()``). It never touches the engine's hot path;
``dt`` adapts so the bar costs a few hundred extra events per run, and the wake-ups never
reorder the engine's own events (SimPy orders same-time events by creation, and the
waker creates only its own). tqdm's ``delay`` keeps runs under half a second silent.

Shown when ``progress`` is True, or when it is ``"auto"`` (the default) and stderr is an
interactive terminal or the code runs in Jupyter; ``False`` (the CLI's ``--quiet``)
silences it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
DELAY_S = 0.5


def in_jupyter() -> bool:
    """True inside a Jupyter kernel (where stderr is not a TTY but a bar renders)."""
    shell = sys.modules.get("IPython")
    ip = getattr(shell, "get_ipython", lambda: None)() if shell else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def wanted(progress: bool | str) -> bool:
    """Resolve ``progress`` (True, False or ``"auto"``) to whether to show a bar."""
    if progress == "auto":
        return bool(getattr(sys.stderr, "isatty", lambda: False)()) or in_jupyter()
    return bool(progress)


def _tqdm():
    """tqdm's notebook bar in Jupyter when ipywidgets is there, else the text bar."""
    if in_jupyter():
        try:
            import ipywidgets  # noqa: F401
            from tqdm.notebook import tqdm

            return tqdm
        except ImportError:
            pass
    from tqdm import tqdm

    return tqdm


class SimProgress:
    """A bar of finished ops over ``total`` for one simulation; :meth:`attach` it to the
    environment before ``env.run()`` and :meth:`close` it after. ``events`` counts the
    SimPy events it added — its process's start and end and one timeout per wake-up
    (``simulate`` subtracts them from ``sim_events``)."""

    def __init__(self, total: int, desc: str = "simulating"):
        self.total, self.desc, self.wakes, self.bar = total, desc, 0, None

    @property
    def events(self) -> int:
        """SimPy events this bar scheduled (0 until attached)."""
        return self.wakes + 2 if self.bar is not None else 0

    def attach(self, env, finished: Callable[[], int]) -> None:
        """Show ``finished()`` (ops ended so far) as the simulation runs in ``env``."""
        self.bar = _tqdm()(
            total=self.total, desc=self.desc, unit="op", delay=DELAY_S, leave=False, dynamic_ncols=True
        )
        env.process(self._watch(env, finished))

    def _watch(self, env, finished: Callable[[], int]):
        dt, last_wall = 1e-6, time.perf_counter()
        while True:
            yield env.timeout(dt)
            self.wakes += 1
            n = finished()
            self.bar.set_postfix_str(f"t={env.now:.4g} s", refresh=False)
            self.bar.update(n - self.bar.n)  # respects tqdm's delay and refresh interval
            if n >= self.total or env.peek() == float("inf"):
                return  # finished, or nothing else is scheduled (let the engine report a stall)
            wall = time.perf_counter()
            dt = dt * 2 if wall - last_wall < 0.2 else max(dt / 2, 1e-9)
            last_wall = wall

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def iterate(
    items: Iterable[T], total: int | None = None, desc: str = "runs", progress: bool | str = "auto"
) -> Iterator[T]:
    """``items`` with a bar of completed runs (for sweeps); plain iteration when silent."""
    if not wanted(progress):
        yield from items
        return
    yield from _tqdm()(items, total=total, desc=desc, unit="run", delay=DELAY_S)
