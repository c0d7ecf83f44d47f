"""Exports ASTRA-sim can run: each rank's sends and collectives chained in one agreed order
(clustersim/interop/chakra_serial.py), replayed here under ASTRA-sim's issue rules.

The replayer below is ASTRA-sim's workload layer reduced to what decides whether a trace
finishes (astra-sim 7e526fb ``workload/Workload.cc``, ``HardwareResource.cc``): a rank issues
its dependency-free nodes in id order while a resource is free — one compute node, one
communication node (a send or a collective) in flight; receives always — a collective ends
once every member has issued its k-th collective of that group, a receive once its send
was issued, everything else one tick after issue. A trace is runnable there when every node
of every rank ends."""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.interop.chakra_attrs import attrs_of
from clustersim.interop.chakra_file import read_trace
from clustersim.interop.chakra_import import import_chakra
from clustersim.interop.chakra_serial import global_order, serial_chain
from clustersim.program import COLLECTIVE, SEND

ROOT = Path(__file__).resolve().parents[1]
COMP, SEND_NODE, RECV_NODE, COLL = 4, 5, 6, 7


def _ranks(folder: Path) -> list[dict]:
    """Per rank, node id → (node, attributes)."""
    out = []
    for path in sorted(folder.glob("trace.*.et"), key=lambda p: int(p.name.split(".")[1])):
        _, nodes = read_trace(path)
        out.append({n.id: (n, attrs_of(n)) for n in nodes})
    return out


def astra_like_replay(folder: Path) -> tuple[int, int]:
    """(nodes ended, nodes in the trace) of the traces in ``folder`` under the rules above."""
    ranks = _ranks(folder)
    path = folder / "comm_group.json"
    groups = json.loads(path.read_text()) if path.is_file() else {}
    done = [set() for _ in ranks]
    issued = [set() for _ in ranks]
    busy = [{"comp": None, "comm": None} for _ in ranks]
    coll_k = [defaultdict(int) for _ in ranks]  # per rank, collectives of a group issued so far
    waiting = defaultdict(list)  # (group, k) → (rank, node id) issued, not ended
    sends = defaultdict(int)  # (src, dst, tag) → sends issued
    recvs = defaultdict(list)  # (src, dst, tag) → recv node ids issued, not ended, in order
    fed = defaultdict(int)  # (src, dst, tag) → recvs ended
    events: list[tuple[int, int, int]] = []
    now = 0

    def members(r: int, nid: int) -> int:
        g = ranks[r][nid][1].get("pg_name", "")
        return len(groups[g]) if g else len(ranks)

    def issue(r: int, nid: int) -> None:
        node, a = ranks[r][nid]
        kind = {COMP: "comp", RECV_NODE: None}.get(node.type, "comm")
        if kind is not None and busy[r][kind] is not None:
            return
        issued[r].add(nid)
        if kind is not None:
            busy[r][kind] = nid
        if node.type in (COMP, SEND_NODE):
            heapq.heappush(events, (now + 1, r, nid))
            if node.type == SEND_NODE:
                sends[r, a["comm_dst"], a.get("comm_tag", 0)] += 1
        elif node.type == RECV_NODE:
            recvs[a["comm_src"], r, a.get("comm_tag", 0)].append(nid)
        else:
            g = a.get("pg_name", "")
            waiting[g, coll_k[r][g]].append((r, nid))
            coll_k[r][g] += 1

    # per rank: each node's unmet deps, who waits on it, and its dependency-free nodes
    left = [{nid: len({*n.data_deps, *n.ctrl_deps}) for nid, (n, _) in nodes.items()} for nodes in ranks]
    users = [defaultdict(list) for _ in ranks]
    for r, nodes in enumerate(ranks):
        for nid, (n, _) in nodes.items():
            for d in {*n.data_deps, *n.ctrl_deps}:
                users[r][d].append(nid)
    free = [sorted(nid for nid, k in left[r].items() if k == 0) for r in range(len(ranks))]
    dirty = set(range(len(ranks)))  # ranks whose state changed since they last issued
    while True:
        for r in dirty:
            for nid in list(free[r]):
                issue(r, nid)
            free[r] = [nid for nid in free[r] if nid not in issued[r]]
        dirty.clear()
        for key, issued_by in list(waiting.items()):
            if len(issued_by) == members(*issued_by[0]):
                for r, nid in issued_by:
                    heapq.heappush(events, (now + 1, r, nid))
                del waiting[key]
        for key, ids in recvs.items():
            while ids and sends[key] > fed[key]:
                heapq.heappush(events, (now + 1, key[1], ids.pop(0)))
                fed[key] += 1
        if not events:
            return sum(map(len, done)), sum(map(len, ranks))
        now, r, nid = heapq.heappop(events)
        done[r].add(nid)
        dirty.add(r)
        for kind in ("comp", "comm"):
            if busy[r][kind] == nid:
                busy[r][kind] = None
        for u in users[r][nid]:
            left[r][u] -= 1
            if not left[r][u]:
                free[r].append(u)
        free[r].sort()


