"""Simulated workloads: Poisson arrivals, the presets, and job files.

How each trace becomes MIG jobs (a job is its seconds alone on each instance size):
  * MISO: measured per-size throughput (MISO's own MIG profiles of each model);
  * Alibaba: the same time on every size that covers the pod's GPU share (the trace
    has no per-size speed, so a larger slice never speeds a job up);
  * Philly: synthetic per-size speed-up t(s) = r (7/s)^b (the trace has runtimes only);
  * SMART-MIG: the paper's generator (``deadline_workload``), sub-linear curves;
  * pcie-paper: MISO's resnet profile for ResNet50, transfer-bound Blooms.

Load (``build_workload(load=X)``, ``simulate --load X``; default 1, within
``LOAD_RANGE``): every preset's arrival rate times X. MISO: the Poisson gaps / X;
Alibaba: the creation times / X; philly and pcie-paper: 85 % x X of the compute
slices; smart-mig presets: the rate multiplier x X; a job file: its arrivals / X
(deadlines keep their distance from the arrival).

Presets (``build_workload``):
  pcie-paper  Table 2 of Tang et al. (HPCAsia 2025): ResNet50 (PCIe demand 0),
              Bloom560m (5.7 GB/s, alpha 1.25), Bloom7b1 (17.65 GB/s, alpha 1.07);
              ``pcie_bound`` is the share of PCIe-bound jobs, split evenly between the
              two Blooms. The paper gives no runtimes, sizes or arrival rate; ours
              (assumptions, kept here): every job runs ~50 s alone on its requested
              size (U(40, 60) s; Fig. 5 puts uncontended PCIe-bound jobs at 50 s);
              Bloom560m asks for 1g (Section 3.2 runs it on 1g), Bloom7b1 for 2g,
              ResNet50 for 1g, 2g or 3g alike. Larger sizes: ResNet50 speeds up as
              MISO's resnet batch-256 profile on an A100 (7g 1.0, 4g .928, 3g .852,
              2g .584, 1g .324 of full speed); Bloom jobs are transfer-bound, the same
              time on every size. Smaller sizes: cannot run. Poisson arrivals at 85 %
              of the cluster's compute slices, by the jobs' mean work. Default job
              count: 1400 per 60 GPUs (Section 5.4), at least 20.
  miso-trace  MISO's (SoCC'22) 100 template jobs repeated (job i is template i mod
              100, shuffled by the seed): full-A100 runtime from trace_100.json,
              model from job_models.json, per-size times from MISO's measured MIG
              throughput (profiles/miso-a100-mig, inf where it did not fit) and its
              memory need; Poisson arrivals, mean 10 s (5 s for the first third),
              as MISO's simulator. A template's runs are one user's (a rerun is
              its owner's): each template's owner drawn by the seed among
              ``limits.USERS`` with Zipf weights. Default 1000 jobs.
  alibaba     Alibaba openb single-GPU pods in creation order: arrival =
              creation_time, duration = deletion_time - scheduled_time, size = the
              smallest profile covering gpu_milli (the same time on larger sizes,
              inf on smaller: the trace has no per-size speed). Default: all.
  philly      Philly job runtimes (non-zero), sampled by the seed as full-GPU
              times; per-size times t(s) = r (7/s)^b with b ~ U(0.3, 1.0) per job
              (our assumption: sub-linear scaling); Poisson arrivals at 85 % load.
              Default 1000 jobs.
  smart-mig   SMART-MIG's generator (``deadline_workload``): training and inference jobs
              with deadlines, Fig. 5's daily arrival pattern x ``rate_multiplier``
              (default 20); one day unless ``jobs``.
  smart-mig-poisson  the same jobs at a fixed rate (base rate x multiplier); 1000 jobs.
Trace presets read ``../shared/data`` at run time (never copied into the repo):
``$SLURM_MIG_SHARED_DATA``, else ``shared/data`` beside the checkout, else
``/work/shared/data``.

Job files (FILE = CSV or JSON), one job per row/object:
  id          unique name (required)
  arrival     seconds from the start (default 0)
  1,2,3,4,7   seconds alone on each size ('inf' = cannot run)   } one of the two
  runtime     seconds on ``size`` and on every larger size      }
  size        requested compute slices (required with runtime)
  memory_mib  GPU memory needed (default 0 = any)
  pcie_demand GB/s alone (default 0)     alpha   Eq. 2 sensitivity (default 1)
  restartable 1/0 or true/false (default false)   kind   a label for reports
  deadline    seconds from the start by which it should end (default: none)
  priority    Slurm's job priority, higher goes first (default 0)
  tasks       instances side by side, one per task, each with the times above
              (``mig:tasks=N``; default 1): the dynamic policies plan it as one job
              on a region; static layouts and whole GPUs run it on N instances of
              one node, as Slurm's ``--gres=gpu:N`` (it ends with its slowest task)
JSON: a list of such objects (or {"jobs": [...]}), per-size times as
``"times": {"1": 310.0, ...}``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..geometry import GeometryError, GpuModel
from ..workload import WorkloadError
from .api import SimJob
from .jobrows import MIB, job_from_row, sizes_at_least
from .limits import draw_user

LOAD = 0.85  # offered load of the Poisson presets, share of the compute slices
LOAD_RANGE = (0.05, 20.0)  # build_workload's load multiplier, inclusive

PCIE_TYPES = {
    # kind: (PCIe demand GB/s, alpha, requested size)   Table 2 of the PCIe paper
    "ResNet50": (0.0, 1.0, None),
    "Bloom560m": (5.7, 1.25, 1),
    "Bloom7b1": (17.65, 1.07, 2),
}
PCIE_BASE_S = (40.0, 60.0)
# MISO's resnet (batch 256) throughput per size relative to 7g, A100-40GB.
RESNET_SPEED = {7: 1.0, 4: 0.928, 3: 0.8516, 2: 0.5841, 1: 0.3235}

PRESETS = ("pcie-paper", "miso-trace", "alibaba", "philly", "smart-mig", "smart-mig-poisson")


# ---------------------------------------------------------------------------
# shared data


def shared_data_dir() -> Path:
    """The shared reference data: $SLURM_MIG_SHARED_DATA, ../shared/data beside the
    checkout, or /work/shared/data; WorkloadError if none exists."""
    env = os.environ.get("SLURM_MIG_SHARED_DATA")
    if env:
        p = Path(env)
        if not p.is_dir():
            raise WorkloadError(
                f"SLURM_MIG_SHARED_DATA={env} is not a directory; point it at the shared data"
            )
        return p
    checkout = Path(__file__).resolve().parents[2]
    for cand in (checkout.parent / "shared" / "data", Path("/work/shared/data")):
        if cand.is_dir():
            return cand
    raise WorkloadError(
        "trace presets need the shared data folder (traces/, profiles/); set "
        "SLURM_MIG_SHARED_DATA to it or place it at ../shared/data beside the checkout"
    )


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file in the shared data") from None


# ---------------------------------------------------------------------------
# generators


def poisson_arrivals(
    n: int, mean_gap: float, rng: random.Random, start: float = 0.0
) -> list[float]:
    """``n`` arrival times with exponential gaps of mean ``mean_gap`` seconds."""
    t, out = start, []
    for _ in range(n):
        t += rng.expovariate(1.0 / mean_gap)
        out.append(t)
    return out


def _mean_gap(works: Sequence[float], gpus: int, model: GpuModel, load: float) -> float:
    """Inter-arrival mean that offers ``load`` of the cluster's compute slices."""
    mean_work = math.fsum(works) / len(works)
    return mean_work / (load * gpus * model.compute_slices)


