"""How unevenly an auxiliary-loss-balanced router spreads tokens over its experts, from a
measured routing statistic (``data/moe_routing_measurements.csv``), and what a perfectly
balanced router's sampling alone gives.

**The statistic.** Wang et al. (arXiv:2408.15664, Table 2) train DeepSeekMoE models (64
routed experts, top-6) with the auxiliary balance loss (α = 0.001, "Loss-Controlled") and
report MaxVio_global = (max_i Load_i − mean Load) / mean Load, the expert loads counted over
the whole validation set: 0.72 (1B) and 0.52 (3B). Counted over that many tokens, sampling
noise is gone: MaxVio_global is the router's *persistent* preference, which every
micro-batch drawn from the same data carries in expectation (a micro-batch's own MaxVio is
that plus its sampling noise and its sequences' domains, so the fit below is a lower bound).

**The load model** (``model.expert_load: aux_loss``, :func:`.moe.expert_tokens`): the
``skew`` law — expert popularity ∝ rank^−s over a seeded random ranking, the micro-batch's
``T·k`` assignments drawn multinomially from it — with the exponent s fitted to the rows by
its closed form. With unlimited tokens the Zipf law's MaxVio over E experts is
E / H(E, s) − 1, H(E, s) = Σ_{r=1..E} r^−s (:func:`zipf_maxvio`); s minimises the squared
error of log(1 + MaxVio) over the rows (one exponent, the rows' geometric-mean ratio when
they share E). The fit is to a routing statistic, never to a step time.

**A balanced router's noise** (:func:`balanced_rank_excess`): with equal probabilities each
token's k distinct experts put a hypergeometric number on each of ``ep`` ranks of E/ep
experts, so a rank's load over T tokens has mean T·k/ep and variance
T·k·(1/ep)(1 − 1/ep)(E − k)/(E − 1); the slowest of ``ep`` ranks exceeds the mean by about
z_ep·σ (z_ep the expected maximum of ep standard normals).
"""

from __future__ import annotations

import csv
import math
from functools import cache
from pathlib import Path

ROUTING_CSV = Path(__file__).resolve().parent.parent / "data" / "moe_routing_measurements.csv"


@cache
def routing_rows() -> tuple[dict[str, str], ...]:
    """The rows of ``moe_routing_measurements.csv`` (read once)."""
    with ROUTING_CSV.open(newline="") as fh:
        return tuple(csv.DictReader(fh))


def zipf_maxvio(experts: int, s: float) -> float:
    """MaxVio of Zipf(``s``) expert popularity over ``experts`` experts with unlimited
    tokens: E / H(E, s) − 1."""
    return experts / math.fsum(r**-s for r in range(1, experts + 1)) - 1.0


def fit_exponent(rows) -> float:
    """The Zipf exponent whose :func:`zipf_maxvio` fits the rows' ``maxvio_global`` at their
    ``routed_experts`` (least squares on log(1 + MaxVio); the error is convex in s over
    [0, 4], so a ternary search finds it)."""
    data = [(int(r["routed_experts"]), float(r["value"])) for r in rows if r["statistic"] == "maxvio_global"]

    def err(s: float) -> float:
        return sum((math.log1p(zipf_maxvio(e, s)) - math.log1p(v)) ** 2 for e, v in data)

    lo, hi = 0.0, 4.0
    for _ in range(200):
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        lo, hi = (lo, b) if err(a) <= err(b) else (a, hi)
    return (lo + hi) / 2


@cache
def aux_loss_exponent() -> float:
    """The Zipf exponent of an auxiliary-loss-balanced router (module doc), fitted to the
    ``aux_loss`` rows."""
    return fit_exponent([r for r in routing_rows() if r["balancing"] == "aux_loss"])


def expected_max_normal(n: int) -> float:
    """Expected maximum of ``n`` independent standard normals: ∫ x·n·φ(x)·Φ(x)^(n−1) dx
    (midpoint rule over ±10, error far below 1e-9)."""
    steps, lo, hi = 20000, -10.0, 10.0
    h = (hi - lo) / steps
    total = 0.0
    for i in range(steps):
        x = lo + (i + 0.5) * h
        phi = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        total += x * n * phi * (0.5 * (1 + math.erf(x / math.sqrt(2)))) ** (n - 1)
    return total * h


def balanced_rank_excess(tokens: int, experts: int, top_k: int, ep: int) -> float:
    """How far the slowest of ``ep`` expert-parallel ranks' loads exceeds their mean, as a
    fraction of it, when ``tokens`` tokens each pick ``top_k`` distinct experts of
    ``experts`` with equal probability (module doc; normal approximation)."""
    mean = tokens * top_k / ep
    var = tokens * top_k * (1 / ep) * (1 - 1 / ep) * (experts - top_k) / (experts - 1)
    return expected_max_normal(ep) * math.sqrt(var) / mean
