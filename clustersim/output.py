"""Every file clustersim writes goes through here: atomically, and never through a link.

A result bundle, trace, picture, sweep table or report is written to a temporary file
created next to its target (``O_EXCL | O_NOFOLLOW``: it cannot be a file planted there)
and renamed onto the target once complete, so a reader — or a run killed half-way —
never sees half a file. A target that is a symbolic link, or a name that is not a plain
file name (``..``, a path separator), is refused with :class:`OutputError`: a link
planted in an output folder cannot make clustersim write anywhere else. Append-only files
(a sweep's journal) are opened with :func:`open_append`, which refuses links the same way.

A folder the user names (:func:`folder`) may be reached through links in its own path, but
may not itself be a link, and nothing below it is opened through one. Files that belong
together (a result bundle) are written through one :class:`Staging`: each under a
temporary name, all renamed into place once every one is complete, so a failure — a full
disk — leaves the folder's earlier files as they were and no temporary file behind. An
operating-system error names the path it hit.

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


def folder(path: str | Path) -> Path:
    """The output folder ``path`` the user named, created: its own path may pass through
    links, but it may not be one (a link planted where a folder is expected would carry
    every file below it elsewhere)."""
    p = Path(path)
    if p.is_symlink():
        raise OutputError(
            f"{p}: is a symbolic link; clustersim never writes through a link (remove it, or choose another folder)"
        )
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _named(p, exc) from None
    if p.is_symlink() or not p.is_dir():
        raise OutputError(f"{p}: exists and is not a folder")
    return p


class Staging:
    """Files written under temporary names beside their targets (:meth:`path`) and renamed
    into place together by :meth:`commit`, after ``removals`` are removed (:func:`remove`);
    :meth:`discard` removes the temporary files. Use through :func:`staged`."""

    def __init__(self):
        self._moves: list[tuple[Path, Path]] = []
        self.removals: list[Path] = []

    @contextlib.contextmanager
    def path(self, path: str | Path) -> Iterator[Path]:
        """Yield a fresh temporary path beside ``path`` (same suffix, so writers that go by
        it — matplotlib, pandas — pick the right format), to be renamed onto ``path``."""
        final = target(path)
        while True:
            tmp = final.with_name(f".{final.name}.{secrets.token_hex(4)}.tmp{final.suffix}")
            try:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666))
                break
            except FileExistsError:
                continue
            except OSError as exc:
                raise _named(final, exc) from None
        self._moves.append((tmp, final))
        try:
            yield tmp
        except OSError as exc:
            raise _named(final, exc) from None

    def commit(self) -> None:
        """Remove :attr:`removals`, then move every complete file into place."""
        for path in self.removals:
            remove(path)
        for tmp, final in self._moves:
            if tmp.is_symlink():  # replaced while we wrote it: do not move a link into place
                raise OutputError(f"{tmp}: became a symbolic link while being written")
            try:
                os.replace(tmp, final)
            except OSError as exc:
                raise _named(final, exc) from None
        self._moves.clear()

    def discard(self) -> None:
        """Remove the temporary files not moved into place."""
        for tmp, _ in self._moves:
            tmp.unlink(missing_ok=True)
        self._moves.clear()


@contextlib.contextmanager
def staged() -> Iterator[Staging]:
    """A :class:`Staging` committed when the block ends, discarded when it raises."""
    stage = Staging()
    try:
        yield stage
        stage.commit()
    finally:
        stage.discard()


@contextlib.contextmanager
def atomic_path(path: str | Path, stage: Staging | None = None) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path`` that replaces ``path`` once the block
    ends — or, with ``stage``, when ``stage`` commits."""
    if stage is not None:
        with stage.path(path) as tmp:
            yield tmp
        return
    with staged() as own, own.path(path) as tmp:
        yield tmp


def _named(path: Path, exc: OSError) -> OutputError:
    """An operating-system error as one that names the path (a full disk says where)."""
    return OutputError(f"{path}: {exc.strerror or exc}")


def remove(path: str | Path) -> None:
    """Delete ``path`` if it is there — a file clustersim names that this run does not
    write (a previous run's ``heatmap.png`` in a reused bundle folder). Checked as a write
    is (:func:`target`): a link or a folder at that name is refused, never removed."""
    target(path).unlink(missing_ok=True)


def write_text(path: str | Path, text: str, stage: Staging | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (with ``stage``: when it commits);
    returns the path."""
    with atomic_path(path, stage) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


@contextlib.contextmanager
def open_atomic(
    path: str | Path, newline: str | None = None, stage: Staging | None = None
) -> Iterator[IO[str]]:
    """A text file to write that appears at ``path`` only once it is closed complete (with
    ``stage``: when it commits)."""
    with atomic_path(path, stage) as tmp, tmp.open("w", encoding="utf-8", newline=newline) as fh:
        yield fh


def open_append(path: str | Path, newline: str | None = None) -> IO[str]:
    """``path`` opened for appending text, refusing a symbolic link (created if absent)."""
    fd = os.open(target(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o666)
    return os.fdopen(fd, "a", encoding="utf-8", newline=newline)


def open_update(path: str | Path) -> IO[bytes]:
    """Existing file ``path`` opened to read and cut in place (binary), refusing a link."""
    return os.fdopen(os.open(target(path), os.O_RDWR | _NOFOLLOW), "r+b")
