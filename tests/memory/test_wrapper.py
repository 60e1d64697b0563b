"""``mig-run`` as an operator runs it: the real executable, real child processes, real
torch on the CPU with an emulated capacity, the simulated MIG backend on disk, and
stand-ins for ``squeue``/``scontrol`` on PATH that record their arguments."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from oomtexts import OOM_TEXTS

from slurm_mig.geometry import get_model
from slurm_mig.memory.modes import with_mem_hint
from slurm_mig.memory.options import Options, UsageError, parse_options
from slurm_mig.memory.slices import target_profile
from slurm_mig.memory.trace import Sample, human, read_trace
from slurm_mig.memory.watch import merge_samples
from slurm_mig.runtimes import RuntimeStore

ROOT = Path(__file__).resolve().parents[2]
MIG_RUN = [sys.executable, str(ROOT / "wrappers" / "mig-run")]
WORKLOADS = ROOT / "tests" / "workloads"
A100 = get_model("A100-40GB")
GIB = 2**30


def mig_run(*args: str, env: dict | None = None, timeout: float = 240, **kw):
    full = dict(os.environ)
    full.pop("SLURM_JOB_ID", None)
    full.update(env or {})
    return subprocess.run(
        [*MIG_RUN, *args], capture_output=True, text=True, env=full, timeout=timeout, **kw
    )


def script(tmp_path: Path, text: str, name: str = "job.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def audit(sim: Path) -> list[tuple[str, str]]:
    lines = (sim / "audit.jsonl").read_text().splitlines()
    return [(r["op"], r["profile"]) for r in map(json.loads, lines)]


def uuids(sim: Path) -> dict[str, str]:
    """profile -> uuid of the instances the simulated backend created."""
    lines = (sim / "audit.jsonl").read_text().splitlines()
    return {r["profile"]: r["uuid"] for r in map(json.loads, lines) if r["op"] == "create"}


# ---------------------------------------------------------------------------
# Pure parts


def test_target_is_the_smallest_larger_profile_that_covers_the_need():
    p = target_profile(A100, need=6 * GIB, current=5 * GIB)
    assert p.name == "1g.10gb"  # 1 compute slice beats 2g.10gb's 2 for the same memory
    assert target_profile(A100, need=100, current=30 * GIB).name == "7g.40gb"
    assert target_profile(A100, need=64 * GIB, current=0) is None
    assert target_profile(A100, need=GIB, current=A100.profile("7g.40gb").memory_bytes) is None


def test_mem_hint_is_set_in_the_mig_word_and_other_words_are_kept():
    assert with_mem_hint("", 123) == "mig:mem=123"
    assert with_mem_hint("run 7 migplan=abc", 5) == "run 7 mig:mem=5"  # the token is the planner's
    assert (
        with_mem_hint("a mig:key=x [slurm-mig: not planned yet: begin]", 5) == "a mig:key=x,mem=5"
    )
    assert with_mem_hint("x mig:key=llm,mem=1G,iters=9 y", 42) == "x mig:key=llm,iters=9,mem=42 y"


def test_a_backlog_of_samples_is_merged_keeping_the_peaks():
    rows = [Sample(i, 100 + (50 if i == 3 else 0), requested_current=i) for i in range(10)]
    merged = merge_samples(rows, 4)
    assert [s.iteration for s in merged] == [2, 5, 8, 9]
    assert [s.requested_peak for s in merged] == [100, 150, 100, 100]
    assert merged[1].requested_current == 5
    assert merge_samples(rows[:3], 4) == rows[:3]


def test_options_split_at_the_double_dash_and_keep_the_command_whole():
    o = parse_options(["--capacity", "10GiB", "--", "python", "t.py", "--capacity", "1"])
    assert o == Options(command=("python", "t.py", "--capacity", "1"), capacity=10 * GIB)
    o = parse_options(["--slice", "1g.5gb", "python", "t.py", "-x"])
    assert o.command == ("python", "t.py", "-x") and o.slice == "1g.5gb"
    with pytest.raises(UsageError, match="not allowed with argument --slice"):
        parse_options(["--slice", "1g.5gb", "--capacity", "1G", "--", "true"])


# ---------------------------------------------------------------------------
# Bad input: one line, exit status 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--slice", "9g.99gb", "--", "true"], "--slice '9g.99gb': no GPU model has this profile"),
        (
            ["--slice", "1g.5gb", "--gpu-model", "H100-80GB", "--", "true"],
            "--slice: H100-80GB has no profile '1g.5gb'",
        ),
        (["--slice", "1g.10gb", "--", "true"], "exists on A100-40GB, A100-80GB, H100-80GB"),
        (["--gpu-model", "V100", "--", "true"], "--gpu-model: unknown GPU model 'V100'"),
        (["--capacity", "1G", "--context", "2G", "--", "true"], "not above the context overhead"),
        (["--slice", "1g.5gb", "--context", "5G", "--", "true"], "not above the context"),
        (["--capacity", "12X", "--", "true"], "unknown unit 'X'"),
        (["--slice", "1g.5gb"], "no command to run"),
        (["--slice", "1g.5gb", "--"], "no command to run"),
        (["--gpu-model", "A100-40GB", "--", "true"], "give --slice PROFILE or --capacity SIZE"),
        (["--max-restarts", "-1", "--capacity", "1G", "--", "true"], "-1 must be >= 0"),
        (["--capacity", "1G", "--mode", "slurm", "--", "true"], "needs $SLURM_JOB_ID"),
    ],
)
def test_bad_input_is_one_error_line(args, message):
    done = mig_run(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mig-run: error: "), done.stderr
    assert message in lines[0]


# ---------------------------------------------------------------------------
# The child's process: argv, stdio, exit status, signals


def test_argv_stdin_stdout_and_exit_status_pass_through(tmp_path):
    job = script(
        tmp_path,
        """
        import json, sys
        print(json.dumps(sys.argv[1:]))
        print(sys.stdin.read().upper(), end="")
        sys.exit(7)
        """,
    )
    args = ["a b", "--capacity", "'quoted'", "$HOME"]
    done = mig_run("--capacity", "1G", "--", sys.executable, job, *args, input="hello\n")
    assert done.returncode == 7
    assert done.stdout == json.dumps(args) + "\nHELLO\n"
    assert done.stderr == ""


def test_a_child_killed_by_a_signal_exits_128_plus_the_signal(tmp_path):
    job = script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert mig_run("--capacity", "1G", "--", sys.executable, job).returncode == 128 + 9


def signal_job(tmp_path: Path, exit_on: str) -> str:
    """A job that logs each SIGTERM and SIGUSR1 it gets to its first argument, after
    "ready" once its handlers are set; it exits 0 on ``exit_on``, else after 60 s."""
    return script(
        tmp_path,
        f"""
        import signal, sys, time
        from pathlib import Path
        log = Path(sys.argv[1])
        def note(sig, frame):
            with log.open("a") as f:
                f.write(signal.Signals(sig).name + "\\n")
            if sig == signal.{exit_on}:
                sys.exit(0)
        signal.signal(signal.SIGTERM, note)
        signal.signal(signal.SIGUSR1, note)
        log.write_text("ready\\n")
        end = time.monotonic() + 60
        while time.monotonic() < end:
            time.sleep(0.05)
        """,
    )


def logged(log: Path, word: str, deadline: float) -> None:
    """Wait until ``word`` is in ``log`` (or the monotonic ``deadline``)."""
    while not (log.exists() and word in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_sigterm_and_sigusr1_to_mig_run_reach_the_child(tmp_path):
    job = signal_job(tmp_path, "SIGTERM")
    log = tmp_path / "signals.log"
    proc = subprocess.Popen(
        [*MIG_RUN, "--capacity", "1G", "--", sys.executable, job, str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    logged(log, "ready", deadline)
    proc.send_signal(signal.SIGUSR1)
    logged(log, "SIGUSR1", deadline)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert log.read_text().split() == ["ready", "SIGUSR1", "SIGTERM"]
    assert proc.returncode == 0, err  # the child's own exit status


def test_a_signal_that_comes_while_the_child_is_being_started_still_reaches_it(
    tmp_path, monkeypatch
):
    """Under load the child can be running before mig-run has its handle (a unit run lost
    a SIGUSR1 so): the signal waits for the handle, then goes to the child."""
    import slurm_mig.memory.runner as runner_module

    job = signal_job(tmp_path, "SIGUSR1")  # without it, the job ends after 60 s
    log = tmp_path / "signals.log"
    real = subprocess.Popen

    def started_then_signalled(*args, **kw):
        child = real(*args, **kw)
        logged(log, "ready", time.monotonic() + 60)
        os.kill(os.getpid(), signal.SIGUSR1)  # handled here, before mig-run holds `child`
        time.sleep(0.2)
        return child

    monkeypatch.setattr(runner_module.subprocess, "Popen", started_then_signalled)
    opts = parse_options(["--capacity", "1G", "--", sys.executable, job, str(log)])
    code = runner_module.Runner(opts, env={**os.environ}, forecaster=lambda *a: None).run()
    assert log.read_text().split() == ["ready", "SIGUSR1"]
    assert code == 0


# ---------------------------------------------------------------------------
# Real torch workloads


def test_an_unmodified_script_runs_and_every_sample_is_traced(tmp_path):
    out = tmp_path / "trace.csv"
    done = mig_run(
        "--capacity", "1G", "--trace", str(out), "--",
        sys.executable, str(WORKLOADS / "decoder_kv.py"), "--iters", "40",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "final iteration 39\n"
    rows = read_trace(out)
    assert [s.iteration for s in rows] == list(range(39))  # forwards 2..40 end iterations
    assert rows[-1].requested_peak > rows[0].requested_peak  # the KV cache grew
    assert not out.with_name("trace.1.csv").exists()


def test_forecast_restarts_the_job_on_a_larger_simulated_slice(tmp_path):
    sim, out, seen = tmp_path / "sim", tmp_path / "t.csv", tmp_path / "seen.txt"
    job = (
        f'echo "$CUDA_VISIBLE_DEVICES $SLURM_MIG_CAPACITY_EMULATE $SLURM_MIG_RESTART" >> {seen}; '
        f"exec {sys.executable} {WORKLOADS / 'growing_batch.py'} --sleep 0.04"
    )
    done = mig_run(
        "--capacity", "8MiB", "--gpu-model", "A100-40GB", "--emulate",
        "--sim-dir", str(sim), "--trace", str(out), "--", "sh", "-c", job,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "final iteration 119\n"  # the relaunched job ran to its end
    assert "mig-run: restart 1 of 2: forecast at iteration" in done.stderr
    small = A100.profile("1g.5gb")
    uuid = uuids(sim)["1g.5gb"]
    first, second = seen.read_text().splitlines()
    assert first.split() == [str(8 * 2**20), "0"]  # no MIG instance yet
    assert second.split() == [uuid, str(small.memory_bytes), "1"]
    assert audit(sim) == [("create", "1g.5gb"), ("destroy", "1g.5gb")]  # removed at the end
    before, after = read_trace(out), read_trace(tmp_path / "t.1.csv")
    assert len(after) == 120
    oom_at = next(s.iteration for s in after if s.requested_peak > 8 * 2**20)
    assert len(before) <= 0.15 * oom_at  # decided long before the cap was reached


OOM_JOB = """
    import os
    print(os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ["SLURM_MIG_CAPACITY_EMULATE"])
    import torch  # the probe starts here
    x = torch.empty({size}, dtype=torch.uint8)  # never touched: no host memory used
    print("allocated", x.numel(), flush=True)
