"""The daemon's thin apply step: a cycle's actions written to Slurm with few calls.

Holds go out as one list call, the updates of jobs re-planned in place one by one, the
notes and the releases' updates ``workers`` at a time (`_Pool`), the releases of each
slice of `RELEASE_CHUNK` jobs as one list call after their updates went through; the
learned runtimes go to the store. One failing write logs an error and fails only that
job's later actions; a budget (``[planner] apply_budget``) leaves the rest to the next
cycle's fresh read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from .. import jobcomment as comments
from ..geometry import get_model
from ..overruns import overran
from ..slurm.assignment import AssignmentError, sign
from .cycle import Action, Hold, Learn, Note, Release, Requeue
from .cyclereport import ApplyReport

__all__ = ["RELEASE_CHUNK", "ApplyReport", "Client", "apply_actions"]

log = logging.getLogger("slurm_mig.planner")


class Client(Protocol):
    """What the daemon needs of `slurm_mig.slurm.client.SlurmClient`."""

    def jobs(self, partition: str | None = None) -> list: ...
    def nodes(self, partition: str | None = None) -> list: ...
    def hold(self, job_id: str) -> None: ...
    def release(self, job_id: str) -> None: ...
    # optional: hold_jobs(ids) / release_jobs(ids) -> {job id: error}, one call for many
    def requeue(self, job_id: str) -> None: ...
    def update_job(self, job_id: str, **fields: str) -> None: ...


RELEASE_CHUNK = 64  # releases per slice: their updates at once, then one release call


def apply_actions(
    actions: Sequence[Action],
    client: Client,
    *,
    key: bytes,
    store: Any = None,
    clock: Callable[[], float] = time.time,
    stop: threading.Event | None = None,
    gres: bool = False,
    slices: bool = False,
    workers: int = 1,
    budget: float | None = None,
    elapsed: Callable[[], float] = time.monotonic,
    unstored: set[tuple[str, int]] | None = None,
) -> ApplyReport:
    """Apply ``actions`` with few Slurm calls: holds as one list call, the updates of
    jobs re-planned in place one by one, notes and the releases' updates ``workers``
    at a time, the releases of each slice of `RELEASE_CHUNK` jobs as one list call
    after their updates went through. A failure is logged and skips only that job's
    later actions (a release never follows a failed update); a failed hold or move
    skips every release. Stops between slices once ``stop`` is set, or once ``budget``
    seconds are spent (``report.cut``: the next cycle reads Slurm afresh and goes on).
    ``gres``: a released job gets its instance's GRES record (``slurm.gres``) in the
    update that writes its token; ``slices``: and its compute slices as ``mig_slice``.
    ``unstored``: the runs whose runtime the store could not take, kept by the caller:
    a failure is logged at ERROR once per run, and the runs stored now leave it."""
    report = ApplyReport()
    began = elapsed()
    notes = [a for a in actions if isinstance(a, Note)]
    releases = [a for a in actions if isinstance(a, Release)]
    requeues = [a for a in actions if isinstance(a, Requeue)]
    failed_jobs: set[str] = set()

    def over(first: bool) -> int | None:
        if stop is not None and stop.is_set():
            # a stop asked (SIGTERM), or only the lease not confirmed (`liveness`)
            return 0 if getattr(stop, "requested", stop.is_set)() else 2
        if budget is not None and not first and elapsed() - began > budget:
            return 1  # every cycle gets at least one slice through: no livelock
        return None

    def fail(job_id: str, what: str, exc: BaseException) -> None:
        failed_jobs.add(job_id)
        text = " ".join(str(exc).split()) or exc.__class__.__name__
        report.failed.append((job_id, text))
        log.error("%s: failed: %s", what, text)

    writes = _Writes(client, key, clock, gres, report, fail, slices=gres and slices)
    pool = _Pool(workers)
    try:
        holds = [a for a in actions if isinstance(a, Hold)]
        why = over(True)
        if why is not None:  # nothing at all goes out: not even the holds
            left = sum(1 for a in actions if not isinstance(a, Learn))
            _left_over(left, why, report)
            holds, releases, notes, requeues = [], [], [], []
        releases = _holds_and_moves(holds, releases, writes)
        slices: list[list[Action]] = [list(notes)] if notes else []
        slices += [releases[i : i + RELEASE_CHUNK] for i in range(0, len(releases), RELEASE_CHUNK)]
        for i, part in enumerate(slices):
            why = over(i == 0)
            if why is not None:
                _left_over(sum(len(p) for p in slices[i:]) + len(requeues), why, report)
                requeues = []
                break
            _apply_slice(part, writes, pool, failed_jobs)
        _apply_requeues(requeues, writes, failed_jobs)
    finally:
        pool.close()
    learns = [a for a in actions if isinstance(a, Learn)]
    quiet = unstored if unstored is not None else set()
    for action in learns:
        _learn(action, store, report, quiet)
    if unstored is not None:  # bounded: the runs still offered
        unstored &= {(a.job_id, a.restart) for a in learns} - set(report.stored)
    return report


class _Writes:
    """What every write of one `apply_actions` shares: the client, the signing key and
    clock, the GRES switch, the report and the failure callback."""

    def __init__(
        self,
        client: Client,
        key: bytes,
        clock: Callable[[], float],
        gres: bool,
        report: ApplyReport,
        fail: Callable[[str, str, BaseException], None],
        slices: bool = False,
    ) -> None:
        self.client = client
        self.key = key
        self.clock = clock
        self.gres = gres
        self.slices = slices
        self.report = report
        self.fail = fail

    def release_fields(self, action: Release) -> dict[str, str]:
        return _release_fields(action, self.key, self.clock, self.gres, self.slices)


def _holds_and_moves(
    holds: Sequence[Hold], releases: Sequence[Release], w: _Writes
) -> list[Release]:
    """The holds, then (when every hold went through) the in-place moves; the releases
    that may go out now: none after a failed hold or move."""
    report = w.report
    moved = [a for a in releases if a.in_place]
    releases = [a for a in releases if not a.in_place]
    _apply_holds(holds, w)
    if not report.failed:
        _apply_in_place(moved, w)
    elif moved:
        report.skipped += len(moved)
        log.warning("a hold failed: %d moves wait for the next cycle's fresh read", len(moved))
    if report.failed and releases:
        # a job that was to give its slices back still holds them: this cycle's
        # plan may have handed them on, so its releases wait for a fresh read
        report.skipped += len(releases)
        log.warning(
            "a hold or move failed: %d releases wait for the next cycle's fresh read",
            len(releases),
        )
        return []
    return releases


def _left_over(left: int, why: int, report: ApplyReport) -> None:
    """``left`` actions not applied: cut by the budget (``why`` 1), by a stop (0), or
    while the lease is not confirmed (2: `liveness` says why, once; the next cycle
    that holds it plans afresh)."""
    if why == 1:
        report.cut += left
        log.info("apply budget spent: %d actions for the next cycle", left)
    elif why == 2:
        report.skipped += left
        log.debug("the planner lease is not confirmed: %d actions not sent", left)
    else:
        report.skipped += left
        log.info("stopping: %d actions left for the next run", left)


def _apply_requeues(requeues: Sequence[Requeue], w: _Writes, failed_jobs: set[str]) -> None:
    """Each requeue (held again), unless an earlier action of its job failed."""
    for action in requeues:
        if action.job_id in failed_jobs:
            w.report.skipped += 1
            continue
        try:
            w.report.calls += 1
            w.client.requeue(action.job_id, hold=True)
            w.report.applied += 1
            log.info("%s", action.describe())
        except _WRITE_ERRORS as exc:
            w.fail(action.job_id, action.describe(), exc)


_WRITE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    comments.CommentTooLong,
    AssignmentError,
)


def _write_errors() -> tuple[type[BaseException], ...]:
    from ..slurm.client import SlurmError

    return (SlurmError, *_WRITE_ERRORS)


class _Pool:
    """``map`` over a thread pool of ``workers`` (in the caller's thread for one)."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, int(workers))
        self._executor = None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        if self.workers == 1 or len(items) <= 1:
            return [fn(x) for x in items]
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="slurm-write")
        return list(self._executor.map(fn, items))

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


