"""Several jobs on one cluster (clustersim.multijob, docs/multi_job.md): shared links are
shared fairly, disjoint jobs run exactly as alone, placements and start times hold."""

from __future__ import annotations

import copy

import pytest
import yaml

import clustersim as cs
from clustersim.errors import ScenarioError

GRAD = 2 * 2**28  # 2 layers × 256 MiB of parameters: the gradient each DP all-reduce moves
NIC = 100e9 / 8  # 100 Gbps in bytes/s
SYNTH = {
    "kind": "synthetic",
    "layers": 2,
    "forward": "1 ms",
    "backward": "2 ms",
    "activation": "1 MiB",
    "params": "256 MiB",
    "optimizer": "1 ms",
}


def _dp_job(name: str, gpus) -> dict:
    return {
        "name": name,
        "model": dict(SYNTH),
        "training": {"global_batch": 2, "micro_batch": 1},
        "parallel": {"dp": 2},
        "placement": {"gpus": gpus},
    }


def _fat_tree(jobs: list[dict], network: str, oversubscription: float = 2) -> dict:
    """Four one-GPU nodes, two per leaf, one spine: a leaf's uplink carries
    2 · NIC / oversubscription, so at 2 it is one NIC's worth for the two nodes below."""
    return {
        "name": "two-dp-jobs",
        "cluster": {
            "nodes": 4,
            "gpus_per_node": 1,
            "gpu": "A100-SXM4-80GB",
            "nic": {"per_node": 1, "bandwidth": "100 Gbps", "latency": "2 us"},
            "topology": {
                "kind": "fat_tree",
                "nodes_per_leaf": 2,
                "spines": 1,
                "oversubscription": oversubscription,
            },
        },
        "simulation": {"iterations": 1, "network": network},
        "jobs": jobs,
    }


def _allreduce_s(res) -> float:
    ar = res.spans[res.spans["kind"] == "collective"]
    return float((ar["end_s"] - ar["start_s"]).max())


def _cross_leaf(network: str, oversubscription: float = 2):
    """Job a on GPUs 0 and 2, b on 1 and 3: both all-reduces cross leaf0 ↔ spine0; and a alone."""
    both = cs.simulate(
        _fat_tree([_dp_job("a", [0, 2]), _dp_job("b", "1,3")], network, oversubscription), progress=False
    )
    alone = cs.simulate(_fat_tree([_dp_job("a", [0, 2])], network, oversubscription), progress=False)
    return both, alone


def test_two_jobs_on_one_bottleneck_each_get_half_of_it_flow():
    both, alone = _cross_leaf("flow")
    # a 2-rank ring all-reduce sends the whole gradient once across the uplink: alone at
    # the uplink's (= one NIC's) rate, together at half of it — the same latency terms
    for name in "ab":
        assert _allreduce_s(both.jobs[name]) - _allreduce_s(alone.jobs["a"]) == pytest.approx(
            GRAD / NIC, rel=1e-12
        )
    assert both.summary["a.iteration_time_s"] == both.summary["b.iteration_time_s"]


def test_two_jobs_on_one_bottleneck_each_get_half_of_it_packet():
    both, alone = _cross_leaf("packet")
    links = both.spans[(both.spans["device"] == "leaf0->spine0")]
    for name in "ab":
        mine = links[links["job"] == name]
        assert mine["bytes"].sum() == GRAD
        rate = GRAD / (mine["end_s"].max() - mine["start_s"].min())
        assert rate == pytest.approx(NIC / 2, rel=2e-3)  # to the last chunk's interleaving
        slowdown = _allreduce_s(both.jobs[name]) - _allreduce_s(alone.jobs["a"])
        assert slowdown == pytest.approx(GRAD / NIC, rel=1e-2)


@pytest.mark.parametrize("network", ["flow", "packet"])
def test_a_non_blocking_tree_takes_the_slowdown_away(network):
    both, alone = _cross_leaf(network, oversubscription=1)  # uplink = 2 NICs: each flow NIC-bound
    for name in "ab":
        assert _allreduce_s(both.jobs[name]) == pytest.approx(_allreduce_s(alone.jobs["a"]), rel=1e-2)
    if network == "flow":
        assert both.summary["a.iteration_time_s"] == alone.summary["a.iteration_time_s"]


def _node_job(name: str, placement, start=0.0) -> dict:
    """A 2-stage pipeline × 2 replicas on one 4-GPU node (NVSwitch only)."""
    return {
        "name": name,
        "model": {**SYNTH, "layers": 4, "activation": "64 MiB"},
        "training": {"global_batch": 8, "micro_batch": 1},
        "parallel": {"pp": 2, "dp": 2},
        "placement": placement,
        "start": start,
    }


NODE_CLUSTER = {
    "nodes": 2,
    "gpus_per_node": 4,
    "gpu": "A100-SXM4-80GB",
    "intra_node": {"kind": "nvswitch", "bandwidth": "300 GB/s", "latency": "2 us"},
}


