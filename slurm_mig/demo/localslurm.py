"""A real Slurm on loopback in a temporary directory, for end-to-end tests and the live demo.

`LocalSlurm` starts its own munged (own key and socket), one slurmctld and one slurmd
per node (``slurmd -N <name>``, each on a free port) from a generated slurm.conf, so two
clusters can run side by side. Clients reach it through `env` (SLURM_CONF, PATH).
Needs root and Debian's Slurm (slurmctld, slurmd, slurm-client, munge): the host's
(22.05 on Debian 12), or with ``slurm=`` another release in a Debian root
(slurm_mig.demo.slurmroot: 24.11, 26.05), whose daemons and client programs then run
chrooted there (`env`'s PATH starts with wrappers for the clients), with /tmp, the
checkout and this Python at their usual paths. Starts in about 1.2 s; ``stop()`` (also
run at interpreter exit) kills every daemon it started and every process whose
environment names its slurm.conf (slurmstepds and job processes outlive slurmd).
Cgroups are off (task/none, proctrack/linuxproc; ``CgroupPlugin=disabled`` from 24.05,
whose slurmd needs a cgroup hierarchy otherwise); ``task_plugin``, ``proctrack_type``
and ``cgroup_conf`` turn them on for a test about device isolation (cgroup v1 names
each node's hierarchy slurm_<node>: such clusters running at once need distinct node
names). ``gres`` gives nodes a MIG gres.conf (slurm_mig.slurm.gres) over fake device
nodes made with mknod under ``<root>/dev/<node>``; LiveCluster always does.

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
  requeue's kill reaches it.
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
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .cpugroup import CpuGroup, CpuGroupError
from .slurmroot import SlurmInstall, find_install, host_install, make_job_python, python_in_usr

_GROUPS = itertools.count()  # distinct cgroup names for the clusters of one process

SLURM_BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "munged")
SBIN_PATHS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
# Client programs a root's cluster puts on PATH as wrappers (daemons are started directly).
CLIENT_PROGRAMS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel", "sacct", "srun", "sprio")
CLIENT_PROGRAMS += ("sacctmgr", "sshare")  # accounting
# The host's MariaDB server (Debian's mariadb-server) for every release's slurmdbd.
MARIADB_SERVERS = ("mariadbd", "mysqld")
MARIADB_INSTALLERS = ("mariadb-install-db", "mysql_install_db")
# slurm.conf keys that may appear once; extra_conf naming one replaces the default line
_REPEATED_KEYS = ("nodename", "partitionname", "nodeset", "frontendname", "downnodes")
_counter = itertools.count(1)
FAKE_GPU_MAJOR = 195  # NVIDIA's
FAKE_CAPS_MAJOR = 240  # "local/experimental use" (devices.txt); no driver here
# Harmless lines every start logs (no PMIx, no saved state, munge's notes).
_LOG_NOISE = re.compile(
    r"pmix|MPI: Cannot create context|state file|Trying backup state|Unauthorized credential"
    r"|munged: (Info|Notice)|CPU frequency|differs from hardware"
)


def find_binary(name: str) -> str | None:
    """Path of a Slurm or munge program, also where sbin is not on PATH."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN_PATHS])
    return shutil.which(name, path=path)