def _apply_holds(holds: Sequence[Hold], w: _Writes) -> None:
    """The plain holds in one list call; a hold that also clears something (the
    planner's dependency, an earlier plan's token and GRES record) as one update each."""
    if not holds:
        return
    report = w.report
    plain = [h for h in holds if not (h.clear_dependency or h.scrub)]
    failed = {}
    if plain:
        ids = list(dict.fromkeys(h.job_id for h in plain))
        failed = _list_or_all_failed(w.client, "hold", ids, report)
    for h in holds:
        if h.job_id in failed:
            w.fail(h.job_id, h.describe(), RuntimeError(failed[h.job_id]))
        elif not (h.clear_dependency or h.scrub) or _hold_update(h, w):
            report.applied += 1
            log.info("%s", h.describe())


def _hold_update(h: Hold, w: _Writes) -> bool:
    """``scontrol update JobId=.. Priority=0`` (what ``scontrol hold`` sends) with what
    the hold clears, in one call; False when it failed (logged)."""
    fields_ = {"Priority": "0"}
    if h.comment is not None:
        fields_["Comment"] = h.comment
    if h.scrub:
        # "": no GRES record (none where [slurm] gres is off: job_submit.lua refuses a
        # user's). Pending-only: Slurm refuses all of the update of a job it started
        # meanwhile, whose token then stays that of the slice it runs on.
        fields_["TresPerNode"] = ""
    if h.clear_dependency:  # "0": Slurm's word for none (an empty value is ignored)
        fields_["Dependency"] = "0"
    try:
        w.report.calls += 1
        w.client.update_job(h.job_id, **fields_)
    except _write_errors() as exc:
        # a job Slurm started since squeue was read: its afterany was met and it runs
        # on its plan; nothing to hold or clear, nothing failed
        if "no longer pending" not in str(exc).lower():
            w.fail(h.job_id, h.describe(), exc)
            return False
    return True


