"""The attacks of issue 10 on the hooks, replayed on a simulated node (real config, real
signed tokens, real simulated GPUs, the thin executables where Slurm runs them): each
must fail only the attacker's job, never drain the node, never hand out a slice that
was not planned, and never stall the node's other hooks."""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from hooksite import (
    EPILOG,
    NODE,
    PROLOG,
    T0,
    TASK_PROLOG,
    Site,
    assignment,
    exe,
    make_site,
    run,
    v1_token,
)
from support import FakeClock, attempts_as, open_tmp_dir

from slurm_mig.geometry import Placement, can_coexist, get_model
from slurm_mig.node import nodestate
from slurm_mig.node.hooks import HookInputError, JobEnv, epilog_main, prolog_main, task_prolog_main
from slurm_mig.node.nodestate import JobRecord, NodeState, NodeStateError, Refusal
from slurm_mig.slurm.assignment import sign

A100 = get_model("A100-40GB")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown, mount, users)")


def refusal_of(site: Site, job: str = "42"):
    r = site.state.refusal(job)
    assert r is not None, f"job {job} was not refused"
    return r


# -- tokens the Prolog refuses (the token itself: tests/slurm/test_assignment.py) -----------


def test_a_genuine_token_of_the_old_format_is_requeued_not_failed(site, capsys):
    data = assignment("42").to_json()
    env = site.env("42", f"migplan={v1_token(data, site.key)}")
    assert run(prolog_main, env, capsys)[0] == 0
    r = refusal_of(site)
    assert r.action == "requeue" and "older slurm-mig (format 1, no plan id)" in r.reason
    forged = site.env("42", f"migplan={v1_token(data, bytes(32))}")
    run(prolog_main, forged, capsys)
    assert refusal_of(site).action == "fail" and "signature is wrong" in refusal_of(site).reason


def test_a_token_without_a_well_formed_plan_id_is_not_used(site, capsys):
    env = site.env("42", f"migplan={sign(replace(assignment('42'), plan='a b'), site.key)}")
    rc, _, _ = run(prolog_main, env, capsys)
    assert rc == 0 and site.backend().instances() == []
    r = refusal_of(site)
    assert r.action == "requeue" and "names no valid plan id ('a b')" in r.reason


def test_a_deeply_nested_forged_payload_is_refused_before_it_is_read(site, capsys):
    # A forged format-1 token whose payload is JSON nested 100 000 deep raised
    # RecursionError in the Prolog before the signature was checked: the node drained.
    nested = base64.urlsafe_b64encode(b"[" * 3000).decode().rstrip("=")  # json: RecursionError
    for word in (f"v1.{nested}.AAAA", "2" + "A" * 3000, "2" + nested[:290], "v1." + "A" * 1000):
        rc, out, err = run(prolog_main, site.env("42", f"mig:key=x migplan={word}"), capsys)
        assert rc == 0 and out == [], err
        r = refusal_of(site)
        assert r.action == "fail" and ("signature" in r.reason or "malformed" in r.reason)
    assert site.scontrol_calls() == []  # no drain
    assert site.backend().instances() == []


# -- hints with huge numbers ----------------------------------------------------------------


@pytest.mark.parametrize(
    "hint", ["mig:time=" + "9" * 150 + ":00:00", "mig:iters=" + "9" * 800, "mig:alpha=1e999"]
)
def test_a_hint_with_huge_numbers_fails_the_job_not_the_node(site, capsys, hint):
    # OverflowError / ValueError escaped: Prolog and Epilog drained the node.
    env = site.env("42", site.comment("42", text=hint))
    rc, out, err = run(prolog_main, env, capsys)
    assert rc == 0 and out == []
    r = refusal_of(site)
    assert r.action == "fail" and r.reason.startswith("hint '")
    rc, out, _ = run(task_prolog_main, site.task_env(env), capsys)
    assert rc == 1 and out[1] == f"print slurm-mig: {r.reason}"
    assert run(epilog_main, env, capsys)[0] == 0
    assert site.scontrol_calls() == []


def test_a_comment_slurm_could_not_have_given_fails_the_job(site, capsys):
    comment = "x" * 5000 + " " + site.comment("42")
    assert run(prolog_main, site.env("42", comment), capsys)[0] == 0
    r = refusal_of(site)
    assert (r.action, r.reason) == (
        "fail",
        f"the job comment has {len(comment)} characters; Slurm allows 1024",
    )


