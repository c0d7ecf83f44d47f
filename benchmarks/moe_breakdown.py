"""Where a fine-grained MoE step goes: each MoE layer's kernels by family, priced by the cost
model, beside the kernel-level rows they are calibrated from, and the simulated step's split.

    PYTHONPATH=$PWD python benchmarks/moe_breakdown.py [--config qwen3|olmoe|mixtral] [--set k=v ...]

Prints, for one MoE layer of one micro-batch on GPU 0: each op's forward / backward seconds
(kernel launch included), its kernel family, kernels the host issues; then the simulated
iteration (exact fidelity) and its exposed EP / DP communication and host-bound time.
Not fitted to anything: a reading aid for issue 36 item 6.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from clustersim.scenario import load_scenario
from clustersim.simulate import simulate
from clustersim.workload.ops import ExpertRanks, TPComm
from clustersim.workload.resolve import resolve_transformer
from clustersim.workload.stage_builder import FixedCosts, TrainSetup, cost_model_of
from clustersim.workload.transformer_ops import layer_ops

#: OLMoE-1B-7B's shape (Muennighoff et al. 2024, Table 1: 16 layers, d 2048, 64 experts of
#: FFN 1024, top-8, 16 heads, SwiGLU, vocabulary 50,304)
OLMOE = {"layers": 16, "hidden": 2048, "heads": 16, "ffn_hidden": 1024, "vocab": 50304}
OLMOE |= {"experts": 64, "experts_per_token": 8, "moe_ffn_hidden": 1024, "gated_mlp": True, "bias": False}
#: representative configurations (hf_config or model fields, nodes, pp, global batch)
CONFIGS = {
    "qwen3": ("qwen3-30b-a3b", 2, 1, 256),
    "olmoe": (OLMOE, 1, 1, 128),
    "mixtral": ("mixtral-8x7b", 8, 4, 256),
}
FAMILIES = (
    ("router", ("router", "moe_aux", "topk")),
    ("permute", ("permute", "sort_chunks", "unsort", "unpermute")),
    ("experts", ("experts",)),
    ("shared", ("shared",)),
    ("attention", ("attn", "qkv", "proj", "rope", "core", "softmax", "flash")),
)


def scenario(name: str, sets: list[str]) -> dict:
    """The scenario dict of configuration ``name`` with ``--set`` overrides."""
    hf, nodes, pp, gbs = CONFIGS[name]
    d = {
        "name": f"moe-{name}",
        "cluster": {"preset": "dgx_h100", "nodes": nodes},
        "model": {
            **({"hf_config": hf} if isinstance(hf, str) else hf),
            "seq_len": 4096,
            "attention": "flash",
        },
        "training": {
            "framework": "megatron_core",
            "global_batch": gbs,
            "micro_batch": 1,
            "precision": "bf16",
            "recompute": "none",
            "optimizer": "adam",
        },
        "parallel": {"tp": 1, "pp": pp, "ep": 8},
        "simulation": {"iterations": 1, "network": "analytical", "fidelity": "exact"},
    }
    if pp > 1:
        d["parallel"].update(schedule="interleaved", virtual_stages=2)
    for s in sets:
        key, value = s.split("=", 1)
        *path, last = key.split(".")
        node = d
        for part in path:
            node = node.setdefault(part, {})
        node[last] = _value(value)
    return d


def _value(text: str):
    """A ``--set`` value: a bool, a number or the string itself."""
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text) if any(c in text for c in ".e") else int(text)
    except ValueError:
        return text


def family(name: str) -> str:
    """The kernel family an op of :func:`layer_ops` belongs to."""
    for fam, keys in FAMILIES:
        if any(k in name for k in keys):
            return fam
    return "other"


def layer_table(d: dict) -> None:
    """Print one MoE layer's ops on GPU 0 (expert rank 0) and their family totals."""
    sc = load_scenario(d)
    st = TrainSetup.of(sc)
    cfg = resolve_transformer(sc.model)
    cm = cost_model_of(sc, st)
    fixed = FixedCosts.of(sc, cm, st.precision, cfg.seq_len * cfg.hidden * st.e)
    host = fixed.host
    ops = layer_ops(cfg, st.micro_batch, st.tp, st.sp, st.e, True, split=st.split, kernels=st.kernels)
    fams: dict = defaultdict(lambda: [0.0, 0.0, 0])
    print(f"{'op':28s} {'fwd us':>9s} {'bwd us':>9s}  family")

    def price(op, label=""):
        f = cm.time(op.fwd, op.name, "F")
        b = cm.time(op.bwd_input, op.name, "B") + cm.time(op.bwd_weight, op.name, "W")
        n = cm.issued(op.fwd) + cm.issued(op.bwd_input) + cm.issued(op.bwd_weight)
        fam = family(op.name)
        fams[fam][0] += f
        fams[fam][1] += b
        fams[fam][2] += n
        g = op.fwd.gemm
        shape = f" gemm m,n,k={tuple(int(x) for x in g)}" if g else ""
        print(f"{label + op.name:28s} {f * 1e6:9.1f} {b * 1e6:9.1f}  {fam}{shape}")

    for op in ops:
        if isinstance(op, TPComm):
            print(f"{op.name:28s} {'(coll)':>9s} {op.forward_nbytes / 2**20:8.1f} MiB sync={op.host_sync}")
        elif isinstance(op, ExpertRanks):
            for o in op.ranks[0]:
                price(o, "  rank0 ")
        else:
            price(op)
    print("family totals per MoE layer (us): fwd, bwd, kernels issued")
    for fam, (f, b, n) in fams.items():
        print(f"  {fam:10s} {f * 1e6:9.1f} {b * 1e6:9.1f} {n:4d}")
    print(f"host dispatch per kernel: {host.forward_s * 1e6 if host else float('nan'):.2f} us")


def step(d: dict) -> None:
    """Print the simulated iteration's split and its EP collectives on the first GPU."""
    r = simulate(d, progress=False)
    s = r.summary
    keys = ("iteration_time_s", "mfu", "exposed_comm_fraction", "exposed_ep_fraction")
    print(
        "  ".join(
            f"{k} {s[k]:.4g}" for k in (*keys, "exposed_dp_fraction", "host_bound_s", "bubble_fraction")
        )
    )
    sp = r.spans
    ep = sp[(sp.device == sp.device.iloc[0]) & (sp.lane == "ep")]
    for name, g in ep.groupby("name"):
        dur = g.end_s - g.start_s
        print(f"  {name}: {len(g)} calls, mean {dur.mean() * 1e6:.1f} us, total {dur.sum():.4f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="qwen3", choices=sorted(CONFIGS))
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--no-step", action="store_true")
    a = ap.parse_args()
    d = scenario(a.config, a.set)
    layer_table(d)
    if not a.no_step:
        step(d)


if __name__ == "__main__":
    main()
