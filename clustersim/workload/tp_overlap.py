"""Tensor-parallel communication overlapped with the GEMMs it feeds (``parallel.tp_comm_overlap``).

Megatron-Core's ``--tp-comm-overlap`` hands the sequence-parallel all-gathers and
reduce-scatters of a layer's four linears to Transformer Engine's userbuffers, which split
them into chunks pipelined with chunks of the GEMM. Which GEMM overlaps which collective,
and how, is TE's default table (``transformer_engine/pytorch/module/base.py``,
``initialize_ub``: ``methods`` and ``num_splits``):

* ``ring_exchange`` — ``qkv_fprop``, ``fc1_fprop`` (the all-gather before QKV / FC1) and
  ``proj_dgrad``, ``fc2_dgrad`` (the all-gather of the output gradient before the
  projection's / FC2's input-gradient GEMM): in ``t`` = tp steps each rank passes one
  ``s/t`` shard to its ring neighbour while the GEMM runs on the shard it already holds;
  the first GEMM chunk needs no communication.
* ``pipeline`` — ``proj_fprop``, ``fc2_fprop`` (the reduce-scatter after the projection /
  FC2): the GEMM in ``num_splits`` (default 4) chunks along the tokens, each chunk's
  output reduce-scattered while the next chunk computes; the last one is exposed.
* ``bulk`` — ``qkv_wgrad`` / ``fc1_wgrad``: the reduce-scatter of the input gradient runs
  alongside the weight-gradient GEMM, unchunked; ``qkv_dgrad`` / ``fc1_dgrad``: the
  all-gather of the sharded input the weight gradient needs (:mod:`.sp_regather`) runs
  alongside the input-gradient GEMM.

Here those become items for :mod:`.segments` (``("o", kind, bytes, name, seconds, flops,
method, chunks, margin, host, launches)``: the collective, then the GEMM work it pipelines with,
the GEMM's host seconds and its kernels' launches) and segments
the compiler emits as separate ops — GEMM chunks on the compute lane, the userbuffers
transfers as sends and receives between TP neighbours on the ``tp send`` / ``tp recv`` lanes
(:mod:`clustersim.compilers.pipeline.tp_overlap`) — so the engine produces the overlap.

Userbuffers are not NCCL: the chunks move by copy engine (``ring_exchange``, ``use_ce``) or
by TE's own kernels reading peers' memory over NVLink, so no chunk pays NCCL's per-call
protocol latency. What they cost the GEMM is TE's SM budget (``initialize_ub``'s
``get_default_config``, rows of ``data/interference_measurements.csv``): ``ring_exchange``
takes ``num_sm`` 1 with ``set_sm_margin`` off — the GEMM keeps every SM; ``pipeline`` and
``bulk`` take ``num_sm`` 16 with ``set_sm_margin`` on — the GEMM is launched on SMs − 16
for its whole run, priced per GEMM shape by the wave model over the SMs it keeps
(:mod:`.gemm_interference`; the scalar ``cluster.comm_compute_slowdown`` where the GPU
has no SM count). ``comm_compute_slowdown`` 1 turns interference off. The margin is carried
as ``margin`` seconds and emitted as its own ``interference`` op so the breakdown shows it
(``interference_fraction``, ``interference_tp_s``; docs/metrics.md). Pairs are found by the GEMM's name next to the collective; other TP points (the
embedding's and output layer's, those next to MLA's down-projections or the MoE MLP, a
backward split into B and W) stay plain collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScenarioError
from ..hardware.interference import sm_budget
from .cost_model import Efficiency, gemm_batch
from .gemm_interference import relaunched_slowdown
from .ops import Work
from .sp_regather import NAME as REGATHER

RING, PIPELINE, BULK = "ring_exchange", "pipeline", "bulk"
#: column-parallel linears: all-gather before (fprop, ring), reduce-scatter of dgrad after (bulk)
AG_GEMMS = ("qkv", "mlp_up")
#: row-parallel linears: reduce-scatter after (fprop, pipeline), all-gather before dgrad (ring)
RS_GEMMS = ("attn_out", "mlp_down")
#: each method's overlap kind in ``data/interference_measurements.csv``
KIND = {RING: "tp_ring_exchange", PIPELINE: "tp_pipeline", BULK: "tp_bulk"}


@dataclass(frozen=True)
class TPOverlap:
    """The resolved options: the TP size (ring-exchange chunks), the pipeline method's splits
    and the slowdown of a GEMM launched with TE's SM margin (module doc; 1: none)."""

    tp: int
    splits: int
    slowdown: float = 1.0

    def chunks(self, method: str) -> int:
        """Chunks of the GEMM for ``method`` (bulk: one)."""
        return {RING: self.tp, PIPELINE: self.splits, BULK: 1}[method]

    def margin(
        self, method: str, seconds: float, eff: Efficiency | None = None, work: Work | None = None
    ) -> float:
        """Seconds TE's SM margin adds to a GEMM of ``seconds`` (``work``, priced with
        ``eff``) overlapped by ``method``: none with interference off (slowdown 1) or where
        the GEMM keeps every SM; else the wave model at SMs − ``num_sm``, or the scalar
        slowdown without an SM count or a GEMM shape (module doc)."""
        row = sm_budget(KIND[method])
        if self.slowdown == 1.0 or not row.sm_margin:
            return 0.0
        shaped = eff is not None and work is not None and bool(work.gemm) and min(work.gemm) > 0
        factor = relaunched_slowdown(eff, work.gemm, gemm_batch(work), row.comm_sms) if shaped else None
        return seconds * ((self.slowdown if factor is None else factor) - 1.0)


