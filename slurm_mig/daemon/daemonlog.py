"""The planner daemon's log lines of a cycle (`daemon.PlannerDaemon`): the hint for an
OSError that failed a cycle, the repartitions and the summary of a cycle, the log file."""

from __future__ import annotations

import errno
import logging
from typing import Any

from ..config import Config
from .cycle import CycleResult
from .cyclereport import CycleReport

__all__ = ["log_cycle", "log_repartitions", "log_to_file", "os_hint"]

log = logging.getLogger("slurm_mig.planner")


def os_hint(exc: OSError) -> str:
    """What to do about an OSError that failed a cycle."""
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return (
            "the planner is out of file descriptors: raise LimitNOFILE in its unit, or see "
            "what holds them (ls -l /proc/<pid>/fd, ss -tnp); the next cycle tries again"
        )
    if exc.errno in (errno.ENOMEM, errno.EAGAIN):
        return (
            "cannot start squeue or scontrol (memory or process limit); the next cycle tries again"
        )
    return "the next cycle tries again"


def log_repartitions(cycle: int, result: Any) -> None:
    """One log line per GPU whose configuration a policy changed (SMART-MIG's
    controller: ``stats["repartitions"]`` of (gpu, from, to) configuration numbers);
    the hooks realise it as jobs start on the new configuration's slots."""
    for snap, got in zip(result.snapshots, result.decisions):
        stats = got.stats or {}
        moves = stats.get("repartitions", ())
        for gpu, before, after in moves:
            g = snap.gpus[gpu]
            log.info(
                "cycle %d: repartition %s gpu %d (%s): configuration %d -> %d",
                cycle, g.node, g.local, snap.model.name, before, after,
            )  # fmt: skip
        if stats.get("controller") and not moves:
            log.info("cycle %d: repartition: the controller kept every configuration", cycle)


def log_cycle(report: CycleReport, result: CycleResult, actions: int) -> None:
    """The cycle's one summary line; a dry run counts the releases it would make."""
    applied = report.apply
    log.info(
        "cycle %d done in %.2f s: %d actions, %d failed; %d planned, %d released, "
        "%d waiting, %d noted, %d busy; plan ends in %.0f s%s",
        report.number,
        report.finished - report.started,
        actions,
        len(applied.failed) if applied else 0,
        len(result.planned),
        len(applied.released) if applied else len(result.released),
        result.waiting,
        result.noted,
        result.busy,
        result.makespan,
        f"; re-planned: {', '.join(result.replanned)}" if result.replanned else "",
    )


def log_to_file(config: Config) -> None:
    """Every record of the planner one printable line on each of its handlers (stderr
    too: `safetext.LogEscaper`), and ``[paths] log_file`` appended to, created 0600;
    ConfigError with the fix when that file exists and others may read it."""
    from ..config import ConfigError
    from ..safetext import UnsafeLogFile, install_escaper, open_private_log

    root = logging.getLogger("slurm_mig")
    path = config.log_file
    if path and not any(getattr(h, "_slurm_mig_planner", False) for h in root.handlers):
        where = f"{config.source or '<config>'}: [paths] log_file"
        try:
            fd = open_private_log(path)
        except UnsafeLogFile as exc:
            raise ConfigError(f"{where}: {exc}") from None
        except OSError as exc:
            raise ConfigError(
                f"{where}: {path}: cannot open it ({exc.strerror or exc}); fix the path, "
                'or set log_file = "" to log to stderr only'
            ) from None
        stream = open(fd, "a", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s slurm-mig planner: %(message)s"))
        handler._slurm_mig_planner = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    install_escaper(root.handlers)
