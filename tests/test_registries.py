"""Every registry shares one shape (clustersim.plugins) and is tested through its metadata,
never through the names it holds: adding a plugin must not need a test change."""

import math
import subprocess
import sys

import pytest

import clustersim as cs
from clustersim.collectives import ALGORITHMS, Shape, estimate_time
from clustersim.compilers import MODES
from clustersim.hardware.gpus import GPUS
from clustersim.network.factory import NETWORK_MODELS
from clustersim.plugins import Plugin, Registry
from clustersim.scenario.schema import ParallelSpec
from clustersim.schedules import SCHEDULES
from clustersim.topology import TOPOLOGIES

REGISTRIES = {"schedules": SCHEDULES, "topologies": TOPOLOGIES, "collective algorithms": ALGORITHMS}
REGISTRIES |= {"network models": NETWORK_MODELS, "GPUs": GPUS, "training modes": MODES}


@pytest.mark.parametrize("title", REGISTRIES)
def test_every_entry_has_a_one_line_description_and_its_own_name(title):
    registry = REGISTRIES[title]
    assert isinstance(registry, Registry) and len(registry) > 0
    for name, plugin in registry.items():
        assert plugin.name == name
        assert plugin.description.strip() and "\n" not in plugin.description


def test_clustersim_list_prints_every_registry_with_descriptions():
    out = subprocess.run(
        [sys.executable, "-m", "clustersim.cli", "list"], capture_output=True, text=True, check=True
    ).stdout
    for title, registry in REGISTRIES.items():
        section = out.split(f"{title}:\n", 1)[1].split(":\n", 1)[0]
        for name, description in registry.table():
            assert f"  {name:<18} {description}" in section


def test_lookup_names_the_field_and_the_accepted_names():
    for registry in REGISTRIES.values():
        with pytest.raises(cs.ScenarioError) as info:
            registry.lookup("no-such-plugin")
        assert info.value.field == registry.field
        assert str(info.value).endswith(f"known {registry.what}s: {', '.join(registry)}")


def test_a_registry_with_an_order_key_stays_sorted_whatever_the_registration_order():
    reg = Registry("thing", "x", order=lambda p: p.description)
    for name, rank in (("b", "2"), ("c", "3"), ("a", "1")):
        reg.add(Plugin(name, rank))
    assert list(reg) == ["a", "b", "c"]


@pytest.mark.parametrize("schedule", SCHEDULES.values(), ids=lambda s: s.name)
def test_virtual_stages_defaults_to_the_schedules_declared_chunks(schedule):
    par = ParallelSpec.model_validate({"pp": 2, "schedule": schedule.name})
    assert par.virtual_stages == (1 if schedule.chunks is None else schedule.chunks)
    assert ParallelSpec.model_validate({"schedule": schedule.name, "virtual_stages": 3}).virtual_stages == 3


@pytest.mark.parametrize("algo", ALGORITHMS.values(), ids=lambda a: a.name)
def test_every_algorithm_prices_each_kind_it_runs_and_more_bytes_cost_more(algo):
    # the α-β cost on the first of a 2-host × 4 group, one NVLink SHARP host of 8, 8 hosts
    # of one that it fits: positive, finite, increasing in the size
    n = 8
    shapes = [
        ((4, 4), Shape(n, bw=100e9, alpha=5e-6, nodes=2, bw_inter=10e9, alpha_inter=2e-5)),
        ((8,), Shape(n, bw=100e9, alpha=5e-6, nvls=0.85)),
        ((1,) * 8, Shape(n, bw=100e9, alpha=5e-6, nodes=8, bw_inter=10e9, alpha_inter=2e-5)),
    ]
    priced = 0
    for kind in sorted(algo.kinds - {"barrier"}):
        for per_host, shape in shapes:
            if algo.fits(kind, n, per_host) is None and algo.hardware(shape, kind) is None:
                small, big = (estimate_time(kind, algo.name, shape, s) for s in (2**20, 2**26))
                assert 0 < small < big < math.inf
                priced += 1
                break
    assert priced > 0
