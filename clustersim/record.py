"""The run recorder (a leaf module): the engine's and the fabric's only way to say what happened.

The hot path appends plain tuples — no pandas, no formatting. The engine keeps each op's
start and end in arrays and, after the run, fills ``Recorder.ops`` with
``(op_id, start_s, end_s)`` per executed op in op-id order (everything else about an op
is static and comes from the Program afterwards); the fabric appends whole span tuples
for link busy periods to ``Recorder.spans``, with the fields :data:`SPAN_FIELDS` in that
order. The Result turns both into the ``res.spans`` DataFrame once, at the end.

Field meanings:
  device      GPU name (``"gpu3"``) or link name (``"gpu3->nvswitch0"``)
  lane        ``compute``, ``send``, ``recv``, ``comm`` … for GPUs; ``link`` for links
  kind        ``compute``, ``send``, ``recv``, ``collective``, ``optimizer``, ``link`` …
  name        human label (``"F3"``, ``"B3"``, ``"send F3"``, a flow label for links)
  stage       pipeline stage, -1 where none
  microbatch  micro-batch index, -1 where none
  start_s, end_s   simulated seconds
  bytes       bytes moved (0 for compute)
  flops       FLOPs executed (0 for communication)
  phase       ``F`` forward, ``B`` backward (input grad, or whole backward), ``W`` weight grad,
              ``O`` optimizer, ``""`` for communication and links
  iteration   training iteration index, -1 for links
"""

from __future__ import annotations

SPAN_FIELDS = (
    "device",
    "lane",
    "kind",
    "name",
    "stage",
    "microbatch",
    "start_s",
    "end_s",
    "bytes",
    "flops",
    "phase",
    "iteration",
)


class Recorder:
    """Collects op times, other span tuples (see :data:`SPAN_FIELDS`) and memory samples."""

    __slots__ = ("ops", "spans", "memory")

    def __init__(self) -> None:
        #: (op_id, start_s, end_s) per executed Program op, by op id (filled after the run)
        self.ops: list[tuple[int, float, float]] = []
        #: full span tuples (SPAN_FIELDS) of everything that is not a Program op: link busy periods
        self.spans: list[tuple] = []
        #: (device, time_s, allocated_bytes) after every allocation change
        self.memory: list[tuple] = []
