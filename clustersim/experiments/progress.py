"""A progress display over a sweep's runs: a tqdm bar on a terminal, log lines elsewhere.

``enabled``: None — a bar when stderr is a terminal, else silent; True — a bar (a line
counter without tqdm); ``"log"`` — a line every :data:`~clustersim.progress.LOG_EVERY_S`
seconds (what the CLI asks for off a terminal, so a long search is never silent);
False — nothing. Runs a resumed sweep finds already done are counted as the start
(``done``), not as work of this session, so the rate and the ETA are this session's:
``plans: 120/1656 (7%), 3 min 2 s, ETA 39 min`` — they survive a resume.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from ..progress import LOG_EVERY_S, POLL_S, elapsed_text, every


class Progress:
    """Counts finished runs out of ``total`` (``done`` of them finished before this
    session); use as a context manager. ``clock``, ``stream`` and ``thread=False`` (no
    thread calling :meth:`tick`) are for tests."""

    def __init__(
        self,
        total: int,
        enabled: bool | str | None = None,
        desc: str = "runs",
        done: int = 0,
        clock: Callable[[], float] = time.monotonic,
        stream: TextIO | None = None,
        thread: bool = True,
    ):
        self.total, self.done, self.desc, self.start_done = total, done, desc, done
        self.clock, self.stream, self.thread = clock, stream, thread
        self.log = enabled == "log"
        self.enabled = sys.stderr.isatty() if enabled is None else bool(enabled) and not self.log
        self.started = self._last = clock()
        self._bar, self._halt = None, None
        if self.enabled:
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(total=total, initial=done, desc=desc, unit="run", file=sys.stderr)
            except ImportError:
                self._bar = None

    def _out(self) -> TextIO:
        return self.stream or sys.stderr

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.log:
            self.tick()
        elif self._bar is not None:
            self._bar.update(n)
        elif self.enabled:
            self._out().write(f"\r{self.desc}: {self.done}/{self.total}")
            self._out().flush()

    def eta_s(self) -> float | None:
        """Seconds left at this session's rate (None before its first finished run)."""
        ran, elapsed = self.done - self.start_done, self.clock() - self.started
        if ran <= 0 or elapsed <= 0:
            return None
        return (self.total - self.done) * elapsed / ran

    def line(self) -> str:
        """``plans: 120/1656 (7%), 3 min 2 s, ETA 39 min``."""
        eta = self.eta_s()
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        return (
            f"{self.desc}: {self.done}/{self.total}{share}, {elapsed_text(self.clock() - self.started)}"
            + ("" if eta is None else f", ETA {elapsed_text(eta)}")
        )

    def tick(self) -> None:
        """In log mode, write :meth:`line` when :data:`LOG_EVERY_S` have passed since the last."""
        now = self.clock()
        if self.log and now - self._last >= LOG_EVERY_S:
            self._last = now
            self._out().write(f"clustersim: {self.line()}\n")
            self._out().flush()

    def __enter__(self) -> Progress:
        if self.log:
            self._out().write(f"clustersim: {self.line()}\n")
            self._halt = every(POLL_S, self.tick) if self.thread else None
        return self

    def __exit__(self, *exc) -> None:
        if self._halt is not None:
            self._halt()
        if self.log:
            self._out().write(f"clustersim: {self.line()}\n")
        elif self._bar is not None:
            self._bar.close()
        elif self.enabled:
            self._out().write("\n")