def overlap_of(parallel, slowdown: float = 1.0) -> TPOverlap | None:
    """The scenario's TP overlap (None when ``tp_comm_overlap`` is off); ``slowdown``:
    ``cluster.comm_compute_slowdown``, what the SM margin costs a GEMM."""
    if not parallel.tp_comm_overlap:
        return None
    return TPOverlap(parallel.tp, parallel.tp_comm_overlap_num_splits, slowdown)


def check_tp_overlap(spec) -> None:
    """Refuse ``tp_comm_overlap`` where Megatron does or where nothing could overlap: it
    needs sequence parallelism (megatron/training/arguments.py: "Tensor parallel
    communication/GEMM overlap can happen only when sequence parallelism is enabled"),
    hence tp > 1, a transformer, and per-layer segments."""
    par = spec.parallel
    if not par.tp_comm_overlap:
        return
    if par.tp < 2 or not par.sequence_parallel:
        raise ScenarioError(
            "parallel.tp_comm_overlap",
            True,
            f"it overlaps sequence-parallel collectives (tp={par.tp}, sequence_parallel="
            f"{par.sequence_parallel}); accepted with tp ≥ 2 and sequence_parallel: true",
        )
    if spec.simulation.granularity != "layer":
        raise ScenarioError(
            "parallel.tp_comm_overlap",
            True,
            "its chunks need per-layer segments; accepted with simulation.granularity: layer",
        )


def merge_forward(tagged: list[tuple], ov: TPOverlap, eff: Efficiency | None = None) -> list[tuple]:
    """Forward items with each all-gather + column-parallel GEMM (ring exchange) and each
    row-parallel GEMM + reduce-scatter (pipeline) merged. ``tagged``: (item, op name, its
    :class:`Work` or None); ``eff``: the efficiencies the GEMMs were priced with."""
    out: list[tuple] = []
    i = 0
    while i < len(tagged):
        item, name, work = tagged[i]
        nxt = tagged[i + 1] if i + 1 < len(tagged) else (None, "", None)
        if item[0] == "x" and item[1] == "all_gather" and nxt[1] in AG_GEMMS:
            out.append(_merged(item, nxt[0], RING, ov, (eff, nxt[2])))
            i += 2
        elif item[0] == "c" and name in RS_GEMMS and nxt[0] and nxt[0][:2] == ("x", "reduce_scatter"):
            out.append(_merged(nxt[0], item, PIPELINE, ov, (eff, work)))
            i += 2
        else:
            out.append(item)
            i += 1
    return out


def merge_backward(tagged: list[tuple], ov: TPOverlap, eff: Efficiency | None = None) -> list[tuple]:
    """Backward items (last op first) with the output-gradient all-gather + a row-parallel
    GEMM's dgrad merged (ring exchange) and a column-parallel GEMM's wgrad + the input-
    gradient reduce-scatter after it merged (bulk). ``tagged``: (item, op name, part, its
    :class:`Work` or None), part ``"dgrad"`` or ``"wgrad"`` for the GEMMs' separate items;
    ``eff`` as :func:`merge_forward`."""
    out: list[tuple] = []
    i = 0
    while i < len(tagged):
        item, name, part, work = tagged[i]
        nxt = tagged[i + 1] if i + 1 < len(tagged) else (None, "", "", None)
        if item[0] == "x" and item[1] == "all_gather" and nxt[1] in RS_GEMMS and nxt[2] == "dgrad":
            out.append(_merged(item, nxt[0], RING, ov, (eff, nxt[3])))
            i += 2
        elif (
            item[:2] == ("x", "all_gather")
            and item[3] == REGATHER
            and nxt[1] in AG_GEMMS
            and nxt[2] == "dgrad"
        ):
            # TE's qkv_dgrad / fc1_dgrad bulk overlap: the SP input's all-gather beside the dgrad GEMM
            out.append(_merged(item, nxt[0], BULK, ov, (eff, nxt[3])))
            i += 2
        elif part == "wgrad" and name in AG_GEMMS and nxt[0] and nxt[0][:2] == ("x", "reduce_scatter"):
            out.append(_merged(nxt[0], item, BULK, ov, (eff, work)))
            i += 2
        else:
            out.append(item)
            i += 1
    return out


def _merged(comm: tuple, gemm: tuple, method: str, ov: TPOverlap, priced: tuple) -> tuple:
    _, kind, nbytes, name = comm[:4]  # (an expert collective carries its group after)
    margin = ov.margin(method, gemm[1], *priced)
    # the GEMM's host seconds ride along (its module's issue: :mod:`.host_kernels`)
    # ... and its kernels' launches (the GEMM's, and the small kernels a framework adds to it)
    return ("o", kind, nbytes, name, gemm[1], gemm[2], method, ov.chunks(method), margin, gemm[5], gemm[3])
