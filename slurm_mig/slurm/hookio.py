"""The hooks' dealings with the world outside the node's records: the log lines (stderr,
the log file, syslog), ``scontrol`` and ``squeue`` calls, and an array task's id.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from .. import jobcomment as comments
from ..config import Config
from .assignment import AssignmentError, load_key, open_token
from .hookoutcome import WARNING
from .jobenv import ARRAY_TASK, JobEnv, digits

__all__ = ["array_task_of", "as_array_task", "emit", "run_scontrol", "scontrol_path"]

_EXTRA_PATH = "/usr/bin:/usr/local/bin:/bin:/usr/sbin:/sbin"


def scontrol_path(env: Mapping[str, str]) -> str:
    """$SLURM_MIG_SCONTROL, else scontrol on PATH or in the usual places (Slurm runs the
    prolog without PATH)."""
    import shutil

    if env.get("SLURM_MIG_SCONTROL"):
        return env["SLURM_MIG_SCONTROL"]
    path = ":".join(p for p in (env.get("PATH", ""), _EXTRA_PATH) if p)
    return shutil.which("scontrol", path=path) or "scontrol"


def as_array_task(
    job: JobEnv, config: Config, env: Mapping[str, str], scontrol: str | None = None
) -> JobEnv:
    """The Prolog's or Epilog's job under the id the planner knows it by: an array
    task's ``<array id>_<task>``, which their environment does not name. Asked of
    slurmctld (squeue, beside ``scontrol``) only when the job's token names an array
    task or cannot be read (gone from a rewritten comment): a plain job's genuine token
    names its own SLURM_JOB_ID. ``array_unknown`` when slurmctld did not answer."""
    if not digits(job.job_id, 10):
        return job
    token = comments.parse(job.comment).token
    if token is not None:
        try:
            if open_token(token, load_key(config.key_file)).job_id == job.job_id:
                return job
        except AssignmentError:
            pass  # forged, or no key: the Prolog refuses it; the Epilog still asks
    task, failed = array_task_of(job.job_id, env, scontrol)
    if failed is not None:
        return replace(job, array_unknown=True)
    return job if task is None else replace(job, job_id=task, slurm_id=job.job_id)


def array_task_of(
    job_id: str, env: Mapping[str, str], scontrol: str | None = None
) -> tuple[str | None, str | None]:
    """(``<array id>_<task>`` of Slurm job ``job_id``, or None when it is no array task;
    what went wrong, or None). Read from ``squeue -j`` as numbers only: no job name or
    comment in the output, so nothing a user wrote can pose as another job's line."""
    import subprocess

    exe = str(Path(scontrol or scontrol_path(env)).with_name("squeue"))
    argv = [exe, "-h", "--states=all", "-r", f"--jobs={job_id}", "-O", "JobID:12,JobArrayID:24"]
    clean = {k: v for k, v in env.items() if not k.startswith("SQUEUE_")}
    try:
        done = subprocess.run(
            argv, env=clean, capture_output=True, text=True, errors="replace", timeout=20
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{exe}: {exc}"
    if done.returncode != 0:
        return None, f"{exe} exited {done.returncode}: {' '.join(done.stderr.split())[:300]}"
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == job_id:  # -j <array id> lists every task
            return (words[1] if ARRAY_TASK.match(words[1]) else None), None
    return None, f"{exe}: job {job_id} is not in slurmctld's list"


def run_scontrol(
    args: list[str], env: Mapping[str, str], scontrol: str | None = None
) -> str | None:
    """Run ``scontrol ARGS``; None on success, else what went wrong (never raises)."""
    import subprocess

    exe = scontrol or scontrol_path(env)
    try:
        done = subprocess.run(
            [exe, *args],
            env=dict(env),
            capture_output=True,
            text=True,
            errors="replace",  # a reply naming a job whose name is not UTF-8
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{exe}: {exc}"
    if done.returncode != 0:
        return f"{exe} exited {done.returncode}: {' '.join(done.stderr.split())[:300]}"
    return None


def emit(
    hook: str, job_id: str, node: str, log: list[tuple[int, str]], config: Config | None
) -> None:
    """Write each log line, prefixed ``slurm-mig <hook> job <id>:``, to stderr, to the
    config's log_file when set, and to syslog (all best effort); control characters
    written as escapes (`safetext.printable`), so no job name or reason starts a line."""
    from ..safetext import printable

    if not log:
        return
    most = 4000  # characters of one line (a reason, an NVML error)
    lines = [(level, printable(f"{hook} job {job_id}: {text}", most)) for level, text in log]
    if config is not None and config.log_file is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        text = "".join(f"{stamp} {printable(node, 256)} slurm-mig {line}\n" for _, line in lines)
        problem = _append_log(config.log_file, text.encode("utf-8", "backslashreplace"))
        if problem:
            lines.append((WARNING, printable(f"{hook} job {job_id}: {problem}", most)))
    for _, line in lines:
        print(f"slurm-mig {line}", file=sys.stderr)
    try:
        import syslog

        syslog.openlog("slurm-mig", 0, syslog.LOG_DAEMON)
        for level, line in lines:
            syslog.syslog(level, line)
        syslog.closelog()
    except (ImportError, OSError):
        pass


def _append_log(path: Path, data: bytes) -> str | None:
    """Append to the hooks' log file, best effort; what kept it from being written when
    that was the file, not the permissions: root creates it 0600; one that group or
    others may read or that is not root's is left alone, never a job's failure (the
    TaskProlog, as the user, writes only where the file lets it)."""
    from ..safetext import UnsafeLogFile, open_private_log

    try:
        fd = open_private_log(path, create=os.geteuid() == 0)
    except UnsafeLogFile as exc:
        return f"log file not written: [paths] log_file: {exc}"
    except OSError:
        return None
    try:
        os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)
    return None
