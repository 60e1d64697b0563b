"""A real Slurm on loopback in a temporary directory, for end-to-end tests and the live demo.

`LocalSlurm` starts its own munged (own key and socket), one slurmctld and one slurmd
per node (``slurmd -N <name>``, each on a free port) from a generated slurm.conf, so two
clusters can run side by side. Clients reach it through `env` (SLURM_CONF, PATH).
Needs root and Debian's Slurm (slurmctld, slurmd, slurm-client, munge): the host's
(22.05 on Debian 12), or with ``slurm=`` another release in a Debian root
(slurm_mig.demo.slurmroot: 24.11, 26.05), whose daemons and client programs then run
chrooted there (`env`'s PATH starts with wrappers for the clients), with /tmp, the
checkout and this Python at their usual paths. Starts in about 1.2 s; ``stop()`` (also
run at interpreter exit) kills every daemon it started, then every other process of the
cluster (slurmstepds and jobs outlive slurmd: slurm_mig.demo.procfs finds them); under a
test run ($SLURM_MIG_TEST_RUN) it passes that mark on and registers its directory.
Its parts: slurmconf (files), accountingdb, privatenodes, processes (and ports), programs,
jobcommands and sacctmgr (client commands), nodedaemons (crashing and restarting slurmd).
Cgroups are off (task/none, proctrack/linuxproc; ``CgroupPlugin=disabled`` from 24.05,
whose slurmd needs a cgroup hierarchy otherwise); ``task_plugin``, ``proctrack_type``
and ``cgroup_conf`` turn them on for a test about device isolation (cgroup v1 names
each node's hierarchy slurm_<node>: such clusters running at once need distinct node
names). ``gres`` gives nodes a MIG gres.conf (slurm_mig.slurm.gres) over fake device
nodes made with mknod under ``<root>/dev/<node>``; LiveCluster always does. ``mig_layout``
instead gives them a fixed layout's records, typed by profile (a site without slurm-mig).

``accounting`` adds Slurm accounting, for tests of Slurm's own policy (associations,
fairshare, QOS and association limits): a private MariaDB server (always the host's
``mariadbd``, on a free port of 127.0.0.1, its data copied from a datadir that
mariadb-install-db makes once per process) and the release's own slurmdbd, both started
before slurmctld and stopped after it; slurm.conf then enforces
associations,limits,qos, so a job's user needs an association (`add_user`). slurmdbd
pushes every change to slurmctld at once (`scontrol show assoc_mgr` shows it; the add_*
methods wait for that), but priority/multifactor computes usage and FairShare only at
its start and every PriorityCalcPeriod (a minute at least): `accounting_setup` makes
associations before slurmctld starts, `restart_slurmctld` recomputes. Slurm 25.05+
knows no user named nobody (uid_from_string): `add_user` adds nobody by uid. About
0.5-1 s more per start (the first of a process up to 5 s more: mariadb-install-db).

``private_nodes`` makes each node a host of its own, as the e2e fixtures do: its slurmd
(and so its Prologs, Epilogs and jobs) starts under ``unshare --mount --propagation
private`` with a preamble that bind-mounts ``<root>/nodes/<node>/<name>`` over each
node-local path (SlurmdSpoolDir, one path for all nodes then, and every ``node_dirs``
path; a root's release adds its own namespace and chroot inside, whose rbind of /tmp
carries these mounts). The same configured path then shows each node its own files and
the host, where slurmctld, the planner daemon and the tests run, an empty mount point;
the mounts vanish with the node's processes. `node_path` says where a node's file lies
on the host, `node_argv`/`run_on` run a command as on the node. Left shared, as a site
shares or distributes them: the configuration (etc), the munge socket, the jobs' output
directory, /tmp, and the daemons' logs and pid files (the harness reads them). No network
namespaces: slurmctld reaches every slurmd on 127.0.0.1 at its own port, and the hooks
the planner's listeners on 127.0.0.1; per-node addresses would need veth pairs and
routes for a separation that the ports already give. ``job_user`` is who ``sbatch``
submits as when a call names nobody (None: root; the e2e fixtures: nobody).

24.11 and 26.05 behave as listed below too (the same tests pass), except: a
``job_modify`` refusal's message reaches the user (22.05: only slurmctld's log), and
plain ``sinfo --json`` groups nodes (the client asks for ``-N``).

What Slurm 22.05.8 does, measured with this harness (pinned by tests/e2e/test_client.py):

- Prolog and Epilog (root, PrologFlags=Alloc) get a clean environment: nothing of
  slurmd's (a SLURM_MIG_CONFIG exported to slurmd is *not* seen; see `hook_env`) and
  no PATH at all. They see SLURM_JOB_ID, SLURM_JOB_UID, SLURM_JOB_USER,
  SLURM_JOB_PARTITION, SLURM_JOB_RESTART_COUNT (0 on the first run), SLURMD_NODENAME,
  SLURM_NODELIST, SLURM_CLUSTER_NAME, SLURM_CONF, SLURM_SCRIPT_CONTEXT
  (prolog_slurmd / epilog_slurmd) and SLURM_JOB_COMMENT only when the job has a comment;
  never the job name or the admin comment. The Epilog adds SLURM_JOB_EXIT_CODE.
- After a Prolog failure the job is requeued before the Epilog runs: that Epilog sees
  SLURM_JOB_RESTART_COUNT already one higher than its Prolog did.
- TaskProlog runs as the job's user with the job's environment (PATH included),
  SLURM_JOB_ID, SLURM_JOB_NAME, SLURM_JOB_PARTITION, SLURMD_NODENAME, and
  SLURM_RESTART_COUNT only after a requeue; no SLURM_JOB_COMMENT, no
  SLURM_JOB_RESTART_COUNT. ``print ...`` lines go to the job's output.
- TaskProlog exit != 0: the batch script never runs; the job ends FAILED, reason
  NonZeroExitCode, ExitCode <status>:0; no requeue; its output gets
  "slurmstepd-<node>: error: TaskProlog failed status=<status>"; the Epilog runs.
- A TaskProlog (as the user, no privileges) may ``scontrol requeuehold $SLURM_JOB_ID``:
  the job becomes PENDING, priority 0, restart count +1, state_reason JobHeldUser with
  state_description "job requeued in held state" (scontrol: job_requeued_in_held_state).
  It should then exit != 0: with exit 0 the batch script starts and runs until the
  requeue's kill reaches it. That kill (SIGTERM to the step) can reach the TaskProlog
  itself before it exits: slurmstepd then logs "slurm task_prolog did not exit
  normally. reason: " and drops its ``print`` lines (they are passed on only when the
  TaskProlog exits), so ours ignores SIGTERM.
- ``scontrol requeue`` (no hold) makes the job wait cred_expire seconds (default 120;
  `requeue_delay` here) with reason BeginTime before it can start again.
- Prolog that runs ``scontrol update NodeName=$SLURMD_NODENAME State=DRAIN
  Reason="slurm-mig: ..."`` and exits 1: the node is drained with *our* reason (a
  plain exit 1 gives "Prolog error"); the job is requeued held (PENDING, priority 0,
  restart count +1, state_reason JobHeldUser, state_description "launch failed
  requeued held"). Both requeue holds are user holds: the owner may release them.
- job_submit.lua setting ``job_desc.priority = 0`` makes a *user* hold (JobHeldUser):
  the job's owner may ``scontrol release`` it. ``scontrol hold`` by root turns it into
  JobHeldAdmin, which the owner cannot release.
- A job's owner may change its Comment; AdminComment is refused to the owner.
- ``scontrol update NodeName=X State=RESUME`` leaves the node IDLE+NOT_RESPONDING until
  slurmctld's next ping (about a second here).
- With the default SchedulerParameters a job that became eligible by time (after a
  requeue) waits up to a minute for the main scheduler; here sched_interval=1.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import accountingdb, leftovers, privatenodes, slurmconf
from .cpugroup import CpuGroup, CpuGroupError
from .jobcommands import JobCommands
from .nodedaemons import NodeDaemons
from .processes import (
    ClusterError,
    daemon_logs,
    end_cluster_processes,
    free_port,
    kill_daemons,
    listening,
    remove_node_cgroups,
    world_reachable,
)
from .programs import (
    CLIENT_PROGRAMS,
    MARIADB_INSTALLERS,
    MARIADB_SERVERS,
    SBIN_PATHS,
    SLURM_BINARIES,
    find_binary,
    munged_argv,
    skip_reason,
)
from .sacctmgr import AccountCommands
from .slurmconf import FAKE_CAPS_MAJOR, FAKE_GPU_MAJOR
from .slurmroot import SlurmInstall, host_install, make_job_python, python_in_usr

# the names importers use, some now defined elsewhere and importable from here as before
__all__ = [
    "CLIENT_PROGRAMS",
    "FAKE_CAPS_MAJOR",
    "FAKE_GPU_MAJOR",
    "MARIADB_INSTALLERS",
    "MARIADB_SERVERS",
    "SBIN_PATHS",
    "SLURM_BINARIES",
    "ClusterError",
    "LocalSlurm",
    "find_binary",
    "free_port",
    "skip_reason",
]

_GROUPS = itertools.count()  # distinct cgroup names for the clusters of one process
_counter = itertools.count(1)


@dataclass
class LocalSlurm(JobCommands, NodeDaemons, AccountCommands):
    """A throwaway Slurm cluster on loopback; a context manager, or start()/stop()."""

    nodes: Sequence[str] = ("node1",)
    partition: str = "mig"  # a second partition "debug" has the same nodes
    default_partition: str = "debug"  # where jobs without --partition go
    partition_options: str = ""  # more of `partition`'s line (TRESBillingWeights=...)
    cpus: int = 16  # per node, whatever the machine has (SlurmdParameters=config_overrides)
    prolog: Path | None = None
    epilog: Path | None = None
    task_prolog: Path | None = None
    hook_env: Mapping[str, str] = field(default_factory=dict)  # exported to the hooks
    job_submit_lua: Path | None = None  # copied beside slurm.conf as job_submit.lua
    slurmd_env: Mapping[str, str] = field(default_factory=dict)
    extra_conf: Sequence[str] = ()
    requeue_delay: int = 5  # cred_expire: how long a requeued job waits (Slurm: 120)
    root: Path | None = None  # default: a fresh directory under /tmp (short socket paths)
    slurm: SlurmInstall | None = None  # which Slurm: None = the host's
    task_plugin: str = "task/none"  # task/cgroup for a device-isolation test
    proctrack_type: str = "proctrack/linuxproc"
    # cgroup.conf lines; None: none written, except CgroupPlugin=disabled on 24.05+,
    # whose slurmd otherwise needs a cgroup hierarchy of its own
    cgroup_conf: Sequence[str] | None = None
    # node -> GPU models: gres.conf from slurm_mig.slurm.gres (one gpu record per
    # possible MIG instance) over fake device nodes under `dev_dir` (see `gres_conf`)
    gres: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # or node -> a fixed MIG layout's instances: Type=<profile> records (slurmconf)
    mig_layout: Mapping[str, Sequence[slurmconf.LayoutInstance]] = field(default_factory=dict)
    # Nodes as separate hosts: each slurmd (and with it its hooks and jobs) runs in a
    # mount namespace of its own where SlurmdSpoolDir and every path of `node_dirs`
    # show that node's own directory (`node_path`); the host, where the controller and
    # the tests run, sees those paths empty. Off: every node shares one file system.
    private_nodes: bool = False
    node_dirs: Sequence[Path] = ()  # the node-local paths (e.g. slurm-mig's run_dir)
    job_user: str | None = None  # who `sbatch` submits as when no user is given (None: root)
    # CPUs the slurmds (and so the hooks and jobs) use at most together: the
    # controller's processes have the rest, as on a host of their own (benchmarks;
    # `cpugroup`); 0: no limit
    node_cpus: float = 0.0
    # Slurm accounting: a private MariaDB server (the host's) and this release's slurmdbd,
    # started before slurmctld, with AccountingStorageEnforce=associations,limits,qos;
    # `sacctmgr`, `add_account`, `add_user` and `add_qos` then manage it
    accounting: bool = False
    # run once slurmdbd knows the cluster, before slurmctld starts (add_account, add_user,
    # add_qos): slurmctld's first fairshare calculation, at its start, then sees them
    # (priority/multifactor recalculates only every PriorityCalcPeriod, one minute at least)
    accounting_setup: Callable[[LocalSlurm], object] | None = None
    cluster_name: str = field(default="", init=False)
    dbd_port: int = field(default=0, init=False)
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, init=False, repr=False)
    _own_root: bool = field(default=False, init=False, repr=False)
    cpu_group: CpuGroup | None = field(default=None, init=False, repr=False)
    cpu_group_error: str = field(default="", init=False)  # why node_cpus is not in effect

    # --- paths and environment -----------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    @property
    def db_dir(self) -> Path:
        """The accounting database server's directory (datadir, my.cnf, socket)."""
        return self.root / "db"

    @property
    def out_dir(self) -> Path:
        """Where `sbatch` sends job output (``<job id>.out``); writable by every user."""
        return self.root / "out"

    @property
    def env(self) -> dict[str, str]:
        """Environment for client commands (sbatch, squeue, SlurmClient) of this cluster."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k == leftovers.RUN_VAR  # a test run's mark: its daemons and jobs carry it
            or not k.startswith(("SLURM_", "SQUEUE_", "SINFO_", "SBATCH_"))
        }
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = os.pathsep.join([env.get("PATH", "/usr/bin:/bin"), *SBIN_PATHS])
        if self.install.root is not None:  # the release's own client programs first
            env["PATH"] = os.pathsep.join([str(self.bin_dir), env["PATH"]])
        return env

    @property
    def install(self) -> SlurmInstall:
        """The Slurm release this cluster runs (the host's unless `slurm` names a root)."""
        return self.slurm or host_install()

    @property
    def python(self) -> str:
        """This interpreter (and its packages) as the cluster's jobs can run it."""
        if self.install.root is None or not python_in_usr():
            return sys.executable  # the host's, or shared with the root at its own path
        return str(make_job_python(self.root / "python"))

    @property
    def bin_dir(self) -> Path:
        """Wrappers that run a root's client programs (on `env`'s PATH)."""
        return self.root / "bin"

    def dev_dir(self, node: str) -> Path:
        """Where node ``node``'s fake MIG device nodes are (its gres.conf names them)."""
        return self.root / "dev" / node

    def _argv(self, argv: Sequence[str], user: str | None = None) -> list[str]:
        return self.install.argv(argv, user)

    def job_python(self, user: str | None = None) -> str:
        """An interpreter a job of ``user`` can run: `python` for root or where every
        user reaches it, else the node's own /usr/bin/python3 (no packages: enough for
        slurm_mig's standard-library paths, the hooks' and slurm_mig.demo.job's)."""
        if user in (None, "0", "root") or world_reachable(Path(self.python)):
            return self.python
        return "/usr/bin/python3"

    # --- nodes as hosts of their own (private_nodes) ------------------------------------
    @property
    def spool_dir(self) -> Path:
        """SlurmdSpoolDir: one path, each node's own, with `private_nodes`; else
        ``<spool_dir>/<node>`` (%n)."""
        return self.root / "spool"

    def private_dirs(self) -> list[Path]:
        """The paths each node has to itself ([] without `private_nodes`)."""
        if not self.private_nodes:
            return []
        return [self.spool_dir, *(Path(d) for d in self.node_dirs)]

    def node_path(self, node: str, path: str | Path) -> Path:
        """Where ``path`` as node ``node`` sees it lies on the host: under the node's
        backing directory when ``path`` is node-local, else ``path`` itself. For a test
        that inspects a node as an admin logged in there would; never for what the
        controller side is supposed to know."""
        return privatenodes.node_path(self.root, self.private_dirs(), node, path)

    def node_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run as on node ``node``: in a mount namespace of its own with the
        node's private directories mounted, like its slurmd (``argv`` unchanged
        without `private_nodes`)."""
        mounts = [(self.node_path(node, d), d) for d in self.private_dirs()]
        return privatenodes.node_argv(mounts, argv)

    def _make_private_dirs(self) -> None:
        """Each private path on the host (an empty mount point) and each node's
        directory for it (same mode and owner), under ``<root>/nodes/<node>/``."""
        privatenodes.make_private_dirs(self.root, self.private_dirs(), self.nodes)

    # --- life cycle ----------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> LocalSlurm:
        """Write the configuration, start munged, (with `accounting`) MariaDB and
        slurmdbd, slurmctld and the slurmds, and wait until every node is idle."""
        if self.requeue_delay < 5:
            raise ClusterError("requeue_delay (AuthInfo cred_expire) must be at least 5 s")
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="slurm-e2e-"))
            self._own_root = True
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        atexit.register(self.stop)
        leftovers.register(self.root)  # for `make test`'s check (a test run's)
        try:
            self._write_wrappers()
            self._start_munge()
            self._write_conf()
            self._make_private_dirs()
            self._make_cpu_group()
            if self.accounting:
                self._start_accounting(timeout)
            self._spawn_slurmctld()
            for node in self.nodes:
                self.spawn_slurmd(node)
            self.wait_idle(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn_slurmctld(self) -> None:
        self._spawn("slurmctld", [self._binary("slurmctld"), "-D", "-i", "-f", str(self.conf)])

    def restart_slurmctld(self, timeout: float = 30.0, down_for: float = 0.0) -> None:
        """Stop slurmctld (it saves its state: jobs, association usage), wait
        ``down_for`` seconds (an outage) and start it again; jobs live on.
        priority/multifactor computes usage and fairshare at start, otherwise only
        every PriorityCalcPeriod (a minute at least)."""
        self._kill(["slurmctld"])
        time.sleep(down_for)
        self._spawn_slurmctld()
        self.wait_for(
            lambda: "UP" in self.run("scontrol", "ping", check=False).stdout,
            timeout,
            "slurmctld to answer again",
        )

    def _binary(self, name: str) -> str | None:
        if self.install.root is None:
            return find_binary(name)
        return f"/usr/sbin/{name}"  # Debian's place for the daemons, inside the root

    def _write_wrappers(self) -> None:
        """A root's release: wrappers of its client programs in `bin_dir`."""
        if self.install.root is None:
            return
        for program in CLIENT_PROGRAMS:
            slurmconf.write_script(self.bin_dir / program, self.install.wrapper(program))

    def _start_munge(self) -> None:
        """munged with a fresh key, its socket under ``<root>/munge``."""
        mdir = self.root / "munge"
        mdir.mkdir(exist_ok=True)
        os.chmod(mdir, 0o755)  # job users (sbatch --uid) must reach the socket
        key = mdir / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        self._spawn("munged", munged_argv(self._binary("munged"), mdir, self.munge_socket))
        self.wait_for(self.munge_socket.exists, 10.0, "munged to open its socket")

    def _start_accounting(self, timeout: float) -> None:
        """A private MariaDB server (the host's, on a free port of 127.0.0.1, small
        buffers, no durability) and this release's slurmdbd (`dbd_port`) on it, and this
        cluster added there: slurmctld registers with slurmdbd only as a known cluster."""
        db, server = accountingdb.prepare_database(self.db_dir, self.install)
        self._spawn("mariadbd", server, host=True)
        ready = self.root / "mariadbd.out"
        self._wait_started(
            "mariadbd", lambda: "ready for connections" in ready.read_text(), timeout
        )
        accountingdb.write_secret(  # slurmdbd reads it beside SLURM_CONF
            self.conf.parent / "slurmdbd.conf",
            accountingdb.slurmdbd_conf(self.munge_socket, self.dbd_port, self.root, db),
        )
        self._spawn("slurmdbd", [self._binary("slurmdbd"), "-D"])
        self._wait_started("slurmdbd", lambda: listening(self.dbd_port), timeout)
        self.sacctmgr("add", "cluster", self.cluster_name)
        if self.accounting_setup is not None:
            self.accounting_setup(self)

    def _wait_started(self, name: str, ready: Callable[[], object], timeout: float) -> None:
        """Wait until ``ready()``; ClusterError with the logs when daemon ``name`` exits first."""

        def up() -> object:
            proc = self._procs[name]
            if proc.poll() is not None:
                raise ClusterError(f"{name} exited {proc.returncode}\n{self.logs()}")
            return ready()

        self.wait_for(up, timeout, f"{name} to start")

    def _hook(self, kind: str, path: Path | None) -> Path | None:
        """The hook itself, or a wrapper that exports `hook_env` first (Slurm gives
        hooks a clean environment)."""
        if path is None or not self.hook_env:
            return path
        wrapper = slurmconf.hook_wrapper(path, self.hook_env)
        return slurmconf.write_script(self.root / "hooks" / kind, wrapper)

    def _write_conf(self) -> None:
        """Write slurm.conf (and gres.conf, cgroup.conf, job_submit.lua, the hooks'
        wrappers) under ``<root>/etc``, and make the directories it names."""
        etc = self._make_conf_dirs()
        self.cluster_name = f"e2e{os.getpid()}x{next(_counter)}"
        lines = self._base_lines()
        lines += slurmconf.hook_lines(
            {
                "Prolog": self._hook("prolog", self.prolog),
                "Epilog": self._hook("epilog", self.epilog),
                "TaskProlog": self._hook("taskprolog", self.task_prolog),
            }
        )
        if self.job_submit_lua:
            shutil.copyfile(self.job_submit_lua, etc / "job_submit.lua")
            lines.append("JobSubmitPlugins=lua")
        if self.accounting:
            self.dbd_port = free_port()
            lines += slurmconf.accounting_lines(self.dbd_port, self.munge_socket)
        lines = slurmconf.overridden(lines, self.extra_conf)
        node_gres = slurmconf.write_gres(self.gres, self.root / "dev", etc)
        if self.mig_layout:  # (not with `gres`: one gres.conf)
            node_gres = slurmconf.write_layout_gres(self.mig_layout, self.root / "dev", etc)
        lines += slurmconf.gres_types(node_gres)
        cgroup = slurmconf.cgroup_lines(self.cgroup_conf, self.install.version)
        if cgroup is not None:
            (etc / "cgroup.conf").write_text("".join(f"{line}\n" for line in cgroup))
        for node in self.nodes:
            lines.append(slurmconf.node_line(node, free_port(), self.cpus, node_gres.get(node, "")))
        lines += slurmconf.partition_lines(
            self.partition, self.default_partition, self.nodes, self.partition_options
        )
        self.conf.write_text(slurmconf.conf_text(lines))

    def _make_conf_dirs(self) -> Path:
        """The directories slurm.conf names (state, log, spool, the jobs' output, open
        to every user); etc, where the configuration goes."""
        etc = self.root / "etc"
        etc.mkdir(exist_ok=True)
        spools = () if self.private_nodes else tuple(f"spool/{n}" for n in self.nodes)
        for sub in ("state", "log", "spool", *spools):
            (self.root / sub).mkdir(exist_ok=True)
        self.out_dir.mkdir(exist_ok=True)
        os.chmod(self.out_dir, 0o1777)
        return etc

    def _base_lines(self) -> list[str]:
        """slurm.conf's fixed lines for this cluster (slurmctld on a free port)."""
        return slurmconf.base_lines(
            cluster_name=self.cluster_name,
            host=socket.gethostname().split(".")[0],
            ctld_port=free_port(),
            munge_socket=self.munge_socket,
            requeue_delay=self.requeue_delay,
            root=self.root,
            spool=self.spool_dir if self.private_nodes else self.spool_dir / "%n",
            proctrack_type=self.proctrack_type,
            task_plugin=self.task_plugin,
        )

    def _spawn(
        self,
        name: str,
        argv: list[str | None],
        extra_env: Mapping[str, str] | None = None,
        node: str | None = None,
        host: bool = False,
    ) -> None:
        """Start a daemon (a node's in that node's namespace, see `node_argv`; ``host``:
        the host's program even where the cluster runs a root's release)."""
        if any(a is None for a in argv):
            reason = skip_reason(self.install, self.accounting)
            raise ClusterError(f"{name}: program not found ({reason})")
        env = self.env
        env.update(extra_env or {})
        # a root's release: its own namespace and chroot inside
        cmd = [str(a) for a in argv] if host else self._argv(argv)
        if node is not None:
            cmd = self.node_argv(node, cmd)
            if self.cpu_group is not None:  # in the group before it runs
                move = f"echo $$ > {shlex.quote(str(self.cpu_group.path / 'cgroup.procs'))}"
                cmd = ["/bin/sh", "-c", f'{move} && exec "$@"', "sh", *cmd]
        with open(self.root / f"{name}.out", "wb") as out:
            self._procs[name] = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def stop(self) -> None:
        """Kill every daemon this cluster started (slurmds and slurmctld first, then
        slurmdbd, MariaDB and munged last), then the rest of it (slurmstepds, jobs), and
        remove its directory (kept when $SLURM_MIG_E2E_KEEP is set); ClusterError naming
        any process that outlived SIGKILL."""
        last = ("slurmdbd", "mariadbd", "munged")
        slurm = [n for n in self._procs if n not in last]
        for group in (slurm, ["slurmdbd"], ["mariadbd", "munged"]):
            self._kill([n for n in group if n in self._procs])
        self._procs.clear()
        # slurmstepds and job processes outlive slurmd
        left = end_cluster_processes(self.conf, self.root) if self.root is not None else []
        self._remove_cgroups()
        if self.cpu_group is not None:
            self.cpu_group.remove()
            self.cpu_group = None
        atexit.unregister(self.stop)
        if self._own_root and self.root is not None and not os.environ.get("SLURM_MIG_E2E_KEEP"):
            shutil.rmtree(self.root, ignore_errors=True)
        if left:
            raise ClusterError(f"outlived SIGKILL: {'; '.join(map(str, left))}")

    def _kill(self, names: Sequence[str], grace: float = 5.0) -> None:
        """Stop the daemons ``names`` (`kill_daemons`: their process groups)."""
        kill_daemons([self._procs[name] for name in names], grace)

    def _make_cpu_group(self) -> None:
        """The nodes' CPU cgroup (``node_cpus``), or why there is none in
        ``cpu_group_error`` (the nodes then share the CPUs with the controller)."""
        if not self.node_cpus:
            return
        name = f"slurm-mig-nodes-{os.getpid()}-{next(_GROUPS)}"
        try:
            self.cpu_group = CpuGroup.create(name, self.node_cpus)
        except CpuGroupError as exc:
            self.cpu_group_error = str(exc)

    def _remove_cgroups(self) -> None:
        """Remove the (empty, once its processes are gone) cgroup v1 directories each
        slurmd made, slurm_<node> in every controller; rmdir never touches a live one."""
        if "cgroup" in self.task_plugin + self.proctrack_type:
            remove_node_cgroups(self.nodes)

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- commands ------------------------------------------------------------------------
    def run(
        self, *argv: str, check: bool = True, timeout: float = 30.0, user: str | None = None
    ) -> subprocess.CompletedProcess:
        """Run a client command against this cluster (as ``user`` via runuser if given)."""
        cmd = self._argv(argv, user)
        res = subprocess.run(
            cmd, env=self.env, capture_output=True, text=True, errors="replace", timeout=timeout
        )
        if check and res.returncode != 0:
            shown = " ".join(argv) + (f" (as {user})" if user else "")
            raise ClusterError(f"{shown} exited {res.returncode}: {res.stderr.strip()}")
        return res

    def run_on(self, node: str, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run a host program as on node ``node`` (as root, with `env`; see `node_argv`),
        as an admin logged in there would; ClusterError if it fails."""
        cmd = self.node_argv(node, argv)
        res = subprocess.run(
            cmd, env=self.env, capture_output=True, text=True, errors="replace", timeout=timeout
        )
        if res.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} on {node} exited {res.returncode}: {res.stderr}")
        return res

    def wait_for(
        self, cond: Callable[[], object], timeout: float, what: str, interval: float = 0.1
    ) -> None:
        """Poll ``cond`` until it is true; ClusterError (with the logs) after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"timed out after {timeout:.0f} s waiting for {what}\n{self.logs()}"
                )
            time.sleep(interval)

    def logs(self, tail: int = 40) -> str:
        """The last lines of every daemon's log, for a failing test's report."""
        if self.root is None:
            return ""
        return daemon_logs(self.root, tail)
