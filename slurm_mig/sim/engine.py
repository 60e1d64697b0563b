"""Discrete-event engine: arrivals, job ends, instance creation and wake-ups on one
heap, a policy asked what to do after each instant at which something happened (or,
paced as the planner daemon with ``cycle``, after a job start or end, the Prolog's and
the Epilog's notifications, and otherwise at most every ``cycle`` seconds: arrivals wait
for its next decision). ``start_delay`` models what passes between the daemon's release
of a job and its start besides the instance's creation (Slurm scheduling the released
job, the Prolog).

Jobs progress at rate ``1 / (T_size * slowdown)`` of their work per second, where
the slowdown is Eq. 2 of the PCIe paper over the PCIe-bound jobs running on the same
GPU; whenever that number changes, the remaining work of every PCIe-bound job there
is brought up to date and its end re-predicted (stale end events are skipped). The
state of each GPU is the planner's model (``planner.gpustate``), which the PCIe-aware
FAR replay executes on too.
Create and destroy operations take Table 1's times and run one after another per
GPU. Energy integrates the power curve over each GPU's busy compute slices. A job
placed on several instances (a static layout's gang) is ``sim.spread``'s.
A run that ends off its plan, or runs past it, by `limitevidence.late_threshold` is an
event in the policy's snapshot (``snapshot.events``), as the daemon reports it, so that
the driver re-plans the jobs planned on its GPU as the daemon's does.
Deterministic: ties are broken by arrival order and event sequence number.
"""

from __future__ import annotations

import heapq
import math
import time
from array import array
from collections.abc import Callable, Sequence
from types import MappingProxyType

from ..geometry import GpuModel, Slot, get_model
from ..limitevidence import late_threshold
from ..pcie import PCIE_MAX_A100
from ..planner.cluster_snapshot import Event
from ..planner.decisions import Create, Destroy, Move, Place
from ..planner.gpustate import JobRun, LiveInstance
from ..planner.snapshot import ClusterSnapshot
from ..planner.snapshot import Gpu as GpuView
from ..power import power_curve
from .api import PolicyError, RunningView, SimJob
from .cluster import EPS, Gpu, InvariantError, build_view, geometry_for
from .inputcheck import SimInputError, validate_jobs
from .invariants import DONE, HELD, PENDING, check_end, check_instant
from .metrics import SimResult
from .policyview import GpuList, RunningMap, running_view
from .site import SiteConditions, SiteView
from .spread import Spread, SpreadJobs

# Migration overhead: MISO's simulator draws it with mean 5 s.
MIGRATION_S = 5.0

_FINISH, _START, _CREATED, _WAKE = 0, 1, 2, 3
_PROGRESS_EVERY = 4096


def default_pcie_max(model: GpuModel) -> float:
    """PCIe_max per GPU: the paper's measured 30.08 GB/s on PCIe 4.0 models (A30,
    A100); twice that on the PCIe 5.0 generation (H100 and later), our assumption."""
    return PCIE_MAX_A100 if model.timing_family in ("A30", "A100") else 2 * PCIE_MAX_A100


def simulate(
    jobs: Sequence[SimJob],
    policy,
    nodes: int = 1,
    gpus_per_node: int = 1,
    model: GpuModel | str = "A100-40GB",
    seed: int = 0,
    *,
    pcie_max: float | None = None,
    migration_s: float = MIGRATION_S,
    check: bool = False,
    progress: Callable[[int, int], None] | None = None,
    priority: str = "none",
    knowledge: str = "oracle",
    cycle: float = 0.0,
    start_delay: float = 0.0,
) -> SimResult:
    """Run ``jobs`` on ``nodes x gpus_per_node`` GPUs under ``policy`` (a registered
    name, a ``sim.policies.SimPolicy``, or a registry policy object). ``check`` asserts
    every invariant after every instant. ``priority`` (none|age|fairshare) and
    ``knowledge`` (oracle|learned): the site's priority and what the policy knows of
    runtimes (``sim.site``; default: equal priorities and true runtimes). ``cycle``
    (seconds, 0 = off) paces a dynamic policy as the planner daemon is paced: it decides
    at each job start and end (the Prolog's and the Epilog's notifications) and
    otherwise at most every ``cycle`` seconds; ``start_delay`` (seconds) passes between
    such a policy's placement and the job's start, beside the instance's creation (the
    release through Slurm and the Prolog). A policy that models Slurm (static layouts,
    whole GPUs) is neither paced nor delayed."""
    from .policies import SimPolicy, get_policy

    if isinstance(policy, str):
        policy = get_policy(policy)
    elif not isinstance(policy, SimPolicy) and hasattr(policy, "kind"):
        policy = SimPolicy(policy)
    gm = get_model(model) if isinstance(model, str) else model
    site = SiteConditions.of(priority, knowledge)
    engine = Engine(
        jobs,
        policy,
        nodes,
        gpus_per_node,
        gm,
        seed,
        pcie_max,
        migration_s,
        check,
        site,
        cycle,
        start_delay,
    )
    return engine.run(progress)