# the quickstart (TP, PP and DP at once: 16 ranks, ~30k nodes) is the slow-marked case
CASES = [
    pytest.param("quickstart", marks=pytest.mark.slow),
    "synthetic-4stage-1f1b",
    "pipedream-vgg16-16xV100-10GbE",
]


@pytest.mark.parametrize("name", CASES)
def test_an_export_runs_to_completion_under_astra_sims_issue_rules(name, tmp_path):
    prog = cs.compile_scenario(cs.load_scenario(ROOT / "scenarios" / f"{name}.yaml"))
    cs.export_chakra(prog, tmp_path)
    ended, total = astra_like_replay(tmp_path)
    assert ended == total


@pytest.mark.slow
def test_without_the_chain_the_quickstart_deadlocks_as_it_did_in_astra_sim(tmp_path):
    from clustersim.interop.chakra_export import export_chakra

    prog = cs.compile_scenario(cs.load_scenario(ROOT / "scenarios" / "quickstart.yaml"))
    export_chakra(prog, tmp_path, serial=False)
    ended, total = astra_like_replay(tmp_path)
    assert ended < total


@pytest.mark.parametrize("name", CASES)
def test_the_chain_agrees_across_ranks_and_with_the_programs_waits(name):
    prog = cs.compile_scenario(cs.load_scenario(ROOT / "scenarios" / f"{name}.yaml"))
    place = global_order(prog)
    for op in prog.ops:  # every wait points to an earlier place
        for d in op.deps:
            assert place[d] < place[op.id]  # (a collective member sits at its rendezvous, after its deps)
    for members in prog.collective_members().values():  # a collective's members share one place
        assert len({place[m.id] for m in members}) == 1
    chain = serial_chain(prog)
    for after, before in chain.items():
        a, b = prog.ops[after], prog.ops[before]
        assert a.device == b.device and {a.kind, b.kind} <= {SEND, COLLECTIVE}
        assert (place[before], before) < (place[after], after)


def test_clustersims_import_leaves_the_chain_out(tmp_path):
    prog = cs.compile_scenario(cs.load_scenario(ROOT / "scenarios" / "hap-mixed-a100-v100.yaml"))
    cs.export_chakra(prog, tmp_path)
    chained = [a for nodes in _ranks(tmp_path) for _, a in nodes.values() if "clustersim.serial" in a]
    assert chained  # (its sends and all-reduces sit on different lanes)
    back = import_chakra(tmp_path)
    assert [op.deps for op in back.ops] == [op.deps for op in prog.ops]


@pytest.mark.parametrize(
    "name,field",
    [
        ("ps-edge-16workers-20mbit", "parallel.parameter_server"),
        ("two-jobs-oversubscribed-fat-tree", "jobs"),
        ("gpt-7.5b-32gpu-gpu-fail", "faults"),
        ("llama2-7b-grpo-8xa100", "rlhf"),
        ("llama2-7b-serving-1xa100", "generation"),
    ],
)
def test_what_a_trace_cannot_describe_is_refused_with_the_reason(name, field, tmp_path):
    with pytest.raises(cs.ScenarioError, match=f"^{field}: .*a Chakra trace .* holds one job's ranks"):
        cs.export_chakra(ROOT / "scenarios" / f"{name}.yaml", tmp_path)
    assert not list(tmp_path.iterdir())
