"""No function of clustersim takes more than :data:`MAX_PARAMETERS` parameters.

A longer list is a sign that some of its values belong together: group them in a small
frozen dataclass (a collective's :class:`~clustersim.collectives.Tuning`, a search's
:class:`~clustersim.experiments.SearchSpace`) rather than hiding them in ``**kwargs``.
Constructors (``__init__``) are exempt: a record's fields are its parameters. ``self`` and
``cls`` are not counted; ``*args``/``**kwargs`` count as one each. Read from the source with
``ast``, so nested functions and methods are checked too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "clustersim"
MAX_PARAMETERS = 10


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The parameter names of ``fn`` that count: every kind, less a leading self/cls."""
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return names


def too_long(package: Path = PACKAGE) -> dict[str, int]:
    """``file:line function`` → parameter count, for every function over the limit."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name == "__init__":
                continue
            n = len(parameters(node))
            if n > MAX_PARAMETERS:
                out[f"{rel}:{node.lineno} {node.name}"] = n
    return out


def test_no_function_takes_more_than_ten_parameters():
    over = too_long()
    assert not over, (
        f"functions over {MAX_PARAMETERS} parameters (group what belongs together in a frozen "
        f"dataclass): {over}"
    )


def test_the_count_skips_self_and_counts_every_kind_of_parameter():
    (method,) = ast.parse("class C:\n    def f(self, a, /, b, *c, d, **e): pass").body[0].body
    assert sorted(parameters(method)) == ["a", "b", "c", "d", "e"]
