"""Workloads of the simulator: the PCIe paper's preset, the trace presets read from
the shared data (skipped where it is absent), Poisson arrivals, and job files."""

from __future__ import annotations

import collections
import json
import math
import random
import statistics

import pytest
from support import shared_file

from slurm_mig.geometry import get_model
from slurm_mig.sim.jobs import (
    PCIE_TYPES,
    WorkloadError,
    _covering_size,
    alibaba,
    build_workload,
    load_jobs,
    miso_trace,
    pcie_paper,
    philly,
    poisson_arrivals,
    shared_data_dir,
)

A100 = get_model("A100-40GB")
A30 = get_model("A30-24GB")


def test_poisson_arrivals_have_the_asked_mean_and_a_seed():
    a = poisson_arrivals(20000, 3.0, random.Random(1))
    gaps = [y - x for x, y in zip([0.0, *a], a)]
    assert statistics.fmean(gaps) == pytest.approx(3.0, rel=0.03)
    assert a == poisson_arrivals(20000, 3.0, random.Random(1))
    assert a != poisson_arrivals(20000, 3.0, random.Random(2))


@pytest.mark.parametrize("share", [0.0, 0.2, 0.4, 0.6, 1.0])
def test_pcie_paper_has_the_asked_share_of_pcie_bound_jobs(share):
    jobs = pcie_paper(500, share, 4, A100, seed=3)
    bound = [j for j in jobs if j.pcie_demand > 0]
    assert len(bound) == round(500 * share)
    kinds = {j.kind for j in bound}
    assert kinds <= {"Bloom560m", "Bloom7b1"}


def test_pcie_paper_jobs_carry_table_2():
    jobs = pcie_paper(300, 0.6, 4, A100, seed=0)
    seen = {}
    for j in jobs:
        seen.setdefault(j.kind, j)
        demand, alpha, size = PCIE_TYPES[j.kind]
        assert j.pcie_demand == demand
        if demand:
            assert j.alpha == alpha and j.size == size
            # transfer-bound: the same time on every size it can use
            assert len(set(j.times.values())) == 1
        else:
            assert j.size in (1, 2, 3)
            assert j.times[7] < j.times[j.size]  # ResNet50 speeds up on more slices
        assert 40.0 <= j.times[j.size] <= 60.0
        assert min(j.times) == j.size  # cannot run below its requested size
    assert set(seen) == {"ResNet50", "Bloom560m", "Bloom7b1"}
    assert (seen["Bloom560m"].pcie_demand, seen["Bloom560m"].alpha) == (5.7, 1.25)
    assert (seen["Bloom7b1"].pcie_demand, seen["Bloom7b1"].alpha) == (17.65, 1.07)


def test_pcie_paper_offers_85_percent_of_the_slices():
    for gpus in (4, 60):
        jobs = pcie_paper(3000, 0.4, gpus, A100, seed=1)
        work = math.fsum(j.size * j.times[j.size] for j in jobs)
        span = jobs[-1].arrival
        assert work / (span * gpus * 7) == pytest.approx(0.85, rel=0.08)


def test_pcie_paper_is_deterministic_per_seed_and_refuses_a_bad_share():
    assert pcie_paper(50, 0.4, 4, A100, 7) == pcie_paper(50, 0.4, 4, A100, 7)
    assert pcie_paper(50, 0.4, 4, A100, 7) != pcie_paper(50, 0.4, 4, A100, 8)
    with pytest.raises(WorkloadError, match="within"):
        pcie_paper(50, 1.5, 4, A100)


def test_default_job_counts_follow_the_paper():
    assert len(build_workload("pcie-paper", A100, 60)) == 1400
    assert len(build_workload("pcie-paper", A100, 4)) == 93
    assert len(build_workload("pcie-paper", A100, 4, jobs=10)) == 10


def test_pcie_bound_is_only_for_the_pcie_preset(tmp_path):
    with pytest.raises(WorkloadError, match="pcie-paper preset only"):
        build_workload("miso-trace", A100, 4, pcie_bound=0.2)


@pytest.mark.parametrize(
    ("milli", "size7", "size4"),
    [(1, 1, 1), (142, 1, 1), (143, 2, 1), (250, 2, 1), (251, 2, 2), (460, 4, 2), (1000, 7, 4)],
)
def test_alibaba_share_maps_to_the_smallest_covering_profile(milli, size7, size4):
    assert _covering_size(milli, A100) == size7
    assert _covering_size(milli, A30) == size4


# ---------------------------------------------------------------------------
# trace presets (shared data)


