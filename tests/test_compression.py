"""Gradient compression for data-parallel all-reduces (e.g. training across data centres)."""

import pytest

import clustersim as cs
from tests.conftest import synthetic

GIB = 2**30


@pytest.mark.parametrize(
    "network,rel",
    [
        ("direct", 1e-9),
        ("analytical", 1e-9),
        # the packet model also pipelines each ring step's chunks store-and-forward over the
        # route's hops, which the closed form leaves out (0.46 % here)
        ("packet", 0.01),
    ],
)
def test_compression_closed_form_on_a_private_link(network, rel):
    # p = 1, dp = 2, ring over a private link (B, latency l, step α):
    # T = m(f + b) + c/2 + [2(n−1)(α + l) + 2(n−1)/n · (S/k)/B] + c/2 + optimizer,
    # with c = S/GiB × time_per_gib the (de)compression time and k the ratio.
    m, f, b, opt, S, B, lat, alpha, n, k, per_gib = 4, 1e-3, 2e-3, 1e-4, GIB, 10e9, 1e-6, 4e-6, 2, 8.0, 0.02
    raw = synthetic(1, m, f, b, dp=n, params=S, optimizer=opt, bandwidth=B, latency=lat, network=network)
    raw["cluster"]["collective_alpha"] = {"intra_node": alpha, "inter_node": alpha}
    raw["simulation"]["collectives"] = {"all_reduce": "ring"}
    raw["parallel"]["gradient_compression"] = {"ratio": k, "time_per_gib": per_gib}
    res = cs.simulate(raw, progress=False)
    c = S / GIB * per_gib
    t_ar = 2 * (n - 1) * (alpha + lat) + 2 * (n - 1) / n * (S / k) / B
    expected = m * (f + b) + c + t_ar + opt
    assert expected <= res.summary["iteration_time_s"] * (1 + 1e-12)
    assert res.summary["iteration_time_s"] == pytest.approx(expected, rel=rel)
    ar = res.spans[res.spans["kind"] == "collective"]
    assert (ar["bytes"] == int(S / k)).all()
    names = set(res.spans["name"])
    assert {"compress", "decompress"} <= names


def _two_sites(
    wan_bandwidth: str, compressed: bool, links: str = "all", network: str = "analytical", per_site: int = 8
) -> dict:
    # Two sites of one ``per_site``-GPU node each, joined by one WAN link; pp 1 × dp 2·per_site:
    # the gradient all-reduce crosses the WAN. The analytical models give every flow the whole
    # WAN link; the packet model shares it.
    raw = {
        "name": f"2 sites over {wan_bandwidth}",
        "cluster": {
            "nodes": 2,
            "gpus_per_node": per_site,
            "nic": {"bandwidth": "200 Gbit/s", "per_node": per_site},
            "topology": {
                "kind": "wan",
                "bandwidth": wan_bandwidth,
                "latency": "20 ms",
                "sites": [
                    {"nodes": 1, "topology": {"kind": "single_node"}},
                    {"nodes": 1, "topology": {"kind": "single_node"}},
                ],
            },
        },
        "model": {
            "kind": "synthetic",
            "layers": 4,
            "forward": "5 ms",
            "backward": "10 ms",
            "params": "256 MiB",
        },
        "training": {"global_batch": 64},
        "parallel": {"pp": 1, "dp": 2 * per_site},
        "simulation": {
            "network": network,
            "collective_model": "analytical" if network == "analytical" else "fabric",
        },
    }
    if compressed:
        raw["parallel"]["gradient_compression"] = {"ratio": 10, "time_per_gib": "100 ms", "links": links}
    return raw


def _times(
    bw: str, links: str = "all", network: str = "analytical", per_site: int = 8
) -> tuple[float, float]:
    plain = cs.simulate(_two_sites(bw, False, network=network, per_site=per_site), progress=False)
    packed = cs.simulate(_two_sites(bw, True, links, network, per_site), progress=False)
    return plain.summary["iteration_time_s"], packed.summary["iteration_time_s"]


COMPUTE = 4 * 4 * 15e-3  # m = 4 micro-batches of 4 layers × (5 + 10) ms


@pytest.mark.parametrize(
    "links, network", [("all", "analytical"), ("all", "packet"), ("inter_site", "packet")]
)
def test_compression_pays_on_slow_wan(links, network):
    # 1 GiB of gradients at 100 ms per GiB; with inter_site each GPU codes its 1/8 shard only
    codec = 1.0 * 0.1 / (8 if links == "inter_site" else 1)
    slow_plain, slow_packed = _times("100 Mbit/s", links, network)
    comm_plain, comm_packed = slow_plain - COMPUTE, slow_packed - COMPUTE - codec
    # 1 GiB over 100 Mbit/s is bandwidth-bound: the all-reduce shrinks by about the ratio
    # (its latency terms and, for inter_site, the intra-site steps do not shrink, hence the tolerance)
    assert comm_plain > 10 * COMPUTE
    assert comm_plain / comm_packed == pytest.approx(10, rel=0.05)


@pytest.mark.parametrize("network", ["analytical", "packet"])
def test_compression_costs_on_fast_links(network):
    # One GPU per site, dp 2: the all-reduce of S gradient bytes sends S/2 each way over the
    # WAN link twice, a size-independent latency part plus S/B; compressed, it carries int(S/k)
    # bytes, after S·c/2 of compress and before S·c/2 of decompress, all on the critical path
    # after the last backward. So compression adds S·c − (S − int(S/k))/B: at 400 Gbit/s,
    # 100 ms/GiB, k = 10 the codec time (100 ms) outweighs the saved transfer (19 ms).
    S, B, k, c = 4 * 256 * 2**20, 400e9 / 8, 10, 0.1 / GIB  # 4 layers of 256 MiB; B in bytes/s; c per byte
    fast_plain, fast_packed = _times("400 Gbit/s", network=network, per_site=1)
    assert fast_packed - fast_plain == pytest.approx(S * c - (S - int(S / k)) / B, rel=1e-9)


def test_compression_ratio_below_one_is_an_error():
    raw = synthetic(1, 2, dp=2)
    raw["parallel"]["gradient_compression"] = {"ratio": 0.5}
    with pytest.raises(cs.ScenarioError, match=r"parallel.gradient_compression.ratio: 0.5 is invalid"):
        cs.load_scenario(raw)
