"""``slurm-mig planner``: the daemon that holds, plans and releases MIG partition jobs
(slurm_mig/daemon/daemon.py)."""

from __future__ import annotations

import argparse
import logging
import sys

from .common import PROG, Formatter, wrap

log = logging.getLogger("slurm_mig")

EXIT_LEASE_HELD = 3


def add_parser(sub) -> None:
    pn = sub.add_parser(
        "planner",
        formatter_class=Formatter,
        help="run the planner daemon: hold, plan ([planner] algorithm) and release MIG "
        "partition jobs",
        description=wrap(
            "Every [planner] cycle seconds: read the MIG partition's jobs (squeue) and "
            "nodes (sinfo), hold new jobs, plan held ones with the [planner] algorithm "
            "(any name of 'slurm-mig plan --help'; FAR in batches by default) onto the "
            "GPUs of the usable nodes as they are, write each job's assignment "
            "(AdminComment, ReqNodeList, its instance's GRES) and release a job when its "
            "slices are free or, with afterany, shortly before, with a signed token in "
            "its Comment. Logs one line per action. All its state is in Slurm: it can be "
            "stopped (SIGTERM) and restarted at any time. SIGHUP or a hook's notification "
            "([planner] notify) plans at once. After each cycle it writes "
            "<state_dir>/planner-status.json and serves /metrics ([planner] metrics). It "
            "receives the nodes' signed reports (finished runs, MIG instances, memory "
            "needs) on [planner] reports (TCP; README: Node reports). Run "
            "it as root on the slurmctld host (contrib/slurm-mig-planner.service). One "
            "daemon plans at a time: it holds a lease in [paths] state_dir, renewed every "
            "few seconds; on the backup controller run a standby (--standby, "
            "contrib/slurm-mig-planner-standby.service) that takes over once the active "
            "daemon's lease expires ([planner] lease_ttl). Under systemd (Type=notify) it "
            "sends READY=1 and, with WatchdogSec=, WATCHDOG=1 while its cycles progress. "
            f"Exit status: 0 when stopped; 2 on bad input (config, key); "
            f"{EXIT_LEASE_HELD} when another planner holds the lease or runs on this host "
            "(one line names it); with --once, 1 when an action failed."
        ),
    )
    pn.add_argument(
        "--config",
        metavar="PATH",
        help="config file (default: $SLURM_MIG_CONFIG, else /etc/slurm-mig/config.toml)",
    )
    pn.add_argument(
        "--once",
        action="store_true",
        help="run one cycle and exit: 0 when every action applied, 1 when one failed or "
        "Slurm could not be read",
    )
    pn.add_argument(
        "--dry-run",
        action="store_true",
        help="print the actions one cycle would take, one per line, and apply none "
        "(implies --once; needs no signing key)",
    )
    pn.add_argument(
        "--standby",
        action="store_true",
        default=None,
        help="while another planner holds the lease, wait and take over once it expires "
        "(default: [planner] standby); without it, such a start exits with status "
        f"{EXIT_LEASE_HELD}",
    )
    pn.add_argument(
        "-v",
        "--verbose",
        dest="planner_verbose",
        action="count",
        default=0,
        help="debug detail (actions and a summary per cycle are logged without it)",
    )
    pn.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..daemon.daemon import run_planner
    from ..daemon.lease import LeaseHeld

    verbose = args.verbose + args.planner_verbose
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    try:
        return run_planner(args.config, once=args.once, dry_run=args.dry_run, standby=args.standby)
    except LeaseHeld as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_LEASE_HELD
