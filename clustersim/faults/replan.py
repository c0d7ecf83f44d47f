"""Elastic re-planning: a new data-parallel degree on the nodes there are, and the time to
move the state the new roles need over the fabric.

The new plan keeps tp, pp, the schedule and the global batch and takes the largest dp
whose GPUs fill whole nodes (a plan runs on ``nodes × gpus_per_node`` GPUs) and divides
the global batch into micro-batches. Nodes keep their role where they can: each node of
the new plan goes to the surviving node holding the most of the (stage, tp_rank) shards it
needs (ties: lowest index). A GPU that takes a role it does not hold receives that
stage's weights and optimizer states from a surviving holder (holders taken round
robin); all such transfers start together on the physical cluster's fabric (same
network model, so they share links), and the migration lasts until the last one lands.
"""

from __future__ import annotations

from types import SimpleNamespace

import simpy

from ..compilers import check_job
from ..engine.network_setup import build_network
from ..errors import ScenarioError
from ..record import Recorder
from ..resolve import resolve, topology_graph
from .config import Config, roles, scenario_of
from .state import stage_state_bytes


def new_dp(base, nodes: int, field: str, value) -> int:
    """The largest dp that fills whole nodes among ``nodes`` and that the scenario's rules
    accept (the global batch splits into micro-batches, the schedule takes their count)."""
    gpn, tp, pp = base.cluster.gpus_per_node, base.parallel.tp, base.parallel.pp
    tr = base.training
    for dp in range(nodes * gpn // (tp * pp), 0, -1):
        if (dp * tp * pp) % gpn:
            continue
        try:
            scenario_of(base, Config(phys=tuple(range(dp * tp * pp // gpn)), dp=dp))
        except ScenarioError:
            continue
        return dp
    raise ScenarioError(
        field,
        value,
        f"elastic re-plan impossible: on {nodes} node(s) of {gpn} GPUs no data-parallel "
        f"degree with tp × pp = {tp} × {pp} fills whole nodes and runs the scenario (training."
        f"global_batch = {tr.global_batch} in micro-batches of {tr.micro_batch}, schedule "
        f"{base.parallel.schedule}); use recovery.policy: checkpoint_restart",
    )


def replan(base, old: Config, available: list[int], field: str, value) -> tuple[Config, float, float]:
    """(new configuration, migration time s, bytes moved) for the nodes ``available``."""
    gpn = base.cluster.gpus_per_node
    dp = new_dp(base, len(available), field, value)
    shape = Config(phys=tuple(range(dp * base.parallel.tp * base.parallel.pp // gpn)), dp=dp)
    want = roles(base, shape)  # logical GPU → role
    held = roles(base, old)
    free, phys = sorted(available), []
    for i in range(shape.nodes):
        need = [want[i * gpn + j] for j in range(gpn)]
        best = max(free, key=lambda n: (sum(held.get(n * gpn + j) == need[j] for j in range(gpn)), -n))
        free.remove(best)
        phys.append(best)
    new = Config(phys=tuple(phys), dp=dp)
    holders: dict[tuple[int, int], list[int]] = {}
    for gpu, role in sorted(held.items()):
        if gpu // gpn in available:
            holders.setdefault(role, []).append(gpu)
    state = stage_state_bytes(check_job(resolve(scenario_of(base, new))))  # (refused as a run would be)
    moves, turn = [], dict.fromkeys(holders, 0)
    for gpu, role in sorted(roles(base, new).items()):
        if held.get(gpu) == role:
            continue
        if role not in holders:
            raise ScenarioError(
                field,
                value,
                f"elastic re-plan impossible: no surviving GPU holds the state of stage "
                f"{role[0]} (tp rank {role[1]}); use recovery.policy: checkpoint_restart",
            )
        src = holders[role][turn[role] % len(holders[role])]
        turn[role] += 1
        moves.append((src, gpu, int(state[role[0]])))
    return new, migration_time(base, max((*old.phys, *phys)) + 1, moves), float(sum(b for _, _, b in moves))


def migration_time(base, nodes: int, moves: list[tuple[int, int, int]]) -> float:
    """Time until the last of ``moves`` (src GPU, dst GPU, bytes) lands, all started at 0 on
    the fabric of a ``nodes``-node cluster (the physical cluster, joined nodes included)."""
    if not moves:
        return 0.0
    env = simpy.Environment()
    cluster = base.cluster.model_copy(update={"nodes": nodes})
    site = SimpleNamespace(  # what build_network reads of a Job
        simulation=base.simulation,
        cluster=cluster,
        graph=None if base.simulation.network == "direct" else topology_graph(cluster),
    )
    fabric = build_network(site, env, Recorder())
    done = [
        fabric.transfer(f"gpu{src}", f"gpu{dst}", nbytes, label="state migration")
        for src, dst, nbytes in moves
    ]
    env.run(simpy.AllOf(env, done))
    return env.now
