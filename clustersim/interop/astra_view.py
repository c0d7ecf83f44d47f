"""A Chakra trace as ASTRA-sim's workload layer runs it, for clustersim to run the same way.

clustersim's own import of its export rebuilds the Program it came from; ASTRA-sim runs the
same files under rules of its own. :func:`astra_view` copies a trace folder with those rules
written into it, so that ``model: {kind: trace, chakra: <copy>}`` replays in clustersim what
ASTRA-sim replays (``benchmarks/astra_sim_check.py`` compares the two on a matched network):

* **The communication chain is a dependency.** ASTRA-sim keeps one send or collective in
  flight per NPU (:mod:`.chakra_serial`); the export chains them with ``ctrl_deps`` and lists
  those edges in ``clustersim.serial``, which clustersim's import leaves out. The copy drops
  that list, so the chain is kept as dependencies.
* **Compute takes what ASTRA-sim reads.** ASTRA-sim replays a compute node for its
  ``duration_micros`` — a whole number of microseconds — and for 1 ns where that is 0
  (astra-sim 7e526fb ``workload/Workload.cc``, ``issue_replay``); clustersim's own import
  reads the exact seconds in ``clustersim.duration_s``. The copy writes ASTRA-sim's time
  there.

Everything else is copied unchanged (node ids, ``comm_group.json``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .chakra_attrs import OWN, attr
from .chakra_export import COMM_GROUPS
from .chakra_file import read_trace, write_trace
from .chakra_import import rank_files
from .chakra_schema import NODE_TYPES

#: ASTRA-sim's time of a compute node whose ``duration_micros`` is 0 (one cycle of 1 ns)
ZERO_MICROS_S = 1e-9


def astra_seconds(duration_micros: int) -> float:
    """The seconds ASTRA-sim replays a compute node of ``duration_micros`` for."""
    return duration_micros * 1e-6 if duration_micros else ZERO_MICROS_S


def astra_view(src: str | Path, dst: str | Path) -> Path:
    """Copy the trace folder ``src`` to ``dst`` (created) as ASTRA-sim runs it (module
    docstring); returns ``dst``."""
    out = Path(dst)
    out.mkdir(parents=True, exist_ok=True)
    for path in rank_files(src):
        meta, nodes = read_trace(path)
        for node in nodes:
            kept = [a for a in node.attr if a.name not in (OWN + "serial", OWN + "duration_s")]
            if node.type == NODE_TYPES["COMP_NODE"]:
                kept.append(attr(OWN + "duration_s", astra_seconds(node.duration_micros)))
            del node.attr[:]
            node.attr.extend(kept)
        write_trace(out / path.name, meta, nodes)
    groups = Path(src) / COMM_GROUPS
    if groups.is_file():
        shutil.copy(groups, out / COMM_GROUPS)
    return out