def test_the_hook_environment_is_bounded():
    base = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "node1"}
    ok = JobEnv.from_env({**base, "SLURM_JOB_UID": "4294967294", "SLURM_JOB_GPUS": "0,3-4"})
    assert (ok.uid, ok.gpus, ok.problem) == (4294967294, "0,3-4", None)
    assert JobEnv.from_env({**base, "SLURM_JOB_UID": "x" * 5000}).uid is None
    huge = JobEnv.from_env({**base, "SLURM_JOB_RESTART_COUNT": "9" * 5000})
    assert huge.restart == 0 and huge.problem.startswith("the restart count '99999")
    gpus = JobEnv.from_env({**base, "SLURM_JOB_GPUS": "0;rm -rf /"})
    assert gpus.gpus == "" and "is not a GRES index list" in gpus.problem
    with pytest.raises(HookInputError, match="is not a node name"):
        JobEnv.from_env({**base, "SLURMD_NODENAME": "n" * 300})


def test_the_epilog_of_a_job_with_a_huge_hint_records_it_without_a_key(site, capsys):
    env = site.env("42", site.comment("42"))
    run(prolog_main, env, capsys)
    huge = dict(env, SLURM_JOB_COMMENT=site.comment("42", text="mig:time=" + "9" * 150 + ":00:00"))
    rc, _, err = run(epilog_main, huge, capsys, t=T0 + 30)
    assert rc == 0 and "destroyed" in err[0]
    [line] = site.state.runtimes_path.read_text().splitlines()
    assert json.loads(line)["key"] is None


# -- the locks --------------------------------------------------------------------------------


def _slow_config(site: Site, lock_timeout: float) -> None:
    text = site.config.read_text().replace(
        "reuse_wait = 300.0", f"reuse_wait = 300.0\nlock_timeout = {lock_timeout}"
    )
    site.config.write_text(text)


# A stuck hook (root) holding gpu 1's lock, or a hook of slurm-mig before the GPU locks
# holding the node's version gate (a rolling upgrade): either costs lock_timeout at most.
HELD_LOCKS = ["locks/gpu1", "lock"]


def _hold_node_lock(site: Site, seconds: float, lock: str = "lock") -> subprocess.Popen:
    """A stuck hook (root) holding ``private/<lock>``."""
    with site.state.lock(), site.state.gpu_lock(1):
        pass
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(float(sys.argv[2]))\n",
            str(site.run_dir / "private" / lock),
            str(seconds),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


@pytest.mark.parametrize("lock", HELD_LOCKS)
def test_a_held_lock_requeues_the_job_in_bounded_time_and_drains_nothing(
    site, capsys, lock, monkeypatch
):
    # A job holding <run_dir>/lock stalled another job's Prolog for 149 s. The locks are
    # root's now (tests/node/test_nodestate.py); a hook stuck with one costs lock_timeout.
    _slow_config(site, 0.5)
    env = site.env("42", site.comment("42"))
    holder = _hold_node_lock(site, 60, lock)
    clock = FakeClock(1000.0)
    monkeypatch.setattr(nodestate, "time", clock)
    try:
        rc, out, err = run(prolog_main, env, capsys)
    finally:
        holder.kill()
        holder.wait()
    waited = clock.now - 1000.0  # the lock is polled, in fake time, until lock_timeout
    assert rc == 0 and out == [] and 0.5 <= waited <= 0.6 and clock.slept
    r = refusal_of(site)
    assert r.action == "requeue" and "was not free within 0.5 s" in r.reason
    assert site.backend().instances() == [] and site.scontrol_calls() == []
    rc, out, _ = run(task_prolog_main, site.task_env(env), capsys)
    assert rc == 1 and out[1] == f"print slurm-mig: {r.reason}"
    assert site.scontrol_calls() == [["requeuehold", "42"]]


