"""``slurm-mig status``: the live MIG instances per node and GPU, free slices and the
queue with projected starts, drawn with rich (``--watch`` refreshes in place)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from .columns import (
    Column,
    Format,
    add_options,
    check_json,
    fields_help,
    format_lines,
    parse_format,
)
from .common import Formatter, wrap

STATUS_FILE = "planner-status.json"
EXIT_STALE = 3
WIDE = 1000  # columns to draw in when stdout is no terminal and COLUMNS is unset

# -o/--format: one line per instance and per waiting job (squeue's letters where they mean
# the same: %i %u %j %T %N %S %L %Q %r)
COLUMNS = (
    Column("i", "JOBID", "job id ('-': an instance without a job)"),
    Column("u", "USER", "the job's user"),
    Column("j", "NAME", "the job's name"),
    Column("T", "STATE", "running, kept, idle; planned, released, waiting, deferred, noted"),
    Column("N", "NODE", "node"),
    Column("g", "GPU", "GPU index on the node"),
    Column("m", "MODEL", "GPU model"),
    Column(
        "P", "PROFILE", "MIG profile; a job of N slices (mig:tasks=N): Nx<profile>, e.g. 4x1g.5gb"
    ),
    Column("l", "PLACEMENT", "placement: first memory slice:memory slices"),
    Column("U", "UUID", "MIG UUID (from the node's records)"),
    Column("S", "START", "running: when its instance was ready; waiting: projected"),
    Column("L", "LEFT", "time left of its planned runtime ('late 41s' once past)"),
    Column("Q", "PRIORITY", "Slurm's priority as the planner read it"),
    Column("r", "REASON", "why it waits, or what a jobless instance is kept for"),
)
DEFAULT_FORMAT = "%.i %u %j %T %N %.g %P %.L %S %r"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "status",
        formatter_class=Formatter,
        help="show live MIG instances, free slices and the planned queue (admins)",
        description=wrap(
            "Per node and GPU: the live MIG instances like nvidia-smi's MIG table "
            "(profile, placement, UUID, job, user, since, time left of its planned "
            "runtime: 'late 41s' once past it), the "
            "free compute slices, the largest profile that could be created now and the "
            "fragmentation cost (1 - largest free block / free slices); then the queue "
            "with each planned job's node, GPU, profile and projected start. A job of "
            "several slices (mig:tasks=N) is one row, its profile written N times each "
            "instance's (4x1g.5gb) and its placement that of the region holding them. "
            "Reads the "
            "planner's status file (root only), squeue and the nodes' reports (UUIDs, "
            "kept instances; README: Node reports). Users: 'slurm-mig explain JOB'. When the "
            "planner's last cycle ended more than 3 x [planner] cycle + 60 s ago, or it "
            "never wrote one, it says so first, with the lease's holder, and exits with "
            f"status {EXIT_STALE}: is slurm-mig-planner running? Exit status: 0 fresh, "
            f"{EXIT_STALE} stale, 2 on errors (no config, status file not readable, no "
            "squeue)."
        )
        + "\n\n"
        + wrap(
            "Piped, it draws full columns (COLUMNS when set); --watch then prints each "
            "refresh below the last, as 'squeue -i' does. -o/--format or --noheader "
            "print one line per instance and waiting job instead, for scripts."
        ),
        epilog=fields_help(COLUMNS),
    )
    p.add_argument("--config", metavar="PATH", help="config file (default: as the planner)")
    p.add_argument("--node", metavar="N", help="show this node only")
    group = add_options(p, DEFAULT_FORMAT, "implies the one-line-per-job list")
    group.add_argument("--json", action="store_true", help="print the view as JSON")
    p.add_argument(
        "--watch",
        action="store_true",
        help="refresh until Ctrl-C: in place on a terminal, else one view after another",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds between refreshes with --watch (default 2)",
    )
    p.set_defaults(handler=run)


def load_view(config: Any, node: str | None, client: Any = None, now: float | None = None):
    """The `StatusView` from the status file, squeue and the node records."""
    from ..daemon.receiver import node_records
    from ..daemon.statusview import build_view
    from ..slurm.client import SlurmClient

    now = time.time() if now is None else now
    path = Path(config.state_dir) / STATUS_FILE
    try:
        status = json.loads(path.read_text())
    except FileNotFoundError:
        status = {}
    except PermissionError:
        raise ValueError(
            f"cannot read {path}: it is root's; run 'slurm-mig status' as root, or "
            "'slurm-mig explain JOB' for one of your jobs"
        ) from None
    except ValueError:
        status = {}
    if node is not None and node not in config.nodes:
        raise ValueError(
            f"--node: {node!r} is not a node of the config ({', '.join(config.nodes)})"
        )
    from ..slurm.client import SlurmError

    try:
        jobs = (client or SlurmClient()).jobs(config.partition)
    except SlurmError as exc:
        raise ValueError(f"cannot read the queue: {' '.join(str(exc).split())}") from None
    records = node_records(config, node)
    view = build_view(status, jobs, records, now, node)
    stale = _stale(config, view.updated if status else None, now)
    if not status:
        stale = f"no planner status in {path} yet: {stale}"
    if stale:
        view = type(view)(**{**view.__dict__, "problems": (stale, *view.problems), "stale": stale})
    return view


def _stale(config: Any, updated: float | None, now: float) -> str:
    """What to say when the planner's last cycle is stale (or missing), with who holds
    the lease; "" when it is fresh."""
    from ..daemon.lease import LEASE_FILE, read_holder
    from ..daemon.liveness import SERVICE, staleness

    if updated is None:
        text = f"is {SERVICE} running? (systemctl status {SERVICE})"
    else:
        text = staleness(updated, config.cycle, now) or ""
        if not text:
            return ""
    try:
        holder = read_holder(Path(config.state_dir) / LEASE_FILE)
    except OSError:
        holder = None
    if holder is None:
        return text + "; no planner holds the lease"
    if holder.released:
        return text + f"; the last planner ({holder.host}, pid {holder.pid}) stopped"
    return text + f"; lease: {holder.describe(now)}"


def _plain(value: object, style: str = "") -> Any:
    """A rich `Text` of ``value``'s printable characters (never markup)."""
    from rich.text import Text

    from ..safetext import printable

    return Text(printable(value), style=style)


