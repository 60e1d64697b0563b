"""LocalSlurm's configuration files: slurm.conf's lines and text, cgroup.conf, the
hooks' wrappers (pure functions of the values they name), and gres.conf over fake
MIG device nodes (`write_gres`, which makes them; `write_layout_gres` for a fixed MIG
layout, as a site without slurm-mig writes it)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ..geometry import Placement

# slurm.conf keys that may appear once; extra_conf naming one replaces the default line
REPEATED_KEYS = ("nodename", "partitionname", "nodeset", "frontendname", "downnodes")
FAKE_GPU_MAJOR = 195  # NVIDIA's
FAKE_CAPS_MAJOR = 240  # "local/experimental use" (devices.txt); no driver here


def base_lines(
    *,
    cluster_name: str,
    host: str,
    ctld_port: int,
    munge_socket: Path,
    requeue_delay: int,
    root: Path,
    spool: Path,
    proctrack_type: str,
    task_plugin: str,
) -> list[str]:
    """slurm.conf's fixed lines: names, ports, munge, the paths under ``root``, plugins,
    a scheduler that runs every second and timeouts for a test's pace."""
    return [
        f"ClusterName={cluster_name}",
        f"SlurmctldHost={host}(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={ctld_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket},cred_expire={requeue_delay}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={spool}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "MailProg=/bin/true",
        f"ProctrackType={proctrack_type}",
        f"TaskPlugin={task_plugin}",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=1,sched_interval=1,sched_min_interval=0",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "MinJobAge=600",  # finished jobs stay in squeue for 10 minutes
        "KillWait=2",
        "InactiveLimit=0",
        "SlurmdTimeout=60",
        "Waittime=0",
    ]


def hook_lines(hooks: Mapping[str, Path | None]) -> list[str]:
    """``Prolog=...`` and the like for each hook given (key -> path or None), after
    PrologFlags=Alloc when there is any."""
    lines = ["PrologFlags=Alloc"] if any(hooks.values()) else []
    return lines + [f"{key}={path}" for key, path in hooks.items() if path]


def accounting_lines(dbd_port: int, munge_socket: Path) -> list[str]:
    """slurm.conf's lines for accounting through the slurmdbd on ``dbd_port``, with
    associations, limits and QOS enforced."""
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={dbd_port}",
        f"AccountingStoragePass={munge_socket}",  # munge socket to slurmdbd
        "AccountingStorageEnforce=associations,limits,qos",
    ]


def overridden(lines: Sequence[str], extra: Sequence[str]) -> list[str]:
    """slurm.conf ``lines`` then ``extra``, less each line whose key an ``extra`` line
    sets again (Slurm logs every repeated key as an error); node and partition lines add."""

    def key(line: str) -> str:
        return line.split("=", 1)[0].strip().lower()

    keys = {key(line) for line in extra if "=" in line} - set(REPEATED_KEYS)
    return [line for line in lines if key(line) not in keys] + list(extra)


def node_line(node: str, port: int, cpus: int, gres_term: str) -> str:
    """slurm.conf's NodeName line of ``node``: its slurmd on 127.0.0.1:``port``."""
    return (
        f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname=127.0.0.1 Port={port} "
        f"CPUs={cpus} RealMemory=64000 {gres_term} State=UNKNOWN"
    )


def partition_lines(
    partition: str, default_partition: str, nodes: Sequence[str], options: str = ""
) -> list[str]:
    """``partition`` (with ``options``) and "debug", each over every node;
    ``default_partition`` the default."""
    names = ",".join(nodes)
    lines = []
    for part in dict.fromkeys([partition, "debug"]):
        default = "YES" if part == default_partition else "NO"
        more = f" {options}" if options and part == partition else ""
        lines.append(
            f"PartitionName={part} Nodes={names} Default={default} MaxTime=INFINITE State=UP{more}"
        )
    return lines


def gres_types(node_gres: Mapping[str, str]) -> list[str]:
    """slurm.conf's GresTypes line for the nodes' ``Gres=`` terms (none without any):
    gpu, and mig_slice where a node counts its slices (`slurm.gres.SLICE_GRES`)."""
    from ..slurm.gres import SLICE_GRES

    if not any(node_gres.values()):
        return []
    slices = any(f"{SLICE_GRES}:" in term for term in node_gres.values())
    return [f"GresTypes=gpu,{SLICE_GRES}" if slices else "GresTypes=gpu"]


def conf_text(lines: Sequence[str]) -> str:
    """A configuration file of ``lines``."""
    return "\n".join(lines) + "\n"


def cgroup_lines(
    cgroup_conf: Sequence[str] | None, version: tuple[int, ...]
) -> Sequence[str] | None:
    """cgroup.conf's lines (None: no file): ``cgroup_conf``, else CgroupPlugin=disabled
    from Slurm 24.05, whose slurmd otherwise needs a cgroup hierarchy of its own."""
    if cgroup_conf is None and version >= (24, 5):
        return ["CgroupPlugin=disabled"]
    return cgroup_conf