@pytest.mark.parametrize("lock", HELD_LOCKS)
def test_an_epilog_that_cannot_get_the_lock_leaves_the_instance_to_the_next_hook(
    site, capsys, lock
):
    _slow_config(site, 0.3)
    env = site.env("42", site.comment("42"))
    run(prolog_main, env, capsys)
    [inst] = site.backend().instances()
    holder = _hold_node_lock(site, 60, lock)
    try:
        rc, _, err = run(epilog_main, env, capsys, t=T0 + 40)
    finally:
        holder.kill()
        holder.wait()
    assert rc == 0 and site.scontrol_calls() == []
    assert "left 3g.20gb at 4:4 on gpu 1" in err[0] and "for the next hook" in err[0]
    assert site.state.job("42") is None and site.state.task("42") is None
    [kept] = site.state.kept()
    assert (kept.uuid, kept.for_job, kept.until) == (inst.uuid, None, T0 + 40)
    assert json.loads(site.state.runtimes_path.read_text())["seconds"] == 35.0
    # the next hook with the lock destroys it
    other = site.env("50", site.comment("50", gpu=0, profile="1g.5gb", placement=(0, 1)))
    rc, _, err = run(prolog_main, other, capsys, t=T0 + 41)
    assert rc == 0 and any("reclaimed 3g.20gb at 4:4 on gpu 1" in x for x in err)
    assert [(i.gpu, i.profile) for i in site.backend().instances()] == [(0, "1g.5gb")]


# -- the runtime log ----------------------------------------------------------------------------


def test_hook_cost_does_not_grow_with_the_runtime_log(site, capsys, monkeypatch):
    # prolog 109 ms at 1 k lines, 814 ms and 378 MB at 1 M: read whole, under the lock
    from slurm_mig.node import nodestate

    state = site.state
    state.runtimes_path.parent.mkdir(parents=True, exist_ok=True)
    line = '{"job_id": "%d", "seconds": 1.0}\n'
    state.runtimes_path.write_text("".join(line % i for i in range(300_000)))  # 10 MB
    read: list[int] = []
    real_open = open

    def counting_open(path, *args, **kw):
        f = real_open(path, *args, **kw)
        if "runtimes" in str(path):
            real_read = f.read

            def counting_read(n=-1):
                data = real_read(n)
                read.append(len(data))
                return data

            f.read = counting_read  # type: ignore[method-assign]
        return f

    monkeypatch.setattr(nodestate, "open", counting_open, raising=False)
    env = site.env("42", site.comment("42", keep_for="43"))
    assert run(prolog_main, env, capsys)[0] == 0
    assert read == []  # nothing kept on the node: the log is not read at all
    assert run(epilog_main, env, capsys, t=T0 + 30)[0] == 0  # rotates; keeps for job 43
    assert state.runtimes_path.with_name("runtimes.jsonl.1").stat().st_size > 10_000_000
    read.clear()
    other = site.env("50", site.comment("50", gpu=0, profile="1g.5gb", placement=(0, 1)))
    assert run(prolog_main, other, capsys, t=T0 + 31)[0] == 0  # an instance waits: tail only
    assert len(read) == 2 and sum(read) <= 2 * nodestate.TAIL_MAX_BYTES  # both files' tails


# -- files the hooks write ----------------------------------------------------------------------


@as_root
def test_a_full_disk_in_the_epilog_is_a_warning(site, capsys):
    disk = site.tmp / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        text = site.config.read_text().replace(f"{site.tmp}/run/%n", f"{disk}/run/%n")
        site.config.write_text(text)
        env = site.env("42", site.comment("42"))
        assert run(prolog_main, env, capsys)[0] == 0
        from support import fill_disk

        NodeState(disk / "run" / NODE).remove_task("42")  # else the epilog frees a page
        fill_disk(disk / "filler")
        rc, _, err = run(epilog_main, env, capsys, t=T0 + 30)
    finally:
        subprocess.run(["umount", str(disk)], check=True)
    assert rc == 0 and site.scontrol_calls() == []
    assert any("destroyed 3g.20gb" in x for x in err)
    assert any("runtime not recorded: cannot write" in x for x in err), err
    assert site.backend().instances() == []


def _full_run_dir(site: Site, disk: Path) -> None:
    """Point the site's run_dir at ``disk`` (a fresh tiny tmpfs), run one job through it
    (its directories and lock files exist, as on a node in service) and fill it."""
    text = site.config.read_text().replace(f"{site.tmp}/run/%n", f"{disk}/run/%n")
    site.config.write_text(text)
    env = site.env("41", site.comment("41", gpu=1))
    assert prolog_main(env, clock=lambda: T0 + 1) == 0
    assert epilog_main(env, clock=lambda: T0 + 2) == 0
    from support import fill_disk

    fill_disk(disk / "filler")