"""


def test_a_real_oom_restarts_on_the_smallest_profile_covering_the_observed_peak(tmp_path):
    sim = tmp_path / "sim"
    job = script(tmp_path, OOM_JOB.format(size=6 * GIB))
    done = mig_run(
        "--slice", "1g.5gb", "--gpu-model", "A100-40GB", "--emulate", "--sim-dir", str(sim),
        "--", sys.executable, job,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ids = uuids(sim)
    small, large = A100.profile("1g.5gb").memory_bytes, A100.profile("1g.10gb").memory_bytes
    assert done.stdout.splitlines() == [
        f"{ids['1g.5gb']} {small}",
        f"{ids['1g.10gb']} {large}",
        f"allocated {6 * GIB}",
    ]
    assert "torch.OutOfMemoryError: emulated device out of memory" in done.stderr
    assert (
        "out of memory at iteration 0 on 1g.5gb (4.9 GiB) (torch.OutOfMemoryError): "
        "observed peak 6.0 GiB" in done.stderr
    )
    assert "relaunching on 1g.10gb" in done.stderr
    assert audit(sim) == [
        ("create", "1g.5gb"),
        ("create", "1g.10gb"),
        ("destroy", "1g.5gb"),
        ("destroy", "1g.10gb"),
    ]


def test_without_a_backend_an_emulated_restart_changes_only_the_capacity(tmp_path):
    job = script(tmp_path, OOM_JOB.format(size=6 * GIB))
    done = mig_run(
        "--slice", "1g.5gb", "--gpu-model", "A100-40GB", "--emulate", "--",
        sys.executable, job,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    small, large = A100.profile("1g.5gb").memory_bytes, A100.profile("1g.10gb").memory_bytes
    assert done.stdout.splitlines() == [f"None {small}", f"None {large}", f"allocated {6 * GIB}"]


def test_a_forecast_past_the_restart_limit_warns_once_and_lets_the_job_run(tmp_path):
    done = mig_run(
        "--capacity", "6MiB", "--gpu-model", "A100-40GB", "--emulate", "--max-restarts", "0",
        "--", sys.executable, str(WORKLOADS / "decoder_kv.py"), "--sleep", "0.04",
    )  # fmt: skip
    assert done.returncode == 1  # the real OOM, later: the forecast did not kill the job
    warnings = [line for line in done.stderr.splitlines() if line.startswith("mig-run: warning")]
    assert len(warnings) == 1
    assert "restart limit reached (0 of --max-restarts 0); the job goes on" in warnings[0]
    assert "torch.OutOfMemoryError" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("mig-run: out of memory at iteration ")


def test_a_command_that_is_not_there_exits_127_with_one_line():
    done = mig_run("--capacity", "1G", "--", "/nonexistent/train")
    assert done.returncode == 127
    assert (
        done.stderr
        == "mig-run: error: cannot run '/nonexistent/train': No such file or directory\n"
    )


def test_the_restart_limit_ends_the_job_with_its_own_status(tmp_path):
    job = script(tmp_path, OOM_JOB.format(size=6 * GIB))
    done = mig_run(
        "--slice", "1g.5gb", "--gpu-model", "A100-40GB", "--emulate", "--max-restarts", "0",
        "--", sys.executable, job,
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert last.startswith("mig-run: out of memory at iteration 0 on 1g.5gb")
    assert last.endswith("restart limit reached (0 of --max-restarts 0)")


def test_no_larger_profile_names_the_need_and_the_largest_profile(tmp_path):
    job = script(tmp_path, OOM_JOB.format(size=64 * GIB))
    done = mig_run(
        "--slice", "1g.5gb", "--gpu-model", "A100-40GB", "--emulate", "--",
        sys.executable, job,
    )  # fmt: skip
    assert done.returncode == 1
    need = int(64 * GIB * 1.1)
    big = human(A100.profile("7g.40gb").memory_bytes)
    assert done.stderr.splitlines()[-1].endswith(
        f"the job needs 70.4 GiB ({need} bytes) and the largest profile of A100-40GB, "
        f"7g.40gb, has {big}"
    )


# ---------------------------------------------------------------------------
# Slurm: record the need, set mem= in the hint, requeue


def fake_slurm(tmp_path: Path, comment: str, **record) -> tuple[Path, Path]:
    """squeue and scontrol stand-ins: squeue lists job 4242 (``record``: more of its
    fields), scontrol logs its argv."""
    bin_dir, log = tmp_path / "bin", tmp_path / "slurm.log"
    bin_dir.mkdir()
    job = {"job_id": 4242, "name": "train", "job_state": "RUNNING", "comment": comment, **record}
    jobs = {"jobs": [job]}
    (bin_dir / "squeue").write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        "if '--json' not in sys.argv: sys.exit('JSON only')\n"  # the client then reads JSON
        f"open({str(log)!r}, 'a').write(json.dumps(['squeue'] + sys.argv[1:]) + '\\n')\n"
        f"print({json.dumps(json.dumps(jobs))})\n"
    )
    (bin_dir / "scontrol").write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(['scontrol'] + sys.argv[1:]) + '\\n')\n"
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir, log


def oom_under_slurm(tmp_path: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """mig-run of a job that runs out of memory on a 1g.5gb slice, as job 4242 under
    the fake Slurm of ``bin_dir`` (``env``: more of the job's environment)."""
    job = script(tmp_path, OOM_JOB.format(size=6 * GIB))
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "4242", **env}
    return mig_run(
        "--slice", "1g.5gb", "--gpu-model", "A100-40GB", "--emulate", "--",
        sys.executable, job, env=env,
    )  # fmt: skip


