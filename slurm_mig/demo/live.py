"""A whole slurm-mig installation on a loopback Slurm: config, key, hooks, simulated MIG
GPUs and the planner daemon, for the end-to-end tests and the live ``make demo``.

`LiveCluster` writes a config for ``nodes`` x ``gpus`` simulated GPUs, starts Slurm
(slurm_mig.demo.localslurm) with our Prolog, Epilog, TaskProlog and job_submit.lua, seeds
the runtime store with profiled runtimes, runs ``slurm-mig planner`` as a separate
process, submits jobs that sleep their kernel's time on the slice they were given
(slurm_mig/demo/job.py) and collects what ran: the jobs' own records, the
simulated devices' audit logs and each job's planned assignment (its AdminComment).
With ``static_layout`` it is Slurm alone on a fixed MIG layout instead (a site without
slurm-mig): the layout made once on the simulated GPUs, one typed gres.conf record per
instance, no hooks, no job_submit.lua, no planner.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..geometry import Placement, get_model
from ..job import Job
from ..runtimes import RuntimeStore
from ..slurm.assignment import Assignment, generate_key
from ..slurm.client import SlurmClient
from ..slurm.jobrecord import parse_admin_comment
from .localslurm import LocalSlurm
from .slurmconf import LayoutInstance
from .slurmroot import SlurmInstall

ROOT = Path(__file__).resolve().parents[2]
INSTALLED_BIN = "/opt/slurm-mig/bin"  # where the .deb and .rpm put the commands
DONE_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
)


@dataclass
class LiveCluster:
    """slurm-mig on a loopback Slurm; ``with LiveCluster(root) as lc: ...``."""

    root: Path
    nodes: Sequence[str] = ("node1",)
    gpus: int = 2
    model: str = "A100-40GB"
    latency_scale: float = 1.0
    planner: Mapping[str, object] = field(default_factory=dict)  # [planner] overrides
    reuse_wait: float = 30.0  # [hooks]
    slurm: SlurmInstall | None = None  # which Slurm release (None: the host's)
    # the demo's and most tests' jobs run as root: job_submit.lua's ALLOW_ROOT_JOBS set
    # in the cluster's copy (a site keeps it false: root can leave its device cgroup)
    allow_root_jobs: bool = True
    # nodes as hosts of their own (LocalSlurm.private_nodes): the run, state, simulated
    # GPU and log directories are each node's own, the daemon's are the host's; the
    # config's run_dir is then one path (as at a site) instead of one per node (%n)
    private_nodes: bool = False
    job_user: str | None = None  # who `submit` submits as by default (None: root)
    # Slurm accounting (LocalSlurm.accounting: MariaDB and slurmdbd; associations,
    # fairshare, QOS and limits through `cluster.add_account` & co.)
    accounting: bool = False
    # more LocalSlurm fields (task_plugin, cgroup_conf, ... for a device-isolation test)
    slurm_options: Mapping[str, object] = field(default_factory=dict)
    # Slurm alone on a fixed MIG layout (as the simulator's ``static:layout=``: GPU k of
    # the cluster, nodes in order, gets partition k mod n): made on the simulated GPUs
    # at start, one gres.conf record per instance typed by its profile (`layout`), and
    # no hooks, job_submit.lua or planner. None: slurm-mig.
    static_layout: str | None = None
    # slurm-mig as its package installs it in the release's root (``slurm``, a root
    # with the .deb installed): the hooks, job_submit.lua (its `site-files`) and the
    # planner run from /opt/slurm-mig there, not from this source tree
    installed: bool = False
    cluster: LocalSlurm | None = field(default=None, init=False)
    daemon: subprocess.Popen | None = field(default=None, init=False)

    # --- paths ---------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "etc" / "config.toml"

    @property
    def sim_root(self) -> Path:
        return self.root / "sim"

    @property
    def run_root(self) -> Path:
        return self.root / "run"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def log_file(self) -> Path:
        """[paths] log_file: the daemon's on the host, each node's hooks' on the node
        (`node_path`) with private nodes, one file for all without."""
        return self.log_dir / "slurm-mig.log"

    def node_path(self, node: str, path: str | Path) -> Path:
        """Where ``path`` as ``node`` sees it lies on the host (LocalSlurm.node_path):
        for a test that inspects a node, never for what the controller should know."""
        assert self.cluster is not None
        return self.cluster.node_path(node, path)

    def run_dir(self, node: str) -> Path:
        """The node's slurm-mig run_dir (node state, runtimes.jsonl, node-metrics.prom),
        where the host reaches it."""
        return self.node_path(node, self.run_root if self.private_nodes else self.run_root / node)

    def sim_dir(self, node: str) -> Path:
        """The node's simulated GPUs (its "hardware"), where the host reaches them."""
        return self.node_path(node, self.sim_root / node)

    @property
    def job_log(self) -> Path:
        return self.root / "jobs.jsonl"

    @property
    def daemon_log(self) -> Path:
        return self.root / "planner.log"

    @property
    def metrics_url(self) -> str:
        """The daemon's /metrics address (the web page is at its root)."""
        from ..config import load_config

        return f"http://{load_config(self.config_path).metrics}/metrics"

    @property
    def env(self) -> dict[str, str]:
        assert self.cluster is not None
        return self.cluster.env

    # --- life cycle ----------------------------------------------------------------------
    def start(self) -> LiveCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        dirs = (self.root, self.root / "etc", self.sim_root, self.run_root, self.state_dir)
        for d in (*dirs, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o755)  # the TaskProlog runs as the job's user
        self.job_log.touch()
        os.chmod(self.job_log, 0o666)
        key = self.root / "etc" / "key"
        if not key.exists():
            generate_key(key)
        self._write_config(key)
        static = self.static_layout is not None
        hooks = {"SLURM_MIG_CONFIG": str(self.config_path)}
        prolog, epilog, task_prolog = self._hooks()
        self.cluster = LocalSlurm(
            nodes=tuple(self.nodes),
            cpus=8 * self.gpus,
            prolog=None if static else prolog,
            epilog=None if static else epilog,
            task_prolog=None if static else task_prolog,
            hook_env={} if static else hooks,
            job_submit_lua=None if static else self._job_submit_lua(),
            root=self.root / "slurm",
            slurm=self.slurm,
            gres={} if static else {n: [self.model] * self.gpus for n in self.nodes},
            mig_layout=self.layout() if static else {},
            private_nodes=self.private_nodes,
            node_dirs=(self.run_root, self.state_dir, self.sim_root, self.log_dir),
            job_user=self.job_user,
            accounting=self.accounting,
            **self.slurm_options,
        )
        self.cluster.start()
        if static:
            self._make_layout()
        return self

    def _hooks(self) -> tuple[Path, Path, Path]:
        """The Prolog, Epilog and TaskProlog: the installed package's, or this tree's."""
        if self.installed:
            bin_dir = Path(INSTALLED_BIN)
            names = ("slurm-mig-prolog", "slurm-mig-epilog", "slurm-mig-taskprolog")
            return tuple(bin_dir / n for n in names)  # type: ignore[return-value]
        return (
            ROOT / "prolog" / "slurm-mig-prolog",
            ROOT / "epilog" / "slurm-mig-epilog",
            ROOT / "prolog" / "slurm-mig-taskprolog",
        )

    def command(self, *args: str) -> list[str]:
        """The argv of ``slurm-mig ARGS``: the installed one inside the release's root
        (``installed``), else this tree's with this interpreter."""
        if not self.installed:
            return [sys.executable, "-m", "slurm_mig", *args]
        if self.slurm is None or self.slurm.root is None:
            raise ValueError("installed=True needs slurm=, a root with the package installed")
        return self.slurm.argv([f"{INSTALLED_BIN}/slurm-mig", *args])

    def layout(self) -> dict[str, list[LayoutInstance]]:
        """Node -> the instances of `static_layout` on its GPUs, smallest first (the
        order of its gres.conf records: Slurm gives an untyped request the first free
        record of the node it picks, so the smallest free instance there)."""
        from ..planner.online import parse_layout

        model = get_model(self.model)
        parts = parse_layout(self.static_layout or "auto", model)
        out: dict[str, list[LayoutInstance]] = {}
        for n, node in enumerate(self.nodes):
            mine = []
            for gpu in range(self.gpus):
                for slot in parts[(n * self.gpus + gpu) % len(parts)]:
                    name = model.profile_for_slot(slot).name
                    inst = LayoutInstance(gpu, self.model, name, slot.placement)
                    mine.append((slot.size, gpu, slot.placement.start, inst))
            out[node] = [inst for *_, inst in sorted(mine)]
        return out

    def _make_layout(self) -> None:
        """Create `static_layout`'s instances on each node's simulated GPUs (once, as a
        site's mig-parted would at boot)."""
        from ..devices.simulated import SimulatedBackend

        for node, instances in self.layout().items():
            backend = SimulatedBackend(self.sim_dir(node), [self.model] * self.gpus)
            for inst in sorted(instances, key=lambda i: (i.gpu, i.placement.start)):
                backend.create(inst.gpu, inst.profile, inst.placement)

    def _job_submit_lua(self) -> Path:
        """job_submit.lua as a site installs it: written by `slurm-mig site-files` from
        this cluster's config (its partition, MAX_MIG_MEM of its GPU model)."""
        site = self.root / "site"
        subprocess.run(
            self.command("site-files", "--force", "--config", str(self.config_path), str(site)),
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        lua = site / "job_submit.lua"
        if self.allow_root_jobs:
            text = lua.read_text()
            line = "local ALLOW_ROOT_JOBS = false"
            assert line in text, f"{lua} has no line {line!r}"
            lua.write_text(text.replace(line, "local ALLOW_ROOT_JOBS = true"))
        return lua

    def stop(self) -> None:
        self.stop_planner()
        if self.cluster is not None:
            self.cluster.stop()

    def __enter__(self) -> LiveCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_config(self, key: Path) -> None:
        from .localslurm import free_port

        planner = {
            "batch_window": 2.0,
            "cycle": 0.3,
            "default_runtime": 60.0,
            "notify": f"127.0.0.1:{free_port()}",
            # the nodes report runs, instances and memory needs; the planner reads no
            # node file (state_dir and the nodes' run dirs are apart)
            "reports": f"127.0.0.1:{free_port()}",
            "metrics": f"127.0.0.1:{free_port()}",
            "web": True,
            # FAR's shortest plans: the demo shows them, the e2e tests hold Slurm to them
            # (a balanced plan of seconds-long jobs has more hand-offs, each ~1 s of
            # Slurm latency no plan models); adaptive, the daemon's default, and the
            # other objectives run where a test names them
            "algorithm": "far",
            **self.planner,
        }
        from ..planner.registry import policy_info

        if (
            "objective" not in planner
            and "makespan" in policy_info(planner["algorithm"]).objectives
        ):
            planner["objective"] = "makespan"
        planner = {k: v for k, v in planner.items() if v is not None}  # None: the site's default
        lines = ["[slurm]", 'partition = "mig"', "", "[nodes]"]
        lines += [f'"{n}" = {json.dumps([self.model] * self.gpus)}' for n in self.nodes]
        lines += [
            "",
            "[paths]",
            f'state_dir = "{self.state_dir}"',
            f'run_dir = "{self.run_root}{"" if self.private_nodes else "/%n"}"',
            f'key_file = "{key}"',
            f'log_file = "{self.log_file}"',
            f'public_file = "{self.root / "public" / "plan.json"}"',
            "",
            "[planner]",
            *(f"{k} = {json.dumps(v)}" for k, v in planner.items()),
            "",
            "[device]",
            'backend = "simulated"',
            f'simulated_dir = "{self.sim_root}/%n"',
            f"latency_scale = {self.latency_scale}",
            "",
            "[hooks]",
            f"reuse_wait = {self.reuse_wait}",
        ]
        self.config_path.write_text("\n".join(lines) + "\n")
        os.chmod(self.config_path, 0o644)

    # --- planner -------------------------------------------------------------------------
    def learn(self, tasks: Sequence[Job], scale: float) -> None:
        """Seed the runtime store as if every kernel had run once on every size."""
        store = RuntimeStore(self.state_dir / "profiles.sqlite")
        now = time.time()
        for t in tasks:
            for size, seconds in t.times.items():
                store.record(t.id, self.model, size, seconds * scale, f"seed-{t.id}-{size}", 0, now)

    def start_planner(self) -> None:
        log = open(self.daemon_log, "a")  # noqa: SIM115 - the daemon's lifetime
        self.daemon = subprocess.Popen(
            self.command("-v", "planner", "--config", str(self.config_path)),
            env=self.env if self.installed else {**self.env, "PYTHONPATH": str(ROOT)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def stop_planner(self, sig: int = signal.SIGTERM) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(sig)
            try:
                self.daemon.wait(10)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        self.daemon = None

    def runtimes(self) -> list[dict]:
        """The Epilogs' records of every node (runtimes.jsonl)."""
        out = []
        for node in self.nodes:
            private = self.run_dir(node) / "private"  # root's alone since issue 10
            for path in (private / "runtimes.jsonl.1", private / "runtimes.jsonl"):
                if path.exists():
                    out += [json.loads(line) for line in path.read_text().splitlines() if line]
        return out

    def status(self) -> dict:
        """The planner's last cycle (planner-status.json), {} before the first."""
        try:
            return json.loads((self.state_dir / "planner-status.json").read_text())
        except (OSError, ValueError):
            return {}

    def wait_status(self, ok, timeout: float = 120.0) -> dict:
        """The first status for which ``ok(status)`` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            if st and ok(st):
                return st
            time.sleep(0.05)
        raise TimeoutError(f"the planner's status did not come to pass in {timeout:.0f} s")

    def wait_plan(self, n: int, timeout: float = 120.0) -> dict:
        """The status of the first planner cycle that has planned ``n`` jobs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            if st.get("planned", 0) >= n:
                return st
            time.sleep(0.05)
        raise TimeoutError(f"the planner did not plan the {n} jobs in {timeout:.0f} s")

    # --- jobs ----------------------------------------------------------------------------
    def submit(
        self,
        kernel: str,
        scale: float,
        user: str | None = None,
        hints: str = "",
        args: Sequence[str] = (),
    ) -> str:
        """Submit a kernel of the profiled set (``hints``: more ``mig:`` settings, e.g.
        ``deadline=10m``; ``args``: more sbatch options, e.g. ``--deadline=now+1hour``)."""
        assert self.cluster is not None
        user = self.job_user if user is None else user
        python = self.cluster.job_python(user)
        wrap = (
            f"SLURM_MIG_T0=$(date +%s.%N) exec env PYTHONPATH={ROOT} {python} "
            f"-m slurm_mig.demo.job {kernel} {scale} {self.sim_root} {self.job_log}"
        )
        comment = f"mig:key={kernel}" + (f",{hints}" if hints else "")
        return self.cluster.sbatch(
            wrap, *args, partition="mig", comment=comment, name=kernel, user=user
        )

    def jobs(self) -> dict[str, object]:
        return {j.job_id: j for j in SlurmClient(env=self.env).jobs("mig")}

    def wait_done(self, job_ids: Sequence[str], timeout: float) -> dict[str, object]:
        """Wait until every job has ended (and its epilog ran); their last records."""
        deadline = time.monotonic() + timeout
        while True:
            jobs = self.jobs()
            if all(j in jobs and jobs[j].state in DONE_STATES for j in job_ids):
                return jobs
            if time.monotonic() > deadline:
                left = {j: jobs[j].state if j in jobs else "?" for j in job_ids}
                left = {j: s for j, s in left.items() if s not in DONE_STATES}
                raise TimeoutError(f"jobs not done after {timeout:.0f} s: {left}")
            time.sleep(0.5)

    def assignments(self, job_ids: Sequence[str]) -> dict[str, Assignment]:
        """Each job's planned assignment as its AdminComment holds it."""
        jobs = self.jobs()
        out = {}
        for j in job_ids:
            a = parse_admin_comment(jobs[j].admin_comment) if j in jobs else None
            if a is not None:
                out[j] = a
        return out

    def records(self) -> list[dict]:
        """What the jobs themselves saw and did (one line per finished job)."""
        return [json.loads(ln) for ln in self.job_log.read_text().splitlines() if ln.strip()]

    def audit(self) -> list[dict]:
        """Every create and destroy on every node's simulated GPUs, in time order."""
        out = []
        for node in self.nodes:
            path = self.sim_dir(node) / "audit.jsonl"
            if path.exists():
                for ln in path.read_text().splitlines():
                    if ln.strip():
                        out.append({**json.loads(ln), "node": node})
        return sorted(out, key=lambda r: r["start"])

    def live_instances(self) -> list[tuple[str, object]]:
        from ..devices.simulated import SimulatedBackend

        return [
            (node, inst)
            for node in self.nodes
            if (self.sim_dir(node) / "state.json").exists()
            for inst in SimulatedBackend(self.sim_dir(node)).instances()
        ]


def overlapping_lifetimes(audit: Sequence[dict]) -> list[str]:
    """Pairs of instances that lived at the same time on overlapping memory slices."""
    lives: dict[tuple[str, int, str], list] = {}
    for r in audit:
        k = (r["node"], r["gpu"], r["uuid"])
        pl = (r["placement"]["start"], r["placement"]["start"] + r["placement"]["size"])
        if r["op"] == "create":
            lives[k] = [pl, r["start"], float("inf")]
        elif k in lives:
            lives[k][2] = r["end"]
    items = list(lives.items())
    bad = []
    for i, ((n1, g1, u1), (p1, s1, e1)) in enumerate(items):
        for (n2, g2, u2), (p2, s2, e2) in items[i + 1 :]:
            if (n1, g1) == (n2, g2) and p1[0] < p2[1] and p2[0] < p1[1] and s1 < e2 and s2 < e1:
                bad.append(f"{n1} gpu {g1}: {u1} and {u2} overlap in slices and time")
    return bad


def handoff_gaps(records: Sequence[dict]) -> list[float]:
    """Seconds from a slice being freed to the next job on it starting (Slurm, hooks and
    planner cycle together), one per job that had a predecessor on its slices."""
    gaps = []
    for r in records:
        p = Placement(*r["placement"])
        before = [
            o["end"]
            for o in records
            if (o["node"], o["gpu"]) == (r["node"], r["gpu"])
            and Placement(*o["placement"]).overlaps(p)
            and o["end"] <= r["start"]
        ]
        if before:
            gaps.append(r["start"] - max(before))
    return gaps


def slice_handoffs(records: Sequence[dict], runtimes: Sequence[dict]) -> list[float]:
    """Seconds from a slice being freed (the Epilog of the last job on it done: instance
    destroyed, or kept for this job) to the next job on it running (its batch script
    begun), one per job that had a predecessor on its slices. What the planner and Slurm
    add between two jobs; the jobs' own start-up and exit are not in it."""
    freed = {str(r["job_id"]): r["freed"] for r in runtimes if "freed" in r}
    gaps = []
    for r in records:
        p = Placement(*r["placement"])
        before = [
            freed[o["job"]]
            for o in records
            if (o["node"], o["gpu"]) == (r["node"], r["gpu"])
            and Placement(*o["placement"]).overlaps(p)
            and o["end"] <= r["start"]
            and o["job"] in freed
        ]
        if before:
            gaps.append(r.get("launched", r["start"]) - max(before))
    return gaps


def chain_length(assignments: Mapping[str, Assignment]) -> int:
    """Most jobs that run one after another on any one memory slice of a GPU."""
    count: dict[tuple[str, int, int], int] = {}
    for a in assignments.values():
        for m in range(a.placement.start, a.placement.end):
            key = (a.node, a.gpu, m)
            count[key] = count.get(key, 0) + 1
    return max(count.values(), default=0)
