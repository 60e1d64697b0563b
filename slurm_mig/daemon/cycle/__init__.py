"""One cycle of the planner daemon as a pure function: Slurm's view in, actions out.

``plan_cycle(cycle_input)`` reads an immutable `CycleInput` (the jobs of the MIG partition as
squeue shows them, the usable nodes and their GPU models, runtime estimates, the
planner settings, the standing plans of held jobs) and returns the `Action`s that move
Slurm towards the plan: hold, release with the assignment (AdminComment
``slurm-mig:{json}``, ReqNodeList, token), note why a job cannot be planned, learn a
runtime, requeue a job a policy moves. A held job's plan stays in the daemon
(`CycleResult.planned` becomes the next snapshot's ``plans``) until the job is
released: Slurm is written to for the jobs that start, never for the queue. A released
job's assignment lives in its AdminComment; a daemon restarted at any moment rebuilds
the busy view from Slurm and plans held jobs again.

The cycle in steps, each a function of its own module of this package:

1. `classify` (``classify``): each job of the partition is busy (running, configuring,
   completing, or released and not yet started, with an assignment), planned (held,
   with a standing assignment for this run on a usable GPU), waiting (held, no plan),
   to hold, to note (it cannot be planned), or finished (its runtime to learn; an early
   or late end, a failure, a requeue or a lost node is an event that may call for a
   re-plan).
2. `cluster_snapshots` (``clusters``): the planning core's `ClusterSnapshot` per GPU
   model: the GPUs of the usable nodes (nodes sorted by name, then GPU index), the busy
   jobs' instances, the standing plans, the waiting jobs with that model's runtimes,
   the events.
3. `schedule` (``schedule``): ``planner.driver`` with the policy the config names
   (``algorithm``): whether to re-plan, batches, planning through the registry, the
   release gate - the code the simulator runs too.
4. `assignments` (``assignments``): the driver's standing plans and releases as
   `Assignment`s (a plan that did not change keeps its record).
5. `link_reuse` and `early_releases` (``reuse``): ``keep_for``/``reuse_from`` where the
   next job on an instance runs on the identical instance, so the Epilog keeps it for
   that job; the held jobs released ahead of their slices (``afterany``).
6. `cycle_result` (``result``): what to release (with the record fields that changed),
   hold, note and learn; a released job whose plan broke and that goes out again in
   the same cycle is moved in place (`in_place_order`: one update, no hold and
   release around it).

Beside them: ``inputs`` (`CycleInput`, `Estimate`), ``actions`` (the `Action`s and
`CycleResult`), ``slots`` (an assignment's planner slot), ``waiting`` (what keeps a
pending job from starting: its begin time, its dependencies, a reason Slurm keeps a
released job pending for), ``arrays`` (a job array's throttle caps how many of its
tasks are planned), ``backoff`` (what the daemon keeps between cycles of the jobs Slurm
would not start), ``problems`` (why a job can never be planned), ``stale`` (a node's
record of a job not running there holds its slices: step 1 makes it busy), ``refused``
(a slot a job was requeued from twice in a row is barred for it: between steps 4 and 5
its plan moves to a free slot, or is dropped and the job deferred); the AdminComment
record, a job's phase and partition test are `slurm_mig.slurm.jobrecord`'s, the job-id
order `slurm_mig.jobids`'.

Jobs Slurm will not start are not planned, so they hold no slices: a held job whose
begin time is ahead or whose dependency is unmet, one a QOS or association limit would
keep pending (the site policy), the tasks of a job array past its throttle (``%N``)
minus those running or released. A released job Slurm keeps pending anyway is held
again: at once for a reason Slurm does not lift by itself (a limit, licenses, a
constraint, its array's throttle), after ``start_timeout`` for one that is normal for a
while (Resources, Priority: its slices' last job is leaving, the scheduler has not
reached it). It is not planned in that cycle (`CycleResult.limited`); the daemon's
`Backoff` keeps it unplanned for a delay that doubles each time (`BACKOFF_BASE` up to
`BACKOFF_MAX`), which ``explain`` shows; an array task is planned again once its
array's throttle, learned from the tasks Slurm kept back, leaves room.

Safety (no two jobs on overlapping slices of a GPU) rests on Slurm's view alone: a held
job is released only when no busy job and no job ordered before it on its GPU overlaps
it, and a released job stays busy until Slurm says it has left. The daemon writes the
AdminComment in the update before the release (and skips the release when that write
failed), so a busy job's slices are always known; a job moved in place has its old
record until the one update that gives it the new one, and those updates go out before
any release, each after the moves whose old slices it takes. Times in plans are seconds from
``snapshot.now``.
"""

from __future__ import annotations

from ...planner.driver import MIN_RUNTIME
from ...planner.gcpause import paused_gc
from ...slurm.jobrecord import (
    ACTIVE_STATES,
    ADMIN_TAG,
    PENDING_STATES,
    admin_comment_for,
    job_phase,
    job_sort_key,
    note_admin_comment,
    parse_admin_comment,
    record_fields,
)
from .actions import (
    Action,
    CycleResult,
    Hold,
    Learn,
    Note,
    Release,
    Requeue,
    moved_up_after,
)
from .assignments import assignments
from .backoff import BACKOFF_BASE, BACKOFF_MAX, Backoff
from .classify import OVERDUE_SECONDS, Classified, classify
from .clusters import cluster_snapshots, job_deadline
from .inputs import CycleInput, Estimate, JobLike, NodeRecord
from .policyset import PolicySet, configured_objective
from .refused import REFUSALS, Refusals, avoid_refused, requeued_by_slurm, requeued_runs
from .result import cycle_result, in_place_order
from .reuse import early_releases, link_reuse
from .schedule import schedule
from .stale import stale_job

__all__ = [
    "PolicySet",
    "configured_objective",
    "ACTIVE_STATES",
    "ADMIN_TAG",
    "BACKOFF_BASE",
    "BACKOFF_MAX",
    "MIN_RUNTIME",
    "OVERDUE_SECONDS",
    "PENDING_STATES",
    "Action",
    "Backoff",
    "Classified",
    "CycleResult",
    "Estimate",
    "Hold",
    "JobLike",
    "Learn",
    "NodeRecord",
    "Note",
    "REFUSALS",
    "Refusals",
    "Release",
    "Requeue",
    "CycleInput",
    "admin_comment_for",
    "assignments",
    "avoid_refused",
    "classify",
    "cluster_snapshots",
    "cycle_result",
    "early_releases",
    "in_place_order",
    "job_deadline",
    "job_phase",
    "job_sort_key",
    "link_reuse",
    "moved_up_after",
    "note_admin_comment",
    "parse_admin_comment",
    "plan_cycle",
    "record_fields",
    "requeued_by_slurm",
    "requeued_runs",
    "schedule",
    "stale_job",
]


def plan_cycle(snap: CycleInput, policies: PolicySet | None = None) -> CycleResult:
    """The actions this cycle takes, from Slurm's view alone (deterministic): the
    policies ``policies`` keeps (the daemon's, built once per run), else new ones."""
    with paused_gc():
        view = classify(snap)
        groups = cluster_snapshots(snap, view)
        decisions = schedule(snap, view, groups, policies)
        planned, released, requeues = assignments(snap, view, groups, decisions)
        planned, released = avoid_refused(snap, view, groups, planned, released)
        final = link_reuse(planned, [b for b in view.busy if not b.stale])
        ahead = early_releases(snap, view, final, released)
        return cycle_result(snap, view, groups, decisions, final, released, requeues, ahead)