def test_slurm_mode_records_the_need_sets_the_hint_and_requeues(tmp_path):
    bin_dir, log = fake_slurm(tmp_path, "nightly run mig:key=llm,iters=100")
    config = tmp_path / "config.toml"
    config.write_text(
        f'[nodes]\n"n1" = ["A100-40GB"]\n[paths]\nstate_dir = "{tmp_path / "state"}"\n'
    )
    done = oom_under_slurm(tmp_path, bin_dir, SLURM_JOB_NAME="train", SLURM_MIG_CONFIG=str(config))
    assert done.returncode == 75, done.stderr
    need = int(6 * GIB * 1.1)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    # squeue twice: the iters= hint (the horizon) at start, the comment at the requeue
    assert [c[0] for c in calls[:2]] == ["squeue", "squeue"] and "--json" in calls[0]
    assert calls[2:] == [
        [
            "scontrol",
            "update",
            "JobId=4242",
            f"Comment=nightly run mig:key=llm,iters=100,mem={need}",
        ],
        ["scontrol", "requeue", "4242"],
    ]
    assert RuntimeStore(tmp_path / "state" / "profiles.sqlite").memory_need("llm") == need
    assert f"requeued job 4242 with mem=6.6 GiB ({need} bytes)" in done.stderr.splitlines()[-1]