def _gpu_spans(res):
    sp = res.spans[res.spans["lane"] != "link"].drop(columns=["job"], errors="ignore")
    return sp.reset_index(drop=True)


def _in_order(spans):
    return spans.sort_values(["start_s", "device", "lane"], kind="stable").reset_index(drop=True)


def _alone():
    job = _node_job("b", None)
    raw = {k: job[k] for k in ("name", "model", "training")}
    raw.update(cluster=NODE_CLUSTER, parallel={**job["parallel"], "gpus": 4}, simulation={"iterations": 2})
    return cs.simulate(raw, progress=False)


def test_jobs_on_disjoint_links_run_exactly_as_alone():
    sc = {
        "name": "disjoint",
        "cluster": NODE_CLUSTER,
        "simulation": {"iterations": 2},
        "jobs": [_node_job("a", {"gpus": "0-3"}), _node_job("b", {"gpus": "4-7"})],
    }
    both, alone = cs.simulate(sc, progress=False), _alone()
    for name in "ab":
        assert _gpu_spans(both.jobs[name]).equals(_gpu_spans(alone))
        assert both.summary[f"{name}.iteration_time_s"] == alone.summary["iteration_time_s"]
        assert both.summary[f"{name}.bubble_fraction"] == alone.summary["bubble_fraction"]
    # in the combined Result, b's spans are the same under its cluster GPU names
    gpu = both.spans[both.spans["lane"] != "link"]
    b = _in_order(gpu[gpu["job"] == "b"].drop(columns="job"))
    local = _gpu_spans(alone)
    assert b.equals(
        _in_order(local.assign(device="gpu" + (local["device"].str[3:].astype(int) + 4).astype(str)))
    )
    assert list(both.devices["job"]) == ["a"] * 4 + ["b"] * 4
    assert list(both.devices["node"]) == [0] * 4 + [1] * 4


def test_start_delays_a_job_by_exactly_its_start():
    sc = {
        "name": "late",
        "cluster": NODE_CLUSTER,
        "simulation": {"iterations": 2},
        "jobs": [_node_job("a", {"gpus": "0-3"}), _node_job("b", {"gpus": "4-7"}, start="10 ms")],
    }
    late, alone = cs.simulate(sc, progress=False).jobs["b"], _alone()
    got, want = _gpu_spans(late), _gpu_spans(alone)
    assert float(got["start_s"].min()) == 0.01
    key = ["device", "lane", "iteration", "name", "microbatch"]
    got, want = got.sort_values(key).reset_index(drop=True), want.sort_values(key).reset_index(drop=True)
    assert got[key].equals(want[key])
    for col in ("start_s", "end_s"):
        assert got[col].to_numpy() - 0.01 == pytest.approx(want[col].to_numpy(), abs=1e-12)
    assert late.summary["iteration_time_s"] == pytest.approx(alone.summary["iteration_time_s"], rel=1e-9)


def _placements(jobs: list[tuple[str, dict, dict]]) -> dict:
    raw = {
        "cluster": NODE_CLUSTER,
        "jobs": [
            {
                "name": n,
                "model": dict(SYNTH),
                "training": {"global_batch": 12},
                "parallel": par,
                "placement": pl,
            }
            for n, par, pl in jobs
        ],
    }
    return cs.load_scenario(raw).placement


def test_placement_policies():
    two = {"dp": 2}
    assert _placements([("a", two, {"policy": "packed"}), ("b", two, {})]) == {"a": (0, 1), "b": (2, 3)}
    assert _placements([("a", two, {"policy": "spread"}), ("b", two, {"policy": "spread"})]) == {
        "a": (0, 4),
        "b": (1, 5),
    }
    # after a 3-GPU job on node 0, spread takes each node's first free GPU, per_rail stays on rails
    three = {"gpus": 3}
    assert _placements([("a", three, {}), ("b", two, {"policy": "spread"})])["b"] == (3, 4)
    assert _placements([("a", three, {}), ("b", two, {"policy": "per_rail"})])["b"] == (4, 5)
    assert _placements([("a", three, {"gpus": "5-7"}), ("b", {"gpus": 4}, {"policy": "per_rail"})])["b"] == (
        0,
        1,
        2,
        4,
    )


