"""``parallel.partition`` in Megatron-Core's spelling: the layers per model chunk of
``--decoder-first/last-pipeline-num-layers`` and ``--account-for-embedding/loss-in-pipeline-split``
(with interleaving) against Megatron-Core's own ``get_num_layers_to_build``; its refusals;
the even-split refusal naming ``parallel.partition``; the search trying uneven splits."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.experiments.plans import plan_space
from clustersim.planner import resolve_partition
from clustersim.workload.megatron_split import megatron_split, uneven_split

BOTH = {"account_for_embedding": True, "account_for_loss": True}

#: layers per model chunk (chunk a·pp + b: virtual stage a of stage b) as Megatron-Core's
#: ``get_num_layers_to_build(config, vp_stage=a, pp_rank=b)`` returns them
#: (megatron/core/transformer/transformer_block.py, NVIDIA/Megatron-LM @d98e8a6, run with
#: each config below): Llama-3.1-405B's 126 layers, DeepSeek-V3's 61
MEGATRON = [
    ((126, 8, 1, BOTH), [15] + [16] * 6 + [15]),
    ((126, 16, 1, BOTH), [7] + [8] * 14 + [7]),
    ((126, 8, 8, BOTH), [1] + [2] * 62 + [1]),
    ((126, 16, 2, BOTH), [3] + [4] * 30 + [3]),
    ((126, 16, 1, {"first_stage_layers": 7, "last_stage_layers": 7}), [7] + [8] * 14 + [7]),
    ((61, 16, 1, {"first_stage_layers": 3, "last_stage_layers": 2}), [3] + [4] * 14 + [2]),
]

#: decoder layers per chunk of ``--pipeline-model-parallel-layout`` strings as Megatron-Core's
#: ``PipelineParallelLayerLayout(layout, pp).layout[pp_rank][vp_stage].count(decoder)`` gives
#: them (after its ``validate_layer_layout(layers, mtp)``; @d98e8a6): (layout, layers, pp, vp, mtp)
MEGATRON_LAYOUTS = [
    (("Et|(tt|)*29,t|tmL", 61, 16, 2, 1), [1] + [2] * 29 + [1, 1]),
    (("E|(t|)*3,ttL", 5, 5, 1, 0), [0, 1, 1, 1, 2]),
    (("Et*8|t*8|t*8|t*7L", 31, 4, 1, 0), [8, 8, 8, 7]),
    (("Et*8|t*8|t*8|t*7L", 31, 2, 2, 0), [8, 8, 8, 7]),
]

#: configurations Megatron-Core refuses (its assertions / TransformerConfig checks)
MEGATRON_REFUSES = [
    (126, 8, 1, {"first_stage_layers": 14, "last_stage_layers": 14}),  # 98 middle layers over 6 stages
    (61, 16, 1, {"first_stage_layers": 5, "last_stage_layers": 4}),  # 52 over 14
    (61, 16, 1, {"account_for_embedding": True}),  # 62 over 16
    (126, 8, 1, {"first_stage_layers": 15, "account_for_loss": True}),  # the two ways together
    (126, 16, 8, {"first_stage_layers": 6}),  # 6 does not divide by vp 8
]


@pytest.mark.parametrize("args,expected", MEGATRON)
def test_layers_per_chunk_are_megatron_cores(args, expected):
    layers, pp, vp, form = args
    assert megatron_split(layers, pp, vp, **form) == expected


@pytest.mark.parametrize("args,expected", MEGATRON_LAYOUTS)
def test_a_layouts_chunks_are_megatron_cores(args, expected):
    layout, layers, pp, vp, mtp = args
    assert megatron_split(layers, pp, vp, layout=layout, mtp_layers=mtp) == expected


@pytest.mark.parametrize(
    "layout,says",
    [
        ("Et|(tt|)*29,t|ttL", "62 × t"),  # one decoder layer too many
        ("Et|(tt|)*29,t|tmL", "16 × 1 = 16 expected"),  # 32 chunks at vp 1
        ("Et*3|(tt|)*29,m|L", "not modelled"),  # Megatron's standalone MTP chunk
        ("tEt*2|(tt|)*29,t|mL", "embedding E must come first"),
        ("Et|(tt|)*29,t|txL", "unknown layout character 'x'"),
    ],
)
def test_a_bad_layout_is_refused_saying_why(layout, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        megatron_split(61, 16, 1 if "16 × 1" in says else 2, layout=layout, mtp_layers=1)


def test_deepseek_v3_runs_on_megatrons_layout():
    """DeepSeek-V3 (61 layers, one MTP layer) at pp 16, interleaved over 2 chunks per stage
    on Megatron's layout; at pp 16 without interleaving on first 3 / last 2 layers."""
    sc = cs.load_scenario(
        "scenarios/deepseek-v3-2048xh800-dualpipe.yaml",
        {
            "parallel.schedule": "interleaved",
            "parallel.virtual_stages": 2,
            "training.global_batch": 16384,  # m = 128, a multiple of pp
            "parallel.partition": {"layout": "Et|(tt|)*29,t|tmL"},
        },
    )
    assert resolve_partition(sc, 32) == [1] + [2] * 29 + [1, 1]
    split = {"first_stage_layers": 3, "last_stage_layers": 2}
    sc = sc.with_overrides(
        {"parallel.schedule": "1f1b", "parallel.virtual_stages": 1, "parallel.partition": split}
    )
    assert resolve_partition(sc, 16) == [3] + [4] * 14 + [2]


