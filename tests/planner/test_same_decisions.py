"""One snapshot, three executors, the same decisions: the planner daemon, the
simulator's policy of the same name and ``slurm-mig plan --start STATE.json`` decide
identically for every registered policy.

Two ways round:

* from Slurm: the daemon plans a cluster (running jobs, standing plans, waiting jobs),
  writes its status file as it does every cycle, and the CLI and the simulator's policy
  adapter are fed that file's snapshot;
* from the simulator: a real simulation is stopped at an instant with jobs waiting and
  running (idle instances, PCIe-bound jobs, standing plans and departures included), and
  the CLI and a fresh policy object are fed the snapshot the engine handed the running
  one (so the running policy's caches cannot have changed its mind).
"""

from __future__ import annotations

import json

import pytest
from support import squeue_job

from slurm_mig.cli import main
from slurm_mig.daemon.cycle import CycleInput, Estimate, plan_cycle
from slurm_mig.daemon.daemon import CycleReport
from slurm_mig.geometry import Placement, get_model
from slurm_mig.planner.decisions import decisions_to_json
from slurm_mig.planner.driver import BatchSettings
from slurm_mig.planner.registry import get_policy as registry_policy
from slurm_mig.planner.registry import policy_names
from slurm_mig.planner.snapshot import snapshot_from_json, snapshot_to_json
from slurm_mig.sim import SimJob, SimPolicy, simulate
from slurm_mig.slurm.assignment import Assignment
from slurm_mig.slurm.client import Job
from slurm_mig.slurm.jobrecord import admin_comment_for
from slurm_mig.workload import generate

A100 = get_model("A100-40GB")
NOW = 1_700_000_000.0
WINDOW = 30.0
POLICIES = [n for n in policy_names() if n != "fixpart-SIZES"] + ["fixpart-4-2-1"]


def decided(data: dict) -> dict:
    """What must agree: where each job starts now, the standing plans, the moves."""
    return {
        "placements": sorted(
            (p["job"], p["node"], p["local"], p["profile"], p["placement"]["start"])
            for p in data["placements"]
        ),
        "planned": sorted(
            (
                p["job"],
                p["node"],
                p["local"],
                p["profile"],
                p["placement"]["start"],
                p["batch"],
                p["order"],
            )
            for p in data["planned"]
        ),  # fmt: skip
        "moves": sorted((m["job"], m["node"], m["local"], m["profile"]) for m in data["moves"]),
    }


