"""clustersim's Chakra exports run in ASTRA-sim's analytical backend, side by side (issue 31).

    python benchmarks/astra_sim_check.py --astra ASTRA_BIN [--examples DIR] [--only NAME] [--matched]

``ASTRA_BIN`` is ``AstraSim_Analytical_Congestion_Unaware`` as ``../shared/tools/astra-sim-build``
builds it; ``--examples`` is ASTRA-sim's ``examples/`` folder (its collective microbenchmark
traces). Nothing in the test suite depends on this script. Three parts (the third runs first):

1. **ASTRA-sim's own collective traces** (8 NPUs, 1 MB: all-reduce, all-gather,
   reduce-scatter, all-to-all) on ASTRA-sim's ``Ring_8npus`` network (50 GB/s, 500 ns per
   link) run by both simulators. ASTRA-sim with its example system file (4 dataset splits,
   one chunk in flight per dimension) and with one split; clustersim imports the same trace
   (``model: {kind: trace}``) on a ``ring`` topology of the same links, the α-β collective
   model, the ring algorithm, no NCCL protocol latency.
2. **The shipped scenarios** of the pipeline and replicated modes, exported unfolded
   (``export-chakra``; at most ``--max-ranks`` ranks, a larger one at a reduced data-parallel
   degree, said on its line), each run in ASTRA-sim on a two-level switch network built from
   the scenario's cluster (NVLink domain, then the NICs); prints whether it ran to completion
   and both iteration times. The clusters differ in what each simulator prices (NCCL
   protocols, contention, ASTRA-sim's chunking): the line is a runnability check and a
   ratio, not a validation.

3. **clustersim's exports on a matched network** (``--matched``: this part alone): the
   shipped samples and data-parallel (8, 64 ranks) and pipeline exports, run by ASTRA-sim on
   a ``Ring`` of its example's links and by clustersim on a ``ring`` of the same links, each
   trace as ASTRA-sim runs it (:mod:`clustersim.interop.astra_view`); ASTRA-sim with one
   split, no local-memory time and 1 ns a collective step (:data:`MATCHED`). Prints both
   times and their ratio, beside clustersim's own replay and ASTRA-sim's example system.

ASTRA-sim prints ``sys[i] finished, T cycles`` per NPU (1 cycle = 1 ns); its time is the
largest T.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import clustersim as cs
from clustersim.interop.astra_view import astra_view
from clustersim.interop.chakra_attrs import attr
from clustersim.interop.chakra_file import write_trace
from clustersim.interop.chakra_import import rank_files
from clustersim.interop.chakra_schema import NODE_TYPES, GlobalMetadata, Node
from clustersim.resolve import resolve
from clustersim.scenario import read_yaml

ROOT = Path(__file__).resolve().parent.parent
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
#: ASTRA-sim's analytical backend reads "GB/s" as 2^30 bytes per second
#: (astra-network-analytical 599a047 ``common/NetworkFunction.cpp`` ``bw_GBps_to_Bpns``)
GIB = 2**30
GIB_50 = 50.0 * GIB
#: the shipped scenarios of modes ASTRA-sim can replay (parameter-server, multi-job and fault
#: scenarios are refused by the export)
SHIPPED = (
    "quickstart",
    "synthetic-4stage-1f1b",
    "pipedream-vgg16-16xV100-10GbE",
    "pipedream-vgg16-16xV100-10GbE-15-1",
    "pipedream-vgg16-10GbE-straggler",
    "hap-mixed-a100-v100",
    "edgepipe-vit-large-4xT4-1GbE",
    "fusionllm-gpt-1.3b-48gpu-3sites-wan",
    "gpt-7.5b-64xh100-balanced",
    "mixtral-8x7b-64xH100-ep8",
    "llama3-70b-128k-cp8",
    "megatron-162b-64gpu-search",
    "gpt3-175b-1024xa100-balanced",
    "deepseek-v3-2048xh800-dualpipe",
    "quickstart-tp-overlap",
)

#: Shipped scenarios with settings changed, for the kinds of export no shipped scenario has:
#: name → (scenario, sections merged into it)
VARIANTS = {
    "quickstart-tp-overlap": (
        "quickstart",
        {
            "parallel": {"tp_comm_overlap": True, "sequence_parallel": True},
            "simulation": {"granularity": "layer"},
        },
    ),
}


#: ASTRA-sim's system settings matched to clustersim's α-β collectives: one dataset split, no
#: local-memory time for reductions, its direct all-to-all, 1 ns a collective step (its
#: smallest endpoint delay: at 0 no NPU finishes)
MATCHED = {"all_to_all": "direct", "local_mem_bw": 1e9, "endpoint_delay": 1}
#: the matched network: a ring of ASTRA-sim's example links (``Ring_8npus``: 50 GB/s, 500 ns)
RING_GBPS, RING_NS = 50.0, 500.0


def system_config(
    splits: int, all_to_all: str = "ring", local_mem_bw: float = 1600, endpoint_delay: int = 10
) -> dict:
    """ASTRA-sim's system file: ring collectives on every dimension (``all_to_all``: its
    all-to-all implementation; ``local_mem_bw``: the GB/s its reductions read and write at;
    ``endpoint_delay``: the ns it adds to every step of a collective), replayed compute."""
    ring = ["ring"]
    return {
        "scheduling-policy": "LIFO",
        "endpoint-delay": endpoint_delay,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": splits,
        "all-reduce-implementation": ring,
        "all-gather-implementation": ring,
        "reduce-scatter-implementation": ring,
        "all-to-all-implementation": [all_to_all],
        "collective-optimization": "localBWAware",
        "local-mem-bw": local_mem_bw,
        "boost-mode": 0,
    }


def run_astra(
    binary: Path, workload: Path, network: dict, splits: int, groups: Path | None, **system
) -> float | None:
    """ASTRA-sim's time in seconds (the last NPU's end), or None when an NPU never finished."""
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "system.json").write_text(json.dumps(system_config(splits, **system)))
        (t / "memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
        (t / "network.yml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in network.items()))
        cmd = [
            str(binary),
            f"--workload-configuration={workload}",
            f"--system-configuration={t / 'system.json'}",
            f"--remote-memory-configuration={t / 'memory.json'}",
            f"--network-configuration={t / 'network.yml'}",
        ]
        if groups is not None and groups.is_file():
            cmd.append(f"--comm-group-configuration={groups}")
        # (in the scratch folder: ASTRA-sim writes its log/ folder into the working directory)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=tmp)
    ends = {int(r): int(c) for r, c in FINISHED.findall(out.stdout + out.stderr)}
    npus = 1
    for n in network["npus_count"]:
        npus *= n
    return max(ends.values()) * 1e-9 if len(ends) == npus else None


def ring_trace_scenario(folder: Path, npus: int) -> dict:
    """clustersim on ASTRA-sim's ``Ring_<n>npus`` network: the trace in ``folder``."""
    return {
        "name": f"astra-ring-{folder.name}",
        "cluster": {
            "nodes": 1,
            "gpus_per_node": npus,
            "gpu": "H100-SXM5-80GB",
            "intra_node": {"kind": "nvswitch", "bandwidth": GIB_50, "latency": 500e-9},
            "topology": {"kind": "ring", "bandwidth": GIB_50, "latency": 500e-9},
            "collective_protocols": None,
            "collective_alpha": {"intra_node": 0.0, "inter_node": 0.0},  # ASTRA-sim has no software α
        },
        "model": {"kind": "trace", "chakra": str(folder)},
        "training": {"global_batch": npus, "micro_batch": 1},
        "simulation": {
            "network": "analytical",
            "collective_model": "analytical",
            "collectives": {k: "ring" for k in ("all_reduce", "all_gather", "reduce_scatter")},
        },
    }


