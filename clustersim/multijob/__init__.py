"""Several jobs on one cluster (docs/multi_job.md): each job's Program moved onto its placed
GPUs and merged (:mod:`.merge`), run once on the shared fabric (:mod:`.run`), its Result
split per job (:mod:`.split`)."""

from .merge import Placed, merge_programs
from .run import resolve_jobs, simulate_jobs

__all__ = ["Placed", "merge_programs", "resolve_jobs", "simulate_jobs"]
