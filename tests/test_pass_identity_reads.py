"""A pass's pricing reads each item, run of kernels and segment once, by its identity (issue
38 item 8: a pass repeats its layers' item tuples): the host's race
(:func:`clustersim.workload.host.host_waits`), the merged runs and lone segments
(:func:`clustersim.workload.segments.to_segments`) and the estimate's segment times
(``plan_estimate._segments_time``). A pass whose items are all distinct copies — nothing
to share — is priced the same, to the bit; and a run of kernels summed in one loop is the
run they make added one by one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.experiments import plan_estimate
from clustersim.validation.megatron import megatron_rows, megatron_scenario
from clustersim.workload import stage_builder
from clustersim.workload.segments import _Run, _run_of

ROOT = Path(__file__).resolve().parent.parent


def _scenarios() -> list[tuple[str, object]]:
    rows = megatron_rows()
    return [
        ("megatron 1.7B (pp 1)", lambda: cs.load_scenario(megatron_scenario(rows[0]))),
        ("megatron 76.1B (pp 8)", lambda: cs.load_scenario(megatron_scenario(rows[5]))),
        ("mixtral EP 8", lambda: cs.load_scenario(ROOT / "scenarios" / "mixtral-8x7b-64xH100-ep8.yaml")),
    ]


def _recorded(monkeypatch, sc) -> tuple[object, list[tuple]]:
    """The resolved job of ``sc`` and every pass the stage builder priced for it (also
    layer by layer, as an export asks), with what it gave."""
    calls = []

    def record(fixed, pieces, granularity, backward):
        out = stage_builder._pass_segments(fixed, pieces, granularity, backward)
        calls.append((fixed, pieces, granularity, backward, out))
        return out

    monkeypatch.setattr(stage_builder, "cached_pass_segments", record)
    job = plan_estimate.resolve(sc)
    stage_builder.transformer_chunk_costs(sc, sc.parallel.pp, layers=True)
    return job, calls


@pytest.mark.parametrize("name, make", _scenarios(), ids=[n for n, _ in _scenarios()])
def test_a_pass_of_copied_items_is_priced_as_the_shared_one(monkeypatch, name, make):
    job, calls = _recorded(monkeypatch, make())
    flat = [item for _, pieces, *_ in calls for piece in pieces for item in piece]
    assert len({id(i) for i in flat}) < len(flat)  # the layers' items are shared: the reads are exercised
    for fixed, pieces, granularity, backward, out in calls:
        copies = tuple(tuple(tuple(list(item)) for item in piece) for piece in pieces)
        assert repr(stage_builder._pass_segments(fixed, copies, granularity, backward)) == repr(out)
    groups, net = plan_estimate._groups(job), plan_estimate._Network(job)
    for cost in job.chunk_costs:
        for segs in cost.passes.values():
            copies = tuple(replace(s) for s in segs)
            shared = plan_estimate._segments_time(segs, groups, net)
            assert repr(plan_estimate._segments_time(copies, groups, net)) == repr(shared)


@pytest.mark.parametrize("name, make", _scenarios(), ids=[n for n, _ in _scenarios()])
def test_a_run_summed_at_once_is_the_run_added_item_by_item(monkeypatch, name, make):
    _, calls = _recorded(monkeypatch, make())
    for _, pieces, *_ in calls:
        for piece, kinds in ((piece, kinds) for piece in pieces for kinds in ("cep", "cp")):
            kernels = [i for i in piece if i[0] in kinds]  # the piece's kernels as one run, per-rank or not
            one_by_one = _Run()
            for item in kernels:
                one_by_one.add(item)
            assert repr(vars(_run_of(kernels))) == repr(vars(one_by_one))