def skip_reason(slurm: str | SlurmInstall | None = None, accounting: bool = False) -> str | None:
    """Why LocalSlurm cannot run here with that Slurm (not root, programs or root
    missing), or None. ``slurm``: "host" (the default) or a root's suite;
    ``accounting``: also slurmdbd (of that release) and the host's MariaDB server."""
    if os.geteuid() != 0:
        return "LocalSlurm needs root (it starts munged, slurmctld and slurmd)"
    if isinstance(slurm, SlurmInstall):
        slurm = slurm.name
    missing = []
    if slurm not in (None, "host"):
        found = find_install(slurm)
        if isinstance(found, str):
            return found
        if accounting and not (found.root / "usr" / "sbin" / "slurmdbd").exists():
            missing.append(f"slurmdbd in the {slurm} root")
    else:
        missing = [name for name in SLURM_BINARIES if find_binary(name) is None]
        if accounting and find_binary("slurmdbd") is None:
            missing.append("slurmdbd")
    if accounting and _first_binary(MARIADB_SERVERS) is None:
        missing.append("mariadbd")
    if accounting and _first_binary(MARIADB_INSTALLERS) is None:
        missing.append("mariadb-install-db")
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} missing); apt-get install "
            f"slurmctld slurmd slurm-client munge{' slurmdbd mariadb-server' * accounting}"
            " (make slurm-packages; a root's: make slurm-roots)"
        )
    return None


def _first_binary(names: Iterable[str]) -> str | None:
    return next(filter(None, map(find_binary, names)), None)


_TEMPLATE: list[Path] = []  # this process's freshly installed, never started datadir


def _mariadb_cnf(datadir: Path, port: int, run_dir: Path) -> str:
    """my.cnf of a private MariaDB server: root, 127.0.0.1:``port``, small buffers and
    no durability (the database lives as long as its cluster)."""
    return (
        f"[mysqld]\nuser=root\ndatadir={datadir}\nsocket={run_dir / 'mysqld.sock'}\n"
        f"pid-file={run_dir / 'mysqld.pid'}\nbind-address=127.0.0.1\nport={port}\n"
        "skip-name-resolve\nskip-log-bin\nperformance_schema=OFF\nkey_buffer_size=1M\n"
        "innodb_buffer_pool_size=32M\ninnodb_log_file_size=8M\ninnodb_lock_wait_timeout=900\n"
        "innodb_flush_log_at_trx_commit=0\ninnodb_doublewrite=0\ninnodb_flush_method=nosync\n"
    )


