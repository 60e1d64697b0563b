"""What several test modules share: where the project's reference data lies, batches
small enough to plan by hand, jobs as squeue shows them, the command line run as a
program, and probes of what another user or a slow client can do."""

from __future__ import annotations

import csv
import errno
import gzip
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_mig import job as planner_job
from slurm_mig.slurm.assignment import Assignment, generate_key
from slurm_mig.slurm.client import Job, Node
from slurm_mig.slurm.jobrecord import admin_comment_for

ROOT = Path(__file__).resolve().parents[1]


def _shared_data() -> Path:
    """``../shared/data`` beside the checkout, or ``$SLURM_MIG_SHARED_DATA``."""
    env = os.environ.get("SLURM_MIG_SHARED_DATA")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[1]
    for cand in (here.parent / "shared" / "data", Path("/work/shared/data")):
        if cand.is_dir():
            return cand
    return here.parent / "shared" / "data"


SHARED_DATA = _shared_data()


def shared_file(relative: str) -> Path:
    """A file of the shared reference data; the calling test is skipped where it is absent."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"shared reference data not present: {path}")
    return path


# Five tasks on an A30 (Table 1: create 1g .11, 2g .12, 4g .13; destroy .10). The
# longest task already sits on 4 slices, so FAR's family has one allocation:
# A->4, B,C,E->1, D->2. Its FAR plan without refinement:
#   create 4g [0, .13]; A on 4g [.13, 8.13]; destroy 4g [8.13, 8.23];
#   create 2g@0 [8.23, 8.35]; D on 2g@0 [8.35, 11.35];
#   create 1g@2 [8.35, 8.46]; B [8.46, 14.46]; create 1g@3 [8.46, 8.57]; C [8.57, 13.57];
#   destroy 2g@0 [11.35, 11.45]; create 1g@0 [11.45, 11.56]; E [11.56, 13.56].
A30_FIVE = [
    planner_job.Job("A", 0.0, {1: 40.0, 2: 20.0, 4: 8.0}),
    planner_job.Job("B", 0.0, {1: 6.0, 2: 4.0, 4: 4.0}),
    planner_job.Job("C", 0.0, {1: 5.0, 2: 3.0, 4: 3.0}),
    planner_job.Job("D", 0.0, {1: 8.0, 2: 3.0, 4: 3.0}),
    planner_job.Job("E", 0.0, {1: 2.0, 2: 1.5, 4: 1.5}),
]


@contextmanager
def open_tmp_dir() -> Iterator[Path]:
    """A temporary directory every user can pass through (0755; pytest's tmp_path sits
    in a 0700 directory), for tests that run a program as another user."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="slurm-mig-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class FakeClock:
    """A stand-in for the ``time`` module of the code under test (monkeypatched over its
    ``time`` attribute), so that a test about time takes none: ``time()``, ``monotonic()``
    and ``perf_counter()`` read ``now``, which ``sleep`` moves on at once (recording each
    wait in ``slept``, then calling ``on_sleep``); anything else is the real module's."""

    def __init__(self, now: float = 0.0, on_sleep: Callable[[FakeClock], None] | None = None):
        self.now = now
        self.slept: list[float] = []
        self.on_sleep = on_sleep

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    perf_counter = monotonic

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(self)

    def __getattr__(self, name: str):
        return getattr(time, name)  # strftime, gmtime and the rest


def squeue_job(job_id: str, **fields) -> Job:
    """A job as squeue shows it: alice's ``train``, pending and held by an admin in the
    ``mig`` partition, submitted at 1000.0; ``fields`` override any of that."""
    base = dict(
        job_id=job_id,
        name="train",
        user="alice",
        partition="mig",
        state="PENDING",
        reason="JobHeldAdmin",
        held=True,
        comment="",
        admin_comment="",
        nodes="",
        required_nodes="",
        time_limit=None,
        submit_time=1000.0,
        start_time=None,
        end_time=None,
        restart_count=0,
        exit_code=None,
    )
    base.update(fields)
    base.setdefault("uid", uid_of(base["user"]))
    return Job(**base)


def uid_of(user: str) -> int | None:
    """The uid squeue gives with a test job's user name (alice 1000, bob 1001, mallory
    1002, else one derived from the name); None for no name."""
    import zlib

    known = {"alice": 1000, "bob": 1001, "mallory": 1002}
    if not user:
        return None
    return known.get(user, 10_000 + zlib.crc32(user.encode("utf-8", "surrogatepass")) % 50_000)


def write_config(tmp: Path, nodes: dict[str, list[str]], **planner) -> Path:
    """A planner config under ``tmp`` (simulated devices, its signing key beside it):
    ``nodes`` maps a node to its GPU models, ``planner`` overrides [planner] keys."""
    opts = {"batch_window": 0.0, "cycle": 0.5, "default_runtime": 600.0, **planner}
    lines = ["[slurm]", 'partition = "mig"', "[nodes]"]
    lines += [f'"{n}" = {json.dumps(m)}' for n, m in nodes.items()]
    lines += [
        "[paths]",
        f'state_dir = "{tmp / "state"}"',
        f'run_dir = "{tmp / "run" / "%n"}"',
        f'key_file = "{tmp / "key"}"',
        "[planner]",
        *(f"{k} = {json.dumps(v)}" for k, v in opts.items()),
        "[device]",
        'backend = "simulated"',
        f'simulated_dir = "{tmp / "sim" / "%n"}"',
    ]
    path = tmp / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    if not (tmp / "key").exists():
        generate_key(tmp / "key")
    return path


def node(name: str, *states: str) -> Node:
    """A node of the ``mig`` partition as sinfo shows it (IDLE unless ``states``)."""
    return Node(name, frozenset(states or {"IDLE"}), "", 16, ("mig",))


