"""Slurm as slurm-mig sees it: jobs and nodes read from ``squeue --json`` and
``sinfo --json -N``, and the few changes the planner makes, through ``scontrol``.

Standard library only (the hooks import it). Commands get an argument vector, never a
shell, so values need no quoting: a Comment may hold spaces, quotes or ``$``.
Reads accept the JSON of Slurm 22.05 (numbers, ``job_state`` a string, node
``state`` + ``state_flags``) through 26.05 (numbers as ``{"set", "infinite",
"number"}``, states as lists, ``sinfo`` as records per node and partition);
tests/fixtures/slurm holds each release's captured output. Where pyslurm (>= 23.2,
``pyslurm.Jobs``) imports and no explicit environment was given, ``jobs()`` reads
through it instead of squeue, as long as it agrees with squeue (see
`reason_from_pyslurm`); everything else always uses the commands. Otherwise ``jobs()``
reads squeue's fixed-width output (`jobs_from_fixed_width`: 10,000 jobs cost 22.05's
``squeue --json`` 31 MB) and falls back to the JSON where that cannot be trusted.

What Slurm 22.05.8 does, measured on a loopback cluster (tests/e2e):
- ``squeue --json`` ignores ``-p``/``--states`` and lists every job slurmctld still
  keeps (finished ones for MinJobAge seconds); ``sinfo --json`` ignores ``-p``. We
  filter here. From 24.05 squeue honours ``-p``, and we pass it.
- From 23.11 plain ``sinfo --json`` groups nodes that share a partition and state:
  one record, one reason and one CPU range for all of them. ``-N`` gives one record
  per node and partition.
- ``time_limit`` is in minutes, null for an unlimited pending job and 525600
  (365 days) once an unlimited job started: both read as None (unlimited).
- ``exit_code`` is the raw wait status (768 = exit 3).
- a pending job's ``start_time``/``end_time`` are estimates or left over from a run
  before a requeue: read as None.
- a job requeued held after a Prolog failure or by ``scontrol requeuehold`` has
  ``state_reason`` JobHeldUser (its owner may release it) and the detail in
  ``state_description`` ("launch failed requeued held", "job requeued in held state"),
  which scontrol shows as the Reason.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .commands import (
    SlurmError,
    SlurmUnavailable,
    check_job_id,
    check_node_name,
    parse_json_output,
    run_command,
)
from .fixedwidth import (
    FAST_FIELDS,
    FAST_FORMAT,
    MAX_WIDE_IDS,
    NARROW,
    NARROW_FIELDS,
    NARROW_WIDTHS,
    RECORD_SIZE,
    WIDE,
    FastReadError,
    FieldFilled,
    FixedWidthLayout,
    RecordMisfit,
    jobs_from_fixed_width,
)
from .jobparse import (
    PyslurmDisagrees,
    array_task_ids,
    job_from_json,
    jobs_from_json,
    load_pyslurm,
    nodes_from_json,
    pyslurm_job_records,
    reason_from_pyslurm,
)
from .jobrecord import job_sort_key
from .jobtypes import (
    HELD_REASONS,
    OWNER_RELEASABLE_REASONS,
    STATE_DESCRIPTIONS,
    UNFINISHED_STATES,
    UNUSABLE_NODE_STATES,
    Job,
    Node,
)

if TYPE_CHECKING:
    from .sitepolicy import SitePolicy

__all__ = [
    "FAST_FIELDS",
    "FAST_FORMAT",
    "HELD_REASONS",
    "LIST_CHUNK",
    "MAX_WIDE_IDS",
    "NARROW",
    "NARROW_FIELDS",
    "NARROW_WIDTHS",
    "OWNER_RELEASABLE_REASONS",
    "RECORD_SIZE",
    "SHARES_REFRESH",
    "STATE_DESCRIPTIONS",
    "UNFINISHED_STATES",
    "UNUSABLE_NODE_STATES",
    "WIDE",
    "FastReadError",
    "FieldFilled",
    "FixedWidthLayout",
    "Job",
    "Node",
    "PyslurmDisagrees",
    "RecordMisfit",
    "SlurmClient",
    "SlurmError",
    "array_task_ids",
    "job_from_json",
    "jobs_from_json",
    "jobs_from_fixed_width",
    "nodes_from_json",
    "reason_from_pyslurm",
]

_SQUEUE_HONOURS_PARTITION = (24, 5)
LIST_CHUNK = 256  # job ids per scontrol hold/release call (its command line stays short)
_FIELD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
SHARES_REFRESH = 60.0  # seconds between reads of sshare's fairshare factors
log = logging.getLogger(__name__)


# --- the client ----------------------------------------------------------------------
class SlurmClient:
    """Reads jobs and nodes and makes slurm-mig's changes (hold, release, requeue,
    job updates, drain) through Slurm's commands."""

    # Read jobs from squeue's fixed-width output (`jobs_from_fixed_width`) before the
    # JSON; False: always the JSON (a test, or an instance, may set either).
    fast_read: bool = True

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        fast_read: bool | None = None,
    ) -> None:
        self.env = dict(env) if env is not None else None
        self.timeout = timeout
        if fast_read is not None:
            self.fast_read = fast_read
        self.last_read = ""  # "pyslurm", "fixed-width" or "json": how jobs() last read
        self._records: dict[bytes, Job] = {}  # the last fixed-width read's, by record
        self._pyslurm = load_pyslurm() if env is None else None
        self._version: tuple[int, ...] | None = None

    def _run(self, *argv: str) -> str:
        return self._exec(list(argv), self.env, text=True)

    def _exec(self, cmd: list[str], env: Mapping[str, str] | None, text: bool) -> Any:
        return run_command(cmd, env, text, self.timeout)

    def _json(self, *argv: str) -> dict[str, Any]:
        return parse_json_output(self._run(*argv), argv)

    # reads
    def version(self) -> tuple[int, ...]:
        """The Slurm release of the client commands, (22, 5, 8); (0,) when unknown.
        Asked once (``sinfo --version``)."""
        if self._version is None:
            try:
                text = self._run("sinfo", "--version")
            except SlurmError:
                text = ""
            m = re.search(r"\b(\d+)\.(\d+)(?:\.(\d+))?", text)
            self._version = tuple(int(g) for g in m.groups() if g) if m else (0,)
        return self._version

    def jobs(self, partition: str | None = None) -> list[Job]:
        """Every job slurmctld knows (finished ones too, for MinJobAge), optionally
        only those of one partition."""
        records = None
        jobs = None
        if self._pyslurm is not None:
            try:
                records = pyslurm_job_records(self._pyslurm)
                self.last_read = "pyslurm"
            except Exception:  # out of step with libslurm, or disagrees: the commands
                records = None
        if records is None and self.fast_read:
            jobs = self._fast_jobs(partition)
        if records is None and jobs is None:
            argv = ["squeue", "--json", "--states=all"]
            if partition is not None and self.version() >= _SQUEUE_HONOURS_PARTITION:
                argv.append(f"--partition={partition}")  # slurmctld reads only that one
            records = self._json(*argv).get("jobs") or []
            self.last_read = "json"
        if jobs is None:
            jobs = [j for r in records or () for j in jobs_from_json(r)]
        if partition is not None:
            jobs = [j for j in jobs if j.partition == partition]
        return jobs

    def _fast_jobs(self, partition: str | None) -> list[Job] | None:
        """Jobs from squeue's fixed-width output, or None (with one log line saying
        why) when squeue refused the format or its output cannot be trusted: the
        caller then reads the JSON. A missing squeue or a timeout raises SlurmError,
        as the JSON path would."""
        env = {
            k: v
            for k, v in (os.environ if self.env is None else self.env).items()
            if not k.startswith("SQUEUE_")  # SQUEUE_USERS etc. would filter the list
        }
        env["SLURM_TIME_FORMAT"] = "%s"  # times as epoch seconds
        filled: list[str] = []
        keep: dict[bytes, Job] = {}
        try:
            jobs = self._fast_read(NARROW, partition, env, keep, filled)
        except RecordMisfit:  # an uncut field overran its narrow width: all of it wide
            keep, filled = {}, []
            jobs = self._fast_read(WIDE, partition, env, keep)
        if jobs is not None and filled:
            ids = list(dict.fromkeys(filled))
            if len(ids) > MAX_WIDE_IDS:  # a list that long costs as much as all of it
                keep = {}
                jobs = self._fast_read(WIDE, partition, env, keep)
            else:  # only those jobs again, wide: a few records, not 30 MB at 10,000 jobs
                more = self._fast_read(WIDE, partition, env, keep, ids=ids)
                jobs = (
                    None
                    if more is None
                    else sorted([*jobs, *more], key=lambda j: job_sort_key(j.job_id))
                )
        if jobs is None:
            return None
        self._records = keep
        self.last_read = "fixed-width"
        return jobs

    def _fast_read(
        self,
        layout: FixedWidthLayout,
        partition: str | None,
        env: Mapping[str, str],
        keep: dict[bytes, Job],
        filled: list[str] | None = None,
        ids: Sequence[str] = (),
    ) -> list[Job] | None:
        """One ``squeue -O`` read in ``layout`` (of the jobs ``ids`` only, when given):
        its jobs, or None (with one log line) when the JSON must be read instead. A
        narrow read's records whose value filled a field that is wider in the wide
        layout go to ``filled``; a narrow record out of shape raises RecordMisfit."""
        argv = ["squeue", "-h", "--states=all", "-r", "-O", layout.format]
        if partition is not None:
            argv.append(f"--partition={partition}")
        if ids:
            argv.append("--jobs=" + ",".join(ids))
        try:
            out = self._exec(argv, env, text=False)
        except SlurmUnavailable:
            raise  # squeue missing or slurmctld silent: the JSON would fare no better
        except SlurmError as exc:
            log.warning("squeue -O failed, reading the JSON instead: %s", exc)
            return None
        try:
            return jobs_from_fixed_width(out, layout, self._records, keep, filled)
        except RecordMisfit as exc:
            if layout is not WIDE and not isinstance(exc, FieldFilled):
                raise
            log.warning("squeue's fixed-width output read as JSON instead: %s", exc)
        except FastReadError as exc:
            log.warning("squeue's fixed-width output read as JSON instead: %s", exc)
        return None

    def nodes(self, partition: str | None = None) -> list[Node]:
        """Every node (optionally only those of one partition) with its state."""
        nodes = nodes_from_json(self._json("sinfo", "--json", "-N"))
        if partition is not None:
            nodes = [n for n in nodes if partition in n.partitions]
        return nodes

    def site_policy(self, refresh: float = 300.0) -> SitePolicy:
        """Slurm's policy as the planner reads it (`sitepolicy`): the association
        manager's associations and QOS with their usage and the active reservations,
        read anew at each call (two commands); the fairshare factors after
        `SHARES_REFRESH` seconds (Slurm recalculates them once a PriorityCalcPeriod, a
        minute at least), the priority weights and partitions after ``refresh``."""
        from ..config import expand_hostlist
        from . import sitepolicy

        now = time.monotonic()
        cached = getattr(self, "_site_static", None)
        if cached is None or now - cached[0] > refresh:
            weights = sitepolicy.parse_config(self._run("scontrol", "show", "config"))
            parts = sitepolicy.parse_partitions(self._run("scontrol", "-o", "show", "partition"))
            cached = self._site_static = (now, weights, parts)
        _, weights, parts = cached
        assocs, qos = sitepolicy.parse_assoc_mgr(
            self._run("scontrol", "-o", "show", "assoc_mgr", "flags=assoc,qos")
        )
        shared = getattr(self, "_site_shares", None)
        if shared is None or now - shared[0] > min(refresh, SHARES_REFRESH):
            try:  # six decimals where the association manager prints two
                shares = sitepolicy.parse_sshare(
                    self._run("sshare", "-a", "-P", "-n", "-o", "Account,User,FairShare")
                )
            except SlurmError:  # no accounting: no fairshare either
                shares = {}
            shared = self._site_shares = (now, shares)
        shares = shared[1]
        env = dict(os.environ if self.env is None else self.env)
        env["SLURM_TIME_FORMAT"] = "%s"
        resv = self._exec(["scontrol", "-o", "show", "reservation"], env, text=True)
        return sitepolicy.SitePolicy(
            weights=weights,
            assocs=assocs,
            qos=MappingProxyType(qos),
            partitions=MappingProxyType(parts),
            reservations=sitepolicy.parse_reservations(resv, expand_hostlist),
            fairshare=MappingProxyType(shares),
        )

    # changes
    def hold(self, job_id: str | int) -> None:
        """Hold a pending job (an admin hold when run as root: the user cannot release it)."""
        self._run("scontrol", "hold", check_job_id(job_id))

    def release(self, job_id: str | int) -> None:
        self._run("scontrol", "release", check_job_id(job_id))

    def hold_jobs(self, job_ids: Sequence[str | int]) -> dict[str, str]:
        """Hold many pending jobs with one ``scontrol hold a,b,...`` per `LIST_CHUNK`;
        returns {job id: error} for those that failed (found one by one only when the
        list call failed)."""
        return self._for_list("hold", job_ids)

    def release_jobs(self, job_ids: Sequence[str | int]) -> dict[str, str]:
        """`hold_jobs` for ``scontrol release``."""
        return self._for_list("release", job_ids)

    def _for_list(self, verb: str, job_ids: Sequence[str | int]) -> dict[str, str]:
        ids = [check_job_id(j) for j in job_ids]
        failed: dict[str, str] = {}
        for i in range(0, len(ids), LIST_CHUNK):
            chunk = ids[i : i + LIST_CHUNK]
            try:
                self._run("scontrol", verb, ",".join(chunk))
                continue
            except SlurmError as exc:
                if len(chunk) == 1:
                    failed[chunk[0]] = str(exc)
                    continue
            for jid in chunk:  # which one: hold and release are idempotent
                try:
                    self._run("scontrol", verb, jid)
                except SlurmError as exc:
                    failed[jid] = str(exc)
        return failed

    def requeue(self, job_id: str | int, hold: bool = False) -> None:
        """Put a running or finished batch job back in the queue (held with hold=True);
        its restart count goes up by one."""
        self._run("scontrol", "requeuehold" if hold else "requeue", check_job_id(job_id))

    def update_job(self, job_id: str | int, **fields: str) -> None:
        """``scontrol update JobId=.. Key=Value ...`` (NodeList, Comment, AdminComment,
        Gres, ...); an empty value clears the field."""
        if not fields:
            raise ValueError("update_job: give at least one field, e.g. Comment='...'")
        args = []
        for key, value in fields.items():
            if not _FIELD_RE.fullmatch(key):
                raise ValueError(f"update_job: {key!r} is not a Slurm job field name")
            args.append(f"{key}={value}")
        self._run("scontrol", "update", f"JobId={check_job_id(job_id)}", *args)

    def drain_node(self, node: str, reason: str) -> None:
        """Drain a node: running jobs finish, no new ones start; ``reason`` shows in sinfo."""
        if not reason.strip():
            raise ValueError("drain_node: Slurm needs a reason to drain a node")
        self._run(
            "scontrol",
            "update",
            f"NodeName={check_node_name(node)}",
            "State=DRAIN",
            f"Reason={reason}",
        )

    def resume_node(self, node: str) -> None:
        """Undo a drain."""
        self._run("scontrol", "update", f"NodeName={check_node_name(node)}", "State=RESUME")
