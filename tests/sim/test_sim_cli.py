"""``slurm-mig simulate`` as an operator runs it: the table, the JSON shape of the
issue, --check, --plot, the progress bar, and one-line errors with exit 2."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_mig.cli import main
from slurm_mig.sim.progress import Progress

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = ["simulate", "--gpus", "4", "--workload", "pcie-paper", "--jobs", "60"]


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_has_the_issues_shape(capsys):
    rc, out, err = run(capsys, *SMALL, "--pcie-bound", "0.6", "--policy", "baseline,far", "--json")
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert list(data["policies"]) == ["baseline", "far"]
    for summary in data["policies"].values():
        for key in ("jct_sum", "jct_mean", "wait_mean", "makespan", "energy_j"):
            assert isinstance(summary[key], float) and summary[key] > 0
        assert summary["jobs"] == 60
        assert summary["jct_sum"] == pytest.approx(60 * summary["jct_mean"])
    assert (data["gpus"], data["gpu_model"], data["seed"]) == (4, "A100-40GB", 0)


def test_the_table_compares_policies_against_the_first(capsys):
    rc, out, _ = run(capsys, *SMALL, "--policy", "baseline,far:moldable=false", "--seed", "3")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("pcie-paper: 60 jobs, 40 % PCIe-bound; 4 x A100-40GB; seed 3")
    header = next(line for line in lines if line.startswith("POLICY"))
    assert "JCT SUM" in header and "ENERGY kWh" in header and "VS FIRST" in header
    rows = [line for line in lines if line.startswith(("baseline", "far"))]
    assert [r.split()[0] for r in rows] == ["baseline", "far:moldable=false"]
    assert "+0.0 %" in rows[0]


def test_the_same_seed_gives_the_same_figures(capsys):
    def figures(seed):
        _, out, _ = run(capsys, *SMALL, "--seed", seed, "--json")
        data = json.loads(out)["policies"]
        return {p: {k: v for k, v in s.items() if k not in ("wall_s", "events_per_s")}
                for p, s in data.items()}  # fmt: skip

    assert figures("5") == figures("5")
    assert figures("5") != figures("6")


def test_check_reports_that_the_invariants_held(capsys):
    rc, out, _ = run(capsys, *SMALL, "--policy", "baseline", "--check")
    assert rc == 0 and "every invariant held" in out


def test_nodes_split_the_gpus(capsys):
    rc, out, _ = run(capsys, *SMALL, "--nodes", "2", "--policy", "baseline")
    assert rc == 0 and "4 x A100-40GB on 2 nodes" in out


def test_plot_writes_a_png(tmp_path, capsys):
    png = tmp_path / "sim.png"
    rc, _, err = run(capsys, *SMALL, "--plot", str(png))
    assert rc == 0 and png.read_bytes()[:8] == PNG_MAGIC
    assert f"plot written to {png}" in err


def test_a_job_file_runs(tmp_path, capsys):
    f = tmp_path / "jobs.csv"
    f.write_text(
        "id,arrival,runtime,size,pcie_demand,alpha\na,0,10,1,17.65,1.07\nb,0,10,1,17.65,1.07\n"
    )
    rc, out, _ = run(capsys, "simulate", "--gpus", "1", "--workload", str(f), "--json")
    data = json.loads(out)["policies"]["baseline"]
    assert rc == 0 and data["jobs"] == 2
    assert data["makespan"] > 12.0  # both on one GPU: Eq. 2 slows them by 1.26


BAD = [
    (["--workload", "nowhere.csv"], "no such file"),
    (["--workload", "pcie-paper", "--policy", "greedy"], "unknown policy 'greedy'"),
    (["--workload", "pcie-paper", "--policy", "far:fast"], "must be KEY=VALUE"),
    (["--workload", "pcie-paper", "--policy", "far:speed=2"], "unexpected keyword"),
    (["--workload", "pcie-paper", "--policy", "pcie-aware,baseline,baseline"], "twice"),
    (["--workload", "pcie-paper", "--nodes", "3"], "does not split evenly"),
    (["--workload", "pcie-paper", "--gpu-model", "V100"], "unknown GPU model 'V100'"),
    (["--workload", "miso-trace", "--pcie-bound", "0.2"], "pcie-paper preset only"),
    (["--workload", "pcie-paper", "--policy", "miso-opt"], "not MISO's online scheduler"),
    (["--workload", "pcie-paper", "--policy", "static:layout=4-2-2"], "not a full partition"),
    (["--workload", "pcie-paper", "--policy", "no-mig:layout=7"], "no-mig runs every job"),
]


@pytest.mark.parametrize(("extra", "needle"), BAD, ids=[b[1] for b in BAD])
def test_bad_input_is_one_line_exit_2(capsys, extra, needle):
    rc, out, err = run(capsys, "simulate", "--gpus", "4", *extra)
    assert rc == 2 and out == ""
    assert err.startswith("slurm-mig: error: ") and err.count("\n") == 1
    assert needle in err


@pytest.mark.parametrize("value", ["1.5", "-0.1", "lots"])
def test_pcie_bound_must_be_a_share(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--gpus", "4", "--workload", "pcie-paper", "--pcie-bound", value])
    assert exc.value.code == 2


def test_bad_input_from_the_real_command_has_no_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-m", "slurm_mig", "simulate", "--gpus", "2",
         "--workload", str(tmp_path / "none.json")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("slurm-mig: error: ") and "Traceback" not in res.stderr


def test_simulate_has_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    for word in ("pcie-paper", "miso-trace", "baseline", "far", "--check", "--plot"):
        assert word in out
    # the baselines a site runs and how each trace becomes MIG jobs
    for word in ("no-mig", "static:layout=7/4-3", "match=exact", "match=fit", "--load",
                 "t(s) = r (7/s)^b", "the same time on every size that fits",
                 "measured MIG throughput"):  # fmt: skip
        assert word in " ".join(out.split()), word


# ---------------------------------------------------------------------------
# progress


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_stays_quiet_on_short_runs():
    s = io.StringIO()
    p = Progress("sim", s, after=60.0)
    p(10, 100)
    p.close()
    assert s.getvalue() == ""


def test_progress_redraws_one_line_on_a_terminal():
    s = _Tty()
    p = Progress("sim", s, after=0.0)
    p(25, 100)
    p(50, 100)
    p.close()
    text = s.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and "50/100 jobs" in text


def test_progress_writes_plain_lines_every_tenth_elsewhere():
    s = io.StringIO()
    p = Progress("sim", s, after=0.0)
    for done in range(0, 101, 5):
        p(done, 100)
    lines = s.getvalue().splitlines()
    assert len(lines) == 11 and lines[-1].startswith("sim: 100/100 jobs")


def test_smart_mig_workload_reports_tardiness_energy_and_et(capsys):
    argv = ["simulate", "--gpus", "4", "--workload", "smart-mig-poisson", "--jobs", "120",
            "--rate-multiplier", "40", "--policy", "edf,met,cedf,smart-mig", "--json"]  # fmt: skip
    rc, out, err = run(capsys, *argv)
    assert rc == 0, err
    data = json.loads(out)
    assert list(data["policies"]) == ["edf", "met", "cedf", "smart-mig"]
    pols = data["policies"].values()
    t = sum(s["tardiness_mean"] for s in pols) / 4
    e = sum(s["energy_j"] for s in pols) / 4
    assert data["et_a"] == pytest.approx(t / (2 * e))  # a = t / (2 e), Eq. 4
    for s in pols:
        assert s["jobs"] == 120 and s["energy_j"] > 0 and s["tardiness_mean"] >= 0
        a = data["et_a"]
        assert s["et"] == pytest.approx((a * s["energy_j"] + s["tardiness_mean"]) / (a + 1))
    assert t > 0  # at 40x on 4 GPUs some jobs are late


# ---------------------------------------------------------------------------
# baselines and load on the command line


def _policies(capsys, *argv):
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_mixed_layouts_are_written_with_a_slash_or_a_comma(capsys):
    argv = ["simulate", "--gpus", "4", "--workload", "pcie-paper", "--jobs", "40"]
    data = _policies(
        capsys,
        *argv,
        "--policy",
        "static:layout=7,4-3:match=fit,no-mig,static:layout=7/4-3:match=fit",
    )
    assert list(data["policies"]) == [
        "static:layout=7,4-3:match=fit", "no-mig", "static:layout=7/4-3:match=fit"
    ]  # fmt: skip
    a, b = (
        data["policies"]["static:layout=7,4-3:match=fit"],
        data["policies"]["static:layout=7/4-3:match=fit"],
    )
    assert a["jct_sum"] == b["jct_sum"] and a["creates"] == b["creates"] == 6  # 7, 4-3, 7, 4-3


def test_first_fit_takes_layout_7(capsys):
    data = _policies(capsys, *SMALL, "--policy", "first-fit:layout=7,no-mig")
    ff, whole = data["policies"]["first-fit:layout=7"], data["policies"]["no-mig"]
    assert ff["jct_sum"] == whole["jct_sum"] and ff["creates"] == whole["creates"] == 4


def test_load_raises_the_arrival_rate_and_is_named_in_the_header(capsys):
    one = _policies(capsys, *SMALL, "--policy", "no-mig")
    two = _policies(capsys, *SMALL, "--policy", "no-mig", "--load", "2")
    assert "load x2" in two["description"] and "load" not in one["description"]
    assert two["policies"]["no-mig"]["wait_mean"] > one["policies"]["no-mig"]["wait_mean"]


@pytest.mark.parametrize("value", ["0", "0.01", "21", "lots", "nan"])
def test_load_must_be_within_its_range(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main([*SMALL, "--load", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--load" in err and ("0.05..20" in err or "not a number" in err)


def test_the_cli_and_build_workload_take_the_same_load_range():
    from slurm_mig.cli import simulate as cli
    from slurm_mig.sim import jobs

    assert cli.LOAD_RANGE == jobs.LOAD_RANGE


def test_the_cli_offers_the_simulators_priority_and_knowledge_modes():
    from slurm_mig.cli import simulate as cli
    from slurm_mig.sim import knowledge, priority

    assert set(cli.PRIORITY_MODES) == set(priority.PRIORITY_MODES)
    assert set(cli.KNOWLEDGE_MODES) == set(knowledge.KNOWLEDGE_MODES)


def test_site_conditions_are_chosen_named_and_the_waits_reported(capsys):
    rc, out, err = run(
        capsys, *SMALL, "--policy", "baseline", "--priority", "fairshare", "--knowledge",
        "learned", "--json",
    )  # fmt: skip
    assert rc == 0, err
    data = json.loads(out)
    assert (data["priority"], data["knowledge"]) == ("fairshare", "learned")
    assert data["description"].endswith("priority fairshare, knowledge learned")
    s = data["policies"]["baseline"]
    assert 0 <= s["wait_p95"] <= s["wait_p99"] <= s["wait_max"]
    rc, out, _ = run(capsys, *SMALL, "--policy", "baseline")
    assert "priority none, knowledge learned" in out  # the defaults, stated
    with pytest.raises(SystemExit) as exc:
        main([*SMALL, "--priority", "seniority"])
    assert exc.value.code == 2
    assert "invalid choice: 'seniority'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag,value,stated,wait_more,bad,says",
    [
        ("--cycle", 600.0, "paced by a 600 s cycle", 0.0, "-5", "-5 must be seconds within 0..86400"),
        ("--start-delay", 30.0, "start 30 s after release", 30.0, "nan", "nan must be seconds within 0..3600"),
    ],
)  # fmt: skip
def test_the_daemons_pace_and_start_delay_hold_back_the_dynamic_policies_only(
    capsys, flag, value, stated, wait_more, bad, says
):
    argv = [*SMALL, "--workload", "miso-trace", "--jobs", "40", "--policy", "adaptive,no-mig"]
    plain = _policies(capsys, *argv)["policies"]
    rc, out, err = run(capsys, *argv, flag, f"{value:g}", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data[flag[2:].replace("-", "_")] == value and data["description"].endswith(stated)
    held = data["policies"]
    same = ("jct_mean", "wait_mean", "makespan", "energy_j", "events")
    assert [held["no-mig"][k] for k in same] == [plain["no-mig"][k] for k in same]
    waits = held["adaptive"]["wait_mean"], plain["adaptive"]["wait_mean"]
    assert waits[0] > waits[1] and waits[0] >= waits[1] + wait_more - 1e-6
    with pytest.raises(SystemExit) as exc:
        main([*SMALL, flag, bad])
    assert exc.value.code == 2
    assert f"{flag}: {says}" in capsys.readouterr().err
