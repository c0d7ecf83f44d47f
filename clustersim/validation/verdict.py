"""A validation table's pass/fail line: the table's name, whether every bound it states
holds, and the numbers set against those bounds (``clustersim validate`` ends each table
with one and exits non-zero when one fails)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """Whether one validation table holds its stated tolerance; ``detail`` says the
    numbers against the bounds."""

    table: str
    passed: bool
    detail: str

    def line(self) -> str:
        """The Markdown line that ends the table."""
        return f"**{'PASS' if self.passed else 'FAIL'}** — {self.table}: {self.detail}"


def within(table: str, errors: list[float], bound: float, what: str = "every row") -> Verdict:
    """The verdict of ``errors`` (relative) against one bound on each |error|."""
    worst = max((abs(e) for e in errors), default=0.0)
    return Verdict(table, worst <= bound, f"{what} within {bound:.0%} (largest |error| {worst:.1%})")