def collective_rows(binary: Path, examples: Path) -> None:
    print("ASTRA-sim's collective microbenchmarks, 8 NPUs, 1 MB, Ring_8npus (50 GB/s = 50·2^30 B/s, 500 ns):")
    print(
        "  ASTRA-sim: 1 split, no local-memory time, 1 ns a step (matched), 1 split at its example's 1600 GB/s"
    )
    print("  local memory, its example's 4 splits; all-to-all: its direct implementation (matched)")
    head = ("clustersim", "matched", "local 1600", "4 splits", "ratio")
    print(f"  {'collective':<16}" + "".join(f"{h:>13}" for h in head))
    network = {"topology": ["Ring"], "npus_count": [8], "bandwidth": [50.0], "latency": [500.0]}
    for kind in COLLECTIVES:
        folder = examples / "workload" / "microbenchmarks" / kind / "8npus_1MB"
        with tempfile.TemporaryDirectory() as tmp:  # clustersim reads <prefix>.<rank>.et from a folder
            for f in folder.glob("*.et"):
                (Path(tmp) / f.name).write_bytes(f.read_bytes())
            ours = cs.simulate(ring_trace_scenario(Path(tmp), 8), progress=False).summary["iteration_time_s"]
        # ASTRA-sim's ring all-to-all forwards n(n−1)/2 steps; its direct one is NCCL's pairwise
        a2a = "direct" if kind == "all_to_all" else "ring"
        matched = run_astra(binary, folder / kind, network, 1, None, **MATCHED)
        local = run_astra(binary, folder / kind, network, 1, None, all_to_all=a2a)
        four = run_astra(binary, folder / kind, network, 4, None)
        ratio = f"{ours / matched:.3f}" if matched else "-"
        cells = [f"{ours * 1e6:.2f}µs", _us(matched), _us(local), _us(four), ratio]
        print(f"  {kind:<16}" + "".join(f"{c:>13}" for c in cells))


