"""The NVML memory source against tests/fake_pynvml.py: the MIG device handle only (the
parent GPU is refused inside a slice), per-process memory where the driver reports it,
else the instance's total; and mig-run end to end with a non-PyTorch child that
'allocates' through the fake's shared usage file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import fake_pynvml as fake
import pytest

from slurm_mig.memory.nvml_sampler import NvmlSlice, SamplerUnavailable, job_pids
from slurm_mig.memory.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]
MIG_RUN = [sys.executable, str(ROOT / "wrappers" / "mig-run")]
MIB, GIB = 2**20, 2**30


@pytest.fixture
def mig_uuid():
    fake.fake_reset(["A100-40GB"])
    uuid = fake.fake_mig_instance()
    fake.fake_set_user("slurm")  # a job's user, inside the slice
    fake.fake_clear_calls()
    yield uuid
    fake.fake_reset()


def test_per_process_memory_of_the_job_on_the_mig_handle(mig_uuid):
    s = NvmlSlice(mig_uuid, fake)
    assert "the job's processes" in s.open()
    fake.fake_set_process_memory(mig_uuid, 101, 2 * GIB)
    fake.fake_set_process_memory(mig_uuid, 102, GIB)
    assert s.used({101, 102}) == 3 * GIB
    assert s.used({101}) == 2 * GIB
    assert s.used({999}) == 3 * GIB  # no pid is ours (a pid namespace): the instance's
    calls = fake.fake_calls()
    assert "nvmlDeviceGetHandleByIndex" not in calls  # never the parent GPU
    s.close()
    assert fake.fake_init_depth() == 0


def test_without_per_process_memory_the_instance_total_is_used(mig_uuid):
    fake.fake_hide_process_memory()
    fake.fake_set_process_memory(mig_uuid, 101, 2 * GIB)
    s = NvmlSlice(mig_uuid, fake)
    assert "the instance's total" in s.open()
    assert s.used({101}) == 2 * GIB + fake._INSTANCE_RESERVED
    s.close()
    # a driver that stops reporting per-process memory after the start: the total
    fake.fake_hide_process_memory(False)
    s = NvmlSlice(mig_uuid, fake)
    assert "the job's processes" in s.open()
    fake.fake_hide_process_memory()
    assert s.used({101}) == 2 * GIB + fake._INSTANCE_RESERVED and not s.per_process
    s.close()


def test_the_parent_gpu_is_refused_inside_a_slice(mig_uuid):
    fake.nvmlInit()
    parent = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(fake.NVMLError_NoPermission):
        fake.nvmlDeviceGetMemoryInfo(parent)
    fake.nvmlShutdown()
    with pytest.raises(SamplerUnavailable, match="not a MIG device"):
        NvmlSlice("GPU-1234", fake)
    with pytest.raises(SamplerUnavailable, match="Not Found"):
        NvmlSlice("MIG-00000000-0000-0000-0000-000000000000", fake).open()


def test_job_pids_are_the_child_and_its_descendants():
    proc = subprocess.Popen(
        [sys.executable, "-c", "import subprocess,sys; subprocess.run(['sleep','5'])"]
    )
    try:
        for _ in range(100):
            pids = job_pids(proc.pid)
            if len(pids) >= 2:
                break
            subprocess.run(["sleep", "0.05"])
        assert proc.pid in pids and len(pids) >= 2 and os.getpid() not in pids
    finally:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------
# mig-run with a non-PyTorch job (a plain Python program driving the fake's usage file)

GROWING_JOB = """
    import os, sys, time
    sys.path.insert(0, {tests!r})
    import fake_pynvml
    uuid, usage = os.environ["CUDA_VISIBLE_DEVICES"], {usage!r}
    print("attempt", os.environ["SLURM_MIG_RESTART"], os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"],
          flush=True)
    if os.environ["SLURM_MIG_RESTART"] == "0":
        for i in range(400):  # +40 MiB per 20 ms (2 GiB/s): 1g.5gb is full after ~2 s
            fake_pynvml.fake_write_usage(usage, uuid, os.getpid(), (600 + 40 * i) * 2**20)
            time.sleep(0.02)
        sys.exit(5)
