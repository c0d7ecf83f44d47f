"""No command is silent for a minute (issue 21, item 1): off a terminal, clustersim writes
its estimate before a run and a log line every LOG_EVERY_S while compiling, running and
saving; a run estimated over a minute says which preset or knob brings it down before it
starts; a search states its plan count and estimate, and its ETA survives a resume. The
cadence is checked with a fake clock, not by waiting a minute."""

from __future__ import annotations

import importlib
import io
import logging
import re
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.cli import main
from clustersim.experiments.progress import Progress
from clustersim.progress import LOG_EVERY_S, POLL_S, Reporter
from clustersim.resolve import resolve
from clustersim.resolve.estimate import estimate

ROOT = Path(__file__).resolve().parent.parent
SYNTH = str(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml")
GPT7 = str(ROOT / "scenarios" / "gpt-7.5b-64xh100-balanced.yaml")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _reporter():
    clock, out = Clock(), io.StringIO()
    return Reporter("job", stream=out, clock=clock, thread=False), clock, out


def test_a_phase_writes_a_line_every_interval_and_no_more():
    rep, clock, out = _reporter()
    with rep.phase("compiling"):
        for t in (1, 5, LOG_EVERY_S - 0.1):
            clock.now = t
            rep.tick()
        assert out.getvalue() == ""
        clock.now = LOG_EVERY_S
        rep.tick()
        clock.now = LOG_EVERY_S + 1
        rep.tick()
    assert out.getvalue() == f"clustersim: job: compiling ({LOG_EVERY_S:.0f} s)\n"


def test_the_running_line_counts_finished_ops():
    rep, clock, out = _reporter()
    done = [0]
    with rep.phase("running", lambda: done[0], 200):
        clock.now, done[0] = 75.0, 50
        rep.tick()
    assert out.getvalue() == "clustersim: job: running, 25% of 200 ops (1 min 15 s)\n"


def test_a_ten_minute_phase_is_never_silent_for_a_minute():
    """The thread ticks every POLL_S; the gaps between lines stay at LOG_EVERY_S (+ one poll)."""
    rep, clock, out = _reporter()
    stamps = []
    with rep.phase("running", lambda: 1, 10):
        while clock.now < 600:
            clock.now += POLL_S
            before = out.getvalue().count("\n")
            rep.tick()
            if out.getvalue().count("\n") > before:
                stamps.append(clock.now)
    gaps = [b - a for a, b in zip([0.0, *stamps], stamps)]
    assert len(stamps) == 600 // LOG_EVERY_S and max(gaps) <= LOG_EVERY_S + POLL_S < 60


def test_the_cli_off_a_terminal_writes_the_estimate_first(capsys):
    assert main(["run", SYNTH]) == 0
    err = capsys.readouterr().err.splitlines()
    est = estimate(resolve(cs.load_scenario(SYNTH)))  # (~164 ops, ~6.3 k events: the run's 164 and 6,212)
    assert err == [f"clustersim: synthetic-4stage-1f1b: estimated {est.line()}"]
    assert est.line().startswith("~164 ops, ~6.")


def test_quiet_writes_nothing(capsys):
    assert main(["run", SYNTH, "--quiet"]) == 0
    assert capsys.readouterr().err == ""


@pytest.fixture
def no_compiling(monkeypatch):
    """An interrupt where compiling would start: the run has announced itself by then."""

    def refuse(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("clustersim.simulate"), "compile_job", refuse)


def test_a_run_over_a_minute_prints_its_estimate_and_advice_before_starting(capsys, no_compiling):
    assert main(["run", GPT7, "--set", "simulation.fidelity=exact"]) == 130
    first, *_, last = capsys.readouterr().err.splitlines()
    assert re.match(
        r"clustersim: gpt-7.5b-64xh100-balanced: estimated ~[\d.]+ M ops, ~[\d.]+ M events, ~", first
    )
    assert "; faster: simulation.fidelity: fast (" in first and "simulation.fidelity: balanced (" in first
    assert last == "interrupted"


def test_a_silent_library_run_over_a_minute_logs_its_advice(caplog, no_compiling):
    sc = cs.load_scenario(GPT7).with_overrides({"simulation.fidelity": "exact"})
    with caplog.at_level(logging.WARNING, "clustersim"), pytest.raises(KeyboardInterrupt):
        cs.simulate(sc)  # progress="auto" off a terminal: no bar, no lines
    (record,) = caplog.records
    assert (
        re.search(r"estimated ~[\d.]+ M ops", record.getMessage())
        and "simulation.fidelity: balanced" in record.getMessage()
    )


def test_the_sweep_eta_is_this_sessions_rate_after_a_resume():
    clock, out = Clock(), io.StringIO()
    with Progress(200, "log", "plans", done=100, clock=clock, stream=out, thread=False) as bar:
        clock.now = 10.0
        bar.update(10)  # 10 runs in 10 s: 90 left take 90 s (not 1.6 s, as 110 runs in 10 s would)
        assert bar.eta_s() == pytest.approx(90.0)
        clock.now = LOG_EVERY_S
        bar.tick()
    lines = out.getvalue().splitlines()
    assert lines[0] == "clustersim: plans: 100/200 (50%), 0 s"
    assert (
        lines[1] == f"clustersim: plans: 110/200 (55%), {LOG_EVERY_S:.0f} s, ETA 2 min 15 s"
    )  # 90 left × 15 s / 10


@pytest.mark.parametrize(
    "top_k, line",
    [
        # the default: 9 plans (1F1B, GPipe, interleaved v2/v4 over pp), the estimate's best 5 simulated
        ("5", re.compile(r"clustersim: search: 9 plans — estimated in .+: 4 estimated, 5 to simulate; ~")),
        (
            "all",
            re.compile("clustersim: search: 6 plans — 6 to simulate; ~"),
        ),  # the search before the estimate
    ],
)
def test_search_states_its_plan_count_and_estimate_before_starting(capsys, top_k, line):
    assert main(["search", SYNTH, "--gpus", "4", "--workers", "1", "--top-k", top_k]) == 0
    err = capsys.readouterr().err.splitlines()
    stated = [line for line in err if line.startswith("clustersim: search: ")]
    assert stated == [stated[0]] and line.match(stated[0]), stated
    assert err.index(stated[0]) < err.index(
        next(line for line in err if line.startswith("clustersim: plans: "))
    )


def test_on_a_terminal_a_phase_is_one_status_line_rewritten_in_place_then_cleared():
    clock, out = Clock(), io.StringIO()
    rep = Reporter("job", stream=out, clock=clock, thread=False, bar=True)
    with rep.phase("compiling"):
        clock.now = 3.0
        rep.tick()
    clear = "\r\x1b[K"
    assert (
        out.getvalue() == f"{clear}clustersim: job: compiling …{clear}clustersim: job: compiling … 3 s{clear}"
    )
