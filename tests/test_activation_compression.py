"""Compression of pipeline activations (and their gradients) on chosen links
(``parallel.activation_compression``, clustersim.parallel.compression)."""

import pytest

import clustersim as cs

MIB = 2**20
F, B, A = 4e-3, 8e-3, 64 * MIB  # per layer; activation bytes per micro-batch
B_WAN, LAT_WAN = 125e6, 20e-3


def _pipeline(
    links: str | None,
    *,
    sites: int = 2,
    per_site: int = 1,
    m: int = 1,
    dp: int = 1,
    network: str = "analytical",
    ratio: float = 8,
    per_gib: float = 0.05,
) -> dict:
    """A synthetic pipeline of one layer per stage over ``sites`` single-server sites of
    ``per_site`` GPUs each, joined by 1 Gbit/s, 20 ms WAN links."""
    n = sites * per_site
    raw = {
        "name": f"pipeline over {sites} sites",
        "cluster": {
            "nodes": sites,
            "gpus_per_node": per_site,
            "nic": {"bandwidth": "200 Gbit/s", "per_node": per_site, "latency": 0},
            "intra_node": {"bandwidth": "300 GB/s", "latency": 0},
            "topology": {
                "kind": "wan",
                "bandwidth": B_WAN,
                "latency": LAT_WAN,
                "sites": [{"nodes": 1, "topology": {"kind": "single_node"}}] * sites,
            },
        },
        "model": {"kind": "synthetic", "layers": n // dp, "forward": F, "backward": B, "activation": A},
        "training": {"global_batch": m * dp},
        "parallel": {"pp": n // dp, "dp": dp},
        "simulation": {"network": network},
    }
    if links is not None:
        raw["parallel"]["activation_compression"] = {"ratio": ratio, "time_per_gib": per_gib, "links": links}
    return raw


def test_two_stage_pipeline_over_the_wan_closed_form():
    # one micro-batch, stage 0 in site 0, stage 1 in site 1: F0 → compress → WAN → decompress → F1 → B1
    # → compress → WAN → decompress → B0. Each crossing: A·c (codec) + ℓ + (A/k)/B (analytical network)
    res = cs.simulate(_pipeline("inter_site"), progress=False)
    crossing = A * 0.05 / 2**30 + LAT_WAN + A / 8 / B_WAN
    assert res.summary["iteration_time_s"] == pytest.approx(2 * (F + B) + 2 * crossing, rel=1e-9)
    sends = res.spans[res.spans["kind"] == "send"]
    assert (sends["bytes"] == A // 8).all() and len(sends) == 2


def test_only_sends_between_sites_are_compressed():
    # 4 stages on 2 sites of 2 GPUs: only the stage 1 → 2 hop (and its gradient back) leaves a site
    raw = _pipeline("inter_site", per_site=2, m=2, network="packet")
    res = cs.simulate(raw, progress=False)
    sends = res.spans[res.spans["kind"] == "send"]
    across = sends["name"].str.contains("s1->s2|s2->s1")
    assert (sends.loc[across, "bytes"] == A // 8).all() and across.sum() == 4
    assert (sends.loc[~across, "bytes"] == A).all()
    codec = res.spans[res.spans["name"].str.startswith(("compress", "decompress"))]
    assert len(codec) == 2 * across.sum()
    assert set(codec["device"]) == {"gpu1", "gpu2"}


@pytest.mark.parametrize("network", ["analytical", "packet"])
def test_compression_saves_the_wan_transfer_less_the_codec_time(network):
    # 4 stages on 2 sites of 2 GPUs, one micro-batch: every pass, transfer and codec op is on
    # the critical path. Only the stage 1 → 2 hop leaves a site, once forward (activations)
    # and once backward (their gradient); each crossing then moves A/k instead of A over the
    # WAN (same latency) and adds A·c/2 of compress and A·c/2 of decompress.
    k, per_gib = 8, 0.05
    plain = cs.simulate(_pipeline(None, per_site=2, network=network), progress=False).summary[
        "iteration_time_s"
    ]
    packed = cs.simulate(
        _pipeline("inter_site", per_site=2, network=network, ratio=k, per_gib=per_gib), progress=False
    ).summary["iteration_time_s"]
    saved_per_crossing = (A - A // k) / B_WAN - A * per_gib / 2**30
    assert plain - packed == pytest.approx(2 * saved_per_crossing, rel=1e-9)


def test_links_all_folds_exactly():
    # 2 servers on a fat-tree, stage s on server s, dp 2: each replica's sends use its own NICs
    raw = _pipeline("all", per_site=2, dp=2, m=2, network="packet")
    raw["cluster"]["topology"] = {"kind": "fat_tree"}
    times = {}
    for fold in (False, True):
        raw["simulation"]["fold"] = fold
        res = cs.simulate(raw, progress=False)
        times[fold] = res.summary["iteration_time_s"]
        # links "all": every activation and gradient send carries A / ratio bytes
        sends = res.spans[res.spans["kind"] == "send"]
        assert len(sends) > 0 and (sends["bytes"] == A // 8).all()
    assert times[True] == pytest.approx(times[False], rel=1e-12)


def test_stage_replicas_refuse_activation_compression():
    raw = _pipeline("all", per_site=2)
    raw["parallel"] = {"pp": 2, "stage_replicas": [3, 1], "activation_compression": {"ratio": 2}}
    with pytest.raises(cs.ScenarioError, match="parallel.activation_compression.*stage_replicas"):
        cs.resolve_scenario(raw)


def test_folding_is_refused_on_chosen_links():
    raw = _pipeline("inter_site", per_site=2, dp=2, m=2)
    raw["simulation"]["fold"] = True
    with pytest.raises(
        cs.ScenarioError, match="cannot fold this scenario: activation_compression on inter_site"
    ):
        cs.simulate(raw, progress=False)