"""


def _setup(tmp_path: Path, **extra) -> tuple[dict, str]:
    usage = tmp_path / "usage.json"
    setup = {"chips": ["A100-40GB"], "instances": [[0, 0]], "user": "slurm",
             "usage": str(usage), **extra}  # fmt: skip
    fake.fake_reset(["A100-40GB"])
    uuid = fake.fake_mig_instance()  # the same UUID the fake makes in mig-run
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    env.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "fake_nvml_site"), str(ROOT / "tests")]),
        FAKE_PYNVML_SETUP=json.dumps(setup),
        CUDA_VISIBLE_DEVICES=uuid,
    )
    return env, str(usage)


def test_a_non_pytorch_job_is_watched_through_nvml_and_restarted_before_its_oom(tmp_path):
    env, usage = _setup(tmp_path)
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(GROWING_JOB.format(tests=str(ROOT / "tests"), usage=usage)))
    out = tmp_path / "trace.csv"
    done = subprocess.run(
        [*MIG_RUN, "--slice", "1g.5gb", "--gpu-model", "A100-40GB", "--emulate",
         "--sample-interval", "0.1", "--duration", "3", "--trace", str(out), "--",
         sys.executable, str(job)],
        capture_output=True, text=True, env=env, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["attempt 0 false", "attempt 1 false"]
    lines = done.stderr.splitlines()
    source = [x for x in lines if x.startswith("mig-run: memory source:")]
    assert source and f"NVML used memory of {env['CUDA_VISIBLE_DEVICES']}" in source[0]
    assert "the job's processes" in source[0] and "the timer is the iteration clock" in source[0]
    restart = next(x for x in lines if "restart 1 of 2: forecast at iteration" in x)
    # a larger slice; which one depends on the slope the timer saw (2 GiB/s of wall
    # time: a busy machine stretches the ticks), the forecast's own tests fake time
    bigger = re.search(r"relaunching on (\S+)", restart)
    assert bigger and bigger[1] in {"1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}
    rows = read_trace(out)
    assert rows and max(r.requested_peak for r in rows) < 4864 * MIB  # before the OOM


def test_nvml_source_asked_for_without_a_mig_device_is_one_error_line(tmp_path):
    env, _ = _setup(tmp_path)
    env["CUDA_VISIBLE_DEVICES"] = "0"
    done = subprocess.run(
        [*MIG_RUN, "--capacity", "1G", "--memory-source", "nvml", "--", "true"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "mig-run: error: --memory-source nvml: CUDA_VISIBLE_DEVICES names no MIG device "
        "(MIG-<uuid>)\n"
    )


def test_a_preallocate_setting_of_the_user_is_kept(tmp_path):
    env, _ = _setup(tmp_path)
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true"
    done = subprocess.run(
        [*MIG_RUN, "--capacity", "1G", "--memory-source", "torch", "--", sys.executable, "-c",
         "import os; print(os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "true\n"


def test_a_jax_job_is_told_that_preallocation_is_off(tmp_path):
    """A stand-in ``jax`` package on the job's path: the note comes at its import, once,
    and the job sees XLA_PYTHON_CLIENT_PREALLOCATE=false."""
    pkg = tmp_path / "site" / "jax"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import os\nPREALLOCATE = os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID",)}
    env.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
    env["PYTHONPATH"] = str(tmp_path / "site")
    code = "import jax, jax\nprint(jax.PREALLOCATE)\nimport sys\nprint('x', file=sys.stderr)"
    done = subprocess.run(
        [*MIG_RUN, "--capacity", "1G", "--", sys.executable, "-c", code],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "false\n"
    notes = [x for x in done.stderr.splitlines() if x.startswith("mig-run: JAX:")]
    assert len(notes) == 1 and "XLA_PYTHON_CLIENT_PREALLOCATE=false" in notes[0]
    plain = subprocess.run(
        [*MIG_RUN, "--capacity", "1G", "--", sys.executable, "-c", "print(1)"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert plain.stderr == ""  # no JAX, no note