class Engine(SpreadJobs):
    """One simulation: the cluster's state, the event heap, and the snapshots it hands
    to the policy (``snapshot()``)."""

    def __init__(
        self,
        jobs: Sequence[SimJob],
        policy,
        nodes: int,
        gpus_per_node: int,
        model: GpuModel,
        seed: int = 0,
        pcie_max: float | None = None,
        migration_s: float = MIGRATION_S,
        check: bool = False,
        site: SiteConditions | None = None,
        cycle: float = 0.0,
        start_delay: float = 0.0,
    ) -> None:
        if nodes < 1 or gpus_per_node < 1:
            raise SimInputError(
                f"a cluster needs at least one node and one GPU per node, not "
                f"{nodes} x {gpus_per_node}"
            )
        if not hasattr(policy, "decide"):
            raise SimInputError(f"{policy!r} is not a policy: it has no decide(snapshot)")
        self.policy = policy
        self.policy_name = str(getattr(policy, "name", type(policy).__name__))
        self.model = model
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.seed = seed
        self.pcie_max = float(pcie_max) if pcie_max else default_pcie_max(model)
        if not self.pcie_max > 0:
            raise SimInputError(f"pcie_max must be a positive GB/s figure, not {pcie_max}")
        self.migration_s = float(migration_s)
        if not (isinstance(cycle, int | float) and 0.0 <= cycle < math.inf):
            raise SimInputError(f"cycle must be seconds >= 0 (0: no pacing), not {cycle!r}")
        if not (isinstance(start_delay, int | float) and 0.0 <= start_delay < math.inf):
            raise SimInputError(f"start_delay must be seconds >= 0, not {start_delay!r}")
        # the daemon's pace and its release's delay (module doc); not Slurm's own
        slurm = bool(getattr(policy, "models_slurm", False))
        self.cycle = 0.0 if slurm else float(cycle)
        self.start_delay = 0.0 if slurm else float(start_delay)
        self._last_decide = -math.inf
        self.check = check
        self.geom = geometry_for(model)
        self.curve = power_curve(model)
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival, i))
        self.jobs: list[SimJob] = [jobs[i] for i in order]
        validate_jobs(self.jobs, model)
        self.index = {j.id: i for i, j in enumerate(self.jobs)}
        n = len(self.jobs)
        t0 = self.jobs[0].arrival if n else 0.0
        self.t0 = t0
        self.now = t0
        g_total = nodes * gpus_per_node
        self.gpu_state = [
            Gpu(k, k // gpus_per_node, model.memory_slices, t0) for k in range(g_total)
        ]
        self.state = bytearray(n)
        self.first_start = [math.nan] * n
        self.finish_t = [math.nan] * n
        self.exec_s = [0.0] * n
        self.planned_s = [math.nan] * n  # at its first start: the seconds planned
        self.alone_s = [math.nan] * n  # and its true seconds alone there
        self.held: dict[int, LiveInstance] = {}  # job index -> its (main) instance
        self.spread: dict[int, Spread] = {}  # job index -> its instances, if several
        self._pending: dict[str, SimJob] = {}
        self.pending = MappingProxyType(self._pending)
        self.heap: list = []
        self._wakes: set[float] = set()  # wake-up times already on the heap
        self.seq = 0
        self.done = 0
        self.arrived_count = 0
        self.creates = self.destroys = self.migrations = 0
        self.events = self.decisions = 0
        self.total_busy = 0
        self.util_t = array("d", [t0])
        self.util_busy = array("d", [0.0])
        self._changed: set[int] = set(range(g_total))
        self._arrived: list[SimJob] = []
        self._finished: list[tuple[str, int]] = []
        self._plan_events: list[Event] = []  # runs off their plan since the last snapshot
        self._run_plan: dict[int, tuple[float, float]] = {}  # job index -> (start, plan)
        self._late: list[tuple[float, int, float]] = []  # (late at, job index, its start)
        self._running_late: dict[int, Event] = {}  # job index -> its "runs late"
        self._first = True  # the first snapshot says "everything is new"
        self.gpus = GpuList(self._view_of, g_total)
        self.running_jobs = RunningMap(self)
        self._check_dirty: set[int] = set(range(g_total))
        self.site: SiteView | None = None
        if site is not None and not site.plain:
            slurm = bool(getattr(policy, "models_slurm", False))
            self.site = SiteView(site, self.jobs, model, t0, slurm=slurm, index=self.index)
        self.seen: Sequence[SimJob] = self.site.seen if self.site else self.jobs

    # -- the policy's snapshot ---------------------------------------------

    def _view_of(self, k: int) -> GpuView:
        g = self.gpu_state[k]
        v = g.view
        if v is None:
            expect = None
            if self.site is not None and self.site.learned:
                expect = self.site.expected_end
            v = g.view = build_view(g, self.seen, self.gpus_per_node, expect, self.now, self.spread)
        return v

    def snapshot(self) -> ClusterSnapshot:
        """The cluster now, for the policy (valid until the engine moves on)."""
        first = self._first
        self._first = False
        self._late_runs()
        snap = ClusterSnapshot(
            now=self.now,
            model=self.model,
            gpus=self.gpus,
            pending=self.pending,
            running=self.running_jobs,
            planned=MappingProxyType(getattr(self.policy, "planned", {})),
            next_batch=int(getattr(self.policy, "batches", 0)),
            pcie_max=self.pcie_max,
            seed=self.seed,
            arrived=None if first else tuple(self._arrived),
            finished=tuple(self._finished),
            changed=None if first else frozenset(self._changed),
            events=(*self._plan_events, *self._running_late.values()),
        )
        self._plan_events.clear()
        self._arrived.clear()
        self._finished.clear()
        self._changed.clear()
        return snap

    def _late_runs(self) -> None:
        """The runs that passed their plan by the threshold, each an event in every
        snapshot while it runs (the daemon's "runs late"). An end off plan is in the
        next snapshot only: the daemon keeps sending it, but a policy reads only the
        events since its oldest standing plan, and plans are made at snapshots."""
        late, now = self._late, self.now
        while late and late[0][0] <= now:
            at, idx, started = heapq.heappop(late)
            inst = self.held.get(idx)
            if inst is not None and self._run_plan.get(idx, (None,))[0] == started:
                what = f"job {self.jobs[idx].id} runs late"
                self._running_late[idx] = Event(at, what, inst.gpu)

    def _plan_event(self, at: float, what: str, idx: int) -> None:
        inst = self.held.get(idx)
        gpu = inst.gpu if inst is not None else None
        self._plan_events.append(Event(at, what, gpu))

    def running(self, job: str) -> RunningView | None:
        return running_view(self, job)

    # -- the loop ----------------------------------------------------------

    def run(self, progress: Callable[[int, int], None] | None = None) -> SimResult:
        wall0 = time.perf_counter()
        jobs, heap = self.jobs, self.heap
        n = len(jobs)
        arr = [j.arrival for j in jobs]
        ai = 0
        pop = heapq.heappop
        state = self.state
        pending = self._pending
        arrived = self._arrived
        site = self.site
        loops = 0
        inf = math.inf
        while True:
            th = heap[0][0] if heap else inf
            ta = arr[ai] if ai < n else inf
            t = th if th < ta else ta
            if t == inf:
                break
            if t < self.now - EPS:
                raise InvariantError(f"time went back from {self.now} to {t}")
            self.now = t
            trigger = False
            while ai < n and arr[ai] <= t:
                j = jobs[ai]
                state[ai] = PENDING
                if site is not None:
                    j = site.arrive(ai, t)  # the job as the policy sees it
                pending[j.id] = j
                arrived.append(j)
                ai += 1
                self.events += 1
                trigger = True
            self.arrived_count = ai
            notified = False  # a job started or ended: the hooks wake the daemon
            while heap and heap[0][0] <= t:
                _, _, kind, obj, tok = pop(heap)
                self.events += 1
                if kind == _FINISH:
                    if obj.ver != tok:
                        continue
                    self._finish(obj)
                    notified = True
                elif kind == _START:
                    if obj.job != tok or obj.run is not None:
                        continue
                    self._begin(obj)
                    notified = True
                elif kind == _WAKE:
                    self._wakes.discard(tok)
                trigger = True
            if trigger:
                if self._paced(notified):
                    self._decide()
                if self.check:
                    self._check_now()
            loops += 1
            if progress is not None and loops % _PROGRESS_EVERY == 0:
                progress(self.done, n)
        if self.done != n:
            self._stuck()
        if progress is not None:
            progress(self.done, n)
        if self.check:
            self._check_end()
        return self._result(time.perf_counter() - wall0)

    def _paced(self, notified: bool) -> bool:
        """Whether the policy decides now: always unpaced or after a job start or end,
        else once ``cycle`` seconds have passed since its last decision (a wake-up is
        put on the heap for then)."""
        if not self.cycle or notified:
            return True
        due = self._last_decide + self.cycle
        if self.now >= due - EPS:
            return True
        if due not in self._wakes:
            self._wakes.add(due)
            self._push(due, _WAKE, None, due)
        return False

    def _decide(self) -> None:
        self.decisions += 1
        self._last_decide = self.now
        site = self.site
        if site is not None:
            held = self.held
            site.refresh(self.now, self._pending, held)
            for inst in site.overdue(self.now, held):
                inst.view = None
                self._touch(self.gpu_state[inst.gpu])
                if self.spread:
                    self._touch_shares(inst.job)
        got = self.policy.decide(self.snapshot())
        for c in got.ops:
            tp = type(c)
            if tp is Place:
                if c.start > self.now + EPS:
                    self._bad(c, "a placement for later: the driver starts planned jobs")
                self._cmd_start(c)
            elif tp is Destroy:
                self._cmd_destroy(c)
            elif tp is Create:
                self._cmd_create(c)
            elif tp is Move:
                self._cmd_migrate(c)
            else:
                raise PolicyError(
                    f"policy {self.policy_name!r} returned {c!r}, which is not an "
                    "operation (Place, Create, Destroy or Move)"
                )
        at = got.wake_at
        if at is not None:
            if not isinstance(at, (int, float)) or math.isnan(at):
                self._bad(at, "its wake-up time is not a number")
            if at > self.now and at not in self._wakes:
                self._wakes.add(at)
                self._push(at, _WAKE, None, at)

    def _push(self, t: float, kind: int, obj, tok) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, tok))

    def _touch(self, g: Gpu) -> None:
        g.view = None
        self._changed.add(g.index)
        if self.check:
            self._check_dirty.add(g.index)

    # -- state changes -----------------------------------------------------

    def _energy(self, g: Gpu) -> None:
        now = self.now
        if now > g.last_t:
            g.energy += self.curve[g.busy_slices] * (now - g.last_t)
            g.last_t = now

    def _busy_change(self, g: Gpu, delta: int) -> None:
        self._energy(g)
        g.busy_slices += delta
        self.total_busy += delta
        if self.util_t[-1] == self.now:
            self.util_busy[-1] = self.total_busy
        else:
            self.util_t.append(self.now)
            self.util_busy.append(self.total_busy)

    def _ends(self, g: Gpu, runs: list[JobRun]) -> None:
        """Put the new ends of ``runs`` on the heap (their earlier ones are stale)."""
        for r in runs:
            r.inst.view = None
            self._push(r.finish, _FINISH, r, r.ver)
        if self.spread:
            for r in runs:
                self._touch_shares(r.idx)
        self._touch(g)

    def _begin(self, inst: LiveInstance) -> None:
        """The bound job starts running on its (now existing) instance."""
        now = self.now
        idx = inst.job
        job = self.jobs[idx]
        g = self.gpu_state[inst.gpu]
        sp = self.spread.get(idx) if self.spread else None
        seconds = job.times[inst.slot.size] if sp is None else sp.seconds
        run = JobRun(idx, inst, seconds, inst.rem, now, job.alpha, job.pcie_demand, job)
        inst.view = None
        plan = seconds if self.site is None else self.site.planned(inst)
        if math.isnan(self.first_start[idx]):
            self.first_start[idx] = now
            self.alone_s[idx] = seconds
            self.planned_s[idx] = plan
        self._running_late.pop(idx, None)  # a restart (a migration) is a new run
        if math.isfinite(plan):
            self._run_plan[idx] = (now, plan)
            heapq.heappush(self._late, (now + plan + late_threshold(plan), idx, now))
        self._busy_change(g, inst.slot.size)
        self._ends(g, g.start(run, now, self.pcie_max))
        if sp is not None:
            self._begin_shares(sp, run)
        if self.site is not None:
            self.site.began(inst, now)

    def _release(self, run: JobRun) -> LiveInstance:
        """Take a running job off its instance (it finished or migrates)."""
        inst = run.inst
        g = self.gpu_state[inst.gpu]
        inst.view = None
        self.exec_s[run.idx] += self.now - run.started
        self._busy_change(g, -inst.slot.size)
        if run.pcie:
            g.pcie_held -= 1
        self._ends(g, g.stop(run, self.now, self.pcie_max))
        del self.held[run.idx]
        return inst

    def _finish(self, run: JobRun) -> None:
        idx = run.idx
        if self.state[idx] != HELD:
            raise InvariantError(f"job {run.job.id!r} finished twice")
        if self.site is not None:
            self.site.ran_until_end(idx, run.started, self.now)
        started, plan = self._run_plan.pop(idx, (None, math.nan))
        self._running_late.pop(idx, None)
        ran = self.now - run.started
        if started == run.started and abs(ran - plan) > late_threshold(plan):
            word = "early" if ran < plan else "late"
            self._plan_event(self.now, f"job {run.job.id} ended {word}", idx)
        self._release(run)
        size = run.inst.slot.size
        sp = self.spread.pop(idx, None) if self.spread else None
        if sp is not None:
            self._release_shares(idx, sp)
            size = self._slowest(idx, sp)
        self.state[idx] = DONE
        self.finish_t[idx] = self.now
        self.done += 1
        self._finished.append((run.job.id, run.inst.gpu))
        if self.site is not None:
            self.site.finished(idx, size, self.now - run.started, self._pending)

    def _bind(self, g: Gpu, inst: LiveInstance, idx: int, rem: float, not_before: float) -> None:
        job = self.jobs[idx]
        inst.job = idx
        inst.rem = rem
        inst.start_at = not_before
        inst.view = None
        g.busy |= inst.mask
        if job.pcie_demand > 0.0:
            g.pcie_held += 1
        self.held[idx] = inst
        self.state[idx] = HELD
        t = inst.ready_at if inst.ready_at > not_before else not_before
        if t <= self.now:
            self._begin(inst)
        else:
            self._push(t, _START, inst, idx)
            self._touch(g)

    def _create(self, g: Gpu, order: int, cmd) -> LiveInstance:
        slot, mask = self.geom.slots[order], self.geom.masks[order]
        if mask & g.held:
            others = [str(i.slot) for i in g.insts.values() if i.mask & mask]
            self._bad(
                cmd,
                f"its memory slices overlap live instance(s) {', '.join(others)} on gpu "
                f"{g.index}; destroy idle ones first (planner.baseline.start_ops does)",
            )
        if self.check:
            start = self.now if self.now > g.channel else g.channel
            for m in range(slot.placement.start, slot.placement.end):
                if start < g.released[m] - EPS:
                    raise InvariantError(
                        f"gpu {g.index}: memory slice {m} re-used at {start} before its "
                        f"previous instance was destroyed at {g.released[m]}"
                    )
        inst = g.create(order, slot, mask, self.now, self.model.create_time(slot.size))
        self.creates += 1
        return inst

    # -- commands ----------------------------------------------------------

    def _bad(self, cmd, why: str):
        raise PolicyError(f"policy {self.policy_name!r} at t={self.now:.3f}: {cmd!r}: {why}")

    def _gpu(self, cmd, k) -> Gpu:
        if not isinstance(k, int) or not 0 <= k < len(self.gpu_state):
            self._bad(cmd, f"no gpu {k!r}; gpus are 0..{len(self.gpu_state) - 1}")
        return self.gpu_state[k]

    def _order(self, cmd, slot) -> int:
        order = self.geom.index_of(slot) if isinstance(slot, Slot) else None
        if order is None:
            self._bad(
                cmd, f"{slot!r} is not a legal instance of a planner size on {self.model.name}"
            )
        return order

    def _target(self, cmd, idx: int) -> tuple[Gpu, LiveInstance | None, int]:
        g = self._gpu(cmd, cmd.dst if type(cmd) is Move else cmd.gpu)
        order = self._order(cmd, cmd.slot)
        job = self.jobs[idx]
        size = cmd.slot.size
        if math.isinf(job.time(size)):
            self._bad(cmd, f"job {job.id!r} cannot run on size {size}")
        if job.memory > self.geom.slot_memory[order]:
            self._bad(cmd, f"job {job.id!r} needs more memory than size {size} has")
        inst = g.insts.get(order)
        if inst is not None and inst.job >= 0:
            self._bad(cmd, f"the instance is busy with job {self.jobs[inst.job].id!r}")
        return g, inst, order

    def _cmd_start(self, c: Place) -> None:
        idx = self.index.get(c.job)
        if idx is None:
            self._bad(c, f"no job {c.job!r}")
        if self.state[idx] != PENDING:
            what = {0: "not arrived yet", 2: "already started", 3: "finished"}[self.state[idx]]
            self._bad(c, f"job {c.job!r} is not pending ({what})")
        if c.more:
            return self._start_spread(c, idx)
        g, inst, order = self._target(c, idx)
        if inst is None:
            inst = self._create(g, order, c)
        del self._pending[c.job]
        if self.site is not None:
            self.site.placed(idx)
        self._bind(g, inst, idx, 1.0, self.now + self.start_delay)

    def _cmd_create(self, c: Create) -> None:
        g = self._gpu(c, c.gpu)
        inst = self._create(g, self._order(c, c.slot), c)
        self._push(inst.ready_at, _CREATED, None, 0)
        self._touch(g)

    def _cmd_destroy(self, c: Destroy) -> None:
        g = self._gpu(c, c.gpu)
        order = self._order(c, c.slot)
        inst = g.insts.get(order)
        if inst is None:
            self._bad(c, f"gpu {c.gpu} has no instance at {c.slot}")
        if inst.job >= 0:
            self._bad(c, f"the instance holds job {self.jobs[inst.job].id!r}")
        end = g.destroy(order, self.now, self.model.destroy_time(c.slot.size))
        for m in range(c.slot.placement.start, c.slot.placement.end):
            g.released[m] = end
        self.destroys += 1
        self._touch(g)

    def _cmd_migrate(self, c: Move) -> None:
        idx = self.index.get(c.job)
        if idx is None:
            self._bad(c, f"no job {c.job!r}")
        src = self.held.get(idx)
        if src is None or src.run is None:
            self._bad(c, f"job {c.job!r} is not running")
        if src.gpu != c.src:
            self._bad(c, f"job {c.job!r} runs on gpu {src.gpu}, not {c.src}")
        if not self.jobs[idx].restartable:
            self._bad(c, f"job {c.job!r} is not restartable")
        if idx in self.spread:
            self._bad(c, f"job {c.job!r} holds several instances; it cannot move")
        if src.gpu == c.dst and src.slot == c.slot:
            self._bad(c, "the job already runs there")
        run = src.run
        g, inst, order = self._target(c, idx)
        rem = run.remaining_at(self.now)
        self._release(run)
        if inst is None:
            inst = self._create(g, order, c)
        self.migrations += 1
        self._bind(g, inst, idx, rem, self.now + self.migration_s)

    # -- end ---------------------------------------------------------------

    def _stuck(self) -> None:
        waiting = [j.id for j in self._pending.values()]
        held = [self.jobs[i].id for i in self.held]
        sample = ", ".join(repr(x) for x in (waiting + held)[:5])
        raise PolicyError(
            f"policy {self.policy_name!r} left {len(waiting)} job(s) pending and "
            f"{len(held)} on instances with nothing left to happen at t={self.now:.3f} "
            f"(e.g. {sample}); a policy must start every job eventually"
        )

    def _check_now(self) -> None:
        check_instant(self, self._check_dirty)
        self._check_dirty.clear()

    def _check_end(self) -> None:
        check_end(self)

    def _result(self, wall: float) -> SimResult:
        t_end = max(self.finish_t, default=self.t0)
        if not self.jobs:
            t_end = self.t0
        energy = 0.0
        for g in self.gpu_state:
            self.now = t_end
            self._energy(g)
            energy += g.energy
        span = t_end - self.t0
        return SimResult(
            policy=self.policy_name,
            model=self.model.name,
            nodes=self.nodes,
            gpus=len(self.gpu_state),
            ids=[j.id for j in self.jobs],
            kinds=[j.kind for j in self.jobs],
            arrival=[j.arrival for j in self.jobs],
            start=list(self.first_start),
            finish=list(self.finish_t),
            exec_s=list(self.exec_s),
            planned_s=list(self.planned_s),
            alone_s=list(self.alone_s),
            energy_j=energy,
            idle_energy_j=self.curve[0] * len(self.gpu_state) * span,
            t0=self.t0,
            t_end=t_end,
            creates=self.creates,
            destroys=self.destroys,
            migrations=self.migrations,
            events=self.events,
            decisions=self.decisions,
            wall_s=wall,
            slices_total=self.model.compute_slices * len(self.gpu_state),
            util_t=self.util_t,
            util_busy=self.util_busy,
            deadline=[j.deadline for j in self.jobs],
        )
