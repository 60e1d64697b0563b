"""The hooks' dealings with the world outside the node's records: the log lines (stderr,
the log file, syslog), ``scontrol`` and ``squeue`` calls, and an array task's id.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from .. import jobcomment as comments
from ..config import Config
from ..slurm.assignment import AssignmentError, load_key, open_token
from .hookoutcome import WARNING
from .jobenv import ARRAY_TASK, JobEnv, digits

__all__ = [
    "SlurmJob",
    "array_task_of",
    "as_array_task",
    "emit",
    "job_states",
    "run_scontrol",
    "scontrol_path",
]

_EXTRA_PATH = "/usr/bin:/usr/local/bin:/bin:/usr/sbin:/sbin"
_ASKABLE = re.compile(r"^[0-9]{1,10}(?:_[0-9]{1,10})?$")  # a job or array task id
MAX_ASKED = 64  # job ids in one squeue call


@dataclass(frozen=True)
class SlurmJob:
    """What slurmctld says of a job: its state (``RUNNING``), the hostlist of its nodes
    ("" when none) and its restart count."""

    state: str
    nodes: str
    restart: int


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


def job_states(
    job_ids: list[str], env: Mapping[str, str], scontrol: str | None = None, timeout: float = 10.0
) -> dict[str, SlurmJob | None] | str:
    """One ``squeue`` call: each of ``job_ids`` (job or array task ids; others are not
    asked) to what slurmctld says of it, or None when slurmctld no longer knows it (it
    ended longer than MinJobAge ago; a job whose line does not read is left out); a
    str saying why Slurm could not be asked. Numbers
    and states only in the output: nothing a user wrote can pose as a job's line."""
    import subprocess

    ids = [j for j in dict.fromkeys(job_ids) if _ASKABLE.match(j)][:MAX_ASKED]
    if not ids:
        return {}
    exe = str(Path(scontrol or scontrol_path(env)).with_name("squeue"))
    fields = "JobArrayID:32,State:24,RestartCnt:12,NodeList:4096"
    argv = [exe, "-h", "--states=all", "-r", f"--jobs={','.join(ids)}", "-O", fields]
    clean = {k: v for k, v in env.items() if not k.startswith("SQUEUE_")}
    try:
        done = subprocess.run(
            argv, env=clean, capture_output=True, text=True, errors="replace", timeout=timeout
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{exe}: {exc}"
    if done.returncode != 0:
        if len(ids) == 1 and "invalid job id" in done.stderr.lower():  # Slurm forgot it
            return dict.fromkeys(ids)  # (of several ids, which one is not said: not judged)
        return f"{exe} exited {done.returncode}: {' '.join(done.stderr.split())[:300]}"
    found: dict[str, SlurmJob | None] = dict.fromkeys(ids)
    garbled = set()  # a line of the job that does not read: not judged at all
    for line in done.stdout.splitlines():
        words = line.split()
        if not words or words[0] not in found:
            continue
        if len(words) in (3, 4) and digits(words[2], 9):
            nodes = words[3] if len(words) == 4 else ""
            found[words[0]] = SlurmJob(words[1].upper(), nodes, int(words[2]))
        else:
            garbled.add(words[0])
    return {k: v for k, v in found.items() if k not in garbled}


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
