"""LocalSlurm's client commands on jobs and nodes: sbatch as the cluster's job user, a
job's output, its ``scontrol show job`` fields, waiting for its state, the nodes'
states and waiting until they are idle."""

from __future__ import annotations

import pwd
import subprocess
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .processes import ClusterError

if TYPE_CHECKING:
    from .localslurm import LocalSlurm


class JobCommands:
    """LocalSlurm's methods on batch jobs and nodes (a mixin: LocalSlurm is its only user)."""

    def try_sbatch(
        self: LocalSlurm,
        wrap: str = "true",
        *args: str,
        partition: str | None = None,
        comment: str | None = None,
        name: str | None = None,
        user: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Submit ``wrap`` as a batch job (output to ``out_dir/<id>.out``); sbatch's result."""
        cmd = ["sbatch", "--parsable", f"--output={self.out_dir}/%j.out", f"--chdir={self.out_dir}"]
        if partition is not None:
            cmd.append(f"--partition={partition}")
        if comment is not None:
            cmd.append(f"--comment={comment}")
        if name is not None:
            cmd.append(f"--job-name={name}")
        user = self.job_user if user is None else user
        if user is not None:  # numeric: 26.05 refuses --uid=<name>
            uid = user if user.isdigit() else str(pwd.getpwnam(user).pw_uid)
            cmd.append(f"--uid={uid}")
        cmd.extend(args)
        cmd.append(f"--wrap={wrap}")
        return self.run(*cmd, check=False)

    def sbatch(self: LocalSlurm, wrap: str = "true", *args: str, **kwargs: str | None) -> str:
        """Submit like `try_sbatch`; the job id (ClusterError if sbatch refused)."""
        res = self.try_sbatch(wrap, *args, **kwargs)
        if res.returncode != 0:
            raise ClusterError(f"sbatch exited {res.returncode}: {res.stderr.strip()}")
        return res.stdout.strip().split(";")[0]

    def job_output(self: LocalSlurm, job_id: str) -> str:
        """What a batch job wrote to its output file ("" before it wrote anything)."""
        path = self.out_dir / f"{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def job_field(self: LocalSlurm, job_id: str, name: str) -> str:
        """One field of ``scontrol show job`` (e.g. "JobState", "Reason", "Restarts")."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id)).stdout
        for word in out.split():
            key, _, value = word.partition("=")
            if key == name:
                return value
        raise ClusterError(f"scontrol show job {job_id} has no field {name}: {out}")

    def job_state(self: LocalSlurm, job_id: str) -> str:
        return self.job_field(job_id, "JobState")

    def wait_job(
        self: LocalSlurm, job_id: str, states: Iterable[str] = ("COMPLETED",), timeout: float = 30.0
    ) -> str:
        """Wait until the job reaches one of ``states``; the state reached."""
        wanted = set(states)
        seen = ""

        def reached() -> bool:
            nonlocal seen
            seen = self.job_state(job_id)
            return seen in wanted

        self.wait_for(reached, timeout, f"job {job_id} to reach {sorted(wanted)} (last {seen!r})")
        return seen

    def node_states(self: LocalSlurm) -> dict[str, str]:
        """Node name -> sinfo's long state ("idle", "drained", "mixed", ...)."""
        res = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        return dict(line.split(None, 1) for line in res.stdout.splitlines() if " " in line)

    def wait_idle(self: LocalSlurm, timeout: float = 30.0) -> None:
        """Wait until every node is idle: registered, not drained, no jobs."""

        def idle() -> bool:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ClusterError(f"{name} exited {proc.returncode}\n{self.logs()}")
            states = self.node_states()
            return all(states.get(n) == "idle" for n in self.nodes)

        self.wait_for(idle, timeout, "the nodes to become idle")
