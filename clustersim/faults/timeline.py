"""The job timeline: iterations, checkpoints, failures, restarts and migrations in order.

A job of ``N`` iterations runs in a configuration whose iteration time ``T`` the engine
measured. After iteration ``i`` (0-based) a checkpoint is written when ``i + 1`` is a
multiple of ``checkpoint_every`` and the job is not done; it blocks the job for
``C = checkpoint bytes / storage_bandwidth``.

Faults strike at their time (``at``) or when the running job has done ``at_iteration``
iterations. A ``gpu_fail`` (and a ``link_fail`` that cuts GPUs off: their nodes fail)
interrupts the segment under way:

* ``checkpoint_restart``: everything since the end of the last completed checkpoint is
  lost (finished iterations, the partial iteration or the partial checkpoint write);
  the job pauses ``restart_time`` plus the checkpoint read (``C``; none before the first
  checkpoint: it restarts from scratch) and resumes at the checkpointed iteration on a
  spare node, in the same configuration. Job time = N·T + K·C + lost + restarts.
* ``elastic``: only the partial segment is lost (finished iterations live on in the
  surviving replicas); the job pauses ``replan_time`` to re-form, migrates state
  (:mod:`.replan`) and continues in the new configuration.

A ``node_join`` and a ``link_fail`` that only re-routes take effect at the next segment
boundary, losing nothing: a join re-plans under ``elastic`` (pause, migration) and waits
as a spare under ``checkpoint_restart``; a re-route changes ``T`` from then on. A fault
whose time falls inside a restart or migration takes effect when it ends. Every
iteration index 0..N−1 ends up exactly once as useful work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import ScenarioError
from .config import Config

COLUMNS = ["kind", "iteration", "start_s", "end_s", "useful", "lost", "config", "note"]


@dataclass
class JobModel:
    """What the timeline needs from the simulator, as plain callables and numbers."""

    iteration_time: Callable[[Config], float]
    #: (config, available physical nodes, field, value) → (new config, migration s, bytes)
    replan: Callable[[Config, list[int], str, object], tuple[Config, float, float]]
    #: (config, link) → physical nodes the link's failure cuts off (empty: it only re-routes)
    cut_off: Callable[[Config, tuple[str, str]], set[int]]
    checkpoint_write_s: float
    checkpoint_read_s: float
    gpus_per_node: int


class Hit(NamedTuple):
    """A fault that strikes within the segment about to run."""

    index: int  # in the scenario's faults list
    when: float
    fault: object
    interrupts: bool  # False: a join or re-route, applied at a segment boundary
    cut: set[int]  # physical nodes that leave (gpu_fail, or a link_fail that cuts them off)


class JobTimeline:
    """Build the rows of one job (see the module docstring); ``run()`` returns them."""

    def __init__(self, recovery, faults, model: JobModel, start: Config, joined_base: int):
        self.rec, self.m = recovery, model
        self.pending = list(enumerate(faults))
        self.cfg = start
        self.replanned = False  # an elastic re-plan has re-formed the job on a fresh cluster
        self.next_node = joined_base  # physical index of the next joining node
        self.rows: list[dict] = []
        self.t = 0.0
        self.done = 0  # iterations done in the current run (the next one to run)
        self.ckpt_done = 0  # iterations covered by the last completed checkpoint
        self.ckpt_due = False
        self.since_ckpt: list[int] = []  # rows of iterations a restart would lose

    def _row(self, kind, start, end, iteration=None, useful=False, lost=False, note=""):
        self.rows.append(
            {
                "kind": kind,
                "iteration": iteration,
                "start_s": start,
                "end_s": end,
                "useful": useful,
                "lost": lost,
                "config": self.cfg.label(),
                "note": note,
            }
        )
        return len(self.rows) - 1

    def run(self) -> list[dict]:
        n = self.rec.job_iterations
        while self.done < n or self.ckpt_due:
            it_time = self.m.iteration_time(self.cfg)
            kind, dur = ("checkpoint", self.m.checkpoint_write_s) if self.ckpt_due else ("iteration", it_time)
            hit = self._next_fault(kind, dur, it_time)
            if hit is None:
                self._complete(kind, dur)
            elif hit.interrupts:
                self._interrupt(kind, hit)
            else:  # a boundary event, due now
                self._boundary(hit.index, hit.fault)
        return self.rows

    def _next_fault(self, kind, dur, it_time) -> Hit | None:
        """The first fault that strikes within the segment about to run (ties: list order)."""
        best = None
        for k, f in self.pending:
            if f.at is not None:
                when = max(f.at, self.t)
                strikes = when < self.t + dur or when == self.t
            elif kind == "iteration":  # by the index: the float time may round onto the iteration's end
                when = self.t + max(0.0, f.at_iteration - self.done) * it_time
                strikes = f.at_iteration < self.done + 1
            else:  # a checkpoint after iteration done − 1: at_iteration = done strikes after it
                when, strikes = self.t, f.at_iteration < self.done
            if not strikes:
                continue
            cut = self._cut(k, f) if f.kind != "node_join" else set()
            interrupts = f.kind == "gpu_fail" or bool(cut)
            if not interrupts and when > self.t:  # joins and re-routes wait for the next boundary
                continue
            if best is None or when < best.when:
                best = Hit(k, when, f, interrupts, cut)
        return best

    def _cut(self, k, f) -> set[int]:
        if f.kind == "gpu_fail":
            node = f.gpu // self.m.gpus_per_node
            if node not in self.cfg.phys:
                raise ScenarioError(
                    f"faults[{k}].gpu",
                    f.gpu,
                    f"GPU {f.gpu} is not in the job when this fault "
                    f"strikes (its nodes then: {sorted(self.cfg.phys)})",
                )
            return {node}
        self._check_link_fault(k, f)
        return self.m.cut_off(self.cfg, tuple(f.link))

    def _check_link_fault(self, k, f) -> None:
        """A link fault names physical links; once an elastic re-plan has re-formed the job
        the simulated cluster is a fresh one, so neither a cut nor a re-route is modelled."""
        if self.replanned:
            raise ScenarioError(
                f"faults[{k}].link",
                list(f.link),
                "a link_fail after an elastic re-plan is not "
                "modelled (the re-planned cluster is a fresh one); use checkpoint_restart",
            )

    def _complete(self, kind, dur):
        start, self.t = self.t, self.t + dur
        if kind == "checkpoint":
            self._row("checkpoint", start, self.t, note=f"covers iterations 0..{self.done - 1}")
            self.ckpt_done, self.ckpt_due, self.since_ckpt = self.done, False, []
            return
        self.since_ckpt.append(self._row("iteration", start, self.t, iteration=self.done, useful=True))
        self.done += 1
        every = self.rec.checkpoint_every
        self.ckpt_due = bool(every) and self.done % every == 0 and self.done < self.rec.job_iterations

    def _consume(self, k):
        self.pending = [(j, f) for j, f in self.pending if j != k]

    def _interrupt(self, kind, hit: Hit):
        k, when, f, nodes = hit.index, hit.when, hit.fault, hit.cut
        self._consume(k)
        if when > self.t:  # the segment under way is cut short and its work lost
            self._row(
                kind,
                self.t,
                when,
                iteration=self.done if kind == "iteration" else None,
                lost=True,
                note="interrupted",
            )
        self.t = when
        what = (
            f"GPU {f.gpu}" if f.kind == "gpu_fail" else f"link {list(f.link)} cut off node(s) {sorted(nodes)}"
        )
        self._row("failure", when, when, note=f"faults[{k}]: {what} failed")
        self.ckpt_due = False  # a checkpoint under way is abandoned
        if self.rec.policy == "checkpoint_restart":
            for r in self.since_ckpt:
                self.rows[r].update(useful=False, lost=True, note="lost: after the last checkpoint")
            self.since_ckpt = []
            read = self.m.checkpoint_read_s if self.ckpt_done else 0.0
            src = (
                f"checkpoint at iteration {self.ckpt_done}"
                if self.ckpt_done
                else "scratch (no checkpoint yet)"
            )
            self._pause("restart", self.rec.restart_time + read, f"restart on a spare from {src}")
            self.done = self.ckpt_done
            return
        survivors = [n for n in self.cfg.phys if n not in nodes]
        self._replan(survivors, f"faults[{k}]", f.model_dump(exclude_none=True))

    def _boundary(self, k, f):
        self._consume(k)
        if f.kind == "link_fail":
            self._check_link_fault(k, f)
            self.cfg = Config(self.cfg.phys, self.cfg.dp, (*self.cfg.failed_links, tuple(f.link)))
            self._row(
                "reroute", self.t, self.t, note=f"faults[{k}]: link {list(f.link)} down; routes avoid it"
            )
            return
        new = list(range(self.next_node, self.next_node + f.nodes))
        self.next_node += f.nodes
        if self.rec.policy == "checkpoint_restart":
            self._row("join", self.t, self.t, note=f"faults[{k}]: node(s) {new} join as spares")
            return
        self._row("join", self.t, self.t, note=f"faults[{k}]: node(s) {new} join")
        self._replan([*self.cfg.phys, *new], f"faults[{k}]", f.model_dump(exclude_none=True))

    def _replan(self, available, field, value):
        if self.cfg.failed_links:
            raise ScenarioError(
                field,
                value,
                "an elastic re-plan while links are down is not modelled (the "
                "re-planned cluster is a fresh one); use checkpoint_restart",
            )
        new, mig_s, moved = self.m.replan(self.cfg, available, field, value)
        self._pause("replan", self.rec.replan_time, f"re-form the job: {new.label()}")
        self.cfg, self.replanned = new, True
        self._pause("migration", mig_s, f"{moved / 2**30:.3g} GiB of state moved over the fabric")

    def _pause(self, kind, dur, note):
        start, self.t = self.t, self.t + dur
        self._row(kind, start, self.t, note=note)
