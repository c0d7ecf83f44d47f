"""A small deterministic Levenberg–Marquardt solver shared by the kernel calibrations."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def levenberg_marquardt(
    residuals: Callable[[np.ndarray], np.ndarray], x0: Sequence[float], iters: int = 300
) -> np.ndarray:
    """Levenberg–Marquardt on a small parameter vector (central-difference Jacobian);
    deterministic from ``x0``."""
    x = np.asarray(x0, dtype=float)
    r = residuals(x)
    cost, lam = float(r @ r), 1e-3
    for _ in range(iters):
        jac = np.empty((r.size, x.size))
        for j in range(x.size):
            h = np.zeros_like(x)
            h[j] = 1e-6
            jac[:, j] = (residuals(x + h) - residuals(x - h)) / 2e-6
        a, g = jac.T @ jac, jac.T @ r
        while lam < 1e12:
            step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -g)
            r_new = residuals(x + step)
            if float(r_new @ r_new) < cost:
                x, r, cost, lam = x + step, r_new, float(r_new @ r_new), lam / 3
                break
            lam *= 4
        else:
            return x
        if np.max(np.abs(step)) < 1e-12:
            break
    return x