def _us(t: float | None) -> str:
    return "deadlock" if t is None else f"{t * 1e6:.2f}µs"


def cluster_network(sc) -> dict:
    """A two-level switch network of ``sc``'s cluster: the NVLink domain, then the NICs
    (per-GPU bandwidths at their efficiency — a node's NICs shared by its GPUs — in ASTRA-sim's
    GB/s of 2^30 bytes; latencies in ns)."""
    c = sc.resolved()["cluster"]
    gpn, nodes = c["gpus_per_node"], sc.num_gpus // c["gpus_per_node"]
    intra = c["intra_node"]
    nic = c.get("nic") or {}
    bw_in = intra["bandwidth"] * intra.get("efficiency", 1.0) / GIB
    # a node's NICs shared by its GPUs: per NPU, per_node NICs over gpn GPUs
    share = (nic.get("per_node") or gpn) / gpn
    bw_out = nic.get("bandwidth", intra["bandwidth"]) * nic.get("efficiency", 1.0) * share / GIB
    lat_in, lat_out = intra.get("latency", 1e-6) * 1e9, nic.get("latency", 1e-6) * 1e9
    if nodes == 1:
        return {"topology": ["Switch"], "npus_count": [gpn], "bandwidth": [bw_in], "latency": [lat_in]}
    if gpn == 1:  # ASTRA-sim refuses a dimension of one NPU
        return {"topology": ["Switch"], "npus_count": [nodes], "bandwidth": [bw_out], "latency": [lat_out]}
    return {
        "topology": ["Switch", "Switch"],
        "npus_count": [gpn, nodes],
        "bandwidth": [bw_in, bw_out],
        "latency": [lat_in, lat_out],
    }