def _header(view) -> list[Any]:
    """The title line (cycle, policy, next batch), then the problems and a failed cycle."""
    from rich.text import Text

    from ..daemon.statusview import ago as _ago
    from ..daemon.statusview import when as _when

    now = view.now
    head = Text.assemble(
        ("slurm-mig status", "bold"),
        _plain(f" · cycle {view.cycle} at {_ago(view.updated, now)} · policy {view.policy or '-'}"),
        _plain(f" · next batch {_when(view.next_batch_at, now)}") if view.next_batch_at else "",
    )
    parts: list[Any] = [head]
    for problem in view.problems:
        parts.append(_plain(problem, "bold red" if problem == view.stale else "yellow"))
    if view.error:
        parts.append(_plain(f"last cycle failed: {view.error}", "red"))
    return parts


def _gpu_table(g, now: float) -> Any:
    """One GPU's table: its summary as the title, then a row per instance."""
    from rich import box
    from rich.table import Table

    from ..daemon.statusview import ago as _ago
    from ..daemon.statusview import left_text

    title = _plain(
        f"{g.node} gpu {g.gpu} · {g.model} · busy {g.busy}/{g.slices} slices · free "
        f"{g.free} · largest free {g.largest_free or 'none'} · fragmentation "
        f"{g.fragmentation:.2f}"
    )
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for name, kw in (
        ("Profile", {}),
        ("Placement", {}),
        ("UUID", {"no_wrap": True}),
        ("Job", {}),
        ("User", {}),
        ("Since", {}),
        ("Left", {"justify": "right"}),
    ):
        t.add_column(name, **kw)
    for i in g.instances:
        cells = (
            i.profile,
            f"{i.placement[0]}:{i.placement[1]}",
            i.uuid or "-",
            i.job or i.note,
            i.user or "-",
            _ago(i.since, now) if i.since else "-",
            left_text(i.drift),
        )
        t.add_row(*(_plain(c) for c in cells))
    if not g.instances:
        t.add_row("-", "-", "no instances", "", "", "", "")
    return t