def _apply_in_place(moved: Sequence[Release], w: _Writes) -> None:
    """Jobs re-planned in place (pending, not held): each new plan in one update, one
    after another in the order given (`cycle.in_place_order`), before any release, as
    holds would go. At a failed update the job is held, so that it does not start on
    the plan it had, and the rest wait for the next cycle's fresh read."""
    errors = _write_errors()
    report = w.report
    for i, action in enumerate(moved):
        try:
            report.calls += 1
            w.client.update_job(action.job_id, **w.release_fields(action))
        except errors as exc:
            w.fail(action.job_id, action.describe(), exc)
            report.skipped += len(moved) - i - 1
            for jid, text in _list_or_all_failed(w.client, "hold", [action.job_id], report).items():
                log.error("job %s: not held after its failed update either: %s", jid, text)
            return
        report.applied += 1
        report.released.append(action.job_id)
        log.info("%s", action.describe())


def _list_or_all_failed(
    client: Client, verb: str, ids: Sequence[str], report: ApplyReport
) -> dict[str, str]:
    """`_list_call`, counted; an error of the call itself fails every job of it."""
    report.calls += 1
    try:
        return _list_call(client, verb, ids)
    except _write_errors() as exc:
        return {jid: str(exc) for jid in ids}


def _list_call(client: Client, verb: str, ids: Sequence[str]) -> dict[str, str]:
    """``client.<verb>_jobs(ids)`` where the client takes a list, else one call per job;
    {job id: error} of those that failed."""
    many = getattr(client, f"{verb}_jobs", None)
    if many is not None:
        return many(ids)
    errors = _write_errors()
    failed = {}
    one = getattr(client, verb)
    for jid in ids:
        try:
            one(jid)
        except errors as exc:
            failed[jid] = str(exc)
    return failed