def test_miso_trace_replays_the_templates_with_measured_speeds():
    shared_file("traces/miso-socc22/trace_100.json")
    runtime = json.loads(shared_file("traces/miso-socc22/trace_100.json").read_text())
    models = json.loads(shared_file("traces/miso-socc22/job_models.json").read_text())
    jobs = miso_trace(300, A100, seed=0)
    assert len(jobs) == 300
    full = sorted(j.times[7] for j in jobs)
    assert full == sorted(float(runtime[str(i % 100)]) for i in range(300))
    assert {j.kind for j in jobs} <= set(models.values())
    for j in jobs:
        finite = sorted(j.times)
        assert finite[-1] == 7 and all(j.times[s] >= j.times[7] * 0.99 for s in finite)
        assert j.memory > 0
    bert = [j for j in jobs if j.kind.startswith("bert")]
    assert all(1 not in j.times for j in bert)  # did not fit on 1g.5gb
    # first third at mean 5 s, the rest at 10 s
    gaps = [b.arrival - a.arrival for a, b in zip(jobs, jobs[1:])]
    assert statistics.fmean(gaps[:99]) < statistics.fmean(gaps[100:])
    assert miso_trace(300, A100, seed=0) == jobs


def test_a_miso_templates_reruns_are_one_users():
    """A rerun belongs to the template's owner, so a user's history of a kind says what
    a site's does; owners are spread over several users and change with the seed."""
    runtime = json.loads(shared_file("traces/miso-socc22/trace_100.json").read_text())
    models = json.loads(shared_file("traces/miso-socc22/job_models.json").read_text())
    templates = collections.Counter((models[k], float(t)) for k, t in runtime.items())
    jobs = miso_trace(1000, A100, seed=0)
    owners: dict[tuple, set[str]] = {}
    for j in jobs:
        owners.setdefault((j.kind, j.times[7]), set()).add(j.user)
    # (a model and a runtime name a template, but for the few that share both)
    assert all(len(users) <= templates[key] for key, users in owners.items())
    assert len({u for users in owners.values() for u in users}) >= 5
    other = miso_trace(1000, A100, seed=1)
    assert [j.user for j in other] != [j.user for j in jobs]


def test_alibaba_pods_become_sized_jobs():
    shared_file("traces/alibaba-gpu-v2023-openb/openb_pod_list_default.csv")
    jobs = alibaba(500, A100)
    assert len(jobs) == 500
    assert all(j.size == min(j.times) and j.times[j.size] > 0 for j in jobs)
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)
    assert {j.size for j in jobs} >= {1, 7}


def test_philly_samples_runtimes_as_full_gpu_times():
    shared_file("traces/philly-runtimes/philly_runtime.csv")
    jobs = philly(200, 8, A100, seed=4)
    assert len(jobs) == 200 and all(j.times[1] >= j.times[7] > 0 for j in jobs)
    assert philly(200, 8, A100, seed=4) == jobs


def test_a_missing_shared_folder_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_MIG_SHARED_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(WorkloadError, match="SLURM_MIG_SHARED_DATA"):
        shared_data_dir()
    with pytest.raises(WorkloadError, match="SLURM_MIG_SHARED_DATA"):
        build_workload("miso-trace", A100, 4)
    monkeypatch.setenv("SLURM_MIG_SHARED_DATA", str(tmp_path))
    with pytest.raises(WorkloadError, match="no such file in the shared data"):
        build_workload("miso-trace", A100, 4)


# ---------------------------------------------------------------------------
# files


def test_csv_jobs_with_per_size_times_and_options(tmp_path):
    f = tmp_path / "jobs.csv"
    f.write_text(
        "id,arrival,1,2,3,4,7,size,pcie_demand,alpha,restartable,memory_mib,kind\n"
        "a,0,100,60,inf,40,30,,5.7,1.25,1,1024,bloom\n"
        "b,12.5,inf,inf,inf,inf,10,7,0,1,0,,\n"
    )
    a, b = load_jobs(f, A100)
    assert a.times == {1: 100.0, 2: 60.0, 4: 40.0, 7: 30.0} and a.size is None
    assert (a.pcie_demand, a.alpha, a.restartable, a.memory, a.kind) == (
        5.7,
        1.25,
        True,
        2**30,
        "bloom",
    )
    assert b.arrival == 12.5 and b.size == 7 and b.times == {7: 10.0}


