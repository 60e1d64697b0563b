"""``slurm-mig gres-conf``: a MIG node's gres.conf, its slurm.conf ``Gres=`` term and its
capability device nodes (so that Slurm's device cgroup enforces each job's slice)."""

from __future__ import annotations

import argparse
import os
import socket
import stat
import sys
from pathlib import Path

from .common import PROG, Formatter, wrap


def add_parser(sub) -> None:
    p = sub.add_parser(
        "gres-conf",
        formatter_class=Formatter,
        help="write a MIG node's gres.conf (one GRES record per possible instance)",
        description=wrap(
            "Print the node's gres.conf: AutoDetect=off and, for every GPU N and every "
            "GPU-instance id g its model can produce, 'Name=gpu Type=m<N>g<g> "
            "MultipleFiles=/dev/nvidia<N>,<GI cap>,<CI cap>' (capability minors from "
            "/proc/driver/nvidia-caps/mig-minors), then 'Name=mig_slice Count=<the node's "
            "compute slices> Flags=CountOnly', the count Slurm's accounting charges by "
            '(not with [slurm] gres = "records"; slurm.conf then needs '
            "GresTypes=gpu,mig_slice). With --node-gres print the Gres= term "
            "of the node's slurm.conf line instead; with --make-nodes create the "
            "capability device nodes (root, 0444) that the records name, as the boot "
            "unit contrib/slurm-mig-caps.service does before slurmd starts."
        ),
    )
    p.add_argument("--config", metavar="CONFIG", help="slurm-mig config (default as elsewhere)")
    p.add_argument("--node", metavar="NAME", help="node name (default: this host's short name)")
    p.add_argument("--dev", metavar="DIR", default="/dev", help="device directory (default /dev)")
    p.add_argument(
        "--minors",
        metavar="FILE",
        help="the mig-minors table (default: the driver's, or the simulated GPUs')",
    )
    p.add_argument("--node-gres", action="store_true", help="print the slurm.conf Gres= term")
    p.add_argument("--make-nodes", action="store_true", help="create the capability device nodes")
    p.add_argument(
        "--check-ids",
        action="store_true",
        help="on idle GPUs, create every instance placement once and check that the "
        "driver gives it the GPU-instance id its gres.conf record names (exit 1 if not)",
    )
    p.add_argument(
        "--catalogue",
        action="store_true",
        help="print each GPU's MIG profiles as the driver reports them and every "
        "difference from slurm-mig's tables (exit 1 if any: the driver wins; root)",
    )
    p.add_argument(
        "--caps-major",
        metavar="N",
        type=int,
        help="major of the capability nodes (default: nvidia-caps in /proc/devices)",
    )
    p.add_argument(
        "--gpu-major",
        metavar="N",
        type=int,
        help="also create /dev/nvidia<N> with this major (the driver makes them on a "
        "real node; for test nodes)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The command; a device fault (no driver, no NVML library, no permission) is one
    line and exit 2, so that the boot unit fails (closed) with a reason, not a traceback."""
    from ..devices.base import DeviceError

    try:
        return _run(args)
    except DeviceError as exc:
        raise ValueError(f"gres-conf: {exc.line()}") from None


def _run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..devices.migcaps import parse_minors
    from ..slurm import gres

    config = load_config(args.config)
    node = args.node or socket.gethostname().split(".")[0]
    models = config.gpu_models(node)
    slices = config.gres == "on"
    if args.node_gres:
        print(gres.node_gres(models, slices))
        return 0
    if args.catalogue:
        from ..devices.open import open_backend

        lines, differ = catalogue_report(open_backend(config, node), models)
        print("\n".join(lines))
        return 1 if differ else 0
    if args.check_ids:
        from ..devices.open import open_backend

        problems, lines = check_ids(open_backend(config, node), models)
        for line in lines:
            print(line)
        for line in problems:
            print(f"{PROG}: {line}", file=sys.stderr)
        return 1 if problems else 0
    if args.minors:
        text = Path(args.minors).read_text(errors="replace")
    else:
        from ..devices.open import open_backend

        text = open_backend(config, node).mig_minors()
    table = parse_minors(text)
    if args.make_nodes:
        made = make_nodes(gres.cap_nodes(models, table), args.dev, args.caps_major)
        if args.gpu_major is not None:
            made += make_gpu_nodes(len(models), args.dev, args.gpu_major)
        print(f"{PROG}: {made} device node(s) created under {args.dev}", file=sys.stderr)
        return 0
    dev = args.dev.rstrip("/") or "/"
    sys.stdout.write(gres.gres_conf(node, models, table, dev, slices))
    return 0


def check_ids(backend, models) -> tuple[list[str], list[str]]:
    """Create every profile placement once on each idle GPU (then destroy it) and compare
    the GPU-instance id the driver gives with `migcaps.gi_id_for`: (problems, report
    lines). A GPU with live instances is a problem (its ids cannot be checked)."""
    from ..devices.migcaps import gi_id_for
    from ..geometry import get_model

    problems, lines = [], []
    for gpu, name in enumerate(models):
        model = get_model(name)
        live = backend.instances(gpu)
        if live:
            problems.append(
                f"GPU {gpu}: {len(live)} MIG instance(s) exist; check the ids on an idle GPU "
                "(at boot, before slurmd starts)"
            )
            continue
        wrong, n = [], 0
        for profile in model.profiles:
            for placement in profile.placements:
                inst = backend.create(gpu, profile.name, placement, job_id="gres-conf")
                try:
                    want = gi_id_for(model, placement)
                    n += 1
                    if inst.gi_id != want:
                        wrong.append(
                            f"{profile.name} at {placement.start}:{placement.size} got id "
                            f"{inst.gi_id}, its record names {want}"
                        )
                finally:
                    backend.destroy(gpu, inst.uuid, job_id="gres-conf")
        if wrong:
            problems.append(
                f"GPU {gpu} ({model.name}): the driver numbers GPU instances otherwise than "
                f"the gres.conf records ({'; '.join(wrong[:3])}{'; ...' if len(wrong) > 3 else ''}): "
                'do not use gres = "on" on this node'
            )
        else:
            lines.append(f"GPU {gpu} ({model.name}): {n} placements, ids as the records name")
    return problems, lines


def catalogue_report(backend, models) -> tuple[list[str], bool]:
    """Per GPU the profiles its driver reports (name, slices, memory, instances,
    placements), then one line per difference from the offline tables: (lines, any
    difference). A backend without a driver (simulated) prints the offline catalogue."""
    from ..devices.catalogue import compare, describe, offline_catalogue
    from ..geometry import get_model

    read = getattr(backend, "catalogue", None)
    lines, differ = [], False
    for gpu, name in enumerate(models):
        model = get_model(name)
        if read is None:
            cat = offline_catalogue(model)
            lines.append(f"GPU {gpu} ({model.name}): offline catalogue (no driver to ask)")
            lines.extend("  " + row for row in describe(cat))
            continue
        cat = read(gpu)
        lines.append(f"GPU {gpu} ({cat.gpu_name}, {model.name}): the driver's catalogue")
        lines.extend("  " + row for row in describe(cat))
        if cat.model and cat.model != model.name:
            lines.append(f"GPU {gpu}: the driver's board is {cat.model}, [nodes] says {model.name}")
            differ = True
        diffs = compare(model, cat)
        lines.extend(f"GPU {gpu}: {d} (the driver wins)" for d in diffs)
        differ = differ or bool(diffs)
    if not differ and read is not None:
        lines.append("the driver and slurm-mig's tables agree")
    return lines, differ


def caps_major(proc_devices: str = "/proc/devices") -> int:
    """The character major the driver registered as ``nvidia-caps``."""
    try:
        text = Path(proc_devices).read_text()
    except OSError as exc:
        raise OSError(f"cannot read {proc_devices}: {exc.strerror}") from None
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[1] == "nvidia-caps" and words[0].isdigit():
            return int(words[0])
    raise ValueError(
        f"no nvidia-caps device in {proc_devices}: load the NVIDIA driver first "
        "(or give --caps-major)"
    )


def _mknod(path: Path, major: int, minor: int, mode: int) -> bool:
    """Make the character node (root-owned, ``mode``) unless it is there already with
    this major and minor; True when one was made."""
    want = os.makedev(major, minor)
    try:
        st = path.lstat()
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == want:
            os.chmod(path, mode)
            return False
        path.unlink()
    except FileNotFoundError:
        pass
    os.mknod(path, stat.S_IFCHR | mode, want)
    os.chmod(path, mode)  # mknod applies the umask
    return True


def make_nodes(minors: list[int], dev: str, major: int | None = None) -> int:
    """Create ``<dev>/nvidia-caps/nvidia-cap<minor>`` for each minor (root, 0444)."""
    major = caps_major() if major is None else major
    caps = Path(dev) / "nvidia-caps"
    caps.mkdir(mode=0o755, parents=True, exist_ok=True)
    return sum(_mknod(caps / f"nvidia-cap{m}", major, m, 0o444) for m in minors)


def make_gpu_nodes(gpus: int, dev: str, major: int) -> int:
    """Create ``<dev>/nvidia<N>`` for each GPU (0666, as NVIDIA's driver makes them)."""
    Path(dev).mkdir(mode=0o755, parents=True, exist_ok=True)
    return sum(_mknod(Path(dev) / f"nvidia{n}", major, n, 0o666) for n in range(gpus))