def test_slurm_mode_requeues_an_array_task_by_its_task_name(tmp_path):
    # task 3 of array 4240 runs as job 4242; scontrol would take the number 4240 for
    # every task of the array, so the task is named as squeue and the planner name it
    bin_dir, log = fake_slurm(tmp_path, "mig:key=llm", array_job_id=4240, array_task_id=3)
    done = oom_under_slurm(tmp_path, bin_dir, SLURM_ARRAY_JOB_ID="4240", SLURM_ARRAY_TASK_ID="3")
    assert done.returncode == 75, done.stderr
    need = int(6 * GIB * 1.1)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c for c in calls if c[0] == "scontrol"] == [
        ["scontrol", "update", "JobId=4240_3", f"Comment=mig:key=llm,mem={need}"],
        ["scontrol", "requeue", "4240_3"],
    ]


def test_slurm_mode_says_why_when_the_hint_has_no_room_for_mem(tmp_path):
    # a hint word 250 bytes long: mem= would take it past the 256 the Lua accepts
    hint = "mig:key=" + "k" * 242
    bin_dir, log = fake_slurm(tmp_path, f"run {hint}")
    done = oom_under_slurm(tmp_path, bin_dir)
    assert done.returncode != 75, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "cannot write mem=" in last and "4242" in last and "256" in last, last
    assert all(json.loads(line)[0] == "squeue" for line in log.read_text().splitlines())


