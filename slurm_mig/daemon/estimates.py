"""Each job's `Estimate` for the cycle: its kind, its owner and its runtime estimate
from the learned runs of that owner and kind (`runtimes.estimate_for_job`), or, while
an overrun of its owner's counts against their ``time=`` hints, from what they ran
(`slurm_mig.overruns`: read once per cycle, and from the runs squeue shows).

Runtimes are learned and estimated per instance size: one task on its instance. A job
of several slices (``tasks=N``) runs its N tasks side by side, each on an instance of
one size, so its estimate is `geometry.gang_times` of one task's: seconds per size of
the region that holds the N instances (``time=`` and the time limit are one task's,
the gang's); regions that hold none are left out (it cannot run there).

A job's kind is its hint ``key=``, else its name, else ``job-<id>``; its owner is its
Slurm uid (``uid:<n>``, `slurm_mig.owner`). Runs are learned and read per (owner, kind): one user's jobs cannot change
another user's plans, whatever they are named. Both are bounded: a kind is the name
itself only when it is 1 to `profiles.MAX_KEY` characters of the hint key's alphabet
(``[A-Za-z0-9_.-]``, what ``mig-run`` may report a memory need under), else a cleaned
prefix and a digest of the whole name (no newline or escape reaches a log line, and two
names of one user stay apart); a job whose uid is unknown learns nothing and is planned
from hints, the prior and defaults.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..geometry import gang_times, get_model, mask_tables, region_sizes
from ..hints import cached_hints
from ..overruns import OVERRUN_MEMORY_S, live_overruns, merge
from ..owner import owner_of
from ..runtimes import MAX_KEY, estimate_for_job, memory_for_job
from ..slurm.jobrecord import in_partition, job_phase
from .cycle import Estimate

__all__ = ["Estimator", "distrusted_times", "gang_region_times", "job_kind", "job_owner"]

_KIND_RE = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_KEY}}}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_PREFIX = 40  # characters of a cleaned name kept before its digest


def job_kind(name: str, job_id: str, hint_key: str | None = None) -> str:
    """The kind a job's runs are learned under: ``hint_key``, else its name (cleaned
    and made unique with a digest when it is not a plain kind), else ``job-<id>``."""
    if hint_key:
        return hint_key
    if not name:
        return f"job-{job_id}"
    if _KIND_RE.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{_UNSAFE.sub('_', name)[:_PREFIX]}~{digest}"


def job_owner(job: Any) -> str:
    """Whose runs a job's are: its Slurm uid (`slurm_mig.owner`, the rule the nodes'
    memory reports follow); `profiles.PRIOR` ("") when unknown (then it learns nothing
    and reads only the prior)."""
    return owner_of(getattr(job, "uid", None))


class _CycleStore:
    """The runtime store's reads, remembered for one cycle (jobs of a kind share them)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._obs: dict[tuple[str, str, str | None], dict[int, list[float]]] = {}
        self._mem: dict[tuple[str, str | None], int | None] = {}

    def observations(
        self, key: str, model: str, owner: str | None = None
    ) -> dict[int, list[float]]:
        k = (key, model, owner)
        if k not in self._obs:
            self._obs[k] = self.store.observations(key, model, owner)
        return self._obs[k]

    def memory_need(self, key: str, owner: str | None = None) -> int | None:
        k = (key, owner)
        if k not in self._mem:
            self._mem[k] = self.store.memory_need(key, owner)
        return self._mem[k]


