"""Fixtures that start real Slurm clusters on loopback (see cluster.LocalSlurm).

    def test_something(slurm):
        cluster = slurm(nodes=("gpu01", "gpu02"), prolog=Path(...), hook_env={...})
        job = cluster.sbatch("sleep 1", partition="mig", comment="mig:mem=4G")
        jobs = SlurmClient(env=cluster.env).jobs("mig")

``slurm`` starts clusters for one test; ``slurm_shared`` for all tests of a module
(faster; the tests must then leave the nodes as they found them). Every cluster is
stopped afterwards (every process of it: slurmstepds and jobs too), also when a test
fails or the run is interrupted (Ctrl-C, SIGTERM), and a failing test's report carries
its daemons' logs. Every cluster looks like a site (`E2E_DEFAULTS`): each node a host of its
own (``private_nodes``: a test inspecting a node reads ``cluster.node_path(node, path)``,
never for what the controller side should know) and jobs of nobody unless a test asks
for root (``user="0"``). Skipped where LocalSlurm cannot run (not root, Slurm not installed);
on CI ($CI set) as root, missing Slurm is a failure instead.

Which Slurm: $SLURM_MIG_SLURM, "host" (the default: Debian 12's 22.05) or the suite of
a root built by slurm_mig.demo.slurmroot ("trixie": 24.11, "sid": 26.05); `make test`
runs this suite once per release. The header of the run names the release.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from slurm_mig.demo.live import LiveCluster
from slurm_mig.demo.slurmroot import SlurmInstall, find_install
from slurm_mig.slurm.client import Job, SlurmClient

from .cluster import LocalSlurm, skip_reason

_SHARED: dict[str, list[LocalSlurm]] = {}  # module name -> its shared clusters
SLURM = os.environ.get("SLURM_MIG_SLURM", "host")
# What a site looks like: each node a host of its own (its slurmd, hooks and jobs in a
# mount namespace where the node-local paths are its own), jobs of an unprivileged user
# (nobody, by number: 26.05 refuses --uid=<name>). A test that is about root's jobs
# submits with user="0"; one that inspects a node reads cluster.node_path(node, path).
JOB_USER = "65534"
E2E_DEFAULTS = {"private_nodes": True, "job_user": JOB_USER}
# the same for a whole slurm-mig installation (slurm_mig.demo.live.LiveCluster), whose
# job_submit.lua then refuses root's jobs in the MIG partition, as at a site
LIVE_DEFAULTS = {**E2E_DEFAULTS, "allow_root_jobs": False}


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (a CI job's timeout, make's) ends the run as Ctrl-C does: the fixtures'
    finalizers then stop every cluster, slurmstepds and jobs included."""
    main = threading.current_thread() is threading.main_thread()
    if main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def pytest_report_header(config: pytest.Config) -> str:
    found = find_install(SLURM)
    if isinstance(found, str):
        return f"e2e Slurm: {SLURM}: not available: {found}"
    return f"e2e Slurm: {found.name} {found.version_text}"


def pytest_terminal_summary(terminalreporter) -> None:
    """Say which Slurm the e2e tests ran on (-q hides the header)."""
    terminalreporter.write_line(pytest_report_header(terminalreporter.config))


def require_local_slurm() -> SlurmInstall:
    """The Slurm under test; skip (or, on CI as root, fail) the calling test when
    LocalSlurm cannot run it."""
    reason = skip_reason(SLURM)
    if reason is None:
        found = find_install(SLURM)
        assert isinstance(found, SlurmInstall)
        return found
    if os.environ.get("CI") and os.geteuid() == 0:
        pytest.fail(f"end-to-end tests must run on CI: {reason}")
    pytest.skip(reason)


def require_accounting() -> None:
    """Skip (or, on CI as root, fail) the calling test where slurmdbd or MariaDB is
    missing for the Slurm under test."""
    reason = skip_reason(SLURM, accounting=True)
    if reason is not None:
        if os.environ.get("CI") and os.geteuid() == 0:
            pytest.fail(f"accounting tests must run on CI: {reason}")
        pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Attach the daemon logs of the test's clusters to a failed setup or call."""
    report = yield
    if report.failed and report.when in ("setup", "call"):
        module = getattr(getattr(item, "module", None), "__name__", "")
        for cluster in [*getattr(item, "_local_slurms", ()), *_SHARED.get(module, ())]:
            report.sections.append((f"slurm logs ({cluster.root})", cluster.logs()))
    return report


def _factory(clusters: list[LocalSlurm], install: SlurmInstall) -> Callable[..., LocalSlurm]:
    def start(**kwargs) -> LocalSlurm:
        cluster = LocalSlurm(**{"slurm": install, **E2E_DEFAULTS, **kwargs})
        clusters.append(cluster)
        return cluster.start()

    return start