def shipped_rows(binary: Path, names: list[str], max_ranks: int) -> None:
    print(
        "Shipped scenarios exported unfolded, run in ASTRA-sim (two-level switch network from the cluster):"
    )
    for name in names:
        base, changes = VARIANTS.get(name, (name, {}))
        raw = read_yaml(ROOT / "scenarios" / f"{base}.yaml")
        for section, values in changes.items():
            raw.setdefault(section, {}).update(values)
        sc = cs.load_scenario(raw)
        note = ""
        if sc.num_gpus > max_ranks:
            p = raw.setdefault("parallel", {})
            dp_now = resolve(sc).dp  # (a scenario may leave dp to auto)
            dp = dp_now * max_ranks // sc.num_gpus
            if dp < 1:
                print(f"  {name}: {sc.num_gpus} ranks even at DP 1; skipped")
                continue
            raw["training"]["global_batch"] = sc.training.global_batch * dp // dp_now
            raw["cluster"]["nodes"] = raw["cluster"].get("nodes", 1) * dp // dp_now
            p["dp"], note = dp, f" (DP {dp_now} → {dp})"
            if p.get("ep", 1) > dp:  # expert groups regroup DP ranks: they shrink with them
                note = f" (DP {dp_now} → {dp}, EP {p['ep']} → {dp})"
                p["ep"] = dp
            sc = cs.load_scenario(raw)
        ours = cs.simulate(sc, progress=False).summary["iteration_time_s"]
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            cs.export_chakra(sc, tmp)
            export_s = time.perf_counter() - t0
            theirs = run_astra(
                binary, Path(tmp) / "trace", cluster_network(sc), 1, Path(tmp) / "comm_group.json"
            )
        verdict = "ran to completion" if theirs else "did NOT finish"
        ratio = f", clustersim/ASTRA-sim {ours / theirs:.3f}" if theirs else ""
        print(
            f"  {name}{note}: {sc.num_gpus} ranks, {verdict}; clustersim {ours:.4f} s, "
            f"ASTRA-sim {_us(theirs) if not theirs else f'{theirs:.4f} s'}{ratio} (export {export_s:.1f} s)"
        )