def completed(pending: Job, slice_: Assignment, start: float, end: float) -> Job:
    """``pending`` as squeue shows it once it ran on the planner's ``slice_`` from
    ``start`` to ``end`` and exited 0."""
    return replace(
        pending,
        state="COMPLETED",
        reason="None",
        held=False,
        admin_comment=admin_comment_for(slice_),
        start_time=start,
        end_time=end,
        exit_code=0,
    )


def run_slurm_mig(*args: str) -> subprocess.CompletedProcess:
    """``python -m slurm_mig ARGS`` in the checkout, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "slurm_mig", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def attempts_as(
    uid: int, ops: dict[str, str], *, gid: int | None = None, setup: str = "", **paths
) -> dict[str, str]:
    """What user ``uid`` (group ``gid``, by default the same number; no other groups) gets
    from each of ``ops`` (name -> a Python expression, run in that order by the system's
    python3 in /, after the statements ``setup``): {name: "ok", or the errno name of the
    OSError it raised}. Each of ``paths`` is a variable the expressions may name, bound
    to that path as a string."""
    probe = "\n".join(
        [
            "import errno, os",
            *(f"{name} = {str(value)!r}" for name, value in paths.items()),
            setup,
            "def attempt(name, op):",
            "    try:",
            "        op()",
            "        print(name, 'ok')",
            "    except OSError as exc:",
            "        print(name, errno.errorcode[exc.errno])",
            *(f"attempt({name!r}, lambda: {expr})" for name, expr in ops.items()),
        ]
    )
    done = subprocess.run(
        ["/usr/bin/python3", "-c", probe],
        capture_output=True,
        text=True,
        user=uid,
        group=uid if gid is None else gid,
        extra_groups=[],
        cwd="/",
        timeout=60,
    )
    assert done.returncode == 0, done
    return dict(line.split() for line in done.stdout.splitlines())


def sent_slowly(sock: socket.socket, data: bytes, wait: float) -> bool:
    """Send ``data`` a byte at a time, after each byte waiting up to ``wait`` seconds to
    hear from the server: True as soon as it closed the connection (EOF or reset), False
    when all was sent and it still had not."""
    sock.settimeout(wait)
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
            if sock.recv(64) == b"":
                return True
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return True
    return False


class _EstimatorConfig:
    default_runtime = 600.0
    serial_fraction = 0.3


def plan_jobs(jobs, nodes: tuple[str, ...] = ("gpu01",), now: float = 10_000.0):
    """One planner cycle (`plan_cycle`, far, no batch window) over squeue's ``jobs`` on
    ``nodes`` of one A100-40GB each, estimated as the daemon would without a store."""
    from slurm_mig.daemon.cycle import CycleInput, plan_cycle
    from slurm_mig.daemon.estimates import Estimator

    models = ("A100-40GB",)
    est = Estimator(_EstimatorConfig(), None)
    snap = CycleInput(
        now=now,
        jobs=tuple(jobs),
        nodes={n: models for n in nodes},
        estimates={j.job_id: est(j, list(models)) for j in jobs},
        batch_window=0.0,
        release_ahead=0.0,
        algorithm="far",
    )
    return plan_cycle(snap)


def trace_limit_ratios() -> list[tuple[float, float]]:
    """(runtime, limit / runtime) of the completed single-node GPU jobs of the ThetaGPU
    2023 and MIT Supercloud 2021 traces (users' time limits against their runs)."""
    theta = shared_file("traces/thetagpu-alcf-2023/data_thetagpu.csv.gz")
    mit = shared_file("traces/mit-supercloud-slurm-2021-subset/slurm-log-queueing-clean.csv.gz")
    out = []
    with gzip.open(theta, "rt") as fh:
        for row in csv.DictReader(fh):
            run, wall = float(row["run_time"]), float(row["wall_time"])
            if row["new_status"] == "Pass" and float(row["node_num"]) == 1 and 0 < run <= wall:
                out.append((run, wall / run))
    with gzip.open(mit, "rt") as fh:
        for row in csv.DictReader(fh):
            limit = int(row["timelimit"])
            run = float(row["service_time"])
            if _supercloud_gpus(row) > 0 and row["state"] == "3" and limit < 525600:
                if 0 < run <= limit * 60:
                    out.append((run, limit * 60 / run))
    return out


def _supercloud_gpus(row: dict[str, str]) -> int:
    """The GPUs a row of the MIT Supercloud trace asked for (TRES 1002 of ``tres_req``)."""
    tres = dict(kv.split("=") for kv in row["tres_req"].split(",") if "=" in kv)
    return int(float(tres.get("1002", "0")))


def supercloud_previous_job_factors() -> list[float]:
    """Per completed GPU job of the MIT Supercloud 2021 subset whose user ran one before
    (in submission order): the factor between its runtime and that previous job's."""
    mit = shared_file("traces/mit-supercloud-slurm-2021-subset/slurm-log-queueing-clean.csv.gz")
    with gzip.open(mit, "rt") as fh:
        rows = [r for r in csv.DictReader(fh) if r["state"] == "3"]
    rows.sort(key=lambda r: float(r["time_submit"]))
    last: dict[str, float] = {}
    out = []
    for row in rows:
        run = float(row["time_end"]) - float(row["time_start"])
        if _supercloud_gpus(row) <= 0 or run <= 0:
            continue
        before = last.get(row["id_user"])
        if before is not None:
            out.append(max(run / before, before / run))
        last[row["id_user"]] = run
    return out


def fill_disk(path) -> None:
    """Write ``path`` until its file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
