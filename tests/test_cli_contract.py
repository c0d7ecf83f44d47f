"""The CLI contract (clustersim.cli.CONTRACT): a user error is one ``error:`` line and exit
2 on every path; an internal error is a short message asking for a report and exit 1,
with the traceback only under ``--debug`` (issue 18, item 5)."""

from __future__ import annotations

import configparser
import importlib
from pathlib import Path

import pytest

import clustersim.cli as cli
from clustersim.cli import CONTRACT, REPORT, build_parser, main

ROOT = Path(__file__).resolve().parent.parent
SYNTHETIC = str(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml")
QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,expected",
    [
        (
            ["run", "missing.yaml"],
            "error: scenario: 'missing.yaml' is invalid; expected the path of an existing file",
        ),
        (
            ["run", SYNTHETIC, "--set", "parallel.pp=[1,"],
            "error: parallel.pp: '[1,' is invalid; not valid YAML",
        ),
        (["run", SYNTHETIC, "--set", "parallel.pp"], "error: --set 'parallel.pp': expected key=value"),
        (["plan", QUICKSTART, "--set", "model.preset=[1, 2]"], "error: model.preset: [1, 2] is invalid"),
        (["plot", str(ROOT / "docs")], "error: " + str(ROOT / "docs") + ": not a clustersim result bundle"),
        (
            ["sweep", SYNTHETIC, "--grid", "parallel.pp"],
            "error: --grid: 'parallel.pp' is invalid; expected KEY=V1,V2",
        ),
    ],
)
def test_user_errors_are_one_line_and_exit_2(capsys, argv, expected):
    code, err = _run(capsys, *argv)
    assert code == 2
    assert err.startswith(expected) and err.count("\n") == 1 and "Traceback" not in err


def test_an_os_error_is_a_user_error(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    code, err = _run(capsys, "run", SYNTHETIC, "--quiet", "--out", str(tmp_path / "file" / "bundle"))
    # one line that names the path the operating system refused
    assert code == 2 and err == f"error: {tmp_path / 'file' / 'bundle'}: Not a directory\n"


@pytest.fixture
def broken_simulate(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("an invariant broke")

    monkeypatch.setattr(importlib.import_module("clustersim.simulate"), "simulate", boom)


def test_internal_error_asks_for_a_report(capsys, broken_simulate):
    code, err = _run(capsys, "run", SYNTHETIC, "--quiet")
    assert code == 1
    assert err == f"internal error: RuntimeError: an invariant broke\n{REPORT}\n"


@pytest.mark.parametrize("argv", [["--debug", "run", SYNTHETIC], ["run", SYNTHETIC, "--debug"]])
def test_debug_adds_the_traceback(capsys, broken_simulate, argv):
    code, err = _run(capsys, *argv, "--quiet")
    assert code == 1
    assert err.startswith("Traceback (most recent call last):")
    assert err.endswith(
        f"RuntimeError: an invariant broke\ninternal error: RuntimeError: an invariant broke\n{REPORT}\n"
    )


def test_help_states_the_contract():
    parser = build_parser()
    assert CONTRACT in " ".join(parser.format_help().split())
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, cmd in sub.choices.items():
        assert CONTRACT in " ".join(cmd.format_help().split()), name
        assert "--debug" in cmd.format_help(), name


def test_readme_states_the_contract():
    readme = (ROOT / "README.md").read_text()
    assert "## Command line" in readme and CONTRACT in " ".join(readme.split())


def test_the_console_command_exits_with_mains_status_and_freezes_only_after(monkeypatch):
    # console() is the console script and `python -m clustersim.cli`; gc.freeze (the exit's
    # collection skipped) comes after main returned, i.e. after every file was written
    calls = []
    monkeypatch.setattr(cli, "main", lambda: calls.append("main") or 2)
    monkeypatch.setattr(cli.gc, "freeze", lambda: calls.append("freeze"))
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    assert exit_.value.code == 2 and calls == ["main", "freeze"]
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["options.entry_points"]["console_scripts"].split() == [
        "clustersim",
        "=",
        "clustersim.cli:console",
    ]
