"""A stand-in for one job of a trace on a MIG instance, run by benchmarks/site_value.py.

It finds out which MIG profile it was given, sleeps for its trace time on that
profile's compute slices divided by the compression, and appends one JSON line {job,
node, profile, size, how, launched, start, end} to ``log`` (``how``: where the profile
came from; ``launched``: when its batch script began, ``SLURM_MIG_T0`` set by the
script's first command; ``start``: when this program did). Where it cannot run on the
profile (less memory than ``MEMORY`` bytes, as it would run out of it, or no time for
that size) it writes the line with ``error`` at once and exits 3.

The profile, from what the node tells a job:

- slurm-mig: the TaskProlog exports ``CUDA_VISIBLE_DEVICES=MIG-<uuid>``, the instance
  the Prolog made; the node's simulated GPUs (its "NVML", under ``SIM_ROOT/<node>``)
  give that instance's profile.
- Slurm alone on a fixed layout: Slurm sets ``SLURM_JOB_GPUS`` (and
  ``CUDA_VISIBLE_DEVICES``) to the index of the job's ``gpu`` GRES record on its node,
  the position of the record among the node's ``Name=gpu`` lines of gres.conf (beside
  ``SLURM_CONF``), whose ``Type=`` is the profile (measured on 22.05, 24.11 and 26.05:
  ``scontrol show job -d`` names the same record, ``GRES=gpu:<type>:1(IDX:<index>)``).

A restartable job (``PROGRESS``, a folder the job's user may write) checkpoints as a
training job does: it keeps the share of its work done in ``PROGRESS/<job id>``,
rewritten every `CHECKPOINT_S` seconds, and a run after a requeue (slurm-mig moving it
to a larger slice) sleeps only for the rest of its work at its new size; its line says
``done_before``, the share done when it began. A requeue kills a run without a line.

Standard library and slurm_mig's standard-library modules only (a job of an
unprivileged user runs it with the node's own python3)::

    python -m slurm_mig.demo.tracejob MODEL TIMES MEMORY COMPRESS SIM_ROOT LOG [PROGRESS]

``TIMES``: ``size=seconds`` pairs, comma-separated (``1=400.3,2=262.9,7=184``).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "CHECKPOINT_S",
    "format_times",
    "gres_profile",
    "main",
    "parse_times",
    "profile_of",
    "read_progress",
    "seconds_on",
]

CHECKPOINT_S = 0.25  # real seconds between a restartable job's checkpoints


def format_times(times: Mapping[int, float]) -> str:
    """``TIMES`` for the command line: the finite sizes, ascending."""
    return ",".join(f"{s}={t:.6g}" for s, t in sorted(times.items()) if math.isfinite(t))


def parse_times(text: str) -> dict[int, float]:
    """``{size: seconds}`` from ``TIMES``; ValueError on a malformed pair."""
    out = {}
    for pair in text.split(","):
        size, _, seconds = pair.partition("=")
        out[int(size)] = float(seconds)
    return out


def gres_profile(gres_conf: str, node: str, index: int) -> str | None:
    """The ``Type=`` of the ``index``-th ``Name=gpu`` record of ``node`` in a gres.conf
    text (records of other nodes, and lines without ``Name=``, are skipped); None if
    there is no such record or it has no type."""
    records = []
    for line in gres_conf.splitlines():
        line = line.split("#", 1)[0].strip()
        fields = dict(w.partition("=")[::2] for w in line.split())
        if fields.get("Name") == "gpu" and fields.get("NodeName", node) == node:
            records.append(fields.get("Type"))
    return records[index] if 0 <= index < len(records) else None


def _mig_profile(uuid: str, sim_dir: Path) -> str | None:
    from slurm_mig.devices.simulated import SimulatedBackend

    mine = [i for i in SimulatedBackend(sim_dir).instances() if i.uuid == uuid]
    return mine[0].profile if mine else None


def profile_of(env: Mapping[str, str], sim_root: Path) -> tuple[str | None, str]:
    """The job's profile and where it came from (``mig``: its MIG instance on the
    simulated GPUs; ``gres``: its GRES record's type), from its environment."""
    node = env.get("SLURMD_NODENAME", "")
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    if visible.startswith("MIG-"):
        return _mig_profile(visible, sim_root / node), "mig"
    index = (env.get("SLURM_JOB_GPUS") or visible).split(",")[0]
    if not index.isdigit() or not env.get("SLURM_CONF"):
        return None, "none"
    gres_conf = Path(env["SLURM_CONF"]).parent / "gres.conf"
    return gres_profile(gres_conf.read_text(), node, int(index)), "gres"


def seconds_on(
    model: str, profile: str | None, times: Mapping[int, float], memory: int
) -> tuple[int | None, float]:
    """(compute slices of ``profile``, trace seconds of a job of ``times`` and
    ``memory`` bytes there); inf where the job cannot run on it (too little memory, no
    time for the size, a type that is no profile of ``model`` or none at all)."""
    from slurm_mig.geometry import GeometryError, get_model

    try:
        prof = get_model(model).profile(profile) if profile else None
    except GeometryError:  # a type that is no profile (slurm-mig's m<N>g<g>)
        prof = None
    if prof is None:
        return None, math.inf
    size = prof.compute_slices
    return size, times.get(size, math.inf) if prof.memory_bytes >= memory else math.inf


def read_progress(path: Path | None) -> float:
    """The share of its work a restartable job did before (0 without a checkpoint, or
    with one that is no number in [0, 1))."""
    if path is None:
        return 0.0
    try:
        done = float(path.read_text()[:32])
    except (OSError, ValueError):
        return 0.0
    return done if 0.0 <= done < 1.0 else 0.0


def _work(seconds: float, done: float, path: Path | None) -> None:
    """Sleep for the rest (``1 - done``) of ``seconds`` of work, checkpointing the share
    done to ``path`` (when given) every `CHECKPOINT_S` seconds."""
    if path is None:
        time.sleep(seconds * (1.0 - done))
        return
    left = seconds * (1.0 - done)
    while left > 0:
        step = min(CHECKPOINT_S, left)
        time.sleep(step)
        left -= step
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{1.0 - left / seconds:.9f}")
        os.replace(tmp, path)  # a requeue mid-write leaves the last whole checkpoint


def main(argv: Sequence[str]) -> int:
    model, times, memory, compress, sim_root, log, *rest = argv
    start = time.time()
    job_id = os.environ.get("SLURM_JOB_ID") or ""
    progress = Path(rest[0]) / job_id if rest and job_id.isdigit() else None
    profile, how = profile_of(os.environ, Path(sim_root))
    record: dict[str, object] = {
        "job": job_id or None,
        "node": os.environ.get("SLURMD_NODENAME", ""),
        "profile": profile,
        "how": how,
        "launched": float(os.environ.get("SLURM_MIG_T0") or start),
        "start": start,
    }
    size, seconds = seconds_on(model, profile, parse_times(times), int(memory))
    record["size"] = size
    if math.isfinite(seconds):
        done = read_progress(progress)
        if progress is not None:
            record["done_before"] = done
        _work(seconds / float(compress), done, progress)
    else:
        record["error"] = f"no time for {profile or 'an unknown profile'} ({how})"
    record["end"] = time.time()
    with open(log, "a") as f:  # one short write per job: O_APPEND keeps lines whole
        f.write(json.dumps(record) + "\n")
    return 0 if math.isfinite(seconds) else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
