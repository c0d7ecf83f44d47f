"""Numbers the README, the docs and the scenario headers quote are the numbers the scenarios print.

A scenario header states them on ``# Prints: key value, key value`` lines, where each key is a
summary key of the scenario's run (a multi-job scenario's per-job numbers: ``job.key``,
docs/multi_job.md); ``# Prints (--set k=v ...): …`` quotes a variant, and the
word ``slow`` in the parentheses (``# Prints (slow; --set k=v): …``) puts a run of minutes
under ``pytest -m slow``. The README and docs/*.md put an HTML comment
``<!-- prints: scenarios/X.yaml [(…)] key value … -->`` after the paragraph (or table) that
quotes them, and each value must appear in that paragraph as written. A quoted value holds to
the digits written: ``0.0499`` to ±0.00005, ``621`` to ±0.5, ``479k`` to ±500 (``k``, ``M``
and ``G`` multiply by 10³, 10⁶ and 10⁹). Each scenario variant runs once for all its quotes.
On a mismatch the message gives the line to write instead, rounded as the old one was.
Every run also holds the memory timeline to the summary's peaks (issue 39 case 4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import clustersim as cs
from tests.test_wrong_answers import timeline_peaks_hold

ROOT = Path(__file__).resolve().parents[1]
HEADER = re.compile(r"^# Prints(?: \(([^)]*)\))?: (.+)$", re.M)
COMMENT = re.compile(r"<!-- prints: (\S+)(?: \(([^)]*)\))? (.+?) -->")
PAIR = re.compile(r"([\w.]+) (-?\d+(?:\.\d+)?)([kMG]?)(?![\w.])")  # keys: also ``job.key`` (multi-job)
SCALE = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}
#: shipped scenario files without a quote here: a sweep file (run by `clustersim sweep`), the
#: Megatron Table 1 rows (docs/validation.md quotes their predictions: checked below) and the
#: 162B search, whose plans' samples/s docs/experiments.md quotes (tests/test_search.py checks them)
UNQUOTED = ("sweeps/quickstart-pp-schedule.yaml", "validation/", "megatron-162b-64gpu-search.yaml")


@dataclass(frozen=True)
class Quote:
    """One quoting line: where it is, the run it quotes, and its (key, digits, suffix) triples."""

    where: str  # the file the quote is written in, relative to the repository root
    line: str  # the whole line (a header line, or the HTML comment)
    scenario: str  # path relative to the repository root
    sets: tuple[str, ...]  # --set KEY=VALUE items
    slow: bool
    pairs: tuple[tuple[str, str, str], ...]


def _options(text: str) -> tuple[tuple[str, ...], bool]:
    sets = tuple(re.findall(r"--set (\S+)", text or ""))
    rest = re.sub(r"--set \S+", "", text or "")
    words = set(re.findall(r"[\w-]+", rest))
    assert words <= {"slow"}, f"unknown words in a Prints line's parentheses: {sorted(words - {'slow'})}"
    return sets, "slow" in words


def _quotes():
    for path in sorted((ROOT / "scenarios").rglob("*.yaml")):
        rel = str(path.relative_to(ROOT))
        for m in HEADER.finditer(path.read_text()):
            sets, slow = _options(m.group(1))
            yield Quote(rel, m.group(0), rel, sets, slow, tuple(PAIR.findall(m.group(2))))
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for m in COMMENT.finditer(text):
            sets, slow = _options(m.group(2))
            pairs = tuple(PAIR.findall(m.group(3)))
            paragraph = text[: m.start()].rsplit("\n\n", 1)[-1]
            for key, digits, _ in pairs:
                written = re.compile(rf"(?<![\d.]){re.escape(digits)}(?![\d])")
                assert written.search(paragraph), f"{doc.name} quotes {key} {digits} only in its comment"
            yield Quote(str(doc.relative_to(ROOT)), m.group(0), m.group(1), sets, slow, pairs)


QUOTES = list(_quotes())
_SUMMARIES: dict = {}
#: runs whose whole Result a story test reads (the others keep only their summary)
_KEEP = {("scenarios/quickstart.yaml", ()), ("scenarios/edgepipe-vit-large-4xT4-1GbE.yaml", ())}
_RESULTS: dict = {}


def _simulate(scenario: str, sets: tuple[str, ...] = ()):
    key = (scenario, sets)
    if key not in _RESULTS:
        over = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in sets)}
        res = cs.simulate(cs.load_scenario(str(ROOT / scenario)).with_overrides(over), progress=False)
        timeline_peaks_hold(res)
        _SUMMARIES[key] = res.summary
        if key not in _KEEP:
            return res
        _RESULTS[key] = res
    return _RESULTS[key]


def _summary(scenario: str, sets: tuple[str, ...]) -> dict:
    return _SUMMARIES.get((scenario, sets)) or _simulate(scenario, sets).summary


def _prose(path: Path) -> str:
    """A file's text with comment marks and line breaks folded into single spaces."""
    return " ".join(re.sub(r"^#", "", line) for line in path.read_text().splitlines()).replace("  ", " ")