def hook_wrapper(hook: Path, env: Mapping[str, str]) -> str:
    """A shell script that exports ``env`` and then runs ``hook`` (Slurm gives hooks a
    clean environment)."""
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    return f'#!/bin/sh\n{exports}exec {shlex.quote(str(hook))} "$@"\n'


def write_gres(gres: Mapping[str, Sequence[str]], dev_root: Path, etc: Path) -> dict[str, str]:
    """gres.conf in ``etc`` for the nodes of ``gres`` (node -> GPU models) over fake
    device nodes made with mknod under ``dev_root/<node>`` (GPU major 195 as NVIDIA's,
    capabilities major `FAKE_CAPS_MAJOR`: no driver answers, so an open the device
    cgroup allows fails with ENXIO, one it denies with EPERM); each node's ``Gres=``."""
    from ..cli.gres_conf import make_gpu_nodes, make_nodes
    from ..devices.migcaps import parse_minors, render_minors
    from ..slurm import gres as slurm_gres

    terms, conf = {}, []
    for node, models in gres.items():
        dev = dev_root / node
        table = parse_minors(render_minors(len(models)))
        make_nodes(slurm_gres.cap_nodes(models, table), str(dev), FAKE_CAPS_MAJOR)
        make_gpu_nodes(len(models), str(dev), FAKE_GPU_MAJOR)
        conf.append(slurm_gres.gres_conf(node, models, table, str(dev)))
        terms[node] = slurm_gres.node_gres(models)
    if conf:
        (etc / "gres.conf").write_text("".join(conf))
        os.chmod(dev_root, 0o755)
    return terms


class LayoutInstance(NamedTuple):
    """One MIG instance of a fixed layout on a node: GPU ``gpu`` (a ``model``), its
    ``profile`` at ``placement``."""

    gpu: int
    model: str
    profile: str
    placement: Placement


def layout_gres_conf(node: str, instances: Sequence[LayoutInstance], dev: str) -> str:
    """A node's gres.conf for a fixed MIG layout as Slurm's MIG documentation writes it
    by hand (AutoDetect=off): one ``Name=gpu Type=<profile>`` record per instance, in
    the order given, ``MultipleFiles=`` its parent device and its GI and CI capability
    nodes (the driver's numbering, as `slurm-mig gres-conf` names them)."""
    from ..devices.migcaps import cap_minors, gi_id_for, parse_minors, render_minors
    from ..geometry import get_model
    from ..slurm.gres import cap_path

    table = parse_minors(render_minors(1 + max((i.gpu for i in instances), default=0)))
    lines = [f"# a fixed MIG layout on {node}", f"NodeName={node} AutoDetect=off"]
    for inst in instances:
        gi = gi_id_for(get_model(inst.model), inst.placement)
        caps = [cap_path(m, dev) for m in cap_minors(table, inst.gpu, gi)]
        files = ",".join([f"{dev}/nvidia{inst.gpu}", *caps])
        lines.append(f"NodeName={node} Name=gpu Type={inst.profile} MultipleFiles={files}")
    return "\n".join(lines) + "\n"


def layout_gres_term(instances: Sequence[LayoutInstance]) -> str:
    """The ``Gres=`` term of a node with a fixed layout: a count per profile."""
    counts: dict[str, int] = {}
    for inst in instances:
        counts[inst.profile] = counts.get(inst.profile, 0) + 1
    return "Gres=" + ",".join(f"gpu:{name}:{n}" for name, n in counts.items())


def write_layout_gres(
    layout: Mapping[str, Sequence[LayoutInstance]], dev_root: Path, etc: Path
) -> dict[str, str]:
    """gres.conf in ``etc`` for the fixed MIG layout of each node of ``layout`` (see
    `layout_gres_conf`) over fake device nodes under ``dev_root/<node>``, made as
    `write_gres` makes them; each node's ``Gres=`` term."""
    from ..cli.gres_conf import make_gpu_nodes, make_nodes
    from ..devices.migcaps import cap_minors, gi_id_for, parse_minors, render_minors
    from ..geometry import get_model

    terms, conf = {}, []
    for node, instances in layout.items():
        dev = dev_root / node
        gpus = 1 + max((i.gpu for i in instances), default=0)
        table = parse_minors(render_minors(gpus))
        minors = {
            m
            for i in instances
            for m in cap_minors(table, i.gpu, gi_id_for(get_model(i.model), i.placement))
        }
        make_nodes(sorted(minors), str(dev), FAKE_CAPS_MAJOR)
        make_gpu_nodes(gpus, str(dev), FAKE_GPU_MAJOR)
        conf.append(layout_gres_conf(node, instances, str(dev)))
        terms[node] = layout_gres_term(instances)
    if conf:
        (etc / "gres.conf").write_text("".join(conf))
        os.chmod(dev_root, 0o755)
    return terms


def write_script(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` as a script every user may run (the file and its
    directory, made if need be, 0755); ``path``."""
    path.parent.mkdir(exist_ok=True)
    os.chmod(path.parent, 0o755)
    path.write_text(text)
    os.chmod(path, 0o755)
    return path