@pytest.mark.parametrize("layers,pp,vp,form", MEGATRON_REFUSES)
def test_what_megatron_refuses_is_refused(layers, pp, vp, form):
    with pytest.raises(ValueError):
        megatron_split(layers, pp, vp, **form)


@settings(max_examples=300, deadline=None)
@given(
    layers=st.integers(1, 200),
    pp=st.integers(1, 32),
    vp=st.integers(1, 8),
    form=st.one_of(
        st.fixed_dictionaries({"account_for_embedding": st.booleans(), "account_for_loss": st.booleans()}),
        st.fixed_dictionaries(
            {"first_stage_layers": st.integers(1, 40) | st.none(), "last_stage_layers": st.integers(1, 40)}
        ),
    ),
)
def test_an_accepted_split_covers_the_layers_once(layers, pp, vp, form):
    """Every layer lands in exactly one chunk; a stage's chunks are equal but for the
    embedding's and loss's places (the first and last chunk)."""
    try:
        chunks = megatron_split(layers, pp, vp, **form)
    except ValueError:
        return
    assert len(chunks) == pp * vp and sum(chunks) == layers and min(chunks) >= 0
    full = list(chunks)
    full[0] += form.get("account_for_embedding", False)
    full[-1] += form.get("account_for_loss", False)
    for stage in range(pp):
        assert len(set(full[stage::pp])) == 1


@settings(max_examples=200, deadline=None)
@given(layers=st.integers(1, 200), pp=st.integers(2, 32), vp=st.integers(1, 4))
def test_uneven_split_is_a_form_megatron_accepts(layers, pp, vp):
    form = uneven_split(layers, pp, vp)
    if form is not None:
        assert min(megatron_split(layers, pp, vp, **form)) >= 1


def _llama405b(**parallel) -> dict:
    return {
        "cluster": {"preset": "dgx_h100", "nodes": 16},
        "model": {"preset": "llama3-405b", "seq_len": 8192},
        "training": {"global_batch": 16, "micro_batch": 1, "precision": "bf16", "recompute": "full"},
        "parallel": {"tp": 8, "pp": 8, "dp": 2, "sequence_parallel": True, **parallel},
        "simulation": {"fidelity": "fast"},
    }


@pytest.mark.parametrize(
    "parallel,expected",
    [
        ({"partition": BOTH}, [15] + [16] * 6 + [15]),
        ({"partition": {"first_stage_layers": 14}}, [14] + [16] * 7),
        ({"partition": BOTH, "schedule": "interleaved", "virtual_stages": 8}, [1] + [2] * 62 + [1]),
    ],
)
def test_a_scenario_runs_on_megatrons_split(parallel, expected):
    sc = cs.load_scenario(_llama405b(**parallel))
    assert resolve_partition(sc, len(expected)) == expected
    assert cs.simulate(sc).summary["iteration_time_s"] > 0


def test_the_even_refusal_names_partition_and_a_split_that_fits():
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(_llama405b())
    text = str(e.value)
    assert "parallel.partition" in text and "balanced" in text and "first_stage_layers" in text
    assert "{'account_for_embedding': True, 'account_for_loss': True}" in text


@pytest.mark.parametrize(
    "parallel,says",
    [
        ({"partition": {"first_stage_layers": 14, "last_stage_layers": 14}}, "98 middle layers"),
        ({"partition": {"first": 14}}, "unknown field 'first'"),
        ({"partition": {"first_stage_layers": 0}}, "expected a value from 1"),
        ({"partition": BOTH, "schedule": "dualpipe", "pp": 16, "dp": 1}, "accepted here: even, balanced"),
    ],
)
def test_a_bad_megatron_split_is_refused_naming_partition(parallel, says):
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(_llama405b(**parallel))
    assert e.value.field.startswith("parallel.partition") and says in str(e.value)


def test_the_search_tries_megatrons_split_where_the_layers_do_not_divide():
    """A 126-layer model on 64 GPUs gets plans at pp 8 (126 = 8 × 15.75), each split as
    Megatron-Core would and loading as it stands."""
    base = cs.load_scenario(_llama405b(pp=2, dp=4), {"cluster.nodes": 8})
    knobs = {"training.recompute": ["full"], "parallel.zero": [0], "parallel.sequence_parallel": [True]}
    plans = [p for p in plan_space(base, 64, micro_batches=[1], vary=knobs) if p["parallel.pp"] == 8]
    assert {p["parallel.schedule"] for p in plans} >= {"1f1b", "interleaved"}
    for plan in plans:
        assert plan["parallel.partition"] == BOTH
        sc = base.with_overrides(plan)
        chunks = resolve_partition(sc, 8 * sc.parallel.virtual_stages)
        assert chunks == megatron_split(126, 8, sc.parallel.virtual_stages, **BOTH)
