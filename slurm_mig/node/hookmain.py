"""The hooks' entry points: read the environment and the config, decide (`prolog`,
`task_prolog`, `epilog`) and carry the outcome out (drain, requeue, metrics, reports,
notifications, the detached reclaim, the log lines, the exit status).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from ..config import Config, ConfigError, load_config
from ..devices.base import DeviceError, MigBackend
from ..slurm.assignment import AssignmentError, load_key
from .admission import hint_key, in_partition, not_ours
from .epilog import epilog
from .hookio import array_task_of, as_array_task, emit, job_states, run_scontrol
from .hookoutcome import INFO, WARNING, Clock, Outcome
from .jobenv import HookInputError, JobEnv, digits
from .nodestate import LockBusyError, NodeState, NodeStateError
from .prolog import prolog
from .reclaim import reclaim_expired
from .recordsweep import Asker, recorded_job, sweep
from .taskprolog import NO_GPU, task_prolog

__all__ = [
    "HOOKS",
    "epilog_main",
    "notify_planner",
    "prolog_main",
    "reclaim_main",
    "task_prolog_main",
]

HOOKS = ("prolog", "epilog", "taskprolog")


def _run(
    hook: str,
    env: Mapping[str, str] | None,
    scontrol: str | None,
    clock: Clock,
    open_backend: Callable[[Config, str], MigBackend] | None,
) -> int:
    """Run ``hook``: decide from the environment and the config, carry the outcome out;
    the exit status."""
    env = os.environ if env is None else env
    try:
        job = JobEnv.from_env(env)
    except HookInputError as exc:
        emit(hook, env.get("SLURM_JOB_ID", "?") or "?", "", [(WARNING, str(exc))], None)
        return 0
    config = None
    try:
        config = load_config(env.get("SLURM_MIG_CONFIG") or None)
        adopted = recorded_job(job, config) if hook == "epilog" else None
        if adopted is not None:
            job = adopted
        elif hook != "taskprolog" and in_partition(job, config):
            job = as_array_task(job, config, env, scontrol)
        out = _decide(
            hook, job, config, clock, open_backend, lambda ids: job_states(ids, env, scontrol)
        )
        if adopted is not None:
            text = f"Slurm named no partition; this node's record of job {job.job_id} makes it ours"
            out.log.insert(0, (INFO, text))
    except ConfigError as exc:
        out = _broken(hook, f"slurm-mig config: {exc}")
    except Exception as exc:  # a bug must not leave a job on the wrong GPU silently
        out = _broken(hook, f"internal error: {type(exc).__name__}: {exc}")
    _ask_slurm(hook, job, out, env, scontrol)
    if hook != "taskprolog" and config is not None and in_partition(job, config):
        _record(hook, job, config, out, env)
    if config is not None and config.notify:
        if hook == "epilog":
            notify_planner(config, job.job_id, "ended", out)
        elif hook == "prolog" and out.started and out.drain is None:
            notify_planner(config, job.job_id, "started", out)
    if out.reclaim_after is not None and env.get("SLURM_SCRIPT_CONTEXT") == "epilog_slurmd":
        _spawn_reclaim(env, job.node, out.reclaim_after, out)  # under slurmd only
    emit(hook, job.job_id, job.node, out.log, config)
    if out.stdout:
        sys.stdout.write("".join(f"{line}\n" for line in out.stdout))
        sys.stdout.flush()
    return out.exit_code


def _ask_slurm(
    hook: str, job: JobEnv, out: Outcome, env: Mapping[str, str], scontrol: str | None
) -> None:
    """Drain the node, requeue and hold the job, as ``out`` asks (a failure is warned)."""
    if out.drain is not None:
        failed = run_scontrol(
            ["update", f"NodeName={job.node}", "State=DRAIN", f"Reason=slurm-mig: {out.drain}"],
            env,
            scontrol,
        )
        if failed:
            out.warn(f"could not drain the node: {failed}")
    if out.requeue:
        target = job.job_id
        if hook == "taskprolog":  # by number, the last task of an array names all of it
            target = array_task_of(job.job_id, env, scontrol)[0] or job.job_id
        failed = run_scontrol(["requeuehold", target], env, scontrol)
        if failed:
            out.warn(f"could not requeue the job: {failed}")


def _record(hook: str, job: JobEnv, config: Config, out: Outcome, env: Mapping[str, str]) -> None:
    """The Prolog's or Epilog's node metrics, accounting record and reports (none of them
    ever fails the hook)."""
    from . import reports  # stdlib only (first: a full spool is an event in the metrics)

    hint = hint_key(job.comment) if hook == "epilog" else None
    own = replace(job, job_id=job.own_id)  # its need file is named as mig-run knows it
    reports.after_hook(hook, config, job.node, out, env, own, hint)

    from .nodemetrics import record  # stdlib and geometry only

    try:
        failed = record(config, job.node, out.events)
        if out.finished is not None:
            from ..slurm.accounting import append

            private = config.run_dir_for(job.node) / "private"
            failed = append(private, out.finished, env) or failed
    except Exception as exc:  # metrics and accounting never fail a hook
        failed = f"metrics not written: {type(exc).__name__}: {exc}"
    if failed:
        out.warn(failed)


def _spawn_reclaim(env: Mapping[str, str], node: str, delay: float, out: Outcome) -> None:
    """Start `reclaim_main` detached: once the kept instance's wait has run out it is
    destroyed even when its job went to another node and no hook comes here again."""
    import subprocess

    tree = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH", "")) if p)
    code = "import sys; from slurm_mig.node.hooks import reclaim_main; sys.exit(reclaim_main())"
    try:
        # Slurm starts hooks without PATH: Python may not know its own path then
        python = sys.executable or os.readlink("/proc/self/exe")
        subprocess.Popen(
            [python, "-c", code, node, f"{delay + 1.0:.1f}"],
            env={**env, "PYTHONPATH": path},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        out.warn(f"cannot start the reclaim of the kept instance (the next hook does it): {exc}")


def reclaim_main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``NODE SECONDS``: sleep, then destroy the node's kept instances whose wait is over
    and the instances of stale job records (`stale.sweep`: their jobs run here no more)
    (one GPU's lock at a time, waiting for each as a hook would for its own); log like
    the hooks. Exit 0 unless misused."""
    args = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    if len(args) != 2 or not digits(args[1].replace(".", "", 1), 12):
        print("usage: reclaim NODE SECONDS", file=sys.stderr)
        return 2
    node, delay = args[0], float(args[1])
    time.sleep(delay)
    out, config = Outcome(), None
    try:
        config = load_config(env.get("SLURM_MIG_CONFIG") or None)
        from ..devices.open import open_backend

        backend = open_backend(config, node)
        state = NodeState(config.run_dir_for(node), warn=out.warn)
        with state.lock(config.lock_timeout, shared=True):
            now = time.time()
            fault = reclaim_expired(state, backend, now, "reclaim", out, config.lock_timeout)
            if fault is None:
                ask = lambda ids: job_states(ids, env)  # noqa: E731
                _, fault = sweep(
                    state, backend, node, out, boot=False, ask=ask, wait=config.lock_timeout
                )
        if fault is not None:
            out.warn(f"cannot reclaim an instance (the next hook retries): {fault}")
    except (ConfigError, DeviceError, NodeStateError, LockBusyError) as exc:
        out.warn(f"kept instances not reclaimed (the next hook does it): {exc}")
    if config is not None:
        from . import reports  # stdlib only

        reports.after_hook("reclaim", config, node, out, env)
    emit("reclaim", "-", node, out.log, config)
    return 0