def pcie_paper(
    n: int, pcie_bound: float, gpus: int, model: GpuModel, seed: int = 0, load: float = LOAD
) -> list[SimJob]:
    """The PCIe paper's Table 2 mix with ``pcie_bound`` of the jobs PCIe-bound."""
    if not 0.0 <= pcie_bound <= 1.0:
        raise WorkloadError(f"--pcie-bound {pcie_bound} must be a share within [0, 1]")
    rng = random.Random(seed)
    n_pcie = round(n * pcie_bound)
    kinds = ["Bloom560m" if i % 2 == 0 else "Bloom7b1" for i in range(n_pcie)]
    kinds += ["ResNet50"] * (n - n_pcie)
    rng.shuffle(kinds)
    small = [s for s in (1, 2, 3) if s in model.planner_sizes]
    drafts = []
    for i, kind in enumerate(kinds):
        demand, alpha, size = PCIE_TYPES[kind]
        if size is None:
            size = rng.choice(small)
        if size not in model.planner_sizes:
            size = min(s for s in model.planner_sizes if s >= size)
        base = rng.uniform(*PCIE_BASE_S)
        times: dict[int, float] = {}
        for s in sizes_at_least(model, size):
            if kind == "ResNet50":
                times[s] = base * RESNET_SPEED.get(size, 1.0) / RESNET_SPEED.get(s, 1.0)
            else:
                times[s] = base
        drafts.append((f"{kind.lower()}-{i}", kind, times, size, demand, alpha))
    gap = _mean_gap([d[3] * d[2][d[3]] for d in drafts], gpus, model, load)
    arrivals = poisson_arrivals(n, gap, rng)
    return [
        SimJob(jid, t, times, pcie_demand=demand, alpha=alpha, size=size, kind=kind)
        for (jid, kind, times, size, demand, alpha), t in zip(drafts, arrivals)
    ]


