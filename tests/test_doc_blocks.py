"""Every ```python block of README.md and docs/*.md runs, as a reader would run it.

The blocks of one file run in order in one namespace (a later block may use an earlier
one's names), in a fresh interpreter (a block that registers a schedule registers it there
only) whose working folder is a temporary one holding a link to ``scenarios/`` (so
``"scenarios/quickstart.yaml"`` resolves, and what a block writes lands in the temporary
folder). A line ending in ``# prints: TEXT`` says what the block prints: the block's
output lines must match these comments in order — the words exactly, each number to the
digits written (``0.262`` to ±0.0005, as tests/test_quoted_numbers.py reads quotes).

A block that cannot run standalone — a fragment of a module or of a SimPy process, a
signature sketch with placeholder arguments, a run of minutes — has the line
``<!-- no-run: reason -->`` right above its fence; it is reported as a skip with that
reason, so the count of blocks not run shows in every test run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)
NO_RUN = re.compile(r"<!-- no-run: (.+?) -->\s*$")
PRINTS = re.compile(r"#\s*prints:\s*(.+?)\s*$", re.M)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class Block:
    """One ```python block: its file, first code line, code and why it is not run (or "")."""

    doc: Path
    line: int
    code: str
    no_run: str

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def _blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = NO_RUN.search(before)
        line = text.count("\n", 0, m.start()) + 2
        out.append(Block(doc, line, m.group(1), reason.group(1) if reason else ""))
    return out


BLOCKS = [b for doc in DOCS for b in _blocks(doc)]

#: runs in the fresh interpreter: the blocks of one file in one namespace, each one's
#: output captured; stops at the first error (the blocks after it would fail on its names)
RUNNER = """
import contextlib, io, json, sys, traceback
import matplotlib
matplotlib.use("Agg")
blocks, namespace, results = json.load(sys.stdin), {"__name__": "__main__"}, []
for name, code in blocks:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, name, "exec"), namespace)
        results.append([out.getvalue(), ""])
    except BaseException:
        results.append([out.getvalue(), traceback.format_exc(limit=-4)])
        break
print(json.dumps(results))
"""

_RUNS: dict[Path, dict[str, tuple[str, str]]] = {}


def _run_file(doc: Path, tmp: Path) -> dict[str, tuple[str, str]]:
    """Block id → (printed, error) of every runnable block of ``doc``, run once."""
    if doc not in _RUNS:
        runnable = [b for b in BLOCKS if b.doc == doc and not b.no_run]
        (tmp / "scenarios").symlink_to(ROOT / "scenarios")
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER],
            input=json.dumps([(b.id, b.code) for b in runnable]),
            capture_output=True,
            text=True,
            cwd=tmp,
            env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"},
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        results = json.loads(proc.stdout.strip().splitlines()[-1])
        _RUNS[doc] = {b.id: tuple(r) for b, r in zip(runnable, results)}
    return _RUNS[doc]


def _matches(printed: str, written: str) -> bool:
    """Whether an output line says what its ``# prints:`` comment wrote: the words
    exactly, each number to the digits written."""
    if NUMBER.sub("#", printed.strip()) != NUMBER.sub("#", written.strip()):
        return False
    for got, want in zip(NUMBER.findall(printed), NUMBER.findall(written)):
        decimals = len(want.partition(".")[2])
        if abs(float(got) - float(want)) > 0.5 * 10**-decimals + 1e-12:
            return False
    return True


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_the_block_runs_and_prints_what_it_says(block, tmp_path):
    if block.no_run:
        pytest.skip(f"no-run: {block.no_run}")
    runs = _run_file(block.doc, tmp_path)
    assert block.id in runs, f"{block.id} did not run: an earlier block of {block.doc.name} failed"
    printed, error = runs[block.id]
    assert not error, f"{block.id} failed:\n{error}"
    expected = PRINTS.findall(block.code)
    if expected:
        lines = printed.splitlines()
        assert len(lines) == len(expected), f"{block.id} printed {lines}, its comments say {expected}"
        for got, want in zip(lines, expected):
            assert _matches(got, want), f"{block.id} prints {got!r}; its comment says {want!r}"


def test_the_number_matcher_holds_to_the_digits_written():
    assert _matches("0.2624 s, bubble 0.26", "0.262 s, bubble 0.26")
    assert not _matches("0.2626 s", "0.262 s") and not _matches("0.262 ms", "0.262 s")
    assert _matches("621", "621") and not _matches("622", "621")


def test_every_block_not_run_says_why():
    skipped = [b for b in BLOCKS if b.no_run]
    assert all(len(b.no_run.split()) >= 3 for b in skipped), [b.id for b in skipped]
    # most blocks run: the markers are for fragments, not for blocks that broke
    assert len(skipped) < len(BLOCKS) / 2, [b.id for b in skipped]