def _holds(actual: float, digits: str, suffix: str) -> bool:
    half = 0.5 * 10 ** -len(digits.partition(".")[2]) * SCALE[suffix]
    return abs(actual - float(digits) * SCALE[suffix]) <= half * (1 + 1e-9)


def _rewrite(actual: float, digits: str, suffix: str) -> str:
    """``actual`` written as ``digits`` was: its significant digits (decimals for a zero), suffix."""
    value = actual / SCALE[suffix]
    written = digits.lstrip("-").replace(".", "").lstrip("0")
    if not written or value == 0:
        return f"{value:.{len(digits.partition('.')[2])}f}"
    sig = len(written)
    decimals = max(sig - 1 - int(f"{abs(value):e}".split("e")[1]), 0)
    return f"{value:.{decimals}f}"


def _corrected(quote: Quote, summary: dict) -> str:
    line = quote.line
    for key, digits, suffix in quote.pairs:
        if not _holds(summary[key], digits, suffix):
            new = _rewrite(summary[key], digits, suffix)
            line = re.sub(rf"\b{key} {re.escape(digits + suffix)}(?![\w.])", f"{key} {new}{suffix}", line)
    return line


def test_something_is_quoted():
    quoted = {q.scenario for q in QUOTES}
    assert {"scenarios/quickstart.yaml", "scenarios/synthetic-4stage-1f1b.yaml"} <= quoted
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "scenarios").rglob("*.yaml")}
    unquoted = {s for s in shipped - quoted if not any(s.startswith("scenarios/" + u) for u in UNQUOTED)}
    assert not unquoted, f"shipped scenarios whose header quotes no checked number: {sorted(unquoted)}"


def test_rewrite_keeps_the_rounding_written():
    assert _rewrite(0.71234, "0.710", "") == "0.712"
    assert _rewrite(0.10031, "0.0499", "") == "0.100"
    assert _rewrite(478_512.0, "479", "k") == "479"
    assert _rewrite(1.2e-5, "0.000", "") == "0.000"
    assert _holds(479_400.0, "479", "k") and not _holds(479_600.0, "479", "k")
    q = Quote("x", "# Prints: a 1.00, b 2", "x", (), False, (("a", "1.00", ""), ("b", "2", "")))
    assert _corrected(q, {"a": 1.004, "b": 2.6}) == "# Prints: a 1.00, b 3"


@pytest.mark.parametrize(
    "quote",
    [pytest.param(q, marks=[pytest.mark.slow] if q.slow else []) for q in QUOTES],
    ids=[
        q.where + ("" if q.where == q.scenario else ">" + q.scenario) + "".join(" " + s for s in q.sets)
        for q in QUOTES
    ],
)
def test_quoted_numbers_are_printed(quote):
    summary = _summary(quote.scenario, quote.sets)
    missing = [key for key, _, _ in quote.pairs if key not in summary]
    assert not missing, f"{quote.where}: {missing} are not summary keys of {quote.scenario}"
    wrong = [(k, d, s) for k, d, s in quote.pairs if not _holds(summary[k], d, s)]
    assert not wrong, (
        f"{quote.where} quotes {[(k, d + s) for k, d, s in wrong]}; the run prints {[(k, summary[k]) for k, _, _ in wrong]}."
        f"\nReplace\n    {quote.line}\nwith\n    {_corrected(quote, summary)}" + _elsewhere(quote, wrong)
    )


def _elsewhere(quote: Quote, wrong) -> str:
    """The other lines of the quoting file that write the wrong digits (its prose may repeat them)."""
    path = ROOT / quote.where
    hits = [
        f"\n    {path.name}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if line.strip() != quote.line.strip()
        and any(re.search(rf"(?<![\d.]){re.escape(d)}(?![\d])", line) for _, d, _ in wrong)
    ]
    return "\nand check these lines, which write the same digits:" + "".join(hits) if hits else ""


