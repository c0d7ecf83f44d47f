"""A configuration the job runs in: which physical nodes, which data-parallel degree,
which cables are down — and the plain scenario (no faults) that simulates one of its
iterations."""

from __future__ import annotations

from dataclasses import dataclass

from ..parallel.plan import Plan


@dataclass(frozen=True)
class Config:
    """``phys[i]`` is the physical node that logical node ``i`` of the plan runs on;
    physical nodes are the cluster's 0..nodes−1, then joined nodes in joining order."""

    phys: tuple[int, ...]
    dp: int
    failed_links: tuple[tuple[str, str], ...] = ()

    @property
    def nodes(self) -> int:
        return len(self.phys)

    def label(self) -> str:
        down = f", {len(self.failed_links)} link(s) down" if self.failed_links else ""
        return f"{self.nodes} nodes, dp {self.dp}{down}"


def scenario_of(base, cfg: Config):
    """The fault-free scenario of one configuration (same model, tp, pp, schedule)."""
    return base.with_overrides(
        {
            "cluster.nodes": cfg.nodes,
            "parallel.dp": cfg.dp,
            "cluster.failed_links": [list(link) for link in cfg.failed_links],
            "faults": [],
            "recovery": None,
        }
    )


def roles(base, cfg: Config) -> dict[int, tuple[int, int]]:
    """Physical GPU → the (stage, tp_rank) whose state it holds in ``cfg``."""
    gpn, par = base.cluster.gpus_per_node, base.parallel
    plan = Plan(tp=par.tp, pp=par.pp, dp=cfg.dp, gpus_per_node=gpn)
    out = {}
    for i, node in enumerate(cfg.phys):
        for j in range(gpn):
            stage, _, tp_rank = plan.coords(i * gpn + j)
            out[node * gpn + j] = (stage, tp_rank)
    return out