def _apply_slice(part: Sequence[Action], w: _Writes, pool: _Pool, failed_jobs: set[str]) -> None:
    """Notes or releases: the updates at once, then the releases as one list call. A
    job released ahead of jobs whose release failed stays held (``failed_jobs``): it
    would wait for a job that does not run."""
    errors = _write_errors()
    report, client, gres = w.report, w.client, w.gres
    todo = []
    for a in part:
        if a.job_id in failed_jobs or (isinstance(a, Release) and failed_jobs & set(a.after)):
            failed_jobs.add(a.job_id)
            report.skipped += 1
            log.info("%s: not now (a job before it was not released)", a.describe())
        else:
            todo.append(a)

    def update(action: Action) -> BaseException | None:
        try:
            if isinstance(action, Release):
                client.update_job(action.job_id, **w.release_fields(action))
            else:
                client.update_job(action.job_id, **dict(action.fields))
        except errors as exc:
            if gres and isinstance(action, Release) and "gres" in str(exc).lower():
                return RuntimeError(
                    f"{exc}; node {action.assignment.node} needs the gres.conf records and "
                    "the mig_slice count of 'slurm-mig gres-conf' and GresTypes=gpu,mig_slice "
                    '(README: Site set-up), or set [slurm] gres = "records" (no slice '
                    'count) or "off"'
                )
            return exc
        return None

    results = pool.map(update, todo)
    report.calls += len(todo)
    to_release = []
    for action, exc in zip(todo, results):
        if exc is not None:
            w.fail(action.job_id, action.describe(), exc)
        elif isinstance(action, Release) and failed_jobs & set(action.after):
            failed_jobs.add(action.job_id)  # its predecessor's update failed just now
            report.skipped += 1
        elif isinstance(action, Release):
            to_release.append(action)
        else:
            report.applied += 1
            log.warning("%s", action.describe())
    if not to_release:
        return
    failed = _list_or_all_failed(client, "release", [a.job_id for a in to_release], report)
    for action in to_release:
        if action.job_id in failed:
            w.fail(action.job_id, action.describe(), RuntimeError(failed[action.job_id]))
            continue
        report.applied += 1
        report.released.append(action.job_id)
        log.info("%s", action.describe())


def _release_fields(
    action: Release, key: bytes, clock: Callable[[], float], gres: bool, slices: bool = False
) -> dict[str, str]:
    """The one update before a release: the record fields that changed, the signed
    token in the Comment, the GRES records (one per instance: a job of several slices
    has several; with ``slices``, the count of all their compute slices), the planner's
    dependency."""
    a = action.assignment
    token = sign(replace(a, issued=clock()), key)
    fields_ = dict(action.fields)
    fields_["Comment"] = comments.parse(action.comment).with_token(token).render()
    if gres:  # Slurm's device cgroup then lets the job open this instance only
        from ..devices.migcaps import gi_id_for
        from ..slurm.gres import Record, tres_per_node

        model = get_model(a.model)
        places = a.instance_placements()  # AssignmentError: this release fails alone
        records = [Record(a.gpu, gi_id_for(model, p)) for p in places]
        count = model.profile(a.profile).compute_slices * len(places) if slices else 0
        fields_["TresPerNode"] = tres_per_node(records, count)
    if action.after:  # released ahead: Slurm starts it once those jobs have left
        fields_["Dependency"] = "afterany:" + ":".join(action.after)
    return fields_


def _learn(action: Learn, store: Any, report: ApplyReport, logged: set[tuple[str, int]]) -> None:
    """A finished run's runtime into the store, and its overrun of its time= hint
    (slurm_mig.overruns; sqlite errors are logged, not raised: at ERROR the first time
    for a run, at DEBUG while it is offered again, ``logged`` holding those runs)."""
    if store is None:
        return
    try:
        if overran(action.seconds, action.hint) and store.record_overrun(
            action.key,
            action.job_id,
            action.restart,
            action.seconds,
            action.hint,
            action.finished,
            owner=action.owner,
        ):
            log.warning("%s: counts against its owner's hints", action.describe())
        if action.ok and store.record(
            action.key,
            action.model,
            action.size,
            action.seconds,
            action.job_id,
            action.restart,
            action.finished,
            owner=action.owner,
        ):
            report.learned += 1
            log.info("%s", action.describe())
        report.stored.append((action.job_id, action.restart))
    except Exception as exc:  # e.g. sqlite errors while learning: log, go on
        run = (action.job_id, action.restart)
        if run in logged:
            log.debug("%s: not recorded yet: %s", action.describe(), exc)
            return
        logged.add(run)
        log.error(
            "%s: not recorded: %s (tried again each cycle, not logged again)",
            action.describe(),
            exc,
        )