def test_runtime_and_size_mean_the_same_time_on_larger_sizes(tmp_path):
    f = tmp_path / "jobs.csv"
    f.write_text("id,arrival,runtime,size\nx,1,50,3g\n")
    (x,) = load_jobs(f, A100)
    assert x.size == 3 and x.times == {3: 50.0, 4: 50.0, 7: 50.0}


def test_json_jobs(tmp_path):
    f = tmp_path / "jobs.json"
    f.write_text(json.dumps({"jobs": [{"id": "a", "arrival": 3, "times": {"1": 5, "7": 1}}]}))
    (a,) = load_jobs(f, A100)
    assert a.times == {1: 5.0, 7: 1.0} and a.arrival == 3.0


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("id,arrival,1,7\na,0,5\n", "3 columns, the header has 4"),
        ("id,arrival,1,7\na,-1,5,1\n", "arrival -1.0 must be >= 0"),
        ("id,arrival,1,7\na,x,5,1\n", "arrival 'x' is not a number"),
        ("id,arrival,1,7\na,0,inf,inf\n", "every time is inf"),
        ("id,arrival,1,5\na,0,1,1\n", "size 5"),
        ("id,arrival,runtime\na,0,5\n", "needs 'size'"),
        ("id,arrival\na,0\n", "no runtime"),
        ("id,arrival,1,7\na,0,1,1\na,0,1,1\n", "duplicate job id 'a'"),
        ("id,arrival,1,7,restartable\na,0,1,1,maybe\n", "restartable 'maybe'"),
        ('[{"id": 1,}]', "not valid JSON"),
        ("", "empty file"),
    ],
)
def test_bad_job_files_name_the_row_and_the_fix(tmp_path, content, needle):
    f = tmp_path / ("jobs.json" if content.startswith("[") else "jobs.csv")
    f.write_text(content)
    with pytest.raises(WorkloadError, match=needle.replace("(", r"\(")):
        load_jobs(f, A100)


def test_a_missing_file_says_which_presets_exist(tmp_path):
    with pytest.raises(WorkloadError, match="pcie-paper, miso-trace"):
        build_workload(str(tmp_path / "nope.csv"), A100, 1)


# ---------------------------------------------------------------------------
# load: every preset's arrival rate times X


def _arrivals(jobs):
    return [j.arrival for j in jobs]


def test_load_scales_the_poisson_presets_arrivals():
    one = build_workload("pcie-paper", A100, 4, 50, seed=2)
    two = build_workload("pcie-paper", A100, 4, 50, seed=2, load=2.0)
    assert _arrivals(two) == pytest.approx([t / 2 for t in _arrivals(one)])
    assert [j.times for j in two] == [j.times for j in one]


@pytest.mark.parametrize(
    ("preset", "data"),
    [
        ("miso-trace", "traces/miso-socc22/trace_100.json"),
        ("alibaba", "traces/alibaba-gpu-v2023-openb/openb_pod_list_default.csv"),
        ("philly", "traces/philly-runtimes/philly_runtime.csv"),
    ],
)
def test_load_scales_every_trace_presets_arrival_rate(preset, data):
    shared_file(data)
    one = build_workload(preset, A100, 8, 200, seed=1)
    for x in (0.5, 3.0):
        got = build_workload(preset, A100, 8, 200, seed=1, load=x)
        assert _arrivals(got) == pytest.approx([t / x for t in _arrivals(one)])
        assert [(j.id, j.times) for j in got] == [(j.id, j.times) for j in one]


def test_load_multiplies_the_smart_mig_rate():
    for preset in ("smart-mig-poisson", "smart-mig"):
        got = build_workload(preset, A100, 4, 300, rate_multiplier=10.0, load=2.0)
        want = build_workload(preset, A100, 4, 300, rate_multiplier=20.0)
        assert got == want


def test_load_scales_a_files_arrivals_and_keeps_its_deadlines_distance(tmp_path):
    p = tmp_path / "jobs.csv"
    p.write_text("id,arrival,runtime,size,deadline\na,0,10,1,\nb,100,10,1,150\n")
    jobs = build_workload(str(p), A100, 1, load=4.0)
    assert [(j.arrival, j.deadline) for j in jobs] == [(0.0, None), (25.0, 75.0)]
    assert build_workload(str(p), A100, 1) == load_jobs(p, A100)


@pytest.mark.parametrize("bad", [0.0, 0.01, 25.0, -1.0, math.nan, math.inf, "lots"])
def test_a_load_outside_its_range_is_one_clear_error(bad):
    with pytest.raises(WorkloadError, match=r"--load .*(0\.05\.\.20|not a number)"):
        build_workload("pcie-paper", A100, 4, 20, load=bad)
