"""The hooks' part of the energy split (`energysplit`): the Prolog starts a run's share
of its GPU's energy counter, the Epilog takes it; a counter that cannot be read only
costs the runs their measured energy, never the hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from ..devices.base import DeviceError, MigBackend
from ..geometry import GeometryError, get_model
from .hookoutcome import Outcome
from .nodestate import JobRecord, NodeState, NodeStateError

__all__ = ["busy_slices", "energy_end", "energy_start", "read_energy"]


def read_energy(backend: MigBackend, gpu: int, out: Outcome) -> int | None:
    """GPU ``gpu``'s energy counter in mJ, None without one; never fails the hook."""
    from ..slurm.energysplit import reading

    try:
        return reading(backend.energy_mj(gpu))
    except DeviceError as exc:
        out.warn(f"energy counter of gpu {gpu} not read (its runs get modelled energy): {exc}")
        return None


def busy_slices(
    records: Iterable[JobRecord], models: tuple[str, ...], gpu: int, but: str = ""
) -> dict[str, int]:
    """Run key -> compute slices of the runs on GPU ``gpu`` (of the job ``records``; every
    instance of a job of several slices), ``but`` that job's."""
    from ..slurm.energysplit import run_key

    out = {}
    for r in records:
        if r.gpu == gpu and r.job_id != but:
            try:
                slices = get_model(models[gpu]).profile(r.profile).compute_slices
                out[run_key(r.job_id, r.restart)] = slices * r.tasks
            except (GeometryError, IndexError):
                continue
    return out


def energy_start(
    rec: JobRecord,
    models: tuple[str, ...],
    state: NodeState,
    records: Iterable[JobRecord],
    backend: MigBackend,
    now: float,
    out: Outcome,
) -> JobRecord:
    """The Prolog, under the GPU's lock: read the counter, give the energy since the
    last reading to the GPU's other runs (``records``: the node's job records, read once
    by the Prolog under that lock) and start this run's share (`energysplit`); ``rec``
    with the reading, or as it was where there is no counter."""
    from ..power import max_watts
    from ..slurm import energysplit as es

    now_mj = read_energy(backend, rec.gpu, out)
    if now_mj is None or not 0 <= rec.gpu < len(models):
        return rec
    busy = busy_slices(records, models, rec.gpu, but=rec.job_id)
    watts = max_watts(models[rec.gpu])
    ledger, problem = es.advance(state.energy_ledger(rec.gpu), now_mj, now, busy, watts)
    if problem is not None:
        out.warn(f"gpu {rec.gpu}: {problem}; its runs so far get modelled energy")
    try:
        state.put_energy_ledger(rec.gpu, es.start(ledger, es.run_key(rec.job_id, rec.restart)))
    except NodeStateError as exc:
        out.warn(f"energy ledger of gpu {rec.gpu} not written (modelled energy): {exc}")
        return rec
    return replace(rec, energy_mj=now_mj)


def energy_end(
    rec: JobRecord,
    models: tuple[str, ...],
    state: NodeState,
    backend: MigBackend,
    end: float,
    out: Outcome,
    jobs: Callable[[], Sequence[JobRecord]] | None = None,
) -> float | None:
    """The Epilog, under the GPU's lock, before the instance goes: read the counter and
    take the run's share of the GPU's energy (`energysplit`); its measured joules, or
    None (no counter, or a reading that is no energy: warned). ``jobs`` reads the node's
    job records (default ``state.jobs``), so a caller that needs them too reads once."""
    from ..power import max_watts
    from ..slurm import energysplit as es

    now_mj = read_energy(backend, rec.gpu, out)
    if now_mj is None or not 0 <= rec.gpu < len(models):
        return None
    watts = max_watts(models[rec.gpu])
    busy = busy_slices((jobs or state.jobs)(), models, rec.gpu)
    ledger, problem = es.advance(state.energy_ledger(rec.gpu), now_mj, end, busy, watts)
    ledger, accrued = es.finish(ledger, es.run_key(rec.job_id, rec.restart))
    try:
        state.put_energy_ledger(rec.gpu, ledger)
    except NodeStateError as exc:
        out.warn(f"energy ledger of gpu {rec.gpu} not written: {exc}")
    joules, why = es.measured_joules(
        accrued, rec.energy_mj, now_mj, max(0.0, end - rec.ready), watts
    )
    why = why or problem
    if joules is None and why is not None:
        out.warn(f"gpu {rec.gpu}: {why}; the run gets modelled energy only")
    return joules