def cli_decisions(capsys, path, name) -> dict:
    assert main(["plan", "--start", str(path), "--planner", name, "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)


# ---------------------------------------------------------------------------
# From Slurm: the daemon's own snapshot


def slurm_job(jid, **kw) -> Job:
    return squeue_job(jid, **{"submit_time": NOW - 600, **kw})


def assignment(jid, node, gpu, profile, start, batch, order, seconds, issued) -> Assignment:
    prof = A100.profile(profile)
    return Assignment(
        jid, 0, node, gpu, A100.name, profile, Placement(start, prof.memory_slices), batch,
        order, seconds, issued,
    )  # fmt: skip


def slurm_view(algorithm: str) -> CycleInput:
    """Two nodes of two A100s: four running jobs, two standing plans (one of them free to
    start), eight jobs waiting past the window, two of them PCIe-bound."""
    tasks = generate(14, A100, "MIXEDSCALING", "WIDETIMES", 0.0, 11)
    est = {
        str(100 + i): Estimate(
            "train",
            {A100.name: {s: 20.0 * t for s, t in task.times.items()}},
            pcie=17.65 if i in (8, 9) else 0.0,
            alpha=1.07 if i in (8, 9) else 1.0,
            restartable=i % 2 == 0,
        )
        for i, task in enumerate(tasks)
    }
    running = [
        ("100", "gpu01", 0, "3g.20gb", 0, 300.0),
        ("101", "gpu01", 0, "1g.5gb", 6, 900.0),
        ("102", "gpu01", 1, "7g.40gb", 0, 120.0),
        ("103", "gpu02", 0, "4g.20gb", 0, 600.0),
    ]
    jobs = []
    for jid, node, gpu, prof, start, secs in running:
        a = assignment(jid, node, gpu, prof, start, 0, 0, secs, NOW - 200)
        jobs.append(
            slurm_job(
                jid,
                state="RUNNING",
                held=False,
                reason="None",
                admin_comment=admin_comment_for(a),
                required_nodes=node,
                nodes=node,
                start_time=NOW - 100,
            )
        )
    kept = [
        ("104", "gpu01", 0, "3g.20gb", 4, 1, 0, 200.0),  # free now: starts
        ("105", "gpu02", 0, "3g.20gb", 4, 1, 1, 150.0),
    ]
    for jid, node, gpu, prof, start, batch, order, secs in kept:
        a = assignment(jid, node, gpu, prof, start, batch, order, secs, NOW - 50)
        jobs.append(slurm_job(jid, admin_comment=admin_comment_for(a), required_nodes=node))
    jobs += [slurm_job(str(100 + i), submit_time=NOW - 300 + i) for i in range(6, 14)]
    return CycleInput(
        now=NOW,
        jobs=tuple(jobs),
        nodes={"gpu01": (A100.name, A100.name), "gpu02": (A100.name, A100.name)},
        estimates=est,
        algorithm=algorithm,
        batch_window=WINDOW,
        batch_size=0,
    )


@pytest.mark.parametrize("name", POLICIES)
def test_the_daemon_the_simulator_and_the_cli_decide_alike_from_slurm(tmp_path, capsys, name):
    result = plan_cycle(slurm_view(name))
    (snap,) = result.snapshots
    (got,) = result.decisions
    daemon = decisions_to_json(got, snap)
    # the status file the daemon writes after the cycle, read back by the CLI
    report = CycleReport(1, NOW, NOW, result, None, None, name, WINDOW, 0)
    status = tmp_path / "planner-status.json"
    status.write_text(json.dumps(report.to_json()))
    cli = cli_decisions(capsys, status, name)
    # the simulator's adapter, given the same snapshot (as JSON, as the engine would
    # hand it over: no memory of earlier snapshots)
    state = snapshot_from_json(json.loads(status.read_text())["state"][0])
    sim = SimPolicy(registry_policy(name), BatchSettings(window=WINDOW, size=0)).decide(state)
    assert decided(cli) == decided(daemon) == decided(decisions_to_json(sim, state))
    # and the daemon acts on exactly these decisions
    released = {a.job_id: a for a in result.actions if type(a).__name__ == "Release"}
    assert sorted(released) == sorted(p[0] for p in decided(daemon)["placements"])
    for job, node, local, profile, start in decided(daemon)["placements"]:
        a = released[job].assignment
        assert (a.node, a.gpu, a.profile, a.placement.start) == (node, local, profile, start)
    assert decided(daemon)["placements"] or decided(daemon)["planned"]  # it decided something


# ---------------------------------------------------------------------------
# From the simulator: a snapshot the engine handed a running policy


class Recorder(SimPolicy):
    """A SimPolicy that keeps, at one decision with work waiting and running, the
    snapshot it was given (as JSON) and what it decided."""

    def __init__(self, policy, settings, at: int):
        super().__init__(policy, settings)
        self.calls, self.at = 0, at
        self.seen: tuple[dict, dict] | None = None

    def decide(self, snap):
        self.calls += 1
        frozen = snapshot_to_json(snap) if self._worth_it(snap) else None
        got = super().decide(snap)
        # one where it started jobs, moved them or planned a new batch
        if frozen is not None and (got.places or got.moves or got.stats.get("batches")):
            self.seen = (frozen, decisions_to_json(got, snap))
        return got

    def _worth_it(self, snap) -> bool:
        return (
            self.seen is None
            and self.calls >= self.at
            and len(snap.pending) >= 3
            and len(snap.running) >= 2
        )


def workload() -> list[SimJob]:
    tasks = generate(60, A100, "MIXEDSCALING", "WIDETIMES", 0.0, 5)
    out = []
    for i, t in enumerate(tasks):
        times = {s: 10.0 * x for s, x in t.times.items()}
        out.append(
            SimJob(
                t.id,
                arrival=20.0 * i,
                times=times,
                pcie_demand=17.65 if i % 4 == 0 else 0.0,
                alpha=1.07,
                restartable=i % 3 == 0,
                size=(1, 2, None)[i % 3] if i % 5 else None,
            )
        )
    return out


@pytest.mark.parametrize("name", POLICIES)
def test_the_engine_the_cli_and_a_fresh_policy_decide_alike_from_the_simulator(
    tmp_path, capsys, name
):
    settings = BatchSettings(window=WINDOW, size=0)
    jobs = workload()
    if name.startswith("fixpart"):  # a static partition must hold every job's size
        jobs = [SimJob(j.id, j.arrival, j.times, pcie_demand=j.pcie_demand) for j in jobs]
    rec = Recorder(registry_policy(name), settings, at=25)
    simulate(jobs, rec, 2, 2, A100, seed=1)
    assert rec.seen is not None, "no decision with work waiting and running"
    state, engine = rec.seen
    path = tmp_path / "state.json"
    path.write_text(json.dumps({**state, "batch_window": WINDOW}))
    # the CLI reads a bare snapshot: give it the window through a status-file wrapper
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"state": [state], "batch_window": WINDOW, "batch_size": 0}))
    cli = cli_decisions(capsys, status, name)
    fresh = SimPolicy(registry_policy(name), settings).decide(snapshot_from_json(state))
    fresh_json = decisions_to_json(fresh, snapshot_from_json(state))
    assert decided(cli) == decided(engine) == decided(fresh_json)
    assert cli["wake_at"] == engine["wake_at"] == fresh_json["wake_at"]
