"""The text a search prints: the top plans, why the winner wins, what was pruned.

"Why" is the iteration time split the simulator measured: a GPU's iteration is compute
plus idle time (the bubble), part of which is exposed (not overlapped) communication, so
comparing the winner's seconds with the runner-up's says where the difference comes from; memory headroom says how close each plan is to not fitting.
"""

from __future__ import annotations

from typing import Any

import pandas as pd


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _placement(row: dict[str, Any]) -> str:
    parts = []
    if row.get("tp", 1) > 1:
        parts.append("tp in node" if row.get("tp_nodes", 1) == 1 else f"tp over {row['tp_nodes']} nodes")
    if row.get("dp", 1) > 1:
        parts.append(f"dp over {int(row['dp_nodes'])} node{'s' * (row['dp_nodes'] > 1)}")
    if row.get("pp", 1) > 1:
        parts.append(f"{int(row['pp_node_hops'])}/{int(row['pp']) - 1} pp hops cross nodes")
    return ", ".join(parts) or "one GPU"


def top_table(ranked: pd.DataFrame, unit: str, n: int) -> str:
    """Aligned table of the ``n`` best plans (with the estimate's iteration time and rank
    beside the simulated one when the search estimated)."""
    est = "est_iteration_s" in ranked.columns
    head = (
        f"{'rank':>4}  {'plan':<28} {'gpus':>4} {unit + '/s':>12} "
        + (f"{'est.rank':>8} {'est. s':>9} " if est else "")
        + f"{'iter s':>9} {'bubble':>7} {'exp.comm':>8} {'peak GiB':>8} {'headroom':>8}  placement"
    )
    lines = [head]
    for row in ranked.head(n).to_dict("records"):
        estimated = f"{int(row['est_rank']):>8} {row['est_iteration_s']:>9.4g} " if est else ""
        lines.append(
            f"{int(row['rank']):>4}  {row['plan']:<28} {int(row['gpus']):>4} {row['throughput']:>12.4g} "
            f"{estimated}{row['iteration_time_s']:>9.4g} {_pct(row['bubble_fraction']):>7} "
            f"{_pct(row['exposed_comm_fraction']):>8} {row['peak_memory_gib']:>8.1f} "
            f"{row['memory_headroom_gib']:>8.1f}  {_placement(row)}"
        )
    return "\n".join(lines)


def why(best: dict[str, Any], other: dict[str, Any], unit: str) -> str:
    """One paragraph: how much better ``best`` is than ``other`` and where it comes from.

    Per GPU, an iteration is compute-lane busy time, exposed communication (a
    communication lane busy while compute waits) and the bubble (compute and
    communication both idle, waiting for another GPU; docs/metrics.md). Seconds are
    fraction × iteration time."""
    gain = best["throughput"] / other["throughput"] - 1 if other["throughput"] else float("inf")
    tb, to = best["iteration_time_s"], other["iteration_time_s"]

    def split(row, t):
        bubble, exposed = row["bubble_fraction"], row["exposed_comm_fraction"]
        return t * (1 - bubble - exposed), t * bubble, t * exposed

    (cb, ib, eb), (co, io, eo) = split(best, tb), split(other, to)
    return (
        f"#{int(best['rank'])} {best['plan']} beats #{int(other['rank'])} {other['plan']} by "
        f"{100 * gain:.1f}% {unit}/s: per iteration {tb:.4g} s vs {to:.4g} s = compute {cb:.4g} s vs "
        f"{co:.4g} s + exposed communication {eb:.3g} s vs {eo:.3g} s + bubble {ib:.3g} s vs "
        f"{io:.3g} s ({_pct(best['bubble_fraction'])} vs {_pct(other['bubble_fraction'])}). "
        f"Memory headroom {best['memory_headroom_gib']:.1f} GiB vs {other['memory_headroom_gib']:.1f} GiB."
    )


def explain(result, n: int = 5) -> str:
    """The full search report (what ``clustersim search`` prints)."""
    t = result.table
    counts = t["status"].value_counts().to_dict()
    simulated = sum(counts.get(s, 0) for s in ("ok", "oom", "error", "timeout"))
    estimated = (
        "" if "est_rank" not in t.columns else f"{int(t['est_rank'].notna().sum())} fit by the estimate, "
    )
    lines = [
        f"{len(t)} plans: {estimated}{counts.get('pruned', 0)} pruned by the memory estimate, {simulated} "
        f"simulated ({counts.get('ok', 0)} ok) in {result.wall_s:.1f} s; objective: {result.objective}"
    ]
    for status, reason in (
        ("invalid", "refused by the scenario rules"),
        ("unexplored", "past the time budget"),
    ):
        if "est_rank" in t.columns and counts.get(status):
            lines.append(f"{counts[status]} plans {status} ({reason})")
    ranked = result.ranked
    if ranked.empty:
        lines.append("no plan fits in memory and simulates")
    else:
        lines += ["", top_table(ranked, result.unit, n), ""]
        rows = ranked.to_dict("records")
        if len(rows) > 1:
            lines.append("Why: " + why(rows[0], rows[1], result.unit))
            if len(rows) > 2:
                lines.append("And vs the slowest: " + why(rows[0], rows[-1], result.unit))
    gap = result.estimate_gap
    if gap is not None:
        top = t[t["est_rank"] == 1].iloc[0]["plan"]
        lines.append(
            f"The estimate's top-1 ({top}) simulates {_pct(gap)} below the best simulated plan"
            if gap > 0
            else f"The estimate's top-1 ({top}) is the best simulated plan"
        )
    failed = t[t["status"].isin(["oom", "error", "timeout"])]
    for row in failed.head(5).to_dict("records"):
        lines.append(f"{row['status']}: {row['plan']} {row.get('error', '')}".rstrip())
    pruned = result.pruned
    if len(pruned):
        shown = ", ".join(
            f"{r['plan']} ({r['est_memory_gib']:.1f} GiB)" for r in pruned.head(6).to_dict("records")
        )
        more = f" and {len(pruned) - 6} more" if len(pruned) > 6 else ""
        cap = pruned["capacity_gib"].iloc[0]
        lines.append(f"Pruned (estimated peak memory > {cap:.1f} GiB per GPU): {shown}{more}")
    return "\n".join(lines)
