"""Every file clustersim writes goes through here: atomically, and never through a link.

A result bundle, trace, picture, sweep table or report is written to a temporary file
created next to its target (``O_EXCL | O_NOFOLLOW``: it cannot be a file planted there)
and renamed onto the target once complete, so a reader — or a run killed half-way —
never sees half a file. A target that is a symbolic link, or a name that is not a plain
file name (``..``, a path separator), is refused with :class:`OutputError`: a link
planted in an output folder cannot make clustersim write anywhere else. Append-only files
(a sweep's journal) are opened with :func:`open_append`, which refuses links the same way.

This is a leaf module (only :mod:`clustersim.errors` below it), so every layer can use it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .errors import OutputError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # (absent on Windows, which has no such links by default)


def target(path: str | Path) -> Path:
    """``path`` checked as a place to write: its folder is created, its name must be a
    plain file name and it must not be a symbolic link or a folder."""
    p = Path(path)
    if p.name in ("", ".."):
        raise OutputError(f"{path}: not a file name clustersim writes to")
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.is_symlink():
        raise OutputError(
            f"{p}: is a symbolic link; clustersim never writes through a link (remove it, or choose another folder)"
        )
    if p.exists() and not p.is_file():
        raise OutputError(f"{p}: exists and is not a regular file")
    return p


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path`` (same suffix, so writers that go by
    it — matplotlib, pandas — pick the right format); on success it replaces ``path``."""
    final = target(path)
    while True:
        tmp = final.with_name(f".{final.name}.{secrets.token_hex(4)}.tmp{final.suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666))
            break
        except FileExistsError:
            continue
    try:
        yield tmp
        if tmp.is_symlink():  # replaced while we wrote it: do not move a link into place
            raise OutputError(f"{tmp}: became a symbolic link while being written")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def remove(path: str | Path) -> None:
    """Delete ``path`` if it is there — a file clustersim names that this run does not
    write (a previous run's ``heatmap.png`` in a reused bundle folder). Checked as a write
    is (:func:`target`): a link or a folder at that name is refused, never removed."""
    target(path).unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


@contextlib.contextmanager
def open_atomic(path: str | Path, newline: str | None = None) -> Iterator[IO[str]]:
    """A text file to write that appears at ``path`` only once it is closed complete."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", newline=newline) as fh:
        yield fh


def open_append(path: str | Path, newline: str | None = None) -> IO[str]:
    """``path`` opened for appending text, refusing a symbolic link (created if absent)."""
    fd = os.open(target(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o666)
    return os.fdopen(fd, "a", encoding="utf-8", newline=newline)


def open_update(path: str | Path) -> IO[bytes]:
    """Existing file ``path`` opened to read and cut in place (binary), refusing a link."""
    return os.fdopen(os.open(target(path), os.O_RDWR | _NOFOLLOW), "r+b")
