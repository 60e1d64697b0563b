"""``mig-run``'s loop: launch the job with the probe, watch it, and on a restart decision
stop it and get it a larger slice through its mode, until it ends by itself."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ..geometry import GpuModel
from . import oom
from .modes import record_need, select_mode
from .options import EXIT_FAILED, EXIT_USAGE, PROG, Options
from .slices import (
    RestartError,
    Slice,
    SliceHolder,
    initial_slice,
    largest_profile,
    model_for,
    target_profile,
)
from .sources import CHOICES, ForecasterFactory, default_forecaster, open_nvml, warm_up
from .trace import human
from .watch import Outcome, StderrTee, TraceWriter, _Watch, trace_path

__all__ = ["ENV_XLA_SET", "FORWARDED", "INJECT_DIR", "POLL", "STOPPING", "Runner"]

POLL = 0.05  # seconds between two looks at the child and the probe file
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
INJECT_DIR = Path(__file__).resolve().parent / "inject"
ENV_XLA_SET = "SLURM_MIG_XLA_PREALLOCATE_SET"  # mig-run set XLA_PYTHON_CLIENT_PREALLOCATE


class Runner:
    """One ``mig-run``: launches, watches, restarts; ``run()`` returns the exit status."""

    def __init__(
        self,
        opts: Options,
        env: Mapping[str, str] | None = None,
        forecaster: ForecasterFactory = default_forecaster,
        err: TextIO | None = None,
    ) -> None:
        self.opts = opts
        self.env = dict(os.environ if env is None else env)
        self.make_forecaster = forecaster
        self.err = err or sys.stderr
        self.mode = select_mode(opts, self.env, self.say)
        self.choice = CHOICES[opts.memory_source]
        model = model_for(opts)
        job = self.env.get("SLURM_JOB_ID") or f"mig-run-{os.getpid()}"
        self.slices = SliceHolder(self.mode.open_backend(model), model, job)
        self.stopping = False
        self.child: subprocess.Popen | None = None
        self._early: dict[int, None] = {}  # signals while a child is being started
        self.slices.current = initial_slice(opts, self.env, self.slices, self.mode.place)
        self._workdir = Path(tempfile.mkdtemp(prefix="mig-run-"))

    @property
    def slice(self) -> Slice:
        """The slice the job runs on now."""
        return self.slices.current

    @property
    def model(self) -> GpuModel | None:
        """The GPU model whose profiles restarts choose from."""
        return self.slices.model

    @property
    def backend(self) -> Any:
        """The node's device backend, None without one."""
        return self.slices.backend

    def run(self) -> int:
        """Launch until the job ends, cannot restart, or was requeued; its exit status."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in FORWARDED}
        if self.make_forecaster is default_forecaster:  # while the job imports torch
            threading.Thread(target=warm_up, name="mig-run-warm-up", daemon=True).start()
        try:
            attempt = 0
            outcome = Outcome(exit_code=128 + signal.SIGTERM)
            while not self.stopping:
                outcome = self._launch(attempt)
                if outcome.need is None or self.stopping:
                    return outcome.exit_code
                problem = self.restart_problem(outcome.need)
                if problem is not None:
                    self.say(f"{outcome.reason}; {problem}")
                    return outcome.exit_code or EXIT_FAILED
                code = self.mode.restart(self.slices, outcome)
                if code is not None:
                    return code
                attempt += 1
            return outcome.exit_code
        except RestartError as exc:
            self.say(f"error: {exc}")
            return EXIT_FAILED
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.mode.release(self.slices)
            shutil.rmtree(self._workdir, ignore_errors=True)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum in STOPPING:
            self.stopping = True
        child = self.child
        if child is None:  # being started: it gets the signal once `self.child` is set
            self._early[signum] = None
        elif child.poll() is None:
            _signal_group(child, signum)

    def _child_env(self, attempt: int, out: Path) -> dict[str, str]:
        env = dict(self.env)
        paths = [str(INJECT_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["SLURM_MIG_PROBE_OUT"] = str(out)
        env["SLURM_MIG_PROBE_CTL"] = str(out.with_name("control"))
        env["SLURM_MIG_RESTART"] = str(attempt)
        if self.slice.profile:
            env["SLURM_MIG_PROFILE"] = self.slice.profile
        if self.slice.uuid:
            env["CUDA_VISIBLE_DEVICES"] = self.slice.uuid
        if "XLA_PYTHON_CLIENT_PREALLOCATE" not in env:  # JAX takes 75 % of the slice else
            env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
            env[ENV_XLA_SET] = "1"
        if self.opts.emulate:
            env["SLURM_MIG_CAPACITY_EMULATE"] = str(self.slice.capacity)
            env["SLURM_MIG_CONTEXT_EMULATE"] = str(self.opts.context)
        return env

    def _launch(self, attempt: int) -> Outcome:
        """Run the command once on the current slice; how it ended."""
        self.child = None
        folder = self._workdir / f"run{attempt}"
        folder.mkdir()
        out = folder / "probe.csv"
        control = out.with_name("control")
        control.write_text("on\n", encoding="utf-8")
        kills = oom.oom_kills()
        env = self._child_env(attempt, out)
        nvml, why = open_nvml(self.choice, env, self.say)
        if nvml is None and self.choice.nvml_only:
            self.say(f"error: --memory-source nvml: {why}")
            return Outcome(exit_code=EXIT_USAGE)
        try:
            self.child = subprocess.Popen(
                self.opts.command,
                env=env,
                start_new_session=True,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:  # as a shell says it: 127 not found, 126 not runnable
            if nvml is not None:
                nvml.close()
            self.say(f"error: cannot run {self.opts.command[0]!r}: {exc.strerror}")
            return Outcome(exit_code=127 if isinstance(exc, FileNotFoundError) else 126)
        early, self._early = self._early, {}
        for signum in early:
            _signal_group(self.child, signum)
        tee = StderrTee(self.child.stderr)
        writer = TraceWriter(trace_path(self.opts.trace, attempt))
        watch = _Watch(self, out, tee, kills, nvml)
        if nvml is not None:
            nvml.start(self.child.pid, self.opts.sample_interval, self.say)
        try:
            restart = self._follow(watch, writer, control)
            if restart is not None:
                return restart
        finally:
            writer.close()
            tee.finish()
            if nvml is not None:
                nvml.stop()
        return watch.ended(self.child.returncode)

    def _follow(self, watch: _Watch, writer: TraceWriter, control: Path) -> Outcome | None:
        """Poll the child and its samples until it exits (None) or a restart is decided
        (the child stopped, the restart's Outcome); the probe's CPU tracking switched on
        and off through the ``control`` file as the forecaster needs samples."""
        assert self.child is not None
        tracking = True
        while True:
            code = self.child.poll()
            restart = watch.poll(writer)
            if restart is not None:
                self._stop(self.child)
                return restart
            want = watch.needs_samples
            if want != tracking:
                tmp = control.with_name("control.tmp")
                tmp.write_text("on\n" if want else "off\n", encoding="utf-8")
                os.replace(tmp, control)
                tracking = want
            if code is not None:
                break
            time.sleep(POLL)
        watch.drain(writer)
        return None

    def _stop(self, child: subprocess.Popen) -> None:
        """SIGTERM to the job's process group, ``--grace`` seconds, then SIGKILL."""
        for sig, wait in ((signal.SIGTERM, self.opts.grace), (signal.SIGKILL, None)):
            _signal_group(child, sig)
            try:
                child.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def restart_problem(self, need: int) -> str | None:
        """Why the job cannot restart on a slice of ``need`` bytes, or None."""
        done = self.mode.restarts_done()
        if done >= self.opts.max_restarts:
            return f"restart limit reached ({done} of --max-restarts {self.opts.max_restarts})"
        if self.model is None:
            return self.mode.without_model()
        target = target_profile(self.model, need, self.slice.capacity)
        if target is None:
            big = largest_profile(self.model)
            return (
                f"the job needs {human(need)} ({need} bytes) and the largest profile of "
                f"{self.model.name}, {big.name}, has {human(big.memory_bytes)}"
            )
        return self.mode.cannot_place(self.slices, target)

    def _record_need(self, key: str, need: int, job: str) -> None:
        """The job's memory need recorded for the planner (see ``modes.record_need``)."""
        record_need(self.opts.config, self.env, self.say, key, need, job)

    def say(self, message: str) -> None:
        print(f"{PROG}: {message}", file=self.err, flush=True)


def _signal_group(child: subprocess.Popen, signum: int) -> None:
    """``signum`` to the job's process group (gone already: nothing to do)."""
    try:
        os.killpg(child.pid, signum)
    except ProcessLookupError:
        pass
