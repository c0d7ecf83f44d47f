"""Gradient compression on chosen links (``parallel.gradient_compression.links``):
``inter_site`` / ``inter_node`` compress only the all-reduce step that crosses sites /
servers (clustersim.compilers.pipeline.gradient_sync)."""

from pathlib import Path

import pytest

import clustersim as cs

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "fusionllm-gpt-1.3b-48gpu-3sites-wan.yaml"
GIB = 2**30
B_INTRA, LAT_INTRA = 300e9, 1e-6  # NVSwitch: GPU→switch→GPU path latency = intra_node.latency
B_WAN, LAT_WAN = 125e6, 20e-3  # 1 Gbit/s, 20 ms
ALPHA_INTRA, ALPHA_INTER = 3e-6, 10e-6
F, B = 5e-3, 10e-3  # per layer


def _sites(
    links: str | None,
    *,
    sites: int = 2,
    per_site: int = 4,
    nodes_per_site: int = 1,
    pp: int = 1,
    ratio: float = 10,
    per_gib: float = 0.1,
    wan: float = B_WAN,
    analytical: bool = True,
    params: int = GIB,
) -> dict:
    """``sites`` sites of ``nodes_per_site`` servers of ``per_site / nodes_per_site`` GPUs (one
    NVSwitch each; a site of several servers is a fat-tree), joined by one WAN link per pair.
    Each stage has 2 layers and ``params`` gradient bytes."""
    gpn = per_site // nodes_per_site
    site_topo = {"kind": "single_node"} if nodes_per_site == 1 else {"kind": "fat_tree"}
    n = sites * per_site
    raw = {
        "name": f"{sites} sites, compression on {links}",
        "cluster": {
            "nodes": sites * nodes_per_site,
            "gpus_per_node": gpn,
            "intra_node": {"bandwidth": B_INTRA, "latency": LAT_INTRA},
            "nic": {"bandwidth": "200 Gbit/s", "per_node": gpn, "latency": 0},
            "collective_alpha": {"intra_node": ALPHA_INTRA, "inter_node": ALPHA_INTER},
            "topology": {
                "kind": "wan",
                "bandwidth": wan,
                "latency": LAT_WAN,
                "sites": [{"nodes": nodes_per_site, "topology": site_topo}] * sites,
            },
        },
        "model": {"kind": "synthetic", "layers": 2 * pp, "forward": F, "backward": B, "params": params // 2},
        "training": {"global_batch": 2 * n // pp},
        "parallel": {"pp": pp, "dp": n // pp},
        "simulation": {
            "network": "packet",
            "collectives": {"all_reduce": "ring", "reduce_scatter": "ring", "all_gather": "ring"},
        },
    }
    if analytical:
        raw["simulation"]["collective_model"] = "analytical"
    if links is not None:
        raw["parallel"]["gradient_compression"] = {"ratio": ratio, "time_per_gib": per_gib, "links": links}
    return raw


def _compute(raw: dict) -> float:
    """Idle-pipeline compute time of one pp = 1 iteration: m micro-batches × layers × (f + b)."""
    par = raw["parallel"]
    return raw["training"]["global_batch"] // par["dp"] * raw["model"]["layers"] * (F + B)


def _ring_in_host(kind: str, n: int, nbytes: float) -> float:
    """α-β ring reduce-scatter / all-gather of ``nbytes`` over n GPUs of one NVSwitch host."""
    assert kind in ("reduce_scatter", "all_gather")
    return (n - 1) * (ALPHA_INTRA + LAT_INTRA + nbytes / (n * B_INTRA))


def test_inter_site_is_intra_site_reduce_scatter_compressed_shard_all_reduce_all_gather():
    # 2 sites × 4 GPUs, dp 8, S = 1 GiB: T = compute + RS(4, S) + S/4·c/2 + AR_x + S/4·c/2 + AG(4, S),
    # AR_x = ring of the 2 GPUs holding one shard, across the WAN: 2(α + ℓ_wan) + (S/(4k))/B_wan
    raw = _sites("inter_site")
    res = cs.simulate(raw, progress=False)
    k, c, L = 10, 0.1 / GIB, 4
    shard = int(GIB / (L * k))
    t_x = 2 * (ALPHA_INTER + LAT_WAN) + shard / B_WAN
    expect = (
        _compute(raw)
        + _ring_in_host("reduce_scatter", L, GIB)
        + GIB / L * c
        + t_x
        + _ring_in_host("all_gather", L, GIB)
    )
    assert res.summary["iteration_time_s"] == pytest.approx(expect, rel=1e-9)
    coll = res.spans[res.spans["kind"] == "collective"]
    by_name = coll.groupby("name")["bytes"].unique().to_dict()
    assert {k: list(v) for k, v in by_name.items()} == {
        "dp reduce-scatter s0": [GIB],
        "dp all-reduce s0": [shard],
        "dp all-gather s0": [GIB],
    }
    codec = res.spans[res.spans["name"].isin(["compress", "decompress"])]
    assert len(codec) == 2 * 8 and codec.eval("end_s - start_s").to_numpy() == pytest.approx(GIB / L * c / 2)


def test_inter_site_wan_link_carries_only_the_compressed_shards():
    # packet model: the 4 shard all-reduces share the WAN link, each 2-GPU ring sends its
    # shard once each way — so each direction carries 4 × S/(4k) bytes, nothing uncompressed
    raw = _sites("inter_site", analytical=False)
    res = cs.simulate(raw, progress=False)
    links = res.spans[res.spans["kind"] == "link"]
    shard = int(GIB / (4 * 10))
    for wan in ("site0.gw->site1.gw", "site1.gw->site0.gw"):
        assert links.loc[links["device"] == wan, "bytes"].sum() == 4 * shard
    # the cross-site step is bound by the shared WAN: busy for 4·S/(4k)/B, the last byte landing
    # ℓ after it left (while one ring waits out the latency between its two steps, the others
    # use the link, so one ℓ shows); per-step α and chunk pipelining are the tolerance
    t_x = LAT_WAN + 4 * shard / B_WAN
    expect = _compute(raw) + 2 * _ring_in_host("reduce_scatter", 4, GIB) + GIB / 4 * 0.1 / GIB + t_x
    assert res.summary["iteration_time_s"] == pytest.approx(expect, rel=1e-3)


def test_groups_inside_one_site_are_not_compressed():
    # pp 2 with one stage per site: each DP group lives in one site; inter_site changes
    # nothing, while inter_node compresses across each site's 2 servers
    plain = cs.simulate(_sites(None, pp=2, nodes_per_site=2), progress=False)
    site = cs.simulate(_sites("inter_site", pp=2, nodes_per_site=2), progress=False)
    assert site.summary["iteration_time_s"] == plain.summary["iteration_time_s"]
    assert not site.spans["name"].isin(["compress", "decompress"]).any()
    node = cs.simulate(_sites("inter_node", pp=2, nodes_per_site=2), progress=False)
    ar = node.spans[node.spans["name"].str.startswith("dp all-reduce")]
    assert (ar["bytes"] == int(GIB / (2 * 10))).all()  # 2 GPUs per server: shards of S/2, compressed
    assert node.spans["name"].eq("compress").sum() == 8


def test_inter_node_with_one_gpu_per_server_is_compression_everywhere():
    # L = 1: no intra-server steps; each GPU codes the whole gradient, as with links: all
    every = cs.simulate(_sites("all", per_site=1), progress=False)
    node = cs.simulate(_sites("inter_node", per_site=1), progress=False)
    assert node.summary["iteration_time_s"] == every.summary["iteration_time_s"]
    assert set(node.spans["name"]) == set(every.spans["name"])


def test_compressing_only_the_wan_pays_where_compressing_everything_costs():
    # 2 sites × 8 GPUs at 400 Gbit/s, ratio 10, 100 ms/GiB. Compressing everything codes the
    # whole S on every GPU: pays only while B_wan < (1 − 1/k)/c ≈ 77 Gbit/s. inter_site codes
    # S/8 per GPU and saves the same WAN bytes: pays while B_wan < 8(1 − 1/k)/c ≈ 618 Gbit/s.
    def t(links):
        raw = _sites(links, per_site=8, wan="400 Gbit/s", analytical=False, params=GIB)
        return cs.simulate(raw, progress=False).summary["iteration_time_s"]

    plain = t(None)
    assert t("all") > plain
    assert t("inter_site") < plain


def test_unequal_sites_are_an_error():
    raw = _sites("inter_site")
    raw["cluster"]["nodes"] = 3
    raw["cluster"]["topology"]["sites"] = [{"nodes": 1}, {"nodes": 2}]
    raw["parallel"]["dp"] = 12
    raw["training"]["global_batch"] = 24
    with pytest.raises(
        cs.ScenarioError,
        match=r"parallel.gradient_compression.links: 'inter_site' is invalid; "
        r"stage 0's data-parallel group holds \{0: 4, 1: 8\} GPUs per site",
    ):
        cs.resolve_scenario(raw)  # checked by the pipeline compiler right after resolve, before anything runs


def test_unknown_links_value_is_an_error():
    raw = _sites("inter_rack")
    with pytest.raises(
        cs.ScenarioError, match=r"parallel.gradient_compression.links: 'inter_rack' is invalid"
    ):
        cs.load_scenario(raw)


def test_folding_is_refused_with_the_reason():
    raw = _sites("inter_site")
    raw["simulation"]["fold"] = True
    with pytest.raises(
        cs.ScenarioError, match="cannot fold this scenario: gradient_compression on inter_site"
    ):
        cs.simulate(raw, progress=False)
    raw["simulation"]["fold"] = "auto"
    assert "gradient_compression on inter_site" in cs.simulate(raw, progress=False).summary["folded"]


def test_shipped_fusionllm_scenario_compresses_only_between_sites():
    from clustersim.simulate import compile_scenario
    from clustersim.topology import build_topology
    from clustersim.topology.wan import gpu_sites

    sc = cs.load_scenario(SCENARIO)
    site = gpu_sites(build_topology(sc.cluster.model_dump()))
    assert site == [g // 16 for g in range(48)]  # 3 sites × 2 nodes × 8 GPUs
    for op in compile_scenario(sc).ops:
        if op.name.startswith("dp all-reduce"):  # one GPU per site: the only traffic leaving a site
            assert sorted(site[d] for d in op.group) == [0, 1, 2]
        elif op.name.startswith(("dp reduce-scatter", "dp all-gather")):
            assert len({site[d] for d in op.group}) == 1 and len(op.group) == 2
    res = cs.simulate(sc, progress=False)
    assert not res.summary["oom"]
    coll = res.spans[res.spans["kind"] == "collective"]
    grad = coll.loc[coll["name"].str.startswith("dp reduce-scatter"), "bytes"].unique()
    assert len(grad) == 1  # every GPU holds the same 1/8 (tp) of the gradients
    ar = coll.loc[coll["name"].str.startswith("dp all-reduce"), "bytes"]
    assert (ar == int(grad[0] / 2 / 50)).all()  # half of it (2 per site), compressed 50×