@contextmanager
def _tiny_tmpfs(path: Path):
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@as_root
def test_a_full_run_directory_requeues_the_job_and_drains_nothing(site, capsys):
    # The attack of issue 18 filled the run directory's disk; the next Prolog created its
    # instance, could not write its record, drained the node and leaked the instance.
    with _tiny_tmpfs(site.tmp / "disk") as disk:
        _full_run_dir(site, disk)
        capsys.readouterr()
        env = site.env("42", site.comment("42", gpu=1))
        rc, out, err = run(prolog_main, env, capsys, t=T0 + 10)
        state = NodeState(disk / "run" / NODE)
        assert rc == 0 and out == []
        assert site.scontrol_calls() == [["requeuehold", "42"]]  # no State=DRAIN
        assert site.backend().instances() == []  # nothing left without a record
        assert state.job("42") is None and state.jobs() == []
        assert any("No space left on device" in x and "requeued and held" in x for x in err), err
        assert any("destroyed it" in x for x in err), err
        # the Epilog after the requeue finds nothing to do and drains nothing either
        assert run(epilog_main, env, capsys, t=T0 + 11)[0] == 0
        assert site.scontrol_calls() == [["requeuehold", "42"]]
        # room again: the job's next run gets its instance
        (disk / "filler").unlink()
        assert run(prolog_main, env, capsys, t=T0 + 20)[0] == 0
        assert state.job("42") is not None and len(site.backend().instances()) == 1


@as_root
@pytest.mark.real_mount
def test_a_need_file_cannot_fill_the_run_directory(site, capsys):
    # Issue 34: a running job's user filled the run directory's disk through their
    # memory-need file (the one file they may write there); the next Prolog trimmed it
    # and won the race, but an Epilog lost its runtime, metrics and accounting row. The
    # need file now lives on a file system of its own, of one page.
    from support import fill_disk

    from slurm_mig.node import reports

    with _tiny_tmpfs(site.tmp / "disk") as disk:
        _full_run_dir(site, disk)
        (disk / "filler").unlink()
        run_dir = disk / "run" / NODE
        reports.make_need_file(run_dir, "40", 4242)
        try:
            free = os.statvfs(disk).f_bfree
            fill_disk(reports.need_path(run_dir, "40"))  # ENOSPC: its own area is full
            assert reports.need_path(run_dir, "40").stat().st_size <= 4096
            assert os.statvfs(disk).f_bfree == free  # the run directory lost nothing
            capsys.readouterr()
            env = site.env("42", site.comment("42", gpu=1))
            rc, _, err = run(prolog_main, env, capsys, t=T0 + 10)
            assert rc == 0 and site.scontrol_calls() == [], err
            rc, _, err = run(epilog_main, env, capsys, t=T0 + 20)
            assert rc == 0 and not any("No space" in x for x in err), err
            rows = (run_dir / "private" / "accounting.jsonl").read_text().splitlines()
            assert [json.loads(r)["job_id"] for r in rows] == ["41", "42"]  # its row
        finally:
            reports.drop_need_area(run_dir, "40")
        assert not reports.need_path(run_dir, "40").parent.exists()


@as_root
@pytest.mark.parametrize("what", ["record", "refusal"])
def test_no_room_for_the_task_record_undoes_the_prolog(site, capsys, monkeypatch, what):
    # The job record fitted, the TaskProlog's copy did not: the instance and the record
    # are both undone (a refusal that cannot be written is a requeue all the same).
    real = NodeState.put_task

    def put_task(self, item, uid):
        if isinstance(item, JobRecord if what == "record" else Refusal):
            raise NodeStateError("cannot write task/42.json: No space left on device", 28)
        return real(self, item, uid)

    monkeypatch.setattr(NodeState, "put_task", put_task)
    comment = site.comment("42", gpu=1) if what == "record" else "mig:key=x"
    rc, _, err = run(prolog_main, site.env("42", comment), capsys)
    assert rc == 0 and site.scontrol_calls() == [["requeuehold", "42"]], err
    assert site.backend().instances() == [] and site.state.jobs() == []


