"""What a node records of its MIG instances, as the hooks write them and the node's
reports carry them to the planner: the instance a run of a job was given
(`JobRecord`), why a job got none (`Refusal`), and an instance kept after its job for
the next one (`KeptInstance`). One type per record for the node (`node.nodestate`
stores them) and the daemon (`daemon.receiver` reads them from reports). Standard
library and ``geometry`` only: the hooks import this.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..geometry import MAX_TASKS, Placement

__all__ = ["ACTIONS", "JobRecord", "KeptInstance", "Refusal"]

ACTIONS = ("fail", "requeue")


def _placement(data: object) -> Placement:
    if not isinstance(data, dict):
        raise ValueError(f"placement must be {{start, size}}, got {data!r}")
    return Placement(int(data["start"]), int(data["size"]))


def _to_json(obj: object) -> dict:
    data = asdict(obj)
    data["placement"] = obj.placement.to_json()
    return data


@dataclass(frozen=True)
class JobRecord:
    """The MIG instance a run of a job was given by the prolog. A job of several slices
    (`geometry.gangs`) was given ``tasks`` instances of ``profile``: ``placement`` is
    then their region, ``uuid`` task 0's instance and ``members`` the others' uuids, in
    task order (`Assignment.instance_placements`)."""

    job_id: str
    restart: int
    gpu: int
    profile: str
    placement: Placement
    uuid: str
    created: float  # epoch seconds the instance came to exist (earlier when adopted)
    ready: float  # epoch seconds the prolog finished preparing it for this job
    reused: bool  # adopted from a kept instance (or a retried prolog), not created
    keep_for: str | None = None  # job that inherits the instance after this one
    # the GPU's energy counter (mJ) at the Prolog; None: no counter (`energysplit`)
    energy_mj: int | None = None
    # SLURM_JOB_ID where ``job_id`` is an array task's <array id>_<task> (its processes
    # on the node are known by this number: `stale.local_jobs`); None: ``job_id`` itself
    slurm_id: str | None = None
    members: tuple[str, ...] = ()  # uuids of tasks 1.. of a job of several slices

    @property
    def uuids(self) -> tuple[str, ...]:
        """Every instance of the run, task 0 first."""
        return (self.uuid, *self.members)

    @property
    def tasks(self) -> int:
        return 1 + len(self.members)

    def to_json(self) -> dict:
        data = _to_json(self)
        for optional in ("energy_mj", "slurm_id"):
            if data[optional] is None:
                del data[optional]  # records as before where there is none
        if self.members:
            data["members"] = list(self.members)
        else:
            del data["members"]
        return data

    @classmethod
    def from_json(cls, data: dict) -> JobRecord:
        return cls(
            job_id=str(data["job_id"]),
            restart=int(data["restart"]),
            gpu=int(data["gpu"]),
            profile=str(data["profile"]),
            placement=_placement(data["placement"]),
            uuid=str(data["uuid"]),
            created=float(data["created"]),
            ready=float(data["ready"]),
            reused=bool(data["reused"]),
            keep_for=None if data.get("keep_for") is None else str(data["keep_for"]),
            energy_mj=_counter(data.get("energy_mj")),
            slurm_id=None if data.get("slurm_id") is None else str(data["slurm_id"]),
            members=_members(data.get("members", [])),
        )


def _members(value: object) -> tuple[str, ...]:
    """The other instances' uuids of a record (at most `MAX_TASKS` - 1 strings)."""
    if not isinstance(value, list) or len(value) >= MAX_TASKS:
        raise ValueError(f"members must be a list of under {MAX_TASKS} uuids")
    return tuple(str(u) for u in value)


def _counter(value: object) -> int | None:
    """An energy counter reading of a record (0..2**64-1), else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < 2**64 else None


@dataclass(frozen=True)
class Refusal:
    """Why a job got no instance, and what the TaskProlog does about it."""

    job_id: str
    action: str  # "fail": the job cannot run as submitted; "requeue": try again later
    reason: str

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"refusal action must be one of {ACTIONS}, got {self.action!r}")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Refusal:
        return cls(str(data["job_id"]), str(data["action"]), str(data["reason"]))


@dataclass(frozen=True)
class KeptInstance:
    """An instance left in place after its job, for ``for_job`` until ``until``."""

    gpu: int
    profile: str
    placement: Placement
    uuid: str
    for_job: str | None
    until: float  # epoch seconds; after it any prolog or epilog may destroy it
    created: float | None = None  # epoch seconds the instance came to exist

    def to_json(self) -> dict:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: dict) -> KeptInstance:
        return cls(
            gpu=int(data["gpu"]),
            profile=str(data["profile"]),
            placement=_placement(data["placement"]),
            uuid=str(data["uuid"]),
            for_job=None if data.get("for_job") is None else str(data["for_job"]),
            until=float(data["until"]),
            created=None if data.get("created") is None else float(data["created"]),
        )
