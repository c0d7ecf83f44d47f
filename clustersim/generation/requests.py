"""The requests a generation run serves: arrival time, prompt and output lengths.

Drawn from ``generation.arrival``, ``prompt_len`` and ``output_len`` with streams of their
own — arrivals from ``default_rng([seed, 0])`` (as the inference mode's), prompt lengths from
``[seed, 1]``, output lengths from ``[seed, 2]`` — so the same scenario and seed give the
same requests, and changing one distribution leaves the others' draws alone. Or read from a
trace file (``generation.trace``): a CSV with a header ``arrival_s,prompt_len,output_len``
and one request a row, sorted by arrival (stable).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

import numpy as np

from ..compilers.inference import arrival_times
from ..errors import ScenarioError, shorten
from ..reader import read_text
from ..scenario.generation_spec import MAX_TOKENS

TRACE_COLUMNS = ("arrival_s", "prompt_len", "output_len")


@dataclass(frozen=True)
class Request:
    """One request: ``arrival`` s, ``prompt`` tokens in, ``output`` tokens to generate (≥ 1:
    the prefill samples the first). A request handed over prefilled (disaggregated serving)
    has its ``first_token`` time and its cache ``ready`` (s) to be admitted."""

    index: int
    arrival: float
    prompt: int
    output: int
    first_token: float | None = None
    ready: float | None = None

    @property
    def admissible(self) -> float:
        """When it may be admitted: its cache's arrival, else its own."""
        return self.arrival if self.ready is None else self.ready


def requests_of(gen, seed: int) -> list[Request]:
    """The requests of a ``generation`` section (module doc), in arrival order."""
    if gen.trace is not None:
        return read_trace(gen.trace)
    n = gen.requests
    # the inference mode's arrivals (same streams), "all_at_once" being its None
    times = arrival_times(None if gen.arrival.process == "all_at_once" else gen.arrival, n, seed)
    prompts = lengths(gen.prompt_len, n, np.random.default_rng([seed, 1]), "generation.prompt_len")
    outputs = lengths(gen.output_len, n, np.random.default_rng([seed, 2]), "generation.output_len")
    return [Request(i, times[i], prompts[i], outputs[i]) for i in range(n)]


def lengths(spec, n: int, rng: np.random.Generator, field: str) -> list[int]:
    """``n`` token counts of the distribution ``spec``; each at least 1 (refused naming ``field``)."""
    if spec.dist == "fixed":
        out = [spec.value] * n
    elif spec.dist == "uniform":
        out = rng.integers(spec.low, spec.high, n, endpoint=True).tolist()
    else:
        draws = rng.lognormal(math.log(spec.median), spec.sigma, n)
        out = np.clip(np.rint(draws), spec.low, spec.high).astype(int).tolist()
    low = min(out, default=1)
    if low < 1:
        raise ScenarioError(field, spec.model_dump(exclude_none=True), "every request needs at least 1 token")
    return out


def read_trace(path: str) -> list[Request]:
    """The requests of trace file ``path`` (module doc); a bad row is refused naming its line."""
    field = "generation.trace"
    reader = csv.DictReader(io.StringIO(read_text(path, field)))
    if reader.fieldnames is None or [c.strip() for c in reader.fieldnames] != list(TRACE_COLUMNS):
        raise ScenarioError(field, path, f"expected the header {','.join(TRACE_COLUMNS)}")
    rows = []
    try:
        for row in reader:
            t, p, o = float(row["arrival_s"]), int(row["prompt_len"]), int(row["output_len"])
            if not (0 <= t < math.inf and 1 <= p <= MAX_TOKENS and 1 <= o <= MAX_TOKENS):
                raise ValueError(
                    f"arrival_s {t} must be finite and ≥ 0, the lengths from 1 to {MAX_TOKENS:,}"
                )
            rows.append((t, p, o))
    except (ValueError, TypeError, csv.Error) as exc:
        raise ScenarioError(field, path, f"row {reader.line_num}: {shorten(str(exc), 160)}") from None
    if not rows:
        raise ScenarioError(field, path, "holds no request; expected at least one row")
    rows.sort(key=lambda r: r[0])
    return [Request(i, t, p, o) for i, (t, p, o) in enumerate(rows)]