@as_root
def test_a_read_only_run_directory_is_still_a_node_fault(site, capsys, monkeypatch):
    # Only a full, over-quota or failing disk is the job's to retry; a read-only file
    # system (an admin's mistake) drains the node as before.
    def put_job(self, rec):
        raise NodeStateError("cannot write jobs/42.json: Read-only file system", 30)

    monkeypatch.setattr(NodeState, "put_job", put_job)
    rc, _, _ = run(prolog_main, site.env("42", site.comment("42", gpu=1)), capsys)
    assert rc == 1
    [call] = site.scontrol_calls()
    assert call[:3] == ["update", f"NodeName={NODE}", "State=DRAIN"]
    assert site.backend().instances() == []


@as_root
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="no /usr/bin/python3")
def test_the_jobs_user_can_read_its_task_record_but_not_grow_or_keep_it():
    # The attack: the user owned its task record, made it writable, appended megabytes
    # and kept the space after the job with a hard link. Now the record is root's, the
    # user reads it by an ACL entry and can neither change its mode nor write it.
    with open_tmp_dir() as tmp:
        s = make_site(tmp)
        s.config.chmod(0o644)
        env = s.env("42", s.comment("42", issued=time.time()), SLURM_JOB_UID="4242")
        assert exe(PROLOG, env).returncode == 0
        task = s.run_dir / "task" / "42.json"
        st = task.stat()
        assert (st.st_uid, st.st_gid) == (0, 0) and (st.st_mode & 0o7777) == 0o440
        drop = tmp / "drop"  # a directory the user may write, on the same file system
        drop.mkdir(mode=0o1777)
        drop.chmod(0o1777)
        ops = {
            "read": "open(path).read()",
            "chmod": "os.chmod(path, 0o600)",
            "append": "open(path, 'a').write('x' * 4096)",
            "link": "os.link(path, os.path.join(drop, 'kept'))",
        }
        got = attempts_as(4242, ops, path=task, drop=drop)
        assert (got["read"], got["chmod"], got["append"]) == ("ok", "EPERM", "EACCES"), got
        # fs.protected_hardlinks (every distribution's default) refuses the link; where
        # it is off, the link keeps a few hundred bytes the user cannot grow
        assert got["link"] in ("EPERM", "ok")
        assert task.stat().st_size == st.st_size
        theirs = attempts_as(4343, {"read": "open(path).read()"}, gid=4242, path=task)
        assert theirs["read"] in ("EACCES", "EPERM")  # another user, same group ids: nothing
        assert exe(EPILOG, env).returncode == 0 and not task.exists()


@pytest.mark.parametrize(
    "state",
    [
        {"version": 1},
        {"version": 1, "gpus": 5, "instances": []},
        [1, 2],
        {"version": 1, "gpus": [{}]},
    ],
)
def test_device_state_of_the_wrong_shape_drains_with_the_restore_message(site, capsys, state):
    run(prolog_main, site.env("41", site.comment("41")), capsys)  # creates the state
    (site.sim_dir / "state.json").write_text(json.dumps(state))
    rc, _, err = run(prolog_main, site.env("42", site.comment("42", gpu=0)), capsys)
    assert rc == 1
    [call] = site.scontrol_calls()
    assert f"simulated GPU state {site.sim_dir / 'state.json'} is unreadable" in call[3]
    assert "is unreadable" in call[3] and "restore it" in call[3]
    assert "KeyError" not in call[3] and "internal error" not in call[3]


@pytest.mark.parametrize(("mode", "owner"), [(0o644, None), (0o640, None), (0o600, 4242)])
@as_root
def test_a_signing_key_others_can_read_or_own_is_refused(site, capsys, mode, owner):
    key = site.tmp / "key"
    key.chmod(mode)
    if owner is not None:
        os.chown(key, owner, owner)
    rc, _, err = run(prolog_main, site.env("42", site.comment("42")), capsys)
    assert rc == 1 and site.backend().instances() == []
    [call] = site.scontrol_calls()
    if owner is None:
        assert f"readable or writable by others (mode {mode:04o}); run 'chmod 600 {key}'" in call[3]
    else:
        assert f"owned by uid {owner}, not root; run 'chown root:root {key}'" in call[3]


def test_the_hooks_log_is_root_only(site, capsys):
    run(prolog_main, site.env("42", site.comment("42")), capsys)
    log = site.tmp / "hooks.log"
    assert (log.stat().st_mode & 0o777) == 0o600


