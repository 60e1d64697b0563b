"""A stand-in for a Rodinia kernel on a MIG slice, run by the live demo and the e2e tests.

It finds the slice that CUDA_VISIBLE_DEVICES names among the node's simulated MIG
instances, sleeps for the kernel's profiled time on that slice size (times ``scale``),
and appends one JSON line {job, kernel, node, uuid, profile, size, gpu, placement,
launched, start, end, alive_at_end} to ``log``: what the test compares with the plan.
``launched`` is when its batch script began (``SLURM_MIG_T0``, set by the script's first
command), ``start`` when this program did.

    python -m slurm_mig.demo.job KERNEL SCALE SIM_ROOT LOG
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from slurm_mig.devices.simulated import SimulatedBackend
from slurm_mig.geometry import get_model
from slurm_mig.workload import load_task_source


def main(kernel: str, scale: float, sim_root: str, log: str) -> int:
    start = time.time()
    node = os.environ.get("SLURMD_NODENAME", "")
    uuid = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    backend = SimulatedBackend(Path(sim_root) / node)
    mine = [i for i in backend.instances() if i.uuid == uuid]
    if not mine:
        print(f"no MIG instance {uuid!r} on {node}", file=sys.stderr)
        return 3
    inst = mine[0]
    model = get_model(backend.gpus()[inst.gpu].model)
    size = model.profile(inst.profile).compute_slices
    times = {t.id: t.times for t in load_task_source("rodinia-a100", model)}
    time.sleep(times[kernel][size] * scale)
    end = time.time()
    alive = any(i.uuid == uuid for i in backend.instances())
    record = {
        "job": os.environ.get("SLURM_JOB_ID"),
        "kernel": kernel,
        "node": node,
        "uuid": uuid,
        "profile": inst.profile,
        "size": size,
        "gpu": inst.gpu,
        "placement": [inst.placement.start, inst.placement.size],
        "launched": float(os.environ.get("SLURM_MIG_T0") or start),
        "start": start,
        "end": end,
        "alive_at_end": alive,
    }
    with open(log, "a") as f:  # one short write per job: O_APPEND keeps lines whole
        f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]))