def _mariadb_template() -> Path:
    """A datadir fresh from mariadb-install-db, made once per process (0.5 to 5 s) and
    copied for each cluster (a few ms); removed at exit."""
    if _TEMPLATE:
        return _TEMPLATE[0]
    installer = _first_binary(MARIADB_INSTALLERS)
    if installer is None:
        raise ClusterError(f"accounting: {skip_reason(accounting=True)}")
    top = Path(tempfile.mkdtemp(prefix="slurm-e2e-mariadb-"))
    atexit.register(shutil.rmtree, top, ignore_errors=True)
    cnf = top / "my.cnf"
    cnf.write_text(_mariadb_cnf(top / "data", free_port(), top))
    argv = [installer, f"--defaults-file={cnf}", "--auth-root-authentication-method=normal"]
    res = subprocess.run(
        [*argv, "--skip-test-db", "--skip-name-resolve"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if res.returncode != 0:
        raise ClusterError(f"{installer} exited {res.returncode}: {res.stdout}{res.stderr}")
    _TEMPLATE.append(top / "data")
    return _TEMPLATE[0]


def _overridden(lines: Sequence[str], extra: Sequence[str]) -> list[str]:
    """slurm.conf ``lines`` then ``extra``, less each line whose key an ``extra`` line
    sets again (Slurm logs every repeated key as an error); node and partition lines add."""

    def key(line: str) -> str:
        return line.split("=", 1)[0].strip().lower()

    keys = {key(line) for line in extra if "=" in line} - set(_REPEATED_KEYS)
    return [line for line in lines if key(line) not in keys] + list(extra)


def _pids_with_env(entry: str) -> list[int]:
    """Processes (not this one) whose environment holds ``entry`` (NAME=value)."""
    want = entry.encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            env = (proc / "environ").read_bytes()
        except OSError:
            continue
        if want in env.split(b"\0"):
            pids.append(int(proc.name))
    return pids


def _world_reachable(path: Path) -> bool:
    """Every user may run ``path`` (links followed): each directory on the way lets
    others through, the file lets them execute."""
    try:
        real = path.resolve(strict=True)
        if not os.stat(real).st_mode & 0o001:
            return False
        return all(os.stat(d).st_mode & 0o001 for d in real.parents)
    except OSError:
        return False


def _listening(port: int) -> bool:
    """Something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClusterError(RuntimeError):
    """The local cluster did not start, or a command against it failed."""


@dataclass
class LocalSlurm:
    """A throwaway Slurm cluster on loopback; a context manager, or start()/stop()."""

    nodes: Sequence[str] = ("node1",)
    partition: str = "mig"  # a second partition "debug" has the same nodes
    default_partition: str = "debug"  # where jobs without --partition go
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
            if not k.startswith(("SLURM_", "SQUEUE_", "SINFO_", "SBATCH_"))
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
        if user in (None, "0", "root") or _world_reachable(Path(self.python)):
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
        path = Path(path)
        for d in self.private_dirs():
            if path == d or d in path.parents:
                return self.root / "nodes" / node / d.name / path.relative_to(d)
        return path

    def node_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run as on node ``node``: in a mount namespace of its own with the
        node's private directories mounted, like its slurmd (``argv`` unchanged
        without `private_nodes`)."""
        dirs = self.private_dirs()
        if not dirs:
            return list(argv)
        lines = ["set -e"]
        for d in dirs:
            back = shlex.quote(str(self.node_path(node, d)))
            lines.append(f"mount --bind {back} {shlex.quote(str(d))}")
        lines.append('exec "$@"')
        return [
            "unshare", "--mount", "--propagation", "private",
            "/bin/sh", "-c", "\n".join(lines), "sh", *argv,
        ]  # fmt: skip

    def _make_private_dirs(self) -> None:
        """Each private path on the host (an empty mount point) and each node's
        directory for it (same mode and owner), under ``<root>/nodes/<node>/``."""
        dirs = self.private_dirs()
        names = [d.name for d in dirs]
        if len(set(names)) != len(names):
            raise ClusterError(f"node_dirs need distinct last components: {names}")
        for d in dirs:
            if not d.is_absolute() or d == self.root or d in self.root.parents:
                raise ClusterError(f"node_dirs: {d} must be absolute and not hold {self.root}")
            d.mkdir(parents=True, exist_ok=True)
            st = d.stat()
            for node in self.nodes:
                back = self.node_path(node, d)
                back.mkdir(parents=True, exist_ok=True)
                os.chmod(back.parent, 0o755)
                os.chmod(back, st.st_mode & 0o7777)
                os.chown(back, st.st_uid, st.st_gid)
        if dirs:
            os.chmod(self.root / "nodes", 0o755)

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
                self._spawn(
                    f"slurmd-{node}",
                    [self._binary("slurmd"), "-D", "-N", node, "-f", str(self.conf)],
                    extra_env=self.slurmd_env,
                    node=node,
                )
            self.wait_idle(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn_slurmctld(self) -> None:
        self._spawn("slurmctld", [self._binary("slurmctld"), "-D", "-i", "-f", str(self.conf)])

    def restart_slurmctld(self, timeout: float = 30.0) -> None:
        """Stop slurmctld (it saves its state: jobs, association usage) and start it
        again; jobs live on. priority/multifactor computes usage and fairshare at start,
        otherwise only every PriorityCalcPeriod (a minute at least)."""
        self._kill(["slurmctld"])
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
        if self.install.root is None:
            return
        self.bin_dir.mkdir(exist_ok=True)
        os.chmod(self.bin_dir, 0o755)
        for program in CLIENT_PROGRAMS:
            path = self.bin_dir / program
            path.write_text(self.install.wrapper(program))
            os.chmod(path, 0o755)

    def _start_munge(self) -> None:
        mdir = self.root / "munge"
        mdir.mkdir(exist_ok=True)
        os.chmod(mdir, 0o755)  # job users (sbatch --uid) must reach the socket
        key = mdir / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        self._spawn(
            "munged",
            [
                self._binary("munged"),
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={mdir / 'munged.pid'}",
                f"--log-file={mdir / 'munged.log'}",
                f"--seed-file={mdir / 'munged.seed'}",
            ],
        )
        self.wait_for(self.munge_socket.exists, 10.0, "munged to open its socket")

    def _start_accounting(self, timeout: float) -> None:
        """A private MariaDB server (the host's, on a free port of 127.0.0.1, small
        buffers, no durability) and this release's slurmdbd (`dbd_port`) on it, and this
        cluster added there: slurmctld registers with slurmdbd only as a known cluster."""
        db = self.db_dir
        db.mkdir(exist_ok=True)
        os.chmod(db, 0o700)
        port, password = free_port(), secrets.token_hex(12)
        cnf = db / "my.cnf"
        cnf.write_text(_mariadb_cnf(db / "data", port, db))
        # run by the server before it accepts connections; the database made here, as
        # slurmdbd 24.11's own creation fails its first try (TLS) and retries in 5 s
        init = db / "init.sql"
        init.write_text(
            "CREATE DATABASE IF NOT EXISTS slurm_acct_db;\n"
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
            "GRANT ALL ON *.* TO 'slurm'@'127.0.0.1';\n"
        )
        server = _first_binary(MARIADB_SERVERS)
        if server is None:
            raise ClusterError(f"accounting: {skip_reason(self.install, accounting=True)}")
        shutil.copytree(_mariadb_template(), db / "data", symlinks=True)
        self._spawn(
            "mariadbd", [server, f"--defaults-file={cnf}", f"--init-file={init}"], host=True
        )
        ready = self.root / "mariadbd.out"
        self._wait_started(
            "mariadbd", lambda: "ready for connections" in ready.read_text(), timeout
        )
        dbd_conf = self.conf.parent / "slurmdbd.conf"  # slurmdbd reads it beside SLURM_CONF
        dbd_conf.touch(mode=0o600)
        os.chmod(dbd_conf, 0o600)  # slurmdbd refuses a file others may read
        dbd_conf.write_text(
            "AuthType=auth/munge\n"
            f"AuthInfo=socket={self.munge_socket}\n"
            f"DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={self.dbd_port}\nSlurmUser=root\n"
            f"PidFile={self.root / 'slurmdbd.pid'}\nLogFile={self.root / 'log' / 'slurmdbd.log'}\n"
            "DebugLevel=info\nStorageType=accounting_storage/mysql\n"
            f"StorageHost=127.0.0.1\nStoragePort={port}\nStorageUser=slurm\n"
            f"StoragePass={password}\nStorageLoc=slurm_acct_db\n"
        )
        self._spawn("slurmdbd", [self._binary("slurmdbd"), "-D"])
        self._wait_started("slurmdbd", lambda: _listening(self.dbd_port), timeout)
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
        hooks = self.root / "hooks"
        hooks.mkdir(exist_ok=True)
        os.chmod(hooks, 0o755)
        wrapper = hooks / kind
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.hook_env.items())
        wrapper.write_text(f'#!/bin/sh\n{exports}exec {shlex.quote(str(path))} "$@"\n')
        os.chmod(wrapper, 0o755)
        return wrapper

    def _write_conf(self) -> None:
        etc = self.root / "etc"
        etc.mkdir(exist_ok=True)
        spools = () if self.private_nodes else tuple(f"spool/{n}" for n in self.nodes)
        for sub in ("state", "log", "spool", *spools):
            (self.root / sub).mkdir(exist_ok=True)
        self.out_dir.mkdir(exist_ok=True)
        os.chmod(self.out_dir, 0o1777)
        host = socket.gethostname().split(".")[0]
        self.cluster_name = f"e2e{os.getpid()}x{next(_counter)}"
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={host}(127.0.0.1)",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket},cred_expire={self.requeue_delay}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.spool_dir if self.private_nodes else self.spool_dir / '%n'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log' / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "MailProg=/bin/true",
            f"ProctrackType={self.proctrack_type}",
            f"TaskPlugin={self.task_plugin}",
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
        hooks = {
            "Prolog": self._hook("prolog", self.prolog),
            "Epilog": self._hook("epilog", self.epilog),
            "TaskProlog": self._hook("taskprolog", self.task_prolog),
        }
        if any(hooks.values()):
            lines.append("PrologFlags=Alloc")
        lines.extend(f"{key}={path}" for key, path in hooks.items() if path)
        if self.job_submit_lua:
            shutil.copyfile(self.job_submit_lua, etc / "job_submit.lua")
            lines.append("JobSubmitPlugins=lua")
        if self.accounting:
            self.dbd_port = free_port()
            lines += [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=127.0.0.1",
                f"AccountingStoragePort={self.dbd_port}",
                f"AccountingStoragePass={self.munge_socket}",  # munge socket to slurmdbd
                "AccountingStorageEnforce=associations,limits,qos",
            ]
        lines = _overridden(lines, self.extra_conf)
        node_gres = self._write_gres(etc)
        if node_gres:
            lines.append("GresTypes=gpu")
        cgroup = self.cgroup_conf
        if cgroup is None and self.install.version >= (24, 5):
            cgroup = ["CgroupPlugin=disabled"]
        if cgroup is not None:
            (etc / "cgroup.conf").write_text("".join(f"{line}\n" for line in cgroup))
        for node in self.nodes:
            lines.append(
                f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname=127.0.0.1 Port={free_port()} "
                f"CPUs={self.cpus} RealMemory=64000 {node_gres.get(node, '')} State=UNKNOWN"
            )
        names = ",".join(self.nodes)
        for part in dict.fromkeys([self.partition, "debug"]):
            default = "YES" if part == self.default_partition else "NO"
            lines.append(
                f"PartitionName={part} Nodes={names} Default={default} MaxTime=INFINITE State=UP"
            )
        self.conf.write_text("\n".join(lines) + "\n")

    def _write_gres(self, etc: Path) -> dict[str, str]:
        """gres.conf for the nodes of `gres` over fake device nodes made with mknod
        (GPU major 195 as NVIDIA's, capabilities major `FAKE_CAPS_MAJOR`: no driver
        answers, so an open the device cgroup allows fails with ENXIO, one it denies with
        EPERM); each node's ``Gres=`` term."""
        from ..cli.gres_conf import make_gpu_nodes, make_nodes
        from ..devices.migcaps import parse_minors, render_minors
        from ..slurm import gres

        terms, conf = {}, []
        for node, models in self.gres.items():
            dev = self.dev_dir(node)
            table = parse_minors(render_minors(len(models)))
            make_nodes(gres.cap_nodes(models, table), str(dev), FAKE_CAPS_MAJOR)
            make_gpu_nodes(len(models), str(dev), FAKE_GPU_MAJOR)
            conf.append(gres.gres_conf(node, models, table, str(dev)))
            terms[node] = gres.node_gres(models)
        if conf:
            (etc / "gres.conf").write_text("".join(conf))
            os.chmod(self.root / "dev", 0o755)
        return terms

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
        slurmdbd, MariaDB and munged last) and remove its directory (kept when
        $SLURM_MIG_E2E_KEEP is set)."""
        last = ("slurmdbd", "mariadbd", "munged")
        slurm = [n for n in self._procs if n not in last]
        for group in (slurm, ["slurmdbd"], ["mariadbd", "munged"]):
            self._kill([n for n in group if n in self._procs])
        self._procs.clear()
        if self.root is not None:  # slurmstepds and job processes outlive slurmd
            for pid in _pids_with_env(f"SLURM_CONF={self.conf}"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._remove_cgroups()
        if self.cpu_group is not None:
            self.cpu_group.remove()
            self.cpu_group = None
        atexit.unregister(self.stop)
        if self._own_root and self.root is not None and not os.environ.get("SLURM_MIG_E2E_KEEP"):
            shutil.rmtree(self.root, ignore_errors=True)

    def _kill(self, names: Sequence[str], grace: float = 5.0) -> None:
        """SIGTERM the daemons ``names`` (their process groups), SIGKILL those still
        running after ``grace`` seconds; reaped either way."""
        for name in names:
            proc = self._procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        for name in names:
            proc = self._procs[name]
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()

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
        if "cgroup" not in self.task_plugin + self.proctrack_type:
            return
        for node in self.nodes:
            for top in Path("/sys/fs/cgroup").glob(f"*/slurm_{node}"):
                for path in sorted(top.rglob("*"), key=lambda p: -len(p.parts)) + [top]:
                    if path.is_dir():
                        try:
                            path.rmdir()
                        except OSError:
                            pass

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
        res = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            shown = " ".join(argv) + (f" (as {user})" if user else "")
            raise ClusterError(f"{shown} exited {res.returncode}: {res.stderr.strip()}")
        return res

    # --- accounting (accounting=True) ---------------------------------------------------
    def sacctmgr(self, *args: str, timeout: float = 30.0) -> str:
        """``sacctmgr -i ARGS`` against this cluster's slurmdbd; its output
        (ClusterError with sacctmgr's message when it fails)."""
        if not self.accounting:
            raise ClusterError(
                "sacctmgr: this cluster has no accounting (LocalSlurm(accounting=True))"
            )
        return self.run("sacctmgr", "-i", *args, timeout=timeout).stdout

    def add_account(
        self, name: str, parent: str | None = None, fairshare: int | str | None = None
    ) -> None:
        """Add account ``name`` (under ``parent``, default root) with ``fairshare``
        (its RawShares), and wait until slurmctld has it."""
        args = ["add", "account", name]
        if parent is not None:
            args.append(f"parent={parent}")
        if fairshare is not None:
            args.append(f"fairshare={fairshare}")
        self.sacctmgr(*args)
        self._wait_assoc_mgr(["flags=assoc", f"accounts={name}"], f"Account={name} ")

    def add_user(
        self,
        user: str,
        account: str,
        fairshare: int | str | None = None,
        qos: str | Sequence[str] | None = None,
        default_qos: str | None = None,
    ) -> None:
        """Give ``user`` an association in ``account`` (its RawShares ``fairshare``, the
        QOS it may use, its default QOS), and wait until slurmctld has it. nobody is
        added by uid (65534): Slurm 25.05+ maps the name nobody to no user."""
        if user == "nobody":
            user = str(pwd.getpwnam(user).pw_uid)
        args = ["add", "user", user, f"account={account}"]
        if fairshare is not None:
            args.append(f"fairshare={fairshare}")
        if qos is not None:
            args.append(f"qos={qos if isinstance(qos, str) else ','.join(qos)}")
        if default_qos is not None:
            args.append(f"defaultqos={default_qos}")
        self.sacctmgr(*args)
        self._wait_assoc_mgr(
            ["flags=assoc", f"accounts={account}", f"users={user}"], f"UserName={user}("
        )

    def add_qos(self, name: str, **limits: object) -> None:
        """Add QOS ``name`` with ``limits`` as sacctmgr spells them (MaxJobsPerUser=1,
        Priority=10, ...), and wait until slurmctld has it."""
        self.sacctmgr("add", "qos", name, *(f"{k}={v}" for k, v in limits.items()))
        self._wait_assoc_mgr(["flags=qos", f"qos={name}"], f"QOS={name}(")

    def _wait_assoc_mgr(self, args: Sequence[str], text: str, timeout: float = 10.0) -> None:
        """Wait until ``scontrol show assoc_mgr ARGS`` shows ``text``: slurmdbd pushes
        each change to the registered slurmctld (nothing to wait for before it runs)."""
        ctld = self._procs.get("slurmctld")
        if ctld is None or ctld.poll() is not None:
            return

        def shown() -> bool:
            res = self.run("scontrol", "show", "assoc_mgr", *args, check=False)
            return text in res.stdout

        self.wait_for(shown, timeout, f"slurmctld to show {text!r} (assoc_mgr {' '.join(args)})")

    def run_on(self, node: str, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run a host program as on node ``node`` (as root, with `env`; see `node_argv`),
        as an admin logged in there would; ClusterError if it fails."""
        cmd = self.node_argv(node, argv)
        res = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} on {node} exited {res.returncode}: {res.stderr}")
        return res

    def try_sbatch(
        self,
        wrap: str = "true",
        *args: str,
        partition: str | None = None,
        comment: str | None = None,
        name: str | None = None,
        user: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Submit ``wrap`` as a batch job (output to ``out_dir/<id>.out``); sbatch's result."""
        cmd = ["sbatch", "--parsable", f"--output={self.out_dir}/%j.out", f"--chdir={self.out_dir}"]
        if partition is not None:
            cmd.append(f"--partition={partition}")
        if comment is not None:
            cmd.append(f"--comment={comment}")
        if name is not None:
            cmd.append(f"--job-name={name}")
        user = self.job_user if user is None else user
        if user is not None:  # numeric: 26.05 refuses --uid=<name>
            uid = user if user.isdigit() else str(pwd.getpwnam(user).pw_uid)
            cmd.append(f"--uid={uid}")
        cmd.extend(args)
        cmd.append(f"--wrap={wrap}")
        return self.run(*cmd, check=False)

    def sbatch(self, wrap: str = "true", *args: str, **kwargs: str | None) -> str:
        """Submit like `try_sbatch`; the job id (ClusterError if sbatch refused)."""
        res = self.try_sbatch(wrap, *args, **kwargs)
        if res.returncode != 0:
            raise ClusterError(f"sbatch exited {res.returncode}: {res.stderr.strip()}")
        return res.stdout.strip().split(";")[0]

    def job_output(self, job_id: str) -> str:
        """What a batch job wrote to its output file ("" before it wrote anything)."""
        path = self.out_dir / f"{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def job_field(self, job_id: str, name: str) -> str:
        """One field of ``scontrol show job`` (e.g. "JobState", "Reason", "Restarts")."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id)).stdout
        for word in out.split():
            key, _, value = word.partition("=")
            if key == name:
                return value
        raise ClusterError(f"scontrol show job {job_id} has no field {name}: {out}")

    def job_state(self, job_id: str) -> str:
        return self.job_field(job_id, "JobState")

    def wait_job(
        self, job_id: str, states: Iterable[str] = ("COMPLETED",), timeout: float = 30.0
    ) -> str:
        """Wait until the job reaches one of ``states``; the state reached."""
        wanted = set(states)
        seen = ""

        def reached() -> bool:
            nonlocal seen
            seen = self.job_state(job_id)
            return seen in wanted

        self.wait_for(reached, timeout, f"job {job_id} to reach {sorted(wanted)} (last {seen!r})")
        return seen

    def node_states(self) -> dict[str, str]:
        """Node name -> sinfo's long state ("idle", "drained", "mixed", ...)."""
        res = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        return dict(line.split(None, 1) for line in res.stdout.splitlines() if " " in line)

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait until every node is idle: registered, not drained, no jobs."""

        def idle() -> bool:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ClusterError(f"{name} exited {proc.returncode}\n{self.logs()}")
            states = self.node_states()
            return all(states.get(n) == "idle" for n in self.nodes)

        self.wait_for(idle, timeout, "the nodes to become idle")

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
        parts = []
        for path in sorted(self.root.glob("*.out")):  # each daemon's stdout and stderr
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            lines = [ln for ln in text.splitlines() if not _LOG_NOISE.search(ln)][-tail:]
            parts.append(f"--- {path.name} ---\n" + "\n".join(lines))
        return "\n".join(parts)
