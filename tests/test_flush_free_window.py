"""The reported period of a flush-free schedule lies before the final drain (issue 15 §6).

PipeDream on p uniform stages of forward f and backward b (free transfers) settles into
1F1B: every stage runs one forward and one backward per f + b, so an iteration of m
micro-batches takes m·(f + b) with no bubble. The last p − 1 micro-batches of the run
finish in the drain, where the later stages have already stopped; a window there shows a
bubble that the steady state does not have. Before the fix, m < p − 1 put the reported
window (iterations − 2) inside the drain: bubble 0.375 for p = 8, m = 3.
"""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.metrics import flush_free_iteration, min_flush_free_iterations
from tests.conftest import synthetic


@pytest.mark.parametrize(
    ("p", "m", "f", "b"), [(8, 3, 1e-3, 2e-3), (8, 2, 1e-3, 1e-3), (4, 2, 1e-3, 2e-3), (6, 1, 1e-3, 2e-3)]
)
@pytest.mark.parametrize("extra", [0, 3])
def test_pipedream_with_few_microbatches_reports_the_steady_state(p, m, f, b, extra):
    iterations = min_flush_free_iterations(m, p) + extra
    res = cs.simulate(synthetic(p, m, f, b, schedule="pipedream", iterations=iterations), progress=False)
    assert res.summary["iteration_time_s"] == pytest.approx(m * (f + b), rel=1e-12)
    assert res.summary["bubble_fraction_max"] == pytest.approx(0.0, abs=1e-12)


def test_the_steady_iteration_ends_before_the_drain():
    # N = m·I micro-batches; iteration k ends with micro-batch (k + 1)·m − 1, which must not
    # be one of the drain's: ≤ N − p. Where m ≥ p − 1 this is the second-to-last iteration.
    for p in range(1, 9):
        for m in range(1, 2 * p + 2):
            for n in range(3, 12):
                k = flush_free_iteration(n, m, p)
                steady = [j for j in range(1, n - 1) if (j + 1) * m - 1 <= n * m - p]
                assert k == (max(steady) if steady else None)
                if m >= p - 1:
                    assert k == n - 2
    # one iteration: that whole iteration; two: the second, drain included, unless it lies
    # wholly in the drain (m < p − 1)
    assert [flush_free_iteration(n, 7, 8) for n in (1, 2)] == [0, 1]
    assert [flush_free_iteration(n, 3, 8) for n in (1, 2)] == [0, None]


@pytest.mark.parametrize("iterations", [2, 3, 4])
def test_too_few_iterations_for_a_steady_period_are_refused(iterations):
    raw = synthetic(8, 3, schedule="pipedream", iterations=iterations)
    with pytest.raises(
        ScenarioError,
        match=rf"simulation\.iterations: {iterations} .*accepted: 1 \(one whole iteration\) or ≥ 5",
    ):
        cs.simulate(raw, progress=False)