@pytest.mark.parametrize(
    "jobs,message",
    [
        (
            [("a", {"dp": 4}, {"gpus": "0-3"}), ("b", {"dp": 2}, {"gpus": [3, 4]})],
            "jobs[1].placement.gpus: [3, 4] is invalid; job 'b' overlaps job 'a' on GPU 3",
        ),
        ([("a", {"dp": 2}, {"gpus": "0-x"})], "expected GPU indices and ranges such as '0-7,16-23'"),
        ([("a", {"dp": 2}, {"gpus": [0, 9]})], "GPU 9 is not in the cluster (GPUs 0 to 7)"),
        ([("a", {}, {"policy": "spread"})], "jobs[0].parallel.gpus: None is invalid; a job placed by policy"),
        ([("a", {"gpus": 6}, {}), ("b", {"gpus": 4}, {})], "only 2 of the cluster's 8 GPUs are left free"),
        (
            [("a", {"gpus": 3}, {"gpus": [0, 1]})],
            "jobs[0].parallel.gpus: 3 is invalid; the placement lists 2 GPUs",
        ),
        (
            [("a", {"tp": 3}, {"gpus": [0, 1]})],
            "jobs[0].parallel.tp: 3 is invalid; the job's 2 GPUs do not divide",  # dp unstated: tp named
        ),
        ([("a", {}, {"gpus": [0], "policy": "packed"})], "give either gpus or policy, not both"),
        (
            [
                (
                    "a",
                    {"dp": 2, "gradient_compression": {"ratio": 10, "links": "inter_node"}},
                    {"gpus": [0, 4]},
                )
            ],
            "jobs[0].parallel.gradient_compression.links: 'inter_node' is invalid",
        ),
        (
            [("a", {"dp": 1}, {"gpus": [0]}), ("a", {"dp": 1}, {"gpus": [1]})],
            "each job needs a name of its own",
        ),
    ],
)
def test_bad_placements_name_the_field_and_the_jobs(jobs, message):
    with pytest.raises(ScenarioError) as exc:
        _placements(jobs)
    assert message in str(exc.value)


def test_overrides_and_resolved_scenario():
    raw = _fat_tree([_dp_job("a", [0, 2]), _dp_job("b", "1,3")], "flow")
    sc = cs.load_scenario(copy.deepcopy(raw)).with_overrides({"cluster.topology.oversubscription": 1})
    assert sc.cluster.topology["oversubscription"] == 1
    out = sc.resolved()
    assert [j["placement"]["gpus"] for j in out["jobs"]] == [[0, 2], [1, 3]]
    assert out["jobs"][1]["parallel"]["gpus"] == 2


SCENARIO = "scenarios/two-jobs-oversubscribed-fat-tree.yaml"


def test_shipped_scenario_matches_the_fair_share():
    """Each all-reduce is S/B longer sharing the 2:1 uplinks (S: the gradient, B: one NIC)
    and as alone on the non-blocking tree (the scenario header's closed form)."""
    sc = cs.load_scenario(SCENARIO)
    oversub, flat = (
        cs.simulate(sc.with_overrides({"cluster.topology.oversubscription": k}), progress=False)
        for k in (2, 1)
    )
    for name in ("job_a", "job_b"):
        ar = flat.jobs[name].spans
        grad = int(ar.loc[ar["kind"] == "collective", "bytes"].iloc[0])
        assert _allreduce_s(oversub.jobs[name]) - _allreduce_s(flat.jobs[name]) == pytest.approx(
            grad / 50e9, rel=1e-9
        )
    raw = yaml.safe_load(open(SCENARIO))
    alone = cs.simulate({**raw, "jobs": raw["jobs"][:1]}, progress=False)
    assert flat.summary["job_a.iteration_time_s"] == alone.summary["job_a.iteration_time_s"]


def test_combined_result_saves_and_draws(tmp_path):
    res = cs.simulate(SCENARIO, progress=False)
    fig = res.plot_gantt()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert any(label.startswith("gpu8 ") and "job_b" in label for label in labels)
    res.to_chrome_trace(tmp_path / "trace.json")
    loaded = cs.load_result(res.save(tmp_path / "bundle", plots=False))
    assert loaded.summary["job_b.iteration_time_s"] == res.summary["job_b.iteration_time_s"]


def test_single_job_tools_refuse_a_multi_job_scenario_by_name():
    sc = cs.load_scenario(SCENARIO)
    with pytest.raises(ScenarioError, match=r"^jobs: \['job_a', 'job_b'\] is invalid; a multi-job scenario"):
        cs.compile_scenario(sc)
    with pytest.raises(ScenarioError, match="^model: None is invalid; a multi-job scenario has no top-level"):
        _ = sc.model


def test_a_job_its_compiler_refuses_is_named_as_the_loader_names_it():
    """A rule of the job's compiler (checked after resolve, before anything runs) names the
    field as ``jobs[k].…``, like the loader's."""
    raw = _fat_tree([_dp_job("a", [0, 2]), _dp_job("b", "1,3")], "analytical")
    raw["jobs"][1]["parallel"].update(zero=3, data_parallel={"shard_group_size": 4})
    with pytest.raises(
        ScenarioError,
        match=r"^jobs\[1\]\.parallel\.data_parallel\.shard_group_size: 4 is invalid; HSDP needs",
    ):
        cs.simulate(raw, progress=False)