def test_slurm_mode_respects_restartable_no(tmp_path):
    bin_dir, log = fake_slurm(tmp_path, "mig:restartable=no")
    done = oom_under_slurm(tmp_path, bin_dir)
    assert done.returncode == 1
    assert "mig:restartable=no, so it is not requeued" in done.stderr
    assert all(json.loads(line)[0] == "squeue" for line in log.read_text().splitlines())


def test_under_slurm_the_slice_is_looked_up_from_the_node_backend(tmp_path):
    """No --slice or --capacity: the instance in CUDA_VISIBLE_DEVICES, found through the
    config's device backend (NVML on a real node, the simulated one here)."""
    from slurm_mig.devices.simulated import SimulatedBackend
    from slurm_mig.geometry import Placement

    sim = tmp_path / "sim"
    inst = SimulatedBackend(sim, ["A100-40GB"]).create(0, "1g.5gb", Placement(0, 1), "4242")
    config = tmp_path / "config.toml"
    config.write_text(
        f'[nodes]\n"testnode" = ["A100-40GB"]\n[paths]\nstate_dir = "{tmp_path / "state"}"\n'
        f'[device]\nbackend = "simulated"\nsimulated_dir = "{sim}"\nlatency_scale = 0.0\n'
    )
    bin_dir, log = fake_slurm(tmp_path, "")
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURMD_NODENAME": "testnode",
        "SLURM_MIG_CONFIG": str(config),
        "CUDA_VISIBLE_DEVICES": inst.uuid,
    }
    job = script(tmp_path, OOM_JOB.format(size=6 * GIB))
    done = mig_run("--emulate", "--", sys.executable, job, env=env)
    assert done.returncode == 75, done.stderr
    small = A100.profile("1g.5gb").memory_bytes
    assert done.stdout.splitlines() == [f"{inst.uuid} {small}"]
    assert "out of memory at iteration 0 on 1g.5gb (4.9 GiB)" in done.stderr
    assert audit(sim) == [("create", "1g.5gb")]  # read only: the prolog/epilog own it


