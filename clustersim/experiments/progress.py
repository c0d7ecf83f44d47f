"""A progress display over a sweep's runs: tqdm when installed, else a line counter.

Silent unless stderr is a terminal (or ``enabled=True`` forces it), so logs and CI output
stay clean.
"""

from __future__ import annotations

import sys


class Progress:
    """Counts finished runs out of ``total``; use as a context manager."""

    def __init__(self, total: int, enabled: bool | None = None, desc: str = "runs"):
        self.total, self.done, self.desc = total, 0, desc
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar = None
        if self.enabled:
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(total=total, desc=desc, unit="run", file=sys.stderr)
            except ImportError:
                self._bar = None

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
        else:
            sys.stderr.write(f"\r{self.desc}: {self.done}/{self.total}")
            sys.stderr.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
        else:
            sys.stderr.write("\n")
