"""One GPU node's worth of slurm-mig for the hook tests (tests/node/test_hook*.py and
the others that run a Prolog, TaskProlog or Epilog): config, signing key, simulated GPUs,
run dir and an ``scontrol`` stand-in that records its arguments; signed assignments; the
hooks called in-process at a fixed time, or the thin executables as Slurm runs them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from slurm_mig import jobcomment as comments
from slurm_mig.devices.simulated import SimulatedBackend
from slurm_mig.geometry import Placement
from slurm_mig.node.nodestate import NodeState
from slurm_mig.slurm import gres
from slurm_mig.slurm.assignment import (
    Assignment,
    AssignmentError,
    generate_key,
    load_key,
    open_token,
    sign,
)

ROOT = Path(__file__).resolve().parents[1]
PROLOG = ROOT / "prolog" / "slurm-mig-prolog"
TASK_PROLOG = ROOT / "prolog" / "slurm-mig-taskprolog"
EPILOG = ROOT / "epilog" / "slurm-mig-epilog"
NODE = "node1"
T0 = 1_700_000_000.0


@dataclass
class Site:
    """One node's worth of slurm-mig: config, key, simulated GPUs, run dir, scontrol log."""

    tmp: Path
    config: Path
    key: bytes
    scontrol: Path
    reuse_wait: float = 300.0

    @property
    def sim_dir(self) -> Path:
        return self.tmp / "sim" / NODE

    @property
    def run_dir(self) -> Path:
        return self.tmp / "run" / NODE

    @property
    def state(self) -> NodeState:
        return NodeState(self.run_dir)

    def backend(self) -> SimulatedBackend:
        return SimulatedBackend(self.sim_dir)

    def comment(self, job_id: str, *, text: str = "", key: bytes | None = None, **fields) -> str:
        a = assignment(job_id, **fields)
        return f"{text} migplan={sign(a, key or self.key)}".strip()

    def env(
        self,
        job_id: str,
        comment: str | None = None,
        *,
        restart: int | None = None,
        partition: str = "mig",
        **extra: str,
    ) -> dict[str, str]:
        env = {
            "SLURM_JOB_ID": job_id,
            "SLURMD_NODENAME": NODE,
            "SLURM_JOB_PARTITION": partition,
            "SLURM_JOB_UID": str(os.getuid()),
            "SLURM_MIG_CONFIG": str(self.config),
            "SLURM_MIG_SCONTROL": str(self.scontrol),
        }
        if comment is not None:
            env["SLURM_JOB_COMMENT"] = comment
            gpus = self.job_gpus(comment)
            if gpus is not None:
                env["SLURM_JOB_GPUS"] = gpus
        if restart is not None:
            env["SLURM_JOB_RESTART_COUNT"] = str(restart)
        env.update(extra)
        return env

    def job_gpus(self, comment: str) -> str | None:
        """SLURM_JOB_GPUS as Slurm sets it for a job the planner released with this
        comment's token (its TresPerNode = the assignment's GRES record); None when the
        comment carries no genuine token."""
        token = comments.parse(comment).token
        try:
            a = open_token(token or "", self.key)
            models = ("A100-40GB", "A100-40GB")
            return ",".join(  # one record per instance of a job of several slices
                str(gres.index_of(models, gres.record_for(models, a.gpu, p)))
                for p in a.instance_placements()
            )
        except (AssignmentError, IndexError, ValueError):
            return None

    def task_env(self, env: dict[str, str]) -> dict[str, str]:
        """What the TaskProlog sees: no comment, SLURM_RESTART_COUNT instead."""
        out = {k: v for k, v in env.items() if k not in ("SLURM_JOB_COMMENT",)}
        if "SLURM_JOB_RESTART_COUNT" in out:
            out["SLURM_RESTART_COUNT"] = out.pop("SLURM_JOB_RESTART_COUNT")
        return out

    def audit(self) -> list[dict]:
        path = self.sim_dir / "audit.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def ops(self) -> list[tuple[str, str | None]]:
        return [(a["op"], a["job_id"]) for a in self.audit()]

    def scontrol_calls(self) -> list[list[str]]:
        log = self.tmp / "scontrol.log"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    def fault(self, op: str, error: str, message: str, **extra) -> None:
        self.sim_dir.mkdir(parents=True, exist_ok=True)
        body = {"op": op, "error": error, "message": message, **extra}
        (self.sim_dir / "fault.json").write_text(json.dumps(body))


def assignment(
    job_id: str,
    *,
    restart: int = 0,
    node: str = NODE,
    gpu: int = 1,
    model: str = "A100-40GB",
    profile: str = "3g.20gb",
    placement: tuple[int, int] = (4, 4),
    issued: float = T0,
    keep_for: str | None = None,
    reuse_from: str | None = None,
    tasks: int = 1,
) -> Assignment:
    return Assignment(
        job_id=job_id,
        restart=restart,
        node=node,
        gpu=gpu,
        model=model,
        profile=profile,
        placement=Placement(*placement),
        batch=3,
        order=0,
        planned_seconds=120.0,
        issued=issued,
        reuse_from=reuse_from,
        keep_for=keep_for,
        tasks=tasks,
    )


def make_site(tmp_path: Path) -> Site:
    """A node's config, key and scontrol stand-in under ``tmp_path``."""
    key_file = generate_key(tmp_path / "key")
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"with open({str(tmp_path / 'scontrol.log')!r}, 'a') as f:\n"
        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    scontrol.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text(
        f"""
[slurm]
partition = "mig"

[nodes]
"node[1-2]" = ["A100-40GB", "A100-40GB"]

[paths]
state_dir = "{tmp_path}/state"
run_dir = "{tmp_path}/run/%n"
key_file = "{key_file}"
log_file = "{tmp_path}/hooks.log"

[planner]
token_ttl = 3600.0

[device]
backend = "simulated"
simulated_dir = "{tmp_path}/sim/%n"
latency_scale = 0.0

[hooks]
reuse_wait = 300.0
"""
    )
    return Site(tmp_path, config, load_key(key_file), scontrol)


def clock_at(t: float):
    return lambda: t


def run(main, env, capsys, t: float = T0 + 5.0) -> tuple[int, list[str], list[str]]:
    """Call a hook entry point at time ``t``; (exit status, stdout lines, stderr lines)."""
    rc = main(env, clock=clock_at(t))
    captured = capsys.readouterr()
    return rc, captured.out.splitlines(), captured.err.splitlines()


def exe(path: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    # Slurm gives the prolog no PATH; the interpreter is named here so that the test
    # uses this checkout's Python whatever /usr/bin/python3 is.
    return subprocess.run(
        [sys.executable, *flags, str(path)], env=env, capture_output=True, text=True, timeout=60
    )


def v1_token(a_json: dict, key: bytes) -> str:
    """A token of format 1 (base64 JSON and its HMAC), as slurm-mig signed them before."""
    payload = base64.urlsafe_b64encode(json.dumps(a_json).encode()).rstrip(b"=").decode()
    mac = hmac.new(key, f"v1.{payload}".encode(), hashlib.sha256).digest()
    return f"v1.{payload}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
