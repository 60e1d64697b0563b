"""``slurm-mig status``: the live MIG instances per node and GPU, free slices and the
queue with projected starts, drawn with rich (``--watch`` refreshes in place)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from .common import Formatter, wrap

STATUS_FILE = "planner-status.json"
EXIT_STALE = 3


def add_parser(sub) -> None:
    p = sub.add_parser(
        "status",
        formatter_class=Formatter,
        help="show live MIG instances, free slices and the planned queue (admins)",
        description=wrap(
            "Per node and GPU: the live MIG instances like nvidia-smi's MIG table "
            "(profile, placement, UUID, job, user, since, drift against the plan), the "
            "free compute slices, the largest profile that could be created now and the "
            "fragmentation cost (1 - largest free block / free slices); then the queue "
            "with each planned job's node, GPU, profile and projected start. Reads the "
            "planner's status file (root only), squeue and the nodes' reports (UUIDs, "
            "kept instances; README: Node reports). Users: 'slurm-mig explain JOB'. When the "
            "planner's last cycle ended more than 3 x [planner] cycle + 60 s ago, or it "
            "never wrote one, it says so first, with the lease's holder, and exits with "
            f"status {EXIT_STALE}: is slurm-mig-planner running? Exit status: 0 fresh, "
            f"{EXIT_STALE} stale, 2 on errors (no config, status file not readable, no "
            "squeue)."
        ),
    )
    p.add_argument("--config", metavar="PATH", help="config file (default: as the planner)")
    p.add_argument("--node", metavar="N", help="show this node only")
    p.add_argument("--json", action="store_true", help="print the view as JSON")
    p.add_argument("--watch", action="store_true", help="refresh in place until Ctrl-C")
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
    from ..slurm.client import SlurmClient
    from ..slurm.receiver import node_records
    from ..statusview import build_view

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
    from ..slurm.lease import LEASE_FILE, read_holder
    from ..slurm.liveness import SERVICE, staleness

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


def render(view) -> Any:
    """The rich renderable of a `StatusView`. Every piece of text is a `Text` (never
    markup: a job named ``[link=...]`` shows as such) of printable characters only."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from ..safetext import printable
    from ..statusview import ago as _ago
    from ..statusview import when as _when

    def plain(value: object, style: str = "") -> Text:
        return Text(printable(value), style=style)

    now = view.now
    head = Text.assemble(
        ("slurm-mig status", "bold"),
        plain(f" · cycle {view.cycle} at {_ago(view.updated, now)} · policy {view.policy or '-'}"),
        plain(f" · next batch {_when(view.next_batch_at, now)}") if view.next_batch_at else "",
    )
    parts: list[Any] = [head]
    for problem in view.problems:
        parts.append(plain(problem, "bold red" if problem == view.stale else "yellow"))
    if view.error:
        parts.append(plain(f"last cycle failed: {view.error}", "red"))
    for g in view.gpus:
        title = plain(
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
            ("Drift", {"justify": "right"}),
        ):
            t.add_column(name, **kw)
        for i in g.instances:
            drift = "-" if i.drift is None else f"{i.drift:+.0f}s"
            cells = (
                i.profile,
                f"{i.placement[0]}:{i.placement[1]}",
                i.uuid or "-",
                i.job or i.note,
                i.user or "-",
                _ago(i.since, now) if i.since else "-",
                drift,
            )
            t.add_row(*(plain(c) for c in cells))
        if not g.instances:
            t.add_row("-", "-", "no instances", "", "", "", "")
        parts.append(t)
    q = Table(title="Queue", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("Job", "User", "Name", "State", "Prio", "Node", "GPU", "Profile", "Start", "Why"):
        q.add_column(name, overflow="fold" if name == "Why" else "ellipsis")
    for r in view.queue:
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
        q.add_row(*(plain(c) for c in cells))
    if not view.queue:
        q.add_row("-", "", "", "no jobs wait", "", "", "", "", "", "")
    parts.append(q)
    return Group(*parts)


def _console() -> Any:
    """Where status draws (a test draws into a recording console instead)."""
    from rich.console import Console

    return Console()


def run(args: argparse.Namespace) -> int:
    from ..config import load_config

    if not 0.1 <= args.interval <= 3600:
        raise ValueError(f"--interval {args.interval:g}: give 0.1 to 3600 seconds")
    config = load_config(args.config)
    view = load_view(config, args.node)
    code = EXIT_STALE if view.stale else 0
    if args.json:
        print(json.dumps(view.to_json(), indent=1))
        return code
    console = _console()
    if not args.watch:
        console.print(render(view))
        return code
    from rich.live import Live

    try:
        with Live(render(view), console=console, screen=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(render(load_view(config, args.node)))
    except KeyboardInterrupt:
        return 0