@as_root
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="no /usr/bin/python3")
def test_the_task_prolog_as_the_user_reads_its_own_record_only():
    # Job records named every job's MIG UUID to every user. Now the TaskProlog, running
    # as the job's user, reads the one copy the Prolog made for that user.
    with open_tmp_dir() as tmp:
        s = make_site(tmp)  # in a directory other users can reach
        s.config.chmod(0o644)
        env = s.env("42", s.comment("42", issued=time.time()), SLURM_JOB_UID="4242")
        p = exe(PROLOG, env)
        assert p.returncode == 0, p.stderr
        uuid = s.state.job("42").uuid
        task = s.task_env(env)

        def task_prolog_as(uid: int) -> subprocess.CompletedProcess:
            return subprocess.run(
                ["/usr/bin/python3", str(TASK_PROLOG)],
                env=task,
                capture_output=True,
                text=True,
                user=uid,
                group=uid,
                extra_groups=[],
                cwd="/",
                timeout=60,
            )

        mine = task_prolog_as(4242)
        assert (mine.returncode, mine.stdout) == (0, f"export CUDA_VISIBLE_DEVICES={uuid}\n")
        theirs = task_prolog_as(4343)  # another user claiming job 42
        # it cannot read job 42's record: asks for a requeue (refused: not its job), exits 1
        assert theirs.returncode == 1 and uuid not in theirs.stdout + theirs.stderr
        assert theirs.stdout.startswith("export CUDA_VISIBLE_DEVICES=\n")
        assert exe(EPILOG, env).returncode == 0


# -- many hooks at once ------------------------------------------------------------------------


def _random_plan(rng: random.Random, jobs: list[str]) -> dict[str, tuple[int, str, Placement]]:
    plan = {}
    for j in jobs:
        profile = rng.choice(A100.profiles)
        plan[j] = (rng.randint(0, 1), profile.name, rng.choice(profile.placements))
    return plan


@pytest.mark.parametrize("seed", [1, 2])
def test_concurrent_hooks_never_double_book_a_slice(site, seed):
    # 420 concurrent hook runs double-booked nothing in the attack; keep it so: waves of
    # prologs and epilogs of jobs planned on overlapping slices, all at once.
    site.config.write_text(
        site.config.read_text().replace("latency_scale = 0.0", "latency_scale = 0.05")
    )
    rng = random.Random(seed)
    now = time.time()
    jobs = [str(100 + i) for i in range(24)]
    plan = _random_plan(rng, jobs)

    def env(j: str) -> dict[str, str]:
        gpu, profile, pl = plan[j]
        comment = site.comment(
            j, gpu=gpu, profile=profile, placement=(pl.start, pl.size), issued=now
        )
        return site.env(j, comment)

    def wave(hooks: list[tuple[Path, str]]) -> None:
        procs = [
            subprocess.Popen(
                [sys.executable, str(exe)],
                env=env(j),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for exe, j in hooks
        ]
        for p in procs:
            p.communicate(timeout=120)
            assert p.returncode == 0

    def check() -> None:
        live = site.state.jobs()
        on_device = {i.uuid: i for i in site.backend().instances()}
        for gpu in (0, 1):
            assert can_coexist(A100, [r.placement for r in live if r.gpu == gpu])
        for r in live:  # every live record's instance exists and is as planned
            inst = on_device[r.uuid]
            assert (inst.gpu, inst.profile, inst.placement) == plan[r.job_id]
        owners = [r.uuid for r in live] + [k.uuid for k in site.state.kept()]
        assert len(owners) == len(set(owners))
        assert site.scontrol_calls() == []

    first, second = jobs[:12], jobs[12:]
    wave([(PROLOG, j) for j in first])
    check()
    placed = [r.job_id for r in site.state.jobs()]
    assert placed and all(
        site.state.refusal(j).action == "requeue" for j in set(first) - set(placed)
    )
    wave([(EPILOG, j) for j in placed[: len(placed) // 2 + 1]] + [(PROLOG, j) for j in second])
    check()
    wave([(EPILOG, j) for j in jobs])
    check()
    assert site.state.jobs() == [] and site.backend().instances() == []
    assert len(site.ops()) >= 2 * len(placed)
