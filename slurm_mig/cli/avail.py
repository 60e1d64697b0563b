"""``slurm-mig avail``: the free MIG capacity per node and GPU, for users (no root
needed): free compute slices and the largest profile that could start now, from the
planner's public summary (slurm_mig/daemon/public.py), in sinfo's manner."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from .columns import (
    Column,
    add_options,
    check_json,
    fields_help,
    format_lines,
    parse_format,
)
from .common import Formatter, wrap

EXIT_NONE = 1  # --profile: no GPU could start it now
EXIT_STALE = 3  # the summary is older than 3 x [planner] cycle + 60 s
NAMED = 5  # GPUs named in the --profile answer at most

COLUMNS = (
    Column("N", "NODE", "node"),
    Column("m", "MODEL", "GPU model"),
    Column("g", "GPU", "GPU index on the node"),
    Column("f", "FREE", "free compute slices (no job holds them, no plan takes them)"),
    Column("s", "SLICES", "compute slices of the GPU"),
    Column("l", "LARGEST", "the largest MIG profile that could start on it now"),
    Column("p", "PROFILES", "every MIG profile that could start on it now"),
)
DEFAULT_FORMAT = "%N %m %.g %.f %l"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "avail",
        formatter_class=Formatter,
        help="free MIG slices and the largest profile that could start now, per GPU (users)",
        description=wrap(
            "Per node and GPU: the free compute slices and the largest MIG profile a job "
            "submitted now could start on without waiting for another job to end, from "
            "the summary the planner publishes every cycle ([paths] public_file, readable "
            "by anyone). Free slices are those no running job holds, none kept for a job "
            "and none a waiting job's plan takes; idle instances count as free (the "
            "planner repartitions them). Down or drained nodes are not listed. "
            "'--profile 3g.20gb' answers whether some GPU could start that profile now. "
            f"Exit status: 0; {EXIT_NONE} when --profile fits no GPU now; "
            f"{EXIT_STALE} when the summary is older than 3 x [planner] cycle + 60 s (the "
            "planner seems stopped; the figures are as old as it says); 2 on errors."
        ),
        epilog=fields_help(COLUMNS),
    )
    p.add_argument("--config", metavar="PATH", help="config file (default: as the planner)")
    p.add_argument(
        "--file", metavar="PATH", help="the planner's summary (default: [paths] public_file)"
    )
    p.add_argument("--node", metavar="N", help="this node only")
    p.add_argument("--model", metavar="M", help="GPUs of this model only (e.g. A100-40GB)")
    p.add_argument(
        "--profile",
        metavar="P",
        help=f"could some GPU start this MIG profile now? (exit 0 yes, {EXIT_NONE} no)",
    )
    group = add_options(p, DEFAULT_FORMAT, "for scripts")
    group.add_argument("--json", action="store_true", help="print the GPUs as JSON")
    p.set_defaults(handler=run)


def _summary_path(args: argparse.Namespace) -> tuple[Path, float]:
    """The summary's path and the planner's cycle (seconds) to judge its age by."""
    from ..config import ConfigError, load_config

    cycle = 5.0
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        if args.file is None:
            text = " ".join(str(exc).split())
            raise ValueError(f"{text} (or give --file, the planner's public summary)") from None
        config = None
    if config is not None:
        cycle = config.cycle
    if args.file is not None:
        return Path(args.file), cycle
    assert config is not None
    if not config.public_file:
        raise ValueError(
            f"[paths] public_file is off in {config.source or 'the config'}, so the planner "
            "publishes no "
            "summary (an admin sets it, e.g. /run/slurm-mig-public/plan.json; or give --file)"
        )
    return Path(config.public_file), cycle


def load(path: Path) -> dict[str, Any]:
    """The planner's summary at ``path`` with its capacity list; a ValueError says in
    one line why not (missing, unreadable, not a summary, from an older planner)."""
    from ..daemon.public import read_public

    try:
        with open(path, "rb"):
            pass
    except FileNotFoundError:
        raise ValueError(
            f"no planner summary at {path}: the planner daemon (slurm-mig-planner) writes "
            "it every cycle; is it running?"
        ) from None
    except PermissionError:
        raise ValueError(f"cannot read {path}: it should be 0644 (ask an admin)") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory, not the planner's summary") from None
    data = read_public(path)
    if data is None:
        raise ValueError(f"{path} is not a planner summary (written by slurm-mig-planner)")
    if not isinstance(data.get("gpus"), list):
        raise ValueError(
            f"{path} has no free-capacity list: an older slurm-mig planner wrote it "
            "(restart slurm-mig-planner after the upgrade)"
        )
    return data


def gpu_rows(data: dict[str, Any], node: str | None, model: str | None) -> list[dict[str, Any]]:
    """The summary's GPUs (well-formed entries only), by node and index, filtered."""
    from ..safetext import printable

    out = []
    for g in data["gpus"]:
        if not isinstance(g, dict):
            continue
        try:
            row = {
                "node": printable(g["node"], 128),
                "gpu": int(g["gpu"]),
                "model": printable(g["model"], 64),
                "slices": int(g["slices"]),
                "free": int(g["free"]),
                "fits": [printable(f, 32) for f in g["fits"] if isinstance(f, str)],
            }
        except (KeyError, TypeError, ValueError):
            continue
        if node is not None and row["node"] != node:
            continue
        if model is not None and row["model"].lower() != model.lower():
            continue
        row["largest"] = row["fits"][-1] if row["fits"] else ""
        out.append(row)
    out.sort(key=lambda r: (r["node"], r["gpu"]))
    return out


