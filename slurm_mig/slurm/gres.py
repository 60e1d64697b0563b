"""Slurm GRES records for MIG instances: what lets Slurm's device cgroup enforce a slice.

A MIG node's ``gres.conf`` holds one ``gpu`` record per possible GPU instance: type
``m<N>g<g>`` (GPU N, GPU-instance id g) with ``MultipleFiles=`` the parent device and the
instance's GI and CI capability nodes. The planner sets each job's GRES to its
instance's record before releasing it (``TresPerNode=gres:gpu:m<N>g<g>:1``), and
``task/cgroup`` with ``ConstrainDevices=yes`` then lets the job open exactly those three
devices (every other record's are denied). The Prolog sees the record's index in
SLURM_JOB_GPUS and checks it against the signed assignment.

Beside them a count-only GRES ``mig_slice`` (`SLICE_GRES`, ``Count=`` the node's compute
slices, no files) counts the slices: with ``[slurm] gres = "on"`` a job also gets
``gres:mig_slice:<k>``, its instance's compute slices, so that Slurm's accounting shows
each job's slices (``sacct -o AllocTRES``), ``TRESBillingWeights=GRES/mig_slice=<w>``
charges fairshare by slices, and Slurm itself refuses to start more slices on a node
than it has, a second guard behind the planner.

Only the standard library, ``geometry`` and ``devices.migcaps``: the Prolog imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..devices.migcaps import cap_minors, gi_id_for, gi_ids
from ..geometry import Placement, get_model

SLICE_GRES = "mig_slice"  # the count-only GRES of a node's compute slices


@dataclass(frozen=True)
class Record:
    """One gres.conf ``gpu`` record: GPU ``gpu``'s GPU instance ``gi``."""

    gpu: int
    gi: int

    @property
    def type(self) -> str:
        return f"m{self.gpu}g{self.gi}"


def records(models: Sequence[str]) -> list[Record]:
    """The node's records in gres.conf order (GPU, then GPU-instance id): the position
    of a record in this list is the index Slurm gives the job in SLURM_JOB_GPUS."""
    return [Record(n, g) for n, name in enumerate(models) for g in gi_ids(get_model(name))]


def record_for(models: Sequence[str], gpu: int, placement: Placement) -> Record:
    """The record of the instance at ``placement`` on GPU ``gpu`` of a node."""
    return Record(gpu, gi_id_for(get_model(models[gpu]), placement))


def index_of(models: Sequence[str], record: Record) -> int | None:
    """SLURM_JOB_GPUS of a job given ``record`` on a node with ``models``."""
    for i, r in enumerate(records(models)):
        if r == record:
            return i
    return None


def tres_per_node(records: Record | Sequence[Record], slices: int = 0) -> str:
    """The job's ``TresPerNode`` for its instances' ``records`` (one per instance; a job
    of several slices has several) and, when ``slices`` > 0, that many `SLICE_GRES`
    (22.05 through 26.05 read this form)."""
    items = [records] if isinstance(records, Record) else list(records)
    tres = ",".join(f"gres:gpu:{r.type}:1" for r in items)
    return f"{tres},gres:{SLICE_GRES}:{slices}" if slices > 0 else tres


def node_slices(models: Sequence[str]) -> int:
    """The compute slices of a node's GPUs: its `SLICE_GRES` count."""
    return sum(get_model(name).compute_slices for name in models)


def node_gres(models: Sequence[str], slices: bool = True) -> str:
    """The ``Gres=`` term of the node's slurm.conf line: its records, then (``slices``)
    its `SLICE_GRES` count."""
    terms = [f"gpu:{r.type}:1" for r in records(models)]
    if slices:
        terms.append(f"{SLICE_GRES}:{node_slices(models)}")
    return "Gres=" + ",".join(terms)


def gres_conf(
    node: str,
    models: Sequence[str],
    table: dict[tuple[int, int, int | None], int],
    dev: str = "/dev",
    slices: bool = True,
) -> str:
    """The node's gres.conf: ``AutoDetect=off``, one record per possible instance
    (``dev``: where the device nodes are, /dev on a real node) and (``slices``) the
    count-only `SLICE_GRES` of its compute slices."""
    lines = [
        f"# slurm-mig gres-conf for {node}: one gpu record per possible MIG instance",
        f"NodeName={node} AutoDetect=off",
    ]
    for r in records(models):
        gi, ci = cap_minors(table, r.gpu, r.gi)
        files = [f"{dev}/nvidia{r.gpu}", cap_path(gi, dev), cap_path(ci, dev)]
        lines.append(f"NodeName={node} Name=gpu Type={r.type} MultipleFiles={','.join(files)}")
    if slices:
        count = node_slices(models)
        lines.append(f"NodeName={node} Name={SLICE_GRES} Count={count} Flags=CountOnly")
    return "\n".join(lines) + "\n"


def cap_path(minor: int, dev: str = "/dev") -> str:
    return f"{dev}/nvidia-caps/nvidia-cap{minor}"


def cap_nodes(models: Sequence[str], table: dict[tuple[int, int, int | None], int]) -> list[int]:
    """Every capability minor the node's records name, ascending (the boot step makes
    these nodes)."""
    out = set()
    for r in records(models):
        out.update(cap_minors(table, r.gpu, r.gi))
    return sorted(out)
