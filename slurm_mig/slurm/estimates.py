"""Each job's `Estimate` for the cycle: its kind, its owner and its runtime estimate
from the learned runs of that owner and kind (`profiles.estimate_for_job`).

A job's kind is its hint ``key=``, else its name, else ``job-<id>``; its owner is its
Slurm user. Runs are learned and read per (owner, kind): one user's jobs cannot change
another user's plans, whatever they are named. Both are bounded: a kind is the name
itself only when it is 1 to `profiles.MAX_KEY` characters of the hint key's alphabet
(``[A-Za-z0-9_.-]``, what ``mig-run`` may report a memory need under), else a cleaned
prefix and a digest of the whole name (no newline or escape reaches a log line, and two
names of one user stay apart); an owner that is empty, too long or not printable learns
nothing and is planned from hints, the prior and defaults.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from ..geometry import get_model
from ..runtimes import MAX_KEY, MAX_OWNER, PRIOR
from .cycle import Estimate

__all__ = ["Estimator", "job_kind", "job_owner"]

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
    """Whose runs a job's are: its Slurm user; `profiles.PRIOR` ("") when unknown or
    unusable (then it learns nothing and reads only the prior)."""
    user = getattr(job, "user", "")
    if not isinstance(user, str) or len(user) > MAX_OWNER or not user.isprintable():
        return PRIOR
    return PRIOR if any(c.isspace() for c in user) else user


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


@lru_cache(maxsize=1 << 16)
def _hints_of(comment: str) -> Any:
    """``parse_hints(comment)``, or the HintError; memoised: a steady cycle reads the
    same comments again (the hints are immutable)."""
    from ..hints import HintError, parse_hints

    try:
        return parse_hints(comment)
    except HintError as exc:
        return exc


class Estimator:
    """Runtime estimates of jobs (`profiles.estimate_for_job`: the learned runs of the
    job's owner and kind within its ``time=`` hint, else the hint, else the site-wide
    prior, else its time limit, else default_runtime)."""

    def __init__(self, config: Any, store: Any) -> None:
        self.config = config
        self.store = _CycleStore(store) if store is not None else None
        self._memo: dict[tuple, Estimate] = {}

    @staticmethod
    def key_of(job: Any) -> tuple[str, Any]:
        """The job's kind (`job_kind`) and its hints (or the HintError)."""
        hints = _hints_of(job.comment)
        key = None if isinstance(hints, Exception) else hints.key
        return job_kind(job.name, job.job_id, key), hints

    def identity(self, job: Any) -> Estimate:
        """The estimate of a running or finished job: its kind and owner only (what
        its runtime is learned under)."""
        return Estimate(self.key_of(job)[0], owner=job_owner(job))

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
        from ..runtimes import estimate_for_job, memory_for_job

        times = {
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
            )
            for name in names
        }
        mem = memory_for_job(self.store, key, owner, hints.mem)
        return Estimate(
            key,
            times,
            mem,
            pcie=hints.pcie or 0.0,
            alpha=hints.alpha if hints.alpha is not None else 1.0,
            restartable=bool(hints.restartable),
            owner=owner,
        )
