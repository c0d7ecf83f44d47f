"""Progress of long simulations and sweeps: bars on a terminal, log lines elsewhere.

``simulate(sc, progress=...)`` attaches a :class:`SimProgress` to the SimPy environment:
a side process that wakes every ``dt`` simulated seconds and moves a bar to the number
of ops finished so far (``Engine.finished_count()``). It never touches the engine's hot path;
``dt`` adapts so the bar costs a few hundred extra events per run, and the wake-ups never
reorder the engine's own events (SimPy orders same-time events by creation, and the
waker creates only its own). tqdm's ``delay`` keeps runs under half a second silent.

Shown when ``progress`` is True, or when it is ``"auto"`` (the default) and stderr is an
interactive terminal or the code runs in Jupyter; ``False`` (the CLI's ``--quiet``)
silences it. ``"log"`` (what the CLI asks for when stderr is not a terminal — a pipe, a
CI log, a batch job) writes plain lines instead: the run's estimate before it starts, and
while a phase (compiling, running, saving) lasts, one line every :data:`LOG_EVERY_S`
seconds with how long it has taken and, while running, the ops finished — so no command
is silent for a minute (:class:`Reporter`).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO, TypeVar

T = TypeVar("T")
DELAY_S = 0.5
#: seconds between two log lines of a phase that is still going (``progress="log"``)
LOG_EVERY_S = 15.0
#: how often the reporter's thread looks at the clock
POLL_S = 1.0


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


def mode(progress: bool | str) -> str | None:
    """``"bar"``, ``"log"`` or None (silent) for a ``progress`` argument (see module doc)."""
    if progress == "log":
        return "log"
    return "bar" if wanted(progress) else None


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


class Reporter:
    """Says what a long command is doing: :meth:`note` writes a line now (the estimate);
    within :meth:`phase`, a line every ``interval`` seconds of ``clock`` while the phase
    lasts — ``clustersim: gpt3: running, 41% of 30 k ops (1 min 15 s)`` — written by a
    daemon thread that wakes every :data:`POLL_S` (``thread=False`` leaves the waking to
    the caller's :meth:`tick`, as tests with a fake clock do). With ``bar=True`` (a
    terminal) the running phase has its tqdm bar (:class:`SimProgress`) and the others
    rewrite one status line in place."""

    def __init__(
        self,
        name: str,
        stream: TextIO | None = None,
        interval: float = LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        thread: bool = True,
        bar: bool = False,
    ):
        self.name, self.stream, self.interval, self.clock = name, stream, interval, clock
        self.thread, self.bar = thread, bar
        self._phase: tuple[str, float, Callable[[], int] | None, int | None] | None = None
        self._last = 0.0

    def _write(self, text: str, end: str = "\n") -> None:
        stream = self.stream or sys.stderr
        stream.write(("\r\x1b[K" if self.bar else "") + f"clustersim: {self.name}: {text}{end}")
        stream.flush()

    def note(self, text: str) -> None:
        """Write one line now."""
        self._write(text)

    @contextlib.contextmanager
    def phase(self, what: str, done: Callable[[], int] | None = None, total: int | None = None):
        """Report ``what`` (``"compiling"``, ``"running"``, ``"saving"``) while the block runs;
        ``done() / total`` is its progress in ops, when known."""
        now = self.clock()
        self._phase, self._last = (what, now, done, total), now
        if self.bar and done is None:
            self._write(f"{what} …", end="")
        halt = every(POLL_S, self.tick) if self.thread else None
        try:
            yield self
        finally:
            if halt is not None:
                halt()
            self._phase = None
            if self.bar and done is None:
                (self.stream or sys.stderr).write("\r\x1b[K")  # clear the status line

    def tick(self) -> None:
        """Write the phase's line if ``interval`` has passed since the last one."""
        phase = self._phase
        if phase is None:
            return
        what, started, done, total = phase
        now = self.clock()
        if self.bar:
            if done is None:
                self._write(f"{what} … {elapsed_text(now - started)}", end="")
            return
        if now - self._last < self.interval:
            return
        self._last = now
        share = f", {done() / total:.0%} of {total:,} ops" if done is not None and total else ""
        self._write(f"{what}{share} ({elapsed_text(now - started)})")


def elapsed_text(s: float) -> str:
    """``42 s``, ``3 min 2 s``, ``1.5 h``."""
    return (
        f"{s:.0f} s" if s < 60 else f"{int(s // 60)} min {s % 60:.0f} s" if s < 3600 else f"{s / 3600:.1f} h"
    )


def every(period: float, fn: Callable[[], None]) -> Callable[[], None]:
    """Call ``fn`` every ``period`` seconds from a daemon thread; returns the stop function
    (which waits for the thread to end)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(period):
            fn()

    thread = threading.Thread(target=loop, name="clustersim-progress", daemon=True)
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join()

    return halt