def cells(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The GPUs as rows of cells (letter -> text) for -o/--format."""
    return [
        {
            "N": r["node"],
            "m": r["model"],
            "g": str(r["gpu"]),
            "f": str(r["free"]),
            "s": str(r["slices"]),
            "l": r["largest"] or "-",
            "p": ",".join(r["fits"]) or "-",
        }
        for r in rows
    ]


def _check_profile(name: str) -> str:
    """``name`` if some GPU model has that profile, else a ValueError listing them."""
    from ..geometry import MODELS, get_model

    known = {p.name for m in MODELS for p in get_model(m).profiles}
    if name not in known:
        raise ValueError(
            f"--profile: no GPU model has a MIG profile {name[:40]!r} "
            f"(profiles: {', '.join(sorted(known, key=_profile_key))})"
        )
    return name


def _profile_key(name: str) -> tuple[int, int]:
    g, _, mem = name.partition(".")
    return (int(g.rstrip("g") or 0), int(mem.rstrip("gb") or 0))


def answer(profile: str, rows: list[dict[str, Any]]) -> tuple[bool, str]:
    """Whether some GPU of ``rows`` could start ``profile`` now, and the line saying so."""
    fit = [r for r in rows if profile in r["fits"]]
    if fit:
        named = ", ".join(f"{r['node']} gpu {r['gpu']}" for r in fit[:NAMED])
        more = f" and {len(fit) - NAMED} more" if len(fit) > NAMED else ""
        count = f"{len(fit)} GPU{'s' if len(fit) != 1 else ''}"
        return True, f"{profile} could start now on {count}: {named}{more}"
    from ..geometry import MODELS, get_model

    models = {m for m in MODELS if profile in {p.name for p in get_model(m).profiles}}
    own = [r for r in rows if r["model"] in models]
    if not own:
        here = sorted({r["model"] for r in rows})
        return False, (
            f"{profile}: no GPU here is a {' or '.join(sorted(models))} "
            f"(models here: {', '.join(here) or 'none listed'})"
        )
    largest = max((r["largest"] for r in own if r["largest"]), key=_profile_key, default="")
    return False, (
        f"{profile}: no GPU could start it now (of {len(own)} {'/'.join(sorted(models))} "
        f"GPU{'s' if len(own) != 1 else ''}, the largest free is {largest or 'none'}); "
        "a job asking for it waits for running jobs to end"
    )


def run(args: argparse.Namespace) -> int:
    from ..daemon.liveness import staleness
    from ..daemon.statusview import span

    check_json(args)
    fmt = parse_format(args.format or DEFAULT_FORMAT, COLUMNS)
    profile = _check_profile(args.profile.strip()) if args.profile is not None else None
    path, cycle = _summary_path(args)
    data = load(path)
    now = time.time()
    updated = data.get("updated")
    updated = float(updated) if isinstance(updated, int | float) else None
    stale = staleness(updated, cycle, now) if updated is not None else None
    if stale:
        print(
            f"slurm-mig avail: {path} is {span(now - updated)} old (last written at "
            f"{time.strftime('%H:%M:%S', time.localtime(updated))}); these figures are from "
            f"then: {stale}",
            file=sys.stderr,
        )
    rows = gpu_rows(data, args.node, args.model)
    code = EXIT_STALE if stale else 0
    ok, line = answer(profile, rows) if profile is not None else (True, "")
    if not ok and not stale:
        code = EXIT_NONE
    if profile is not None:
        rows = [r for r in rows if profile in r["fits"]]
    if args.json:
        out: dict[str, Any] = {"updated": updated, "stale": stale or "", "gpus": rows}
        if profile is not None:
            out.update(profile=profile, could_start=ok, answer=line)
        print(json.dumps(out, indent=1))
        return code
    if profile is not None and not args.format and not args.noheader:
        print(line)
        return code
    for text in format_lines(fmt, cells(rows), COLUMNS, not args.noheader):
        print(text)
    if not rows and profile is None:
        where = f" of node {args.node}" if args.node else ""
        where += f" of model {args.model}" if args.model else ""
        print(
            f"slurm-mig avail: no usable GPU{where} in the planner's summary (down, drained "
            "or not in its partition)",
            file=sys.stderr,
        )
    return code
