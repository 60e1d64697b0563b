"""How ``mig-run`` gets its job a larger slice, one class per ``--mode``: standalone makes
the instance on the node's device backend and relaunches; slurm records the need, writes
it into the job's hint and requeues the job for the planner to place."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .. import jobcomment as comments
from ..geometry import GpuModel, Profile
from ..hints import HintError, comment_problem, parse_hints
from .options import EXIT_FAILED, EXIT_REQUEUED, Options, UsageError
from .slices import (
    RestartError,
    Slice,
    SliceHolder,
    node_backend,
    simulated_backend,
    target_profile,
)
from .trace import human
from .watch import Outcome

__all__ = [
    "MODES",
    "Mode",
    "SlurmMode",
    "StandaloneMode",
    "job_comment",
    "record_need",
    "select_mode",
    "with_mem_hint",
]

Say = Callable[[str], None]


class Mode(ABC):
    """Where the job's slice comes from and how it gets a larger one."""

    def __init__(self, opts: Options, env: Mapping[str, str], say: Say) -> None:
        self.opts = opts
        self.env = env
        self.say = say

    @abstractmethod
    def open_backend(self, model: GpuModel | None) -> Any:
        """The device backend (None without one)."""

    @abstractmethod
    def place(self, holder: SliceHolder, profile: Profile) -> Slice:
        """The first slice of ``--slice``'s profile when the job does not run in one."""

    @abstractmethod
    def restarts_done(self) -> int:
        """The job's restarts so far."""

    @abstractmethod
    def without_model(self) -> str | None:
        """Why a restart cannot be done without a GPU model, or None."""

    @abstractmethod
    def cannot_place(self, holder: SliceHolder, target: Profile) -> str | None:
        """Why the job cannot move to ``target``, or None."""

    @abstractmethod
    def restart(self, holder: SliceHolder, outcome: Outcome) -> int | None:
        """Get the job a slice of ``outcome.need``: None to relaunch it here, else the
        exit status mig-run ends with."""

    @abstractmethod
    def release(self, holder: SliceHolder) -> None:
        """Give back what this mode made, at the very end."""


class StandaloneMode(Mode):
    """Instances made on the node's device backend (or a new emulated capacity)."""

    def __init__(self, opts: Options, env: Mapping[str, str], say: Say) -> None:
        super().__init__(opts, env, say)
        self.restarts = 0

    def open_backend(self, model: GpuModel | None) -> Any:
        if self.opts.sim_dir is not None:
            return simulated_backend(self.opts.sim_dir, model)
        return node_backend(self.opts, self.env)

    def place(self, holder: SliceHolder, profile: Profile) -> Slice:
        if holder.backend is not None:
            return holder.make(profile)
        return Slice(profile.memory_bytes, profile.name)

    def restarts_done(self) -> int:
        return self.restarts

    def without_model(self) -> str | None:
        return "no GPU model to pick a larger profile from; give --gpu-model or --slice"

    def cannot_place(self, holder: SliceHolder, target: Profile) -> str | None:
        if holder.backend is None and not self.opts.emulate:
            return (
                f"cannot create a {target.name} slice without a device backend; "
                "give --sim-dir DIR or --config FILE (or --emulate)"
            )
        return None

    def restart(self, holder: SliceHolder, outcome: Outcome) -> int | None:
        """Move to the smallest profile covering the need and relaunch."""
        assert holder.model is not None and outcome.need is not None
        target = target_profile(holder.model, outcome.need, holder.current.capacity)
        assert target is not None
        new = holder.move_to(target)
        self.restarts += 1
        where = f" ({new.uuid})" if new.uuid else ""
        self.say(
            f"restart {self.restarts} of {self.opts.max_restarts}: {outcome.reason}; "
            f"relaunching on {target.name}{where} with {human(target.memory_bytes)}"
        )
        return None

    def release(self, holder: SliceHolder) -> None:
        holder.release(self.say)