class Estimator:
    """Runtime estimates of jobs (`runtimes.estimate_for_job`: the learned runs of the
    job's owner and kind within its ``time=`` hint, else the hint, else the site-wide
    prior, else its time limit, else default_runtime), for one cycle at ``now`` (epoch
    seconds) over squeue's ``jobs``: a hint of an owner with an overrun that counts
    (`overruns`) is not read (`distrusted_times`)."""

    def __init__(
        self, config: Any, store: Any, *, now: float | None = None, jobs: Iterable[Any] = ()
    ) -> None:
        self.config = config
        self.store = _CycleStore(store) if store is not None else None
        self.now = time.time() if now is None else float(now)
        self._jobs = tuple(jobs)
        self._overruns: dict[str, dict[str, float]] | None = None
        self._memo: dict[tuple, Estimate] = {}

    def overruns(self) -> Mapping[str, Mapping[str, float]]:
        """Owner -> kind -> longest overrun counting this cycle: the store's of the last
        `OVERRUN_MEMORY_S` and those of the runs squeue shows; read once, when the first
        job with a ``time=`` hint is estimated."""
        if self._overruns is None:
            read = getattr(self.store.store, "overruns_since", None) if self.store else None
            stored = read(self.now - OVERRUN_MEMORY_S) if read is not None else {}
            self._overruns = merge(stored, live_overruns(self._runs(), self.now))
        return self._overruns

    def _runs(self) -> Iterator[tuple[str, str, float | None, float | None, float | None]]:
        """(owner, kind, hint, start, end or None) of the jobs that started or ran."""
        for job in self._jobs:
            phase = job_phase(job.state)
            if phase == "pending" or (
                job.partition and not in_partition(job, self.config.partition)
            ):
                continue
            key, hints = self.key_of(job)
            if not isinstance(hints, Exception) and hints.time is not None:
                end = job.end_time if phase == "done" else None
                yield job_owner(job), key, hints.time, job.start_time, end

    @staticmethod
    def key_of(job: Any) -> tuple[str, Any]:
        """The job's kind (`job_kind`) and its hints (or the HintError)."""
        hints = cached_hints(job.comment)
        key = None if isinstance(hints, Exception) else hints.key
        return job_kind(job.name, job.job_id, key), hints

    def identity(self, job: Any) -> Estimate:
        """The estimate of a running or finished job: its kind and owner only (what
        its runtime is learned under)."""
        key, hints = self.key_of(job)
        if isinstance(hints, Exception):
            return Estimate(key, owner=job_owner(job))
        return Estimate(
            key,
            owner=job_owner(job),
            hint=hints.time,
            tasks=hints.tasks,
            restartable=bool(hints.restartable),
        )

    def __call__(self, job: Any, models: Iterable[str]) -> Estimate:
        key, hints = self.key_of(job)
        owner = job_owner(job)
        if isinstance(hints, Exception):
            return Estimate(key, problem=" ".join(str(hints).split()), owner=owner)
        names = tuple(sorted({get_model(m).name for m in models}))
        memo = (
            key,
            owner,
            names,
            hints.time,
            job.time_limit,
            hints.mem,
            hints.pcie,
            hints.alpha,
            hints.restartable,
            hints.tasks,
        )
        if memo not in self._memo:
            try:
                self._memo[memo] = self._estimate(job, key, owner, hints, names)
            except (ValueError, ArithmeticError) as exc:  # one job's data, not the daemon's
                text = " ".join(str(exc).split()) or type(exc).__name__
                return Estimate(key, problem=f"cannot estimate its runtime: {text}", owner=owner)
        return self._memo[memo]

    def _estimate(
        self, job: Any, key: str, owner: str, hints: Any, names: tuple[str, ...]
    ) -> Estimate:
        if hints.time is not None and owner in self.overruns():
            times = self._distrusted(job, key, owner, hints, names)
        else:
            times = self._trusted(job, key, owner, hints, names)
        mem = memory_for_job(self.store, key, owner, hints.mem)
        if hints.tasks > 1:
            times = {
                n: gang_region_times(get_model(n), t, hints.tasks, mem) for n, t in times.items()
            }
        return Estimate(
            key,
            times,
            mem,
            pcie=hints.pcie or 0.0,
            alpha=hints.alpha if hints.alpha is not None else 1.0,
            restartable=bool(hints.restartable),
            owner=owner,
            tasks=hints.tasks,
        )

    def _distrusted(
        self, job: Any, key: str, owner: str, hints: Any, names: tuple[str, ...]
    ) -> dict[str, dict[int, float]]:
        """Seconds per size per model without the job's hint (`distrusted_times`)."""
        longest = self.overruns().get(owner, {}).get(key)
        return {
            name: distrusted_times(
                self.store,
                key,
                get_model(name),
                owner=owner,
                longest=longest,
                time_limit=job.time_limit,
                min_memory=hints.mem,
                default_runtime=self.config.default_runtime,
                serial_fraction=self.config.serial_fraction,
                gang=hints.tasks > 1,
            )
            for name in names
        }

    def _trusted(
        self, job: Any, key: str, owner: str, hints: Any, names: tuple[str, ...]
    ) -> dict[str, dict[int, float]]:
        """Seconds per size per model (`runtimes.estimate_for_job`)."""
        return {
            name: estimate_for_job(
                self.store,
                key,
                get_model(name),
                owner=owner,
                hint_seconds=hints.time,
                time_limit=job.time_limit,
                min_memory=hints.mem,
                default_runtime=self.config.default_runtime,
                serial_fraction=self.config.serial_fraction,
                gang=hints.tasks > 1,
            )
            for name in names
        }


def gang_region_times(
    model: Any, task_times: Mapping[int, float], tasks: int, memory: int | None
) -> dict[int, float]:
    """A job of ``tasks`` instances: one task's seconds per instance size as seconds
    per region size (`geometry.gang_times`), only the regions whose instances have
    ``memory`` (one task's; the planner's memory per size, as `runnable_sizes` reads
    it): a gang no region runs is left with none, and noted (`problems`)."""
    out = gang_times(model, task_times, tasks)
    if memory:
        per, have = region_sizes(model, tasks), mask_tables(model).memory
        out = {r: t for r, t in out.items() if have[per[r]] >= memory}
    return out


def distrusted_times(
    store: Any,
    key: str | None,
    model: Any,
    *,
    owner: str,
    longest: float | None,
    time_limit: float | None,
    min_memory: int | None,
    default_runtime: float,
    serial_fraction: float,
    gang: bool = False,
) -> dict[int, float]:
    """Seconds per size for a job whose owner's ``time=`` hints do not count
    (`slurm_mig.overruns`): its owner's runs of its kind, unbounded by the hint (weighed
    against the time limit), else its time limit, else ``default_runtime`` (never the
    site-wide prior); each size at least ``longest`` (the owner's longest overrun of the
    kind), at most up to the limit."""
    limit = time_limit if time_limit is not None and 0 < time_limit < math.inf else None
    own = bool(store is not None and key and owner and store.observations(key, model.name, owner))
    memory = memory_for_job(store, key, owner, min_memory)
    times = estimate_for_job(
        store if own else None,
        key if own else None,
        model,
        owner=owner,
        # no runs: planned at the limit itself, not at what a limit suggests of a run
        # (`limitevidence`): a hint that does not count earns no credit
        hint_seconds=None if own else limit,
        time_limit=limit,
        min_memory=memory,
        default_runtime=default_runtime,
        serial_fraction=serial_fraction,
        gang=gang,
    )
    if longest is None or not math.isfinite(longest):
        return times
    floor = min(longest, limit) if limit is not None else longest
    return {s: max(t, floor) for s, t in times.items()}