def _miso_profiles(root: Path) -> dict[str, dict[int, float]]:
    """model_train<batch> -> {compute slices: throughput relative to 7g}."""
    path = root / "profiles" / "miso-a100-mig" / "mig_iteration_latency_summary.csv"
    out: dict[str, dict[int, float]] = {}
    for row in csv.DictReader(io.StringIO(_read(path))):
        key = f"{row['model']}_train{row['batch_size']}"
        out.setdefault(key, {})[int(row["slices"])] = float(row["throughput_rel_7g"])
    return out


def miso_trace(
    n: int, model: GpuModel, seed: int = 0, root: Path | None = None, load: float = 1.0
) -> list[SimJob]:
    """MISO's trace_100 templates with measured per-size speeds (see module doc); the
    Poisson gaps divided by ``load``."""
    root = root or shared_data_dir()
    base = root / "traces" / "miso-socc22"
    try:
        runtime = {int(k): float(v) for k, v in json.loads(_read(base / "trace_100.json")).items()}
        models = {int(k): str(v) for k, v in json.loads(_read(base / "job_models.json")).items()}
        memory = json.loads(_read(root / "profiles" / "miso-a100-mig" / "memory_mib.json"))
    except (json.JSONDecodeError, ValueError, AttributeError) as exc:
        raise WorkloadError(f"{base}: MISO trace files are not as documented ({exc})") from None
    speed = _miso_profiles(root)
    rng = random.Random(seed)
    order = [i % len(runtime) for i in range(n)]
    rng.shuffle(order)
    owners = random.Random(f"miso-owners:{seed}")
    owner = {k: draw_user(owners) for k in sorted(runtime)}
    gaps = [(5.0 if i < n // 3 else 10.0) / load for i in range(n)]  # MISO: first third 5 s
    t = 0.0
    jobs = []
    for i, tmpl in enumerate(order):
        t += rng.expovariate(1.0 / gaps[i])
        name = models[tmpl]
        rel = speed.get(name)
        if rel is None:
            raise WorkloadError(f"{base}: no MIG profile for {name!r} in the MISO profiles")
        full = runtime[tmpl]
        times = {s: full / rel[s] for s in model.planner_sizes if s in rel}
        mdl, _, batch = name.partition("_train")
        mib = int(memory.get(mdl, {}).get(batch, 0))
        job = SimJob(f"miso-{i}", t, times, memory=mib * MIB, kind=name, user=owner[tmpl])
        jobs.append(job)
    return jobs


def _covering_size(milli: int, model: GpuModel) -> int | None:
    need = math.ceil(milli * model.compute_slices / 1000 - 1e-9)
    for s in model.planner_sizes:
        if s >= max(1, need):
            return s
    return None


def alibaba(
    n: int | None,
    model: GpuModel,
    root: Path | None = None,
    pod_list: str = "default",
    load: float = 1.0,
) -> list[SimJob]:
    """Single-GPU openb pods; sizes are the smallest profile covering gpu_milli; the
    creation times divided by ``load``."""
    root = root or shared_data_dir()
    path = root / "traces" / "alibaba-gpu-v2023-openb" / f"openb_pod_list_{pod_list}.csv"
    jobs = []
    for row in csv.DictReader(io.StringIO(_read(path))):
        try:
            if int(row["num_gpu"]) != 1 or not row["scheduled_time"] or not row["deletion_time"]:
                continue  # multi-GPU, CPU-only, or never scheduled / still running
            milli = int(row["gpu_milli"])
            created = float(row["creation_time"])
            dur = float(row["deletion_time"]) - float(row["scheduled_time"])
        except (KeyError, ValueError) as exc:
            raise WorkloadError(f"{path}: row {row.get('name')!r}: {exc}") from None
        size = _covering_size(milli, model)
        if milli <= 0 or dur <= 0 or size is None:
            continue
        times = dict.fromkeys(sizes_at_least(model, size), dur)
        jobs.append(SimJob(row["name"], created / load, times, size=size, kind=f"{size}g"))
        if n is not None and len(jobs) >= n:
            break
    if not jobs:
        raise WorkloadError(f"{path}: no single-GPU pod with a positive duration")
    return jobs


def philly(n: int, gpus: int, model: GpuModel, seed: int = 0, root: Path | None = None,
           load: float = LOAD) -> list[SimJob]:  # fmt: skip
    """Philly runtimes as full-GPU times, sub-linear per-size scaling, Poisson arrivals."""
    root = root or shared_data_dir()
    path = root / "traces" / "philly-runtimes" / "philly_runtime.csv"
    runtimes = []
    for row in csv.DictReader(io.StringIO(_read(path))):
        try:
            r = float(row["runtime"])
        except (KeyError, ValueError):
            raise WorkloadError(f"{path}: expected a 'runtime' column of seconds") from None
        if r > 0:
            runtimes.append(r)
    rng = random.Random(seed)
    top = model.compute_slices
    drafts = []
    for i in range(n):
        r = rng.choice(runtimes)
        b = rng.uniform(0.3, 1.0)
        drafts.append((f"philly-{i}", {s: r * (top / s) ** b for s in model.planner_sizes}))
    gap = _mean_gap(
        [min(s * t for s, t in times.items()) for _, times in drafts], gpus, model, load
    )
    arrivals = poisson_arrivals(n, gap, rng)
    return [SimJob(jid, t, times, kind="philly") for (jid, times), t in zip(drafts, arrivals)]


# ---------------------------------------------------------------------------
# files (each row's fields are parsed in ``jobrows``)


def load_jobs(path: str | Path, model: GpuModel) -> list[SimJob]:
    """Jobs from a CSV or JSON file (columns in the module doc)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise WorkloadError(
            f"{p}: no such file; --workload takes a file or a preset ({', '.join(PRESETS)})"
        ) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{p}: cannot read ({exc.__class__.__name__})") from None
    if not text.strip():
        raise WorkloadError(f"{p}: empty file; expected CSV or JSON jobs")
    jobs: list[SimJob] = []
    if p.suffix.lower() == ".json" or text.lstrip()[:1] in "[{":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{p}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
        if isinstance(data, dict) and "jobs" in data:
            data = data["jobs"]
        if not isinstance(data, list):
            raise WorkloadError(f'{p}: expected a list of jobs or {{"jobs": [...]}}')
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                raise WorkloadError(f"{p}: job #{i + 1} is not an object")
            jobs.append(job_from_row(item, f"{p}: job #{i + 1}", model))
    else:
        rows = list(csv.reader(io.StringIO(text)))
        header = [h.strip().lower() for h in rows[0]]
        size_cols = {}
        for h in header:
            key = h.rstrip("g")
            if key.isdigit():
                size_cols[h] = int(key)
        for lineno, row in enumerate(rows[1:], start=2):
            if not row or not any(c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise WorkloadError(
                    f"{p}:{lineno}: {len(row)} columns, the header has {len(header)}"
                )
            item: dict = dict(zip(header, (c.strip() for c in row)))
            if size_cols:
                item["times"] = {size_cols[h]: item.pop(h) for h in size_cols}
            jobs.append(job_from_row(item, f"{p}:{lineno}", model))
    if not jobs:
        raise WorkloadError(f"{p}: no jobs")
    seen: set[str] = set()
    for j in jobs:
        if j.id in seen:
            raise WorkloadError(f"{p}: duplicate job id {j.id!r}; ids must be unique")
        seen.add(j.id)
    return jobs


# ---------------------------------------------------------------------------


def default_jobs(preset: str, gpus: int) -> int | None:
    if preset == "pcie-paper":
        return max(20, round(1400 * gpus / 60))
    if preset in ("alibaba", "smart-mig"):
        return None
    return 1000


def build_workload(
    source: str,
    model: GpuModel,
    gpus: int,
    jobs: int | None = None,
    seed: int = 0,
    pcie_bound: float | None = None,
    rate_multiplier: float | None = None,
    *,
    load: float = 1.0,
) -> list[SimJob]:
    """A preset by name or a job file; ``jobs`` caps or sets the number of jobs;
    ``load`` multiplies the arrival rate (module doc: how, per preset)."""
    key = source.strip().lower()
    load = check_load(load)
    if pcie_bound is not None and key != "pcie-paper":
        raise WorkloadError("--pcie-bound applies to the pcie-paper preset only")
    if rate_multiplier is not None and not key.startswith("smart-mig"):
        raise WorkloadError("--rate-multiplier applies to the smart-mig presets only")
    if jobs is not None and jobs < 1:
        raise WorkloadError(f"--jobs {jobs} must be at least 1")
    n = jobs if jobs is not None else default_jobs(key, gpus)
    try:
        if key == "pcie-paper":
            share = 0.4 if pcie_bound is None else pcie_bound
            return pcie_paper(n, share, gpus, model, seed, load=LOAD * load)
        if key == "miso-trace":
            return miso_trace(n, model, seed, load=load)
        if key == "alibaba":
            return alibaba(n, model, load=load)
        if key == "philly":
            return philly(n, gpus, model, seed, load=LOAD * load)
        if key in ("smart-mig", "smart-mig-poisson"):
            from .deadline_workload import deadline_jobs

            return deadline_jobs(
                model,
                rate_multiplier=(20.0 if rate_multiplier is None else rate_multiplier) * load,
                jobs=n,
                seed=seed,
                daily=key == "smart-mig",
            )
    except GeometryError as exc:
        raise WorkloadError(str(exc)) from None
    out = load_jobs(source, model)
    out = out[:jobs] if jobs is not None else out
    return out if load == 1.0 else [_scaled(j, load) for j in out]


def check_load(load: float) -> float:
    """``load`` as a float within ``LOAD_RANGE``; WorkloadError says the range."""
    low, high = LOAD_RANGE
    try:
        value = float(load)
    except (TypeError, ValueError):
        raise WorkloadError(f"--load {load!r} is not a number; give {low:g}..{high:g}") from None
    if not low <= value <= high:
        raise WorkloadError(
            f"--load {value:g} must be within {low:g}..{high:g} (a multiple of the "
            "workload's own arrival rate; 1 = as recorded)"
        )
    return value


def _scaled(job: SimJob, load: float) -> SimJob:
    """A file's job arriving at ``arrival / load``, its deadline as far after it."""
    arrival = job.arrival / load
    deadline = None if job.deadline is None else arrival + (job.deadline - job.arrival)
    return replace(job, arrival=arrival, deadline=deadline)