class SlurmMode(Mode):
    """A requeue with the need in the job's hint; the backend is only read."""

    def __init__(self, opts: Options, env: Mapping[str, str], say: Say) -> None:
        if not env.get("SLURM_JOB_ID"):
            raise UsageError("--mode slurm needs $SLURM_JOB_ID (run it inside a Slurm job)")
        super().__init__(opts, env, say)

    def open_backend(self, model: GpuModel | None) -> Any:
        return node_backend(self.opts, self.env)

    def place(self, holder: SliceHolder, profile: Profile) -> Slice:
        return Slice(profile.memory_bytes, profile.name)

    def restarts_done(self) -> int:
        return int(self.env.get("SLURM_RESTART_COUNT") or 0)

    def without_model(self) -> str | None:
        return None  # the planner knows the node's GPUs

    def cannot_place(self, holder: SliceHolder, target: Profile) -> str | None:
        return None

    def release(self, holder: SliceHolder) -> None:
        pass  # the planner gives the job its slices; this mode makes none

    def _address(self) -> str:
        """The job as squeue and the planner name it: an array task is
        <array id>_<task>, since its number may be the array's own, which scontrol
        takes for every task."""
        array = self.env.get("SLURM_ARRAY_JOB_ID", "")
        task = self.env.get("SLURM_ARRAY_TASK_ID", "")
        return f"{array}_{task}" if array.isdigit() and task.isdigit() else self.env["SLURM_JOB_ID"]

    def restart(self, holder: SliceHolder, outcome: Outcome) -> int | None:
        """Record the need, put it into the job's hint, requeue the job."""
        assert outcome.need is not None
        from ..slurm.client import SlurmClient, SlurmError

        number = self.env["SLURM_JOB_ID"]
        job = self._address()
        slurm = SlurmClient(env=self.env)
        try:
            comment = job_comment(self.env, job, client=slurm) or ""
        except SlurmError as exc:
            raise RestartError(f"cannot read job {job}: {exc}") from None
        try:
            hints = parse_hints(comment)
        except HintError:
            hints = None
        if hints is not None and hints.restartable is False:
            self.say(f"{outcome.reason}; the job says mig:restartable=no, so it is not requeued")
            return outcome.exit_code or EXIT_FAILED
        key = (hints.key if hints else None) or self.env.get("SLURM_JOB_NAME") or job
        record_need(self.opts.config, self.env, self.say, key, outcome.need, number)
        written = with_mem_hint(comment, outcome.need)
        problem = comment_problem(written) or _hint_problem(written)
        if problem:
            raise RestartError(
                f"cannot write mem={outcome.need} into job {job}'s Comment: {problem}"
            )
        try:
            slurm.update_job(job, Comment=written)
            slurm.requeue(job)
        except SlurmError as exc:
            raise RestartError(f"cannot requeue job {job}: {exc}") from None
        self.say(
            f"{outcome.reason}; requeued job {job} with mem={human(outcome.need)} "
            f"({outcome.need} bytes) for a larger slice"
        )
        return EXIT_REQUEUED


MODES: dict[str, type[Mode]] = {"standalone": StandaloneMode, "slurm": SlurmMode}


def select_mode(opts: Options, env: Mapping[str, str], say: Say) -> Mode:
    """The ``--mode``'s class (auto: slurm inside a Slurm job, else standalone)."""
    name = opts.mode
    if name == "auto":
        name = "slurm" if env.get("SLURM_JOB_ID") else "standalone"
    return MODES[name](opts, env, say)


def job_comment(
    env: Mapping[str, str], job: str, timeout: float = 30.0, client: Any = None
) -> str | None:
    """The Comment of ``job`` as squeue lists it (through ``client``, else a new
    SlurmClient); None when it is not listed; SlurmError when squeue fails."""
    if client is None:
        from ..slurm.client import SlurmClient

        client = SlurmClient(env=env, timeout=timeout)
    found = [j for j in client.jobs() if j.job_id == job]
    return found[0].comment if found else None


def with_mem_hint(comment: str, need: int) -> str:
    """The Comment mig-run writes back: ``mem=<need>`` set in the job's ``mig:`` word
    (added if absent), the user's text kept, the planner's token and note left out (the
    planner writes its own; job_submit.lua strips a token a user writes)."""
    return (
        comments.parse(comment)
        .with_token(None)
        .with_note(None)
        .with_hint("mem", str(need))
        .render()
    )


def _hint_problem(comment: str) -> str | None:
    """The hint parser's message for ``comment``, None when it parses."""
    try:
        parse_hints(comment)
    except HintError as exc:
        return str(exc)
    return None


def record_need(
    config_path: Path | str | None, env: Mapping[str, str], say: Say, key: str, need: int, job: str
) -> None:
    """Under Slurm the job's need file (the Epilog reports it to the planner, see
    `node.needarea`); else RuntimeStore.record_memory when the store is there."""
    try:
        from ..config import load_config
        from ..node.needarea import need_path, write_need
        from ..owner import owner_of
        from ..runtimes import RuntimeStore

        config = load_config(config_path)
        node = env.get("SLURMD_NODENAME", "")
        path = need_path(config.run_dir_for(node), job) if node else None
        if path is not None and os.path.lexists(path):
            write_need(path, key, need)
            return
        store = RuntimeStore(config.state_dir / "profiles.sqlite")
        store.record_memory(key, need, job, owner=owner_of(os.getuid()))  # never the prior
    except Exception as exc:  # the hint in the comment carries the need anyway
        say(f"warning: memory need not recorded for {key!r}: {' '.join(str(exc).split())}")
