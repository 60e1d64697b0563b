"""Slurm's policy as the planner reads it: priority weights, fairshare factors, QOS and
association limits with their usage, partitions' priority factors and the active
reservations, parsed from Slurm's own reports. Pure: the daemon runs the commands
(`slurm_mig.slurm.client.SlurmClient.site_policy`) and the cycle asks the functions.

Slurm computes no priority for a held job (priority 0 *is* the hold: the multifactor
plugin skips such jobs, and so does sprio), so `job_priority` adds up Slurm's own
multifactor terms from the factors Slurm reports (``scontrol show assoc_mgr``: each
association's fairshare factor and priority, each QOS's priority; ``scontrol show
partition``: PriorityJobFactor) with the site's weights (``scontrol show config``), as
Slurm's priority/multifactor documents them. Age counts from when the job became
eligible, as Slurm counts it (`eligible_since`: its ``--begin`` time, none while that is
ahead), or from submission under ``PriorityFlags=ACCRUE_ALWAYS``; the planner's own
hold is not the user's doing and never counts against it.
The job-size and TRES terms are left out (every job of the MIG partition asks for one
GPU slice). `limit_reason` reads the limits and what Slurm says is in use; Slurm stays
the judge: a job it keeps pending for a limit after release is noticed by its reason
(`is_limit_reason`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

from .jobrecord import parse_admin_comment

__all__ = [
    "Assoc",
    "Limit",
    "Qos",
    "Reservation",
    "SitePolicy",
    "Weights",
    "admit",
    "eligible_since",
    "is_limit_reason",
    "job_priority",
    "parse_assoc_mgr",
    "parse_config",
    "parse_partitions",
    "parse_sshare",
    "parse_reservations",
    "pool_of",
]

MAX_RECORDS = 100_000  # associations, QOS or reservations read at most
MAX_TEXT = 64 << 20  # bytes of a report read at most
# TRES a MIG job uses one of (its slice, its node); other TRES (cpu, mem) are left to
# Slurm: a job it keeps pending for them after release is noticed by its reason
JOB_TRES = ("gres/gpu", "node")


@dataclass(frozen=True)
class Weights:
    """The priority plugin and its weights (``scontrol show config``)."""

    plugin: str = "priority/basic"
    age: float = 0.0
    assoc: float = 0.0
    fairshare: float = 0.0
    partition: float = 0.0
    qos: float = 0.0
    max_age: float = 7 * 86400.0  # seconds
    accrue_always: bool = False  # PriorityFlags=ACCRUE_ALWAYS: age from submission

    @property
    def multifactor(self) -> bool:
        return self.plugin == "priority/multifactor"


@dataclass(frozen=True)
class Limit:
    """A limit and what Slurm counts against it (limit None: none set)."""

    limit: int | None
    used: int = 0


@dataclass(frozen=True)
class Assoc:
    """One association (``user`` "" for an account's own) with its fairshare factor,
    priority, parent account and limits."""

    account: str
    user: str
    partition: str
    uid: int | None
    priority: int
    fairshare: float
    parent: str
    grp_jobs: Limit
    max_jobs: Limit
    grp_tres: Mapping[str, Limit]


@dataclass(frozen=True)
class Qos:
    """One QOS: its priority, group limits and per-user limits (by uid) with usage."""

    name: str
    priority: int
    grp_jobs: Limit
    grp_tres: Mapping[str, Limit]
    users: Mapping[int, tuple[Limit, Mapping[str, Limit]]]  # uid -> MaxJobsPU, MaxTRESPU


@dataclass(frozen=True)
class Reservation:
    """An active reservation: its nodes and flags (who may use it is Slurm's check:
    a job that names it was let in at submission)."""

    name: str
    nodes: frozenset[str]
    flags: frozenset[str]


@dataclass(frozen=True)
class SitePolicy:
    """Everything the cycle reads of Slurm's policy (`parse_*` build the parts)."""

    weights: Weights = Weights()
    assocs: tuple[Assoc, ...] = ()
    qos: Mapping[str, Qos] = field(default_factory=lambda: MappingProxyType({}))
    partitions: Mapping[str, tuple[int, str]] = field(
        default_factory=lambda: MappingProxyType({})
    )  # partition -> (PriorityJobFactor, its QOS or "")
    reservations: tuple[Reservation, ...] = ()
    # (account, user) -> fairshare factor as sshare prints it (6 decimals; the
    # association manager's has 2); absent: the association manager's
    fairshare: Mapping[tuple[str, str], float] = field(default_factory=lambda: MappingProxyType({}))

    @cached_property
    def _by_user(self) -> dict[tuple[str, str, str], Assoc]:
        return {(a.account, a.user, a.partition): a for a in reversed(self.assocs) if a.user}

    @cached_property
    def _by_account(self) -> dict[str, Assoc]:
        return {a.account: a for a in reversed(self.assocs) if not a.user}

    @cached_property
    def max_priorities(self) -> tuple[int, int, int]:
        """The largest association, QOS and partition priorities (Slurm normalises by
        them)."""
        return (
            max((a.priority for a in self.assocs), default=0),
            max((q.priority for q in self.qos.values()), default=0),
            max((p for p, _ in self.partitions.values()), default=0),
        )

    def assoc_of(
        self, account: str, user: str, partition: str, uid: int | None = None
    ) -> Assoc | None:
        """The job's user association (its partition's first, else the account's); by
        name, else by uid (Slurm 25.05+ records nobody by its uid)."""
        by = self._by_user
        for who in (user, None if uid is None else str(uid)):
            if who is None:
                continue
            got = by.get((account, who, partition)) or by.get((account, who, ""))
            if got is not None:
                return got
        return None

    def lineage(self, assoc: Assoc) -> list[Assoc]:
        """The association and the accounts above it, nearest first (bounded)."""
        out = [assoc]
        account = assoc.account
        seen = set()
        while account and account not in seen and len(out) < 64:
            seen.add(account)
            a = self._by_account.get(account)
            if a is None:
                break
            out.append(a)
            account = a.parent
        return out


# ---------------------------------------------------------------------------
# Parsers


def parse_config(text: str) -> Weights:
    """The priority plugin and weights from ``scontrol show config``."""
    values = {}
    for line in text[:MAX_TEXT].splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()

    def weight(name: str) -> float:
        return _bounded_float(values.get(name, "0"), 0.0, 2.0**32)

    return Weights(
        plugin=values.get("PriorityType", "priority/basic"),
        age=weight("PriorityWeightAge"),
        assoc=weight("PriorityWeightAssoc"),
        fairshare=weight("PriorityWeightFairShare"),
        partition=weight("PriorityWeightPartition"),
        qos=weight("PriorityWeightQOS"),
        max_age=_duration(values.get("PriorityMaxAge", "7-00:00:00")),
        accrue_always="ACCRUE_ALWAYS" in values.get("PriorityFlags", "").upper().split(","),
    )


def parse_assoc_mgr(text: str) -> tuple[tuple[Assoc, ...], dict[str, Qos]]:
    """Associations and QOS from ``scontrol -o show assoc_mgr flags=assoc,qos``
    (22.05 to 26.05: one record a line)."""
    assocs: list[Assoc] = []
    qos: dict[str, Qos] = {}
    for line in text[:MAX_TEXT].splitlines():
        if len(assocs) + len(qos) >= MAX_RECORDS:
            break
        if line.startswith("ClusterName="):
            a = _assoc(line)
            if a is not None:
                assocs.append(a)
        elif line.startswith("QOS="):
            q = _qos(line)
            if q is not None:
                qos[q.name] = q
    return tuple(assocs), qos


def parse_sshare(text: str) -> dict[tuple[str, str], float]:
    """(account, user) -> FairShare from ``sshare -a -P -n -o Account,User,FairShare``
    (users only: an account's own line has no user)."""
    out = {}
    for line in text[:MAX_TEXT].splitlines()[:MAX_RECORDS]:
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip():
            continue
        account, user, factor = (p.strip() for p in parts)
        if account and factor:
            out[(account, user)] = _bounded_float(factor, 0.0, 1.0)
    return out


def parse_partitions(text: str) -> dict[str, tuple[int, str]]:
    """Partition -> (PriorityJobFactor, QOS or "") from ``scontrol -o show partition``."""
    out = {}
    for line in text[:MAX_TEXT].splitlines()[:MAX_RECORDS]:
        v = _pairs(line)
        name = v.get("PartitionName")
        if not name:
            continue
        factor = _bounded_int(v.get("PriorityJobFactor", "0"), 0, 65535)
        part_qos = v.get("QoS", "")
        out[name] = (factor, "" if part_qos in ("N/A", "(null)") else part_qos)
    return out


def parse_reservations(
    text: str, expand: Callable[[str], Iterable[str]]
) -> tuple[Reservation, ...]:
    """The ACTIVE reservations from ``scontrol -o show reservation``; ``expand`` turns a
    Slurm host list into names."""
    out = []
    for line in text[:MAX_TEXT].splitlines()[:MAX_RECORDS]:
        v = _pairs(line)
        name = v.get("ReservationName")
        if not name or v.get("State", "").upper() != "ACTIVE":
            continue
        nodes = v.get("Nodes", "")
        try:
            names = frozenset(expand(nodes)) if nodes and nodes != "(null)" else frozenset()
        except ValueError:
            continue
        flags = frozenset(f for f in v.get("Flags", "").upper().split(",") if f)
        out.append(Reservation(name, names, flags))
    return tuple(out)


_PAIR_RE = re.compile(r"(\S+?)=(\S*)")
_LIMIT_RE = re.compile(r"(N|[0-9]+)?\(([0-9]+)(?:\.[0-9]+)?\)")
_NAME_ID_RE = re.compile(r"(.*)\(([0-9]+)\)")
_USER_LIMITS_RE = re.compile(r"(?:\S+\()?([0-9]+)\)?=\{([^}]*)\}")


def _pairs(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in _PAIR_RE.finditer(line):
        out.setdefault(m.group(1), m.group(2))
    return out


def _limit(value: str | None) -> Limit:
    """``5(2)``, ``N(2)``, ``5`` or empty."""
    if not value:
        return Limit(None)
    m = _LIMIT_RE.fullmatch(value)
    if m is None:
        return Limit(_bounded_int(value, 0, 2**32) if value.isdigit() else None)
    limit = None if m.group(1) in (None, "N") else _bounded_int(m.group(1), 0, 2**32)
    return Limit(limit, _bounded_int(m.group(2), 0, 2**32))


def _tres(value: str | None) -> dict[str, Limit]:
    """``cpu=N(0),gres/gpu=4(1)`` -> {name: Limit}, only the TRES a MIG job uses."""
    out = {}
    for item in (value or "").split(","):
        name, sep, rest = item.partition("=")
        if sep and (name in JOB_TRES or name.startswith("gres/gpu:")):
            lim = _limit(rest)
            if lim.limit is not None:
                out[name] = lim
    return out


def _assoc(line: str) -> Assoc | None:
    v = _pairs(line)
    user_field = v.get("UserName", "")
    user, uid = "", None
    m = _NAME_ID_RE.fullmatch(user_field)
    if m:
        user, uid = m.group(1), _bounded_int(m.group(2), 0, 2**32)
    shares = v.get("SharesRaw/Norm/Level/Factor", "").split("/")
    fs = _bounded_float(shares[3], 0.0, 1.0) if len(shares) == 4 else 0.0
    parent = v.get("ParentAccount", "")
    pm = _NAME_ID_RE.fullmatch(parent)
    account = v.get("Account", "")
    if not account:
        return None
    return Assoc(
        account=account,
        user=user,
        partition=v.get("Partition", ""),
        uid=uid,
        priority=_bounded_int(v.get("Priority", "0"), 0, 2**32),
        fairshare=fs,
        parent=pm.group(1) if pm else "",
        grp_jobs=_limit(v.get("GrpJobs")),
        max_jobs=_limit(v.get("MaxJobs")),
        grp_tres=MappingProxyType(_tres(v.get("GrpTRES"))),
    )


def _qos(line: str) -> Qos | None:
    head, _, rest = line.partition(" ")
    m = _NAME_ID_RE.fullmatch(head[len("QOS=") :])
    if m is None:
        return None
    users: dict[int, tuple[Limit, Mapping[str, Limit]]] = {}
    before, _, user_part = rest.partition("User Limits=")
    for um in _USER_LIMITS_RE.finditer(user_part):
        uv = _pairs(um.group(2))
        uid = _bounded_int(um.group(1), 0, 2**32)
        users[uid] = (_limit(uv.get("MaxJobsPU")), MappingProxyType(_tres(uv.get("MaxTRESPU"))))
    v = _pairs(before)
    priority = v.get("Priority", "0")
    return Qos(
        name=m.group(1),
        priority=_bounded_int(priority, 0, 2**32) if priority.isdigit() else 0,
        grp_jobs=_limit(v.get("GrpJobs")),
        grp_tres=MappingProxyType(_tres(v.get("GrpTRES"))),
        users=MappingProxyType(users),
    )


def _bounded_int(text: str, low: int, high: int) -> int:
    try:
        return max(low, min(high, int(text)))
    except ValueError:
        return low


def _bounded_float(text: str, low: float, high: float) -> float:
    try:
        x = float(text)
    except ValueError:
        return low
    return max(low, min(high, x)) if math.isfinite(x) else low


def _duration(text: str) -> float:
    """``7-00:00:00`` or ``00:10:00`` as seconds (Slurm's PriorityMaxAge)."""
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    try:
        nums = [int(p) for p in parts]
        d = int(days) if days else 0
    except ValueError:
        return 7 * 86400.0
    while len(nums) < 3:
        nums.insert(0, 0)
    h, m, s = nums[-3:]
    return float(max(0, min(d * 86400 + h * 3600 + m * 60 + s, 10 * 365 * 86400)))


# ---------------------------------------------------------------------------
# Questions the cycle asks


def job_priority(policy: SitePolicy, job, now: float) -> int:
    """The priority Slurm's multifactor plugin would give the job if it were not held
    (module doc); 0 under priority/basic (the planner then goes by submission)."""
    w = policy.weights
    if not w.multifactor:
        return 0
    since = eligible_since(job, now, w.accrue_always)
    age = min(1.0, max(0.0, now - since) / w.max_age) if w.max_age > 0 else 0.0
    assoc = policy.assoc_of(job.account, job.user, _first(job.partition), _job_uid(job))
    fs = 0.0
    if assoc is not None:
        fs = policy.fairshare.get((assoc.account, assoc.user), assoc.fairshare)
    max_assoc, max_qos, max_part = policy.max_priorities
    a = assoc.priority / max_assoc if assoc is not None and max_assoc else 0.0
    q = policy.qos.get(job.qos)
    qf = q.priority / max_qos if q is not None and max_qos else 0.0
    part = policy.partitions.get(_first(job.partition))
    pf = part[0] / max_part if part is not None and max_part else 0.0
    total = w.age * age + w.assoc * a + w.fairshare * fs + w.partition * pf + w.qos * qf
    return max(1, int(total) - int(getattr(job, "nice", 0) or 0))


def eligible_since(job, now: float, accrue_always: bool = False) -> float:
    """When the job's age starts: its submission under ACCRUE_ALWAYS, else its
    ``--begin`` time (``now`` while that is ahead: no age yet), else its submission. On
    a held job Slurm's EligibleTime is the ``--begin`` only; on one the planner has
    released (its record in the AdminComment) a time at or after the plan was issued is
    Slurm's own stamp of that release, not the user's, and is passed over."""
    submitted = job.submit_time if job.submit_time is not None else now
    eligible = getattr(job, "eligible_time", None)
    if accrue_always or not isinstance(eligible, int | float) or eligible <= submitted:
        return submitted
    if eligible > now:
        return now
    record = parse_admin_comment(getattr(job, "admin_comment", "") or "")
    if record is not None and eligible >= record.issued:
        return submitted
    return float(eligible)


def _job_uid(job) -> int | None:
    uid = getattr(job, "uid", None)
    return uid if isinstance(uid, int) else None


def _first(partition: str) -> str:
    return (partition or "").split(",")[0].strip()


_LIMIT_REASON_RE = re.compile(r"(?:QOS|Assoc)(?:Grp|Max|Min|Job)\w*|AccountingPolicy")


def is_limit_reason(reason: str) -> bool:
    """Slurm keeps the job pending for a QOS or association limit (its Reason)."""
    return bool(_LIMIT_REASON_RE.fullmatch(reason or ""))


def _checks(policy: SitePolicy, job) -> list[tuple[tuple, int, int, str]]:
    """(counter key, limit, used, what) for every limit the job would count against:
    its QOS's and the partition's QOS's (group, and per user), its association's and
    those of the accounts above it."""
    out: list[tuple[tuple, int, int, str]] = []

    def add(key: tuple, lim: Limit, what: str) -> None:
        if lim.limit is not None:
            out.append((key, lim.limit, lim.used, f"{what}={lim.limit}"))

    partition = _first(job.partition)
    assoc = policy.assoc_of(job.account, job.user, partition, _job_uid(job))
    uid = assoc.uid if assoc is not None and assoc.uid is not None else _job_uid(job)
    names = [job.qos] if job.qos else []
    part = policy.partitions.get(partition)
    if part is not None and part[1] and part[1] not in names:
        names.append(part[1])
    for name in names:
        q = policy.qos.get(name)
        if q is None:
            continue
        add(("qos", name, "jobs"), q.grp_jobs, f"QOS {name} GrpJobs")
        for tres, lim in q.grp_tres.items():
            add(("qos", name, tres), lim, f"QOS {name} GrpTRES={tres}")
        if uid is not None and uid in q.users:
            jobs, per_user = q.users[uid]
            add(("qosu", name, uid, "jobs"), jobs, f"QOS {name} MaxJobsPerUser")
            for tres, lim in per_user.items():
                add(("qosu", name, uid, tres), lim, f"QOS {name} MaxTRESPerUser={tres}")
    if assoc is not None:
        own = f"association {assoc.account}/{assoc.user}"
        add(("assoc", assoc.account, assoc.user, assoc.partition, "max"), assoc.max_jobs,
            f"{own} MaxJobs")  # fmt: skip
        for a in policy.lineage(assoc):
            who = f"association {a.account}/{a.user}" if a.user else f"account {a.account}"
            key = ("assoc", a.account, a.user, a.partition)
            add((*key, "jobs"), a.grp_jobs, f"{who} GrpJobs")
            for tres, lim in a.grp_tres.items():
                add((*key, tres), lim, f"{who} GrpTRES={tres}")
    return out


def admit(policy: SitePolicy, jobs: Sequence, started: Iterable = ()) -> dict[str, str]:
    """Of ``jobs`` (held, in the order they would start), those a limit would keep
    pending: {job id: which limit, in Slurm's words}. Each job admitted counts against
    the limits of the jobs after it; ``started``: jobs released and not yet running,
    which Slurm does not count yet."""
    added: dict[tuple, int] = {}
    for job in started:
        for key, _, _, _ in _checks(policy, job):
            added[key] = added.get(key, 0) + 1
    out = {}
    for job in jobs:
        checks = _checks(policy, job)
        over = next(
            (
                f"waits for a limit: {what} reached ({used + added.get(key, 0)} in use)"
                for key, limit, used, what in checks
                if used + added.get(key, 0) + 1 > limit
            ),
            None,
        )
        if over is not None:
            out[job.job_id] = over
            continue
        for key, _, _, _ in checks:
            added[key] = added.get(key, 0) + 1
    return out


def pool_of(policy: SitePolicy, job) -> str | None:
    """The reservation whose nodes the job may be planned on ("" : nodes in no active
    reservation), or None when the reservation it names is not active."""
    wanted = [r.strip() for r in (job.reservation or "").split(",") if r.strip()]
    if not wanted:
        return ""
    active = {r.name for r in policy.reservations}
    return next((r for r in wanted if r in active), None)


def node_pools(policy: SitePolicy, nodes: Iterable[str]) -> dict[str, str]:
    """Node -> its active reservation ("" : none)."""
    owner = {}
    for r in policy.reservations:
        for n in r.nodes:
            owner.setdefault(n, r.name)
    return {n: owner.get(n, "") for n in nodes}