def notify_planner(config: Config, job_id: str, event: str, out: Outcome) -> None:
    """Wake the planner daemon: the job has started (the job after it can be released
    ahead) or ended (its slices are free, or kept for the next job)."""
    from ..config import parse_address
    from ..slurm.notify import send

    address = parse_address(config.notify)
    if address is not None:
        try:  # the daemon hears only signed notifications: no key, no datagram
            key = load_key(config.key_file)
        except AssignmentError as exc:
            out.warn(f"the planner is not notified: {exc}")
            return
        failed = send(address, job_id, event, key)
        if failed:
            out.warn(failed)


def _decide(
    hook: str,
    job: JobEnv,
    config: Config,
    clock: Clock,
    open_backend: Callable[[Config, str], MigBackend] | None,
    ask: Asker,
) -> Outcome:
    """The hook's decision (``ask``: the Prolog's question to Slurm about the jobs of
    records in the way, `recordsweep`)."""
    if hook == "taskprolog":
        return task_prolog(job, config)
    if not in_partition(job, config):
        return not_ours(job, config)
    if open_backend is None:
        from ..devices.open import open_backend
    try:
        backend = open_backend(config, job.node)
    except DeviceError as exc:
        return Outcome().fault(f"cannot open the MIG devices: {exc}")
    if hook == "prolog":
        return prolog(job, config, backend, clock, ask)
    return epilog(job, config, backend, clock)


def _broken(hook: str, text: str) -> Outcome:
    """The hook could not decide: the Prolog and Epilog drain the node, the TaskProlog
    gives the task no GPU rather than a wrong one."""
    if hook == "taskprolog":
        out = Outcome(stdout=[NO_GPU, f"print slurm-mig: {text}; the job runs without a GPU"])
        out.warn(text)
        return out
    return Outcome().fault(text)


def prolog_main(
    env: Mapping[str, str] | None = None,
    *,
    scontrol: str | None = None,
    clock: Clock = time.time,
    open_backend: Callable[[Config, str], MigBackend] | None = None,
) -> int:
    """Slurm Prolog (console script ``slurm-mig-prolog``); returns the exit status."""
    return _run("prolog", env, scontrol, clock, open_backend)


def epilog_main(
    env: Mapping[str, str] | None = None,
    *,
    scontrol: str | None = None,
    clock: Clock = time.time,
    open_backend: Callable[[Config, str], MigBackend] | None = None,
) -> int:
    """Slurm Epilog (console script ``slurm-mig-epilog``); returns the exit status."""
    return _run("epilog", env, scontrol, clock, open_backend)


def task_prolog_main(
    env: Mapping[str, str] | None = None,
    *,
    scontrol: str | None = None,
    clock: Clock = time.time,
) -> int:
    """Slurm TaskProlog (console script ``slurm-mig-taskprolog``); returns the exit status.
    As the hook's own process (``env`` None: the console script, the thin executable) it
    ignores SIGTERM: slurmstepd hands a TaskProlog's ``print`` lines to the job only if
    it exits, and the requeue it asks for has Slurm signal the job's step while it still
    runs (the job's output then lost why it was requeued). SIGKILL after KillWait still
    ends a TaskProlog that hangs."""
    if env is None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return _run("taskprolog", env, scontrol, clock, None)