def gpt_dp(gpus: int) -> dict:
    """A data-parallel job over ``gpus`` A100s: a 2-layer GPT-1.3B, 2 micro-batches a replica
    (tests/test_chakra_rescale.py's), one gradient all-reduce after the backward passes."""
    return {
        "name": f"gpt-dp{gpus}",
        "cluster": {"preset": "dgx_a100", "nodes": max(1, gpus // 8)},
        "model": {"preset": "gpt-1.3b", "layers": 2},
        "training": {"global_batch": 2 * gpus, "micro_batch": 1},
        "parallel": {"dp": gpus, "gpus": gpus},
        "simulation": {"fidelity": "fast"},
    }


def matched_traces(tmp: Path) -> dict[str, Path]:
    """The traces compared on the matched network: the shipped samples (synthetic model, dp 8;
    pp 4 × dp 2), the synthetic model's export at dp 64, a 2-layer GPT-1.3B's data-parallel
    exports at 8 and 64 ranks (kernel-priced compute, not whole microseconds) and the
    quickstart's (TP 2 × PP 4 × DP 2)."""
    samples = ROOT / "tests" / "data" / "chakra"
    synthetic = cs.load_scenario(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml")
    scenarios = {
        "synthetic dp64": synthetic.with_overrides(
            {
                "cluster.gpus_per_node": 8,
                "cluster.nodes": 8,
                "parallel.pp": 1,
                "parallel.dp": 64,
                "training.global_batch": 128,
            }
        ),
        "gpt dp8": gpt_dp(8),
        "gpt dp64": gpt_dp(64),
        "quickstart": cs.load_scenario(ROOT / "scenarios" / "quickstart.yaml"),
    }
    out = {"synthetic dp8 sample": samples / "synthetic-dp8"}
    for name, sc in scenarios.items():
        out[name] = tmp / name.replace(" ", "-")
        cs.export_chakra(sc, out[name])
    out["pp4-dp2 sample"] = samples / "synthetic-pp4-dp2"
    return out


def matched_rows(binary: Path) -> None:
    """Each trace in both simulators on one matched network (module docstring, part 3), and
    what each departing term adds: clustersim's own import (the chain left out, exact compute
    seconds) and ASTRA-sim's example system (4 splits, 1,600 GB/s local memory, 10 ns a step)."""
    print(
        f"Exports on a matched network: Ring of {RING_GBPS:g} GB/s (2^30 B), {RING_NS:g} ns links, "
        "α-β ring collectives, no NCCL protocol or α; ASTRA-sim 1 split, no local-memory time, 1 ns a step"
    )
    head = ("clustersim", "ASTRA-sim", "ratio", "own import", "ASTRA example")
    print(f"  {'trace':<22}{'ranks':>6}" + "".join(f"{h:>14}" for h in head))
    with tempfile.TemporaryDirectory() as tmp:
        for name, folder in matched_traces(Path(tmp)).items():
            n = len(rank_files(folder))
            view = astra_view(folder, Path(tmp) / "view" / folder.name)
            ours = cs.simulate(ring_trace_scenario(view, n), progress=False).summary["iteration_time_s"]
            own = cs.simulate(ring_trace_scenario(folder, n), progress=False).summary["iteration_time_s"]
            network = {
                "topology": ["Ring"],
                "npus_count": [n],
                "bandwidth": [RING_GBPS],
                "latency": [RING_NS],
            }
            prefix = folder / rank_files(folder)[0].name.split(".")[0]
            theirs = run_astra(binary, prefix, network, 1, folder / "comm_group.json", **MATCHED)
            example = run_astra(binary, prefix, network, 4, folder / "comm_group.json")
            ratio = f"{ours / theirs:.5f}" if theirs else "-"
            cells = [f"{ours * 1e3:.4f}ms", _ms(theirs), ratio, f"{own * 1e3:.4f}ms", _ms(example)]
            print(f"  {name:<22}{n:>6}" + "".join(f"{c:>14}" for c in cells))
    print(
        "  clustersim runs each trace as ASTRA-sim does (interop.astra_view: the communication chain\n"
        "  kept as dependencies, compute for its whole microseconds); 'own import': clustersim's own\n"
        "  replay (chain left out, exact seconds); 'ASTRA example': its example system's splits,\n"
        "  local-memory reduction time and 10 ns steps, the terms the matched settings switch off"
    )
    spread_rows(binary)


#: a collective group of ranks that are not ring neighbours: the quickstart's gradient-norm group
#: on its 16-rank ring (hops 1, 3, 1, 3, …)
SPREAD = (0, 1, 4, 5, 8, 9, 12, 13)


def spread_rows(binary: Path) -> None:
    """An all-reduce over :data:`SPREAD` alone, on the matched 16-rank ring, in both simulators:
    one of the two terms by which the quickstart departs (docs/interop.md)."""
    print(f"  an all-reduce over ranks {SPREAD} of a 16-rank ring, alone:")
    network = {"topology": ["Ring"], "npus_count": [16], "bandwidth": [RING_GBPS], "latency": [RING_NS]}
    for size in (4, 2**24):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            for rank in range(16):
                # (ASTRA-sim wants a node on every NPU: 1 µs of compute on the others)
                node = Node(id=1, name="idle", type=NODE_TYPES["COMP_NODE"], duration_micros=1)
                if rank in SPREAD:
                    node = Node(id=1, name="all-reduce", type=NODE_TYPES["COMM_COLL_NODE"])
                    node.attr.extend([attr("comm_type", 0), attr("comm_size", size), attr("pg_name", "1")])
                node.attr.append(attr("is_cpu_op", False))
                write_trace(folder / f"trace.{rank}.et", GlobalMetadata(version="0.0.4"), [node])
            (folder / "comm_group.json").write_text(json.dumps({"1": list(SPREAD)}))
            ours = cs.simulate(ring_trace_scenario(folder, 16), progress=False).summary["iteration_time_s"]
            theirs = run_astra(binary, folder / "trace", network, 1, folder / "comm_group.json", **MATCHED)
        print(f"    {size:>10} B: clustersim {ours * 1e6:.3f} µs, ASTRA-sim {_us(theirs)}")


def _ms(t: float | None) -> str:
    return "deadlock" if t is None else f"{t * 1e3:.4f}ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--astra", type=Path, required=True, help="AstraSim_Analytical_Congestion_Unaware")
    ap.add_argument("--examples", type=Path, help="ASTRA-sim's examples/ folder")
    ap.add_argument("--only", action="append", help="a shipped scenario name (repeatable)")
    ap.add_argument("--max-ranks", type=int, default=1024)
    ap.add_argument("--matched", action="store_true", help="only part 3: exports on a matched network")
    args = ap.parse_args()
    if not args.astra.is_file():
        sys.exit(f"{args.astra}: not an ASTRA-sim binary (build it with ../shared/tools/astra-sim-build)")
    if args.examples is not None:
        collective_rows(args.astra, args.examples)
    matched_rows(args.astra)
    if args.matched:
        return
    shipped_rows(args.astra, args.only or list(SHIPPED), args.max_ranks)


if __name__ == "__main__":
    main()