def test_quickstart_explanation_matches_its_breakdown():
    """The quickstart's header and README explain its bubble by the heavier last stage: the
    per-micro-batch compute they quote, each stage's bubble and the formula's mean are the run's."""
    res = _simulate("scenarios/quickstart.yaml")
    s = res.summary
    p, m, iteration = s["pp"], s["num_microbatches"], s["iteration_time_s"]
    spans = res.spans[(res.spans.lane == "compute") & res.spans.phase.isin(["F", "B"])]
    per_device = (spans.end_s - spans.start_s).groupby([spans.stage, spans.device]).sum()
    T = (per_device.groupby(level=0).mean() / m * 1e3).tolist()  # ms per micro-batch, by stage
    bubble = res.devices.groupby("stage").bubble_fraction.mean().tolist()
    assert T[-1] > max(T[:-1]) and bubble[-1] < min(bubble[:-1])  # the last stage sets the pace
    ideal = (p - 1) / (m + p - 1)
    assert bubble[-1] < ideal < min(bubble[:-1])
    others, wait = sum(T[:-1]) / (p - 1), T[-1] - sum(T[:-1]) / (p - 1)
    formula = ((p - 1) * others + (p - 1) / p * m * wait) * 1e-3 / iteration  # mean idle over stages
    assert 0 < s["bubble_fraction"] - formula < 0.03  # what it leaves out: waits for transfers and the
    # last stage's exposed TP all-reduces (its pace is compute + exposed TP, T counts compute only)
    against = (
        f"{T[-1]:.1f} ms of forward + backward per micro-batch against {min(T[:-1]):.1f}–{max(T[:-1]):.1f} ms"
    )
    header = _prose(ROOT / "scenarios/quickstart.yaml")
    for phrase in [
        f"(p − 1)/(m + p − 1) = 3/19 = {ideal:.3f}",
        against,
        f"T_last − T ≈ {wait:.1f} ms",
        f"a bubble of {min(bubble[:-1]):.2f}–{max(bubble[:-1]):.2f} on stages 0–{p - 2} and {bubble[-1]:.3f} on stage {p - 1}",
        f"the formula's mean is {formula:.2f}",
    ]:
        assert phrase in header, phrase
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (
        f"{T[-1]:.1f} ms of compute per micro-batch against {min(T[:-1]):.1f}–{max(T[:-1]):.1f} ms" in readme
    )


def test_edgepipe_latency_is_its_forwards_and_hops():
    """The EdgePipe header splits the empty-pipeline latency into its stages' forwards and the
    hops between them: on an idle pipeline the first request's latency is exactly their sum."""
    res = _simulate("scenarios/edgepipe-vit-large-4xT4-1GbE.yaml")
    first = res.spans[res.spans.microbatch == 0]
    took = (first.end_s - first.start_s).groupby([first.lane, first.device]).sum()
    forwards, hops = took["compute"], took["send"]
    latency = res.summary["first_request_latency_s"]
    assert forwards.sum() + hops.sum() == pytest.approx(latency, rel=1e-12)
    fwd, hop = forwards.mean() * 1e3, hops.mean() * 1e3
    # alike stages: the last one also runs the classifier head (4 % of a forward here)
    assert forwards.max() - forwards.min() < 0.05 * forwards.mean() and hops.max() - hops.min() < 1e-9
    header = _prose(ROOT / "scenarios/edgepipe-vit-large-4xT4-1GbE.yaml")
    for phrase in [
        f"a stage's forward takes ~{fwd:.1f} ms",
        f"takes ~{hop:.1f} ms over the 1 Gbit/s hop",
        f"({len(forwards)} × {fwd:.1f} + {len(hops)} × {hop:.1f} ≈ {latency * 1e3:.1f} ms)",
    ]:
        assert phrase in header, phrase


def test_validation_table_rows_are_the_runs():
    """docs/validation.md's Megatron Table 1 rows that simulate in seconds (`clustersim validate`
    writes the table) quote the predicted TFLOP/s and peak GiB the rows' scenarios give."""
    from clustersim.validation.megatron import megatron_rows, run_rows

    text = (ROOT / "docs/validation.md").read_text()
    for got in run_rows(megatron_rows()[:4]):  # pp = 1, ≤ 256 GPUs; the rest run for minutes
        row = re.search(rf"^\| {re.escape(got['model'])} \|.*$", text, re.M)
        assert row, got["model"]
        cells = [c.strip() for c in row.group(0).strip("|").split("|")]
        predicted, peak = cells[8], cells[10]
        assert (predicted, peak) == (f"{got['predicted']:.1f}", f"{got['peak_memory_gib']:.1f}"), (
            f"docs/validation.md row {got['model']}: write predicted {got['predicted']:.1f}, "
            f"peak GiB {got['peak_memory_gib']:.1f} (or rerun `clustersim validate --out docs/validation.md`)"
        )
