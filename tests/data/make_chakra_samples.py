"""Write the shipped Chakra ET samples under tests/data/chakra/ (run from the repository root).

* ``synthetic-pp4-dp2/``: scenarios/synthetic-4stage-1f1b.yaml with pp 4 × dp 2 on one
  8-GPU node, as clustersim exports it (8 rank files, data-parallel all-reduces in
  ``comm_group.json``);
* ``synthetic-dp8/``: the same model data-parallel over 8 GPUs of one node (pp 1, 2
  micro-batches a replica, one 8 GiB gradient all-reduce), as clustersim exports it;
* ``foreign-4rank/``: a trace written the way ASTRA-sim's generators write one — no
  ``clustersim.*`` attributes, no ``comm_group.json``: on each of 4 ranks a 1000 µs compute,
  then an all-reduce of 64 MiB over all ranks; rank 0 then sends 1 MiB to rank 1.

tests/test_chakra_samples.py checks that the files are what this script writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import clustersim as cs
from clustersim.interop.chakra_attrs import attr
from clustersim.interop.chakra_file import write_trace
from clustersim.interop.chakra_schema import GlobalMetadata, Node

#: the scenario the clustersim-made sample is exported from, and its overrides
SYNTHETIC = "scenarios/synthetic-4stage-1f1b.yaml"
SYNTHETIC_OVERRIDES = {"cluster.gpus_per_node": 8, "parallel.dp": 2, "training.global_batch": 8}
DP8_OVERRIDES = {"cluster.gpus_per_node": 8, "parallel.pp": 1, "parallel.dp": 8, "training.global_batch": 16}
#: the foreign sample's compute (µs), all-reduce and message sizes (bytes)
FOREIGN_COMPUTE_US, FOREIGN_ALLREDUCE, FOREIGN_MESSAGE = 1000, 64 * 2**20, 2**20


def synthetic_scenario(overrides: dict = SYNTHETIC_OVERRIDES):
    return cs.load_scenario(SYNTHETIC).with_overrides(overrides)


def write_foreign(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(4):
        fwd = Node(id=1, name="fwd", type=4, duration_micros=FOREIGN_COMPUTE_US)
        fwd.attr.extend([attr("is_cpu_op", False)])
        coll = Node(id=2, name="all-reduce", type=7, data_deps=[1])
        coll.attr.extend(
            [attr("is_cpu_op", False), attr("comm_type", 0), attr("comm_size", FOREIGN_ALLREDUCE)]
        )
        nodes = [fwd, coll]
        if rank in (0, 1):
            p2p = Node(id=3, name="p2p", type=5 if rank == 0 else 6, data_deps=[2])
            p2p.attr.extend(
                [
                    attr("comm_src", 0, "int32"),
                    attr("comm_dst", 1, "int32"),
                    attr("comm_size", FOREIGN_MESSAGE),
                    attr("comm_tag", 7, "int32"),
                ]
            )
            nodes.append(p2p)
        write_trace(folder / f"allreduce.{rank}.et", GlobalMetadata(version="0.0.4"), nodes)
    return folder


def write_samples(root: Path) -> None:
    cs.export_chakra(synthetic_scenario(), root / "synthetic-pp4-dp2")
    cs.export_chakra(synthetic_scenario(DP8_OVERRIDES), root / "synthetic-dp8")
    write_foreign(root / "foreign-4rank")


if __name__ == "__main__":
    write_samples(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/chakra"))
