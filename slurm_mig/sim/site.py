"""The jobs as a policy sees them at a site: Slurm's priority (``sim.priority``) and
the runtimes the planner could know (``sim.knowledge``), kept up to date while the
engine runs the true jobs.

`SiteConditions` names the condition of a figure (priority mode and weights, what
the policy knew). `SiteView` is the engine's helper: it gives each arriving job the
face the policy sees (`arrive`), re-estimates waiting jobs when a run of their user
and kind ends (`finished`), recomputes priorities every PriorityCalcPeriod
(`refresh`), and predicts running jobs' ends as the daemon does: start plus the
planned seconds, or its time limit once a job runs past them (`expected_end`). A job
on several instances (a static layout's gang, `placed` with its sizes) is planned at
its slowest task and learned under that task's instance size.
Under ``oracle`` knowledge and ``none`` priority the engine uses no `SiteView`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..geometry import GpuModel, task_size
from ..job import Job
from ..limitevidence import OVERDUE_SECONDS, expected_end
from .knowledge import (
    DEFAULT_RUNTIME,
    KNOWLEDGE_MODES,
    SERIAL_FRACTION,
    LearnedRuntimes,
    learned_time_maps,
    limit_task_times,
    limit_times,
)
from .priority import SitePriority, Usage, fair_tree, job_priority

if TYPE_CHECKING:
    from ..planner.gpustate import LiveInstance

__all__ = ["SiteConditions", "SiteView"]


@dataclass(frozen=True)
class SiteConditions:
    """What a simulated site is like: its priority (``priority.mode`` none, age or
    fairshare) and what the policy knows of runtimes (``knowledge``)."""

    priority: SitePriority = field(default_factory=lambda: SitePriority("none"))
    knowledge: str = "oracle"
    default_runtime: float = DEFAULT_RUNTIME
    serial_fraction: float = SERIAL_FRACTION

    def __post_init__(self) -> None:
        if self.knowledge not in KNOWLEDGE_MODES:
            raise ValueError(
                f"knowledge {self.knowledge!r} is not a mode; give one of "
                f"{', '.join(KNOWLEDGE_MODES)}"
            )

    @classmethod
    def of(cls, priority: str = "none", knowledge: str = "oracle") -> SiteConditions:
        """The conditions of two mode names, with the documented weights."""
        return cls(SitePriority(priority), knowledge)

    @property
    def plain(self) -> bool:
        """True where the policy sees the jobs as they are (no `SiteView` needed)."""
        return self.priority.mode == "none" and self.knowledge == "oracle"

    def describe(self) -> str:
        return f"priority {self.priority.mode}, knowledge {self.knowledge}"


class SiteView:
    """The policy's view of the engine's jobs (module doc). ``slurm``: the policy
    models Slurm itself (it plans with time limits under ``learned``); ``index``: a
    job's id -> its position in ``jobs`` (the engine's)."""

    def __init__(
        self,
        cond: SiteConditions,
        jobs: Sequence[Job],
        model: GpuModel,
        t0: float,
        *,
        index: Mapping[int, int],
        slurm: bool = False,
    ) -> None:
        self.cond = cond
        self.jobs = jobs
        self.model = model
        self.slurm = slurm
        self.learned = cond.knowledge == "learned"
        self.prio = cond.priority
        self.seen: list[Job] = list(jobs)
        self.store = LearnedRuntimes()
        self.usage = Usage(self.prio.half_life, t0)
        self.users = sorted({j.user for j in jobs})
        self.factors = fair_tree({}, self.users)
        self.next_tick = t0 + self.prio.calc_period
        self.waiting: dict[tuple[str, str], set[int]] = {}
        self.ends: list[tuple[float, int]] = []  # (expected end, job index) of runs
        self.spread: dict[int, tuple[int, ...]] = {}  # job index -> its instances' sizes
        self._index = index

    # -- what the policy sees of a job ----------------------------------------

    def _times(self, job: Job) -> dict:
        """The fields of ``job``'s times as the policy sees them: ``times`` and a
        gang's ``task_times`` (per instance size), from one estimate."""
        if not self.learned:
            return {"times": job.times, "task_times": job.task_times}
        if self.slurm:
            return {"times": limit_times(job), "task_times": limit_task_times(job, self.model)}
        times, tasks = learned_time_maps(
            job,
            self.model,
            self.store,
            owner=job.user,
            default_runtime=self.cond.default_runtime,
            serial_fraction=self.cond.serial_fraction,
        )
        return {"times": times, "task_times": tasks}

    def _priority(self, job: Job, now: float) -> float:
        if self.prio.mode == "none":
            return job.priority
        return float(job_priority(self.prio, job.arrival, now, self.factors.get(job.user, 0.0)))

    def arrive(self, idx: int, now: float) -> Job:
        """Job ``idx`` as the policy sees it on arrival."""
        job = self.jobs[idx]
        self.waiting.setdefault((job.user, job.kind or job.id), set()).add(idx)
        seen = self.seen[idx] = replace(job, **self._times(job), priority=self._priority(job, now))
        return seen

    def placed(self, idx: int, sizes: tuple[int, ...] = ()) -> None:
        """Job ``idx`` left the queue (its face is frozen: the plan it started on);
        ``sizes``: the sizes of its instances when it holds several (one per task)."""
        job = self.jobs[idx]
        self.waiting.get((job.user, job.kind or job.id), set()).discard(idx)
        if sizes:
            self.spread[idx] = sizes

    def began(self, inst: LiveInstance, now: float) -> None:
        """The job on ``inst`` began running: watch for its expected end."""
        if self.learned:
            heapq.heappush(self.ends, (self.expected_end(inst, now), inst.job))

    # -- events ----------------------------------------------------------------

    def finished(self, idx: int, size: int, seconds: float, pending: dict[str, Job]) -> None:
        """Job ``idx`` ran ``seconds`` on ``size``: learned by its user and kind, and
        the waiting jobs of that user and kind re-estimated in ``pending``. A gang on
        a region is learned under its task size; one on several instances under
        ``size``, its slowest instance's, as it ran."""
        job = self.jobs[idx]
        spread = self.spread.pop(idx, None)
        if not self.learned or self.slurm:
            return
        key = job.kind or job.id
        if job.tasks > 1 and spread is None:  # one task on its instance (`geometry.gangs`)
            size = task_size(self.model, size, job.tasks) or size
        self.store.record(job.user, key, self.model.name, size, seconds)
        for other in self.waiting.get((job.user, key), ()):
            seen = self.seen[other]
            if seen.id in pending:
                seen = self.seen[other] = replace(seen, **self._times(self.jobs[other]))
                pending[seen.id] = seen

    def refresh(self, now: float, pending: dict[str, Job], held: Mapping[int, LiveInstance]):
        """At each PriorityCalcPeriod tick up to ``now``: usage of the runs on the
        ``held`` instances (job index -> instance), fairshare factors and every waiting
        job's priority."""
        if self.prio.mode == "none" or now < self.next_tick:
            return
        tick = self.next_tick
        while tick + self.prio.calc_period <= now:
            tick += self.prio.calc_period
        if self.prio.fairshare:
            last = self.usage.last
            for idx, inst in held.items():
                if inst.run is not None:
                    self.usage.ran(self.jobs[idx].user, tick - max(inst.run.started, last))
            self.usage.tick(tick)
            self.factors = fair_tree(self.usage.used, self.users)
        self.next_tick = tick + self.prio.calc_period
        for jid, seen in list(pending.items()):
            p = self._priority(seen, tick)
            if p != seen.priority:
                seen = self.seen[self._index[jid]] = replace(seen, priority=p)
                pending[jid] = seen

    def ran_until_end(self, idx: int, started: float, end: float) -> None:
        """A run that ends now: its usage since the last tick."""
        if self.prio.fairshare:
            self.usage.ran(self.jobs[idx].user, end - max(started, self.usage.last))

    # -- predicted ends ----------------------------------------------------------

    def expected_end(self, inst: LiveInstance, now: float) -> float:
        """When the policy expects the job on ``inst`` to end: its start (or the
        instance's readiness) plus the planned seconds of its remaining work; once a
        run is past that, its time limit, as the daemon expects
        (`limitevidence.expected_end`)."""
        seen = self.seen[inst.job]
        planned = self.planned(inst)
        run = inst.run
        if run is not None:
            return expected_end(run.started, planned * inst.rem, seen.time_limit, now)
        begin = inst.ready_at if inst.ready_at > inst.start_at else inst.start_at
        return begin + planned * inst.rem

    def planned(self, inst: LiveInstance) -> float:
        """The seconds the policy plans the job on ``inst`` to run there alone (one on
        several instances: its slowest task's)."""
        seen = self.seen[inst.job]
        sizes = self.spread.get(inst.job)
        if sizes is None:
            return seen.times.get(inst.slot.size, math.inf)
        per = seen.per_task(self.model)
        return max(per.get(s, math.inf) for s in sizes)

    def overdue(self, now: float, held: dict) -> list[LiveInstance]:
        """Instances of running jobs whose expected end passed since the last call
        (their views are rebuilt, as the daemon re-projects an overdue job every
        cycle)."""
        gpus: list[LiveInstance] = []
        ends = self.ends
        while ends and ends[0][0] <= now:
            _, idx = heapq.heappop(ends)
            inst = held.get(idx)
            if inst is None or inst.run is None:
                continue
            gpus.append(inst)
            later = max(self.expected_end(inst, now), now + OVERDUE_SECONDS)
            heapq.heappush(ends, (later, idx))
        return gpus