# ---------------------------------------------------------------------------
# Every out-of-memory form: the real message text, printed by any program or raised in
# the job's Python (the probe's exit record)


PRINTS_OOM = """
    import os, sys
    attempt = os.environ["SLURM_MIG_RESTART"]
    print("attempt", attempt, os.environ["SLURM_MIG_CAPACITY_EMULATE"], flush=True)
    if attempt == "0":
        sys.stderr.write("Traceback (most recent call last):\\n  File \\"train.py\\", line 9\\n")
        sys.stderr.write(sys.argv[1] + "\\n")
        sys.exit(1)
"""


@pytest.mark.parametrize("kind", sorted(OOM_TEXTS))
def test_each_oom_form_printed_by_a_program_restarts_it_on_a_larger_slice(tmp_path, kind):
    from slurm_mig.memory.oom import FORMS

    job = script(tmp_path, PRINTS_OOM)
    done = mig_run(
        "--slice", "1g.5gb", "--gpu-model", "A100-40GB", "--emulate", "--",
        sys.executable, job, OOM_TEXTS[kind],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    small, large = A100.profile("1g.5gb").memory_bytes, A100.profile("1g.10gb").memory_bytes
    assert done.stdout.splitlines() == [f"attempt 0 {small}", f"attempt 1 {large}"]
    assert OOM_TEXTS[kind].splitlines()[-1] in done.stderr  # the job's stderr passes through
    assert f"out of memory at iteration None on 1g.5gb (4.9 GiB) ({FORMS[kind][1]})" in (
        done.stderr
    )
    assert "relaunching on 1g.10gb" in done.stderr


RAISES_NVML_ASSERT = """
    import os
    attempt, capacity = os.environ["SLURM_MIG_RESTART"], os.environ["SLURM_MIG_CAPACITY_EMULATE"]
    import torch  # the probe starts here (and takes its variables out of the environment)
    if attempt == "0":
        keep = torch.ones(2**20)  # 4 MiB seen by the probe
        torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1).step()
        raise RuntimeError({text!r})
    print("done on", capacity)
"""


def test_the_allocator_nvml_assert_raised_in_the_job_is_an_oom_with_the_observed_peak(tmp_path):
    job = script(tmp_path, RAISES_NVML_ASSERT.format(text=OOM_TEXTS["nvml-assert"][14:]))
    done = mig_run(
        "--capacity", "6MiB", "--gpu-model", "A100-40GB", "--emulate", "--", sys.executable, job
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"done on {A100.profile('1g.5gb').memory_bytes}\n"
    line = next(x for x in done.stderr.splitlines() if "restart 1 of 2" in x)
    assert "the CUDA caching allocator's NVML assert on its out-of-memory path" in line
    assert "observed peak 4.0 MiB" in line


def test_the_nvml_assert_on_a_mostly_empty_slice_is_not_taken_for_an_oom(tmp_path):
    job = script(tmp_path, RAISES_NVML_ASSERT.format(text=OOM_TEXTS["nvml-assert"][14:]))
    done = mig_run(
        "--slice", "1g.5gb", "--gpu-model", "A100-40GB", "--emulate", "--", sys.executable, job
    )
    assert done.returncode == 1
    assert "not an out-of-memory, so no restart" in done.stderr
    assert "expandable_segments:False" in done.stderr.splitlines()[-1]


@pytest.mark.parametrize(
    "stderr, code",
    [
        (OOM_TEXTS["cuda"] + "\nretrying with a smaller batch\nall good\n", 0),  # exit 0
        (OOM_TEXTS["cuda"] + "\n" + "log line\n" * 80 + "ValueError: bad config\n", 1),
        ("RuntimeError: CUDA error: an illegal memory access was encountered\n", 1),
    ],
)
def test_oom_text_that_is_not_the_failure_does_not_restart(tmp_path, stderr, code):
    job = script(tmp_path, f"import sys\nsys.stderr.write({stderr!r})\nsys.exit({code})\n")
    done = mig_run("--slice", "1g.5gb", "--gpu-model", "A100-40GB", "--emulate", "--",
                   sys.executable, job)  # fmt: skip
    assert done.returncode == code
    assert "restart" not in done.stderr and "relaunching" not in done.stderr


def test_a_flood_of_stderr_without_newlines_passes_through_and_is_bounded(tmp_path):
    job = script(
        tmp_path,
        "import sys\nfor _ in range(160):\n    sys.stderr.write('x' * 65536)\n"
        "sys.stderr.write('\\nCUDA error: out of memory\\n')\nsys.exit(3)\n",
    )
    done = mig_run("--capacity", "1G", "--", sys.executable, job, timeout=120)
    assert done.returncode == 3  # no GPU model: the OOM is reported, the status passes
    assert done.stderr.count("x") == 160 * 65536
    assert "out of memory at iteration None on the slice (1.0 GiB) (CUDA error" in done.stderr


def _memory_cgroup() -> Path | None:
    """A fresh cgroup-v1 memory group under ours, where this machine lets us make one."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, where = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / where.lstrip("/")
            group = base / f"mig-run-test-{os.getpid()}"
            try:
                group.mkdir()
                (group / "memory.limit_in_bytes").write_text(str(768 * 2**20))
            except OSError:
                return None
            return group
    return None


def test_a_kill_by_the_kernel_oom_killer_is_host_memory_and_not_restarted(tmp_path):
    group = _memory_cgroup()
    if group is None:
        pytest.skip("no writable cgroup-v1 memory controller here")
    try:
        job = script(tmp_path, "x = bytearray(3 * 2**30)\nprint('survived')\n")
        wrapper = (
            f"echo $$ > {group}/cgroup.procs && exec {' '.join(MIG_RUN)} --slice 1g.5gb "
            f"--gpu-model A100-40GB --emulate -- {sys.executable} {job}"
        )
        full = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
        done = subprocess.run(["sh", "-c", wrapper], capture_output=True, text=True,
                              env=full, timeout=240)  # fmt: skip
        assert done.returncode == 128 + 9, done.stderr
        assert "survived" not in done.stdout
        last = done.stderr.splitlines()[-1]
        assert "killed by the kernel's OOM killer (host memory, not the GPU slice)" in last
        assert "relaunching" not in done.stderr
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