@pytest.fixture
def slurm(request: pytest.FixtureRequest) -> Iterator[Callable[..., LocalSlurm]]:
    """A factory: ``slurm(**LocalSlurm fields)`` starts a cluster for this test."""
    install = require_local_slurm()
    clusters: list[LocalSlurm] = []
    request.node._local_slurms = clusters
    yield _factory(clusters, install)
    for cluster in clusters:
        cluster.stop()


@pytest.fixture(scope="module")
def slurm_shared(request: pytest.FixtureRequest) -> Iterator[Callable[..., LocalSlurm]]:
    """Like ``slurm``, but the clusters live until the module's last test."""
    install = require_local_slurm()
    clusters = _SHARED.setdefault(request.module.__name__, [])
    yield _factory(clusters, install)
    for cluster in clusters:
        cluster.stop()
    _SHARED.pop(request.module.__name__, None)


@pytest.fixture
def client(cluster: LocalSlurm) -> SlurmClient:
    """A SlurmClient of the module's ``cluster``."""
    return SlurmClient(env=cluster.env)


def squeue_job(client: SlurmClient, job_id: str) -> Job:
    """Job ``job_id`` as squeue shows it (it must be there, once)."""
    found = [j for j in client.jobs() if j.job_id == job_id]
    assert len(found) == 1, f"job {job_id} not in squeue"
    return found[0]


@contextmanager
def live_cluster(prefix: str, **kwargs) -> Iterator[LiveCluster]:
    """A whole slurm-mig installation (LiveCluster with `LIVE_DEFAULTS` and ``kwargs``) on
    the Slurm under test (or ``slurm=``, e.g. a root with the package installed), started in a fresh directory named ``prefix...`` that every
    user can pass through; stopped afterwards, and its directory removed unless
    $SLURM_MIG_E2E_KEEP is set."""
    install = kwargs.pop("slurm", None) or require_local_slurm()
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o755)
    cluster = LiveCluster(root, slurm=install, **{**LIVE_DEFAULTS, **kwargs})
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        if not os.environ.get("SLURM_MIG_E2E_KEEP"):
            shutil.rmtree(root, ignore_errors=True)


def assert_ran_as_planned(lc: LiveCluster, job_ids: Sequence[str]) -> None:
    """Each job saw its own planned instance, alive from before it started to its end;
    no two instances overlapped in slices and time; none is left behind."""
    from slurm_mig.demo.live import overlapping_lifetimes

    records = {r["job"]: r for r in lc.records()}
    planned = lc.assignments(job_ids)
    assert len(planned) == len(job_ids), (sorted(planned), job_ids)
    for j in job_ids:
        r, a = records[j], planned[j]
        assert (r["profile"], r["gpu"]) == (a.profile, a.gpu), (j, r, a)
        assert r["placement"] == [a.placement.start, a.placement.size], (j, r, a)
        assert r["uuid"].startswith("MIG-") and r["alive_at_end"], (j, r)
    assert overlapping_lifetimes(lc.audit()) == []
    assert lc.live_instances() == []  # no instance left behind


def wait_until(ok: Callable, timeout: float, what: str, poll: float = 0.3):
    """``ok()``'s first true value, asked every ``poll`` seconds; TimeoutError naming
    ``what`` when there is none within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = ok()
        if got:
            return got
        time.sleep(poll)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


# A test of an attack whose outcome does not depend on the Slurm release runs on the
# host's Slurm only (CI runs the suite once per release; see the Makefile's `test`).
host_release_only = pytest.mark.skipif(
    SLURM != "host", reason="release-independent: run on the host's Slurm only"
)


def one_on_every_release(values: list[str], kept: str) -> list:
    """Parameters of a test run once per value on the host's Slurm, and for ``kept``
    alone on the other releases: what varies (a policy) does not touch Slurm's release,
    the test's path through Slurm does, and one value walks it."""
    assert kept in values, kept
    return [v if v == kept else pytest.param(v, marks=host_release_only) for v in values]


def planner_address(lc: LiveCluster, what: str) -> tuple[str, int]:
    """The (host, port) of the planner's ``[planner] <what>`` (metrics, notify, reports)."""
    from slurm_mig.config import load_config, parse_address

    address = parse_address(getattr(load_config(lc.config_path), what))
    assert address is not None
    return address


def notify_wakes(lc: LiveCluster, key: bytes, tries: int, cycle: float) -> int:
    """Of ``tries`` genuine datagrams sent from 127.0.0.2 (another node) just after a
    cycle, how many started the next cycle well before the ``cycle`` timer would."""
    import socket

    from slurm_mig.slurm.notify import sign

    woke = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.2", 0))
        for i in range(tries):
            n = lc.status()["cycle"]
            done = lc.wait_status(lambda st, n=n: st["cycle"] > n, 30)
            s.sendto(sign(key, "ended", f"99999{i}", time.time()), planner_address(lc, "notify"))
            nxt = lc.wait_status(lambda st, d=done: st["cycle"] > d["cycle"], 30)
            woke += nxt["started"] - done["finished"] < 0.6 * cycle
    return woke