def _queue_table(queue, now: float) -> Any:
    """The queue's table: a row per waiting job with its plan and why it waits."""
    from rich import box
    from rich.table import Table

    from ..daemon.statusview import when as _when

    q = Table(title="Queue", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("Job", "User", "Name", "State", "Prio", "Node", "GPU", "Profile", "Start", "Why"):
        q.add_column(name, overflow="fold" if name == "Why" else "ellipsis")
    for r in queue:
        why = r.why
        if not why and r.free_at is not None:
            why = f"slices busy until {time.strftime('%H:%M:%S', time.localtime(r.free_at))}"
        cells = (
            r.job,
            r.user or "-",
            r.name or "-",
            r.state,
            "-" if r.priority is None else str(r.priority),
            r.node or "-",
            "-" if r.gpu is None else str(r.gpu),
            r.profile or "-",
            _when(r.start, now),
            why,
        )
        q.add_row(*(_plain(c) for c in cells))
    if not queue:
        q.add_row("-", "", "", "no jobs wait", "", "", "", "", "", "")
    return q


def render(view) -> Any:
    """The rich renderable of a `StatusView`. Every piece of text is a `Text` (never
    markup: a job named ``[link=...]`` shows as such) of printable characters only."""
    from rich.console import Group

    parts = _header(view)
    parts.extend(_gpu_table(g, view.now) for g in view.gpus)
    parts.append(_queue_table(view.queue, view.now))
    return Group(*parts)


def rows(view) -> list[dict[str, str]]:
    """The view as one row per instance and per waiting job (letter -> cell), for
    -o/--format: the instances by node and GPU, then the queue in its order."""
    from ..daemon.statusview import left_text

    def clock(t: float | None) -> str:
        return "-" if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))

    out = []
    for g in view.gpus:
        for i in g.instances:
            state = "running" if i.job else ("idle" if i.note == "idle" else "kept")
            out.append(
                {
                    "i": i.job or "-",
                    "u": i.user or "-",
                    "j": i.name or "-",
                    "T": state,
                    "N": g.node,
                    "g": str(g.gpu),
                    "m": g.model,
                    "P": i.profile,
                    "l": f"{i.placement[0]}:{i.placement[1]}",
                    "U": i.uuid or "-",
                    "S": clock(i.since),
                    "L": left_text(i.drift) if i.job else "-",
                    "Q": "-",
                    "r": "-" if i.job else i.note,
                }
            )
    models = {(g.node, g.gpu): g.model for g in view.gpus}
    for r in view.queue:
        why = r.why
        if not why and r.free_at is not None:
            why = f"slices busy until {clock(r.free_at)}"
        out.append(
            {
                "i": r.job,
                "u": r.user or "-",
                "j": r.name or "-",
                "T": r.state,
                "N": r.node or "-",
                "g": "-" if r.gpu is None else str(r.gpu),
                "m": models.get((r.node, r.gpu), "-"),
                "P": r.profile or "-",
                "l": "-",
                "U": "-",
                "S": clock(r.start),
                "L": "-",
                "Q": "-" if r.priority is None else str(r.priority),
                "r": why or "-",
            }
        )
    return out


def _console() -> Any:
    """Where status draws (a test draws into a recording console instead): the
    terminal's width, or when stdout is no terminal COLUMNS or else `WIDE` columns, so
    that a pipe gets every column in full."""
    import os

    from rich.console import Console

    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS", "").strip().isdigit():
        console = Console(width=WIDE)
    console.on_broken_pipe = _reader_gone  # type: ignore[method-assign]
    return console


def _reader_gone() -> None:
    """rich's reaction to a closed pipe is exit status 1; the CLI's is 141, quietly."""
    raise BrokenPipeError


def run(args: argparse.Namespace) -> int:
    from ..config import load_config

    if not 0.1 <= args.interval <= 3600:
        raise ValueError(f"--interval {args.interval:g}: give 0.1 to 3600 seconds")
    check_json(args)
    listing = getattr(args, "format", None) or getattr(args, "noheader", False)
    fmt = parse_format(args.format or DEFAULT_FORMAT, COLUMNS) if listing else None
    config = load_config(args.config)
    view = load_view(config, args.node)
    code = EXIT_STALE if view.stale else 0
    if args.json:
        print(json.dumps(view.to_json(), indent=1))
        return code
    if fmt is not None:
        return _list(view, fmt, args, lambda: load_view(config, args.node), code)
    console = _console()
    if not args.watch:
        console.print(render(view))
        return code
    if not console.is_terminal:  # a pipe: one view after another, each flushed
        try:
            while True:
                console.print(render(view))
                console.file.flush()
                time.sleep(args.interval)
                view = load_view(config, args.node)
                console.print()
        except KeyboardInterrupt:
            return 0
    from rich.live import Live

    try:
        with Live(render(view), console=console, screen=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(render(load_view(config, args.node)))
    except KeyboardInterrupt:
        return 0


def _list(view, fmt: Format, args: argparse.Namespace, reload, code: int) -> int:
    """-o/--format: the rows as lines; with --watch, again every interval (a stale
    planner's line, and with the header the time, first: squeue -i's habit)."""
    import sys

    header = not args.noheader
    while True:
        if header and args.watch:
            print(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(view.now)))
        if view.stale:
            print(f"slurm-mig status: {view.stale}", file=sys.stderr)
        for line in format_lines(fmt, rows(view), COLUMNS, header):
            print(line)
        if not args.watch:
            return code
        sys.stdout.flush()
        try:
            time.sleep(args.interval)
        except KeyboardInterrupt:
            return 0
        view = reload()
        if header:
            print()
