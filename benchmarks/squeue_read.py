"""Time SlurmClient.jobs() through squeue's fixed-width output and through its JSON.

Starts a LocalSlurm (MaxJobCount=100000), submits held jobs with sbatch (8 at a time,
each with a name and a comment) up to each count given, then reads all jobs both ways
a few times and prints the wall time of each read (squeue and parsing) and the bytes
squeue printed; also squeue's own time for the wide -O layout (the one a value too long
for the narrow layout costs). Prints, asserts nothing but that both paths read the
same jobs. Needs root and Slurm, like tests/e2e; run it under the e2e tests' lock:

    flock /tmp/slurm-mig-e2e.lock python benchmarks/squeue_read.py --jobs 2000,10000

SLURM_MIG_SLURM=trixie|sid picks another release's root, as for tests/e2e.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurm_mig.demo.localslurm import LocalSlurm  # noqa: E402
from slurm_mig.demo.slurmroot import find_install  # noqa: E402
from slurm_mig.slurm.client import NARROW, WIDE, SlurmClient  # noqa: E402


def timed_reads(client: SlurmClient, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        client.jobs("mig")
        times.append(time.perf_counter() - started)
    return times


def squeue(cluster: LocalSlurm, argv: list[str]) -> tuple[float, int]:
    """Seconds and bytes of one squeue run."""
    env = {**cluster.env, "SLURM_TIME_FORMAT": "%s"}
    started = time.perf_counter()
    out = subprocess.run(cluster._argv(argv, None), env=env, capture_output=True, check=True)
    return time.perf_counter() - started, len(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="2000", help="job counts, e.g. 2000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    release = os.environ.get("SLURM_MIG_SLURM", "host")
    install = None if release == "host" else find_install(release)
    if isinstance(install, str):
        sys.exit(f"no Slurm {release}: {install}")
    with LocalSlurm(nodes=("n1",), slurm=install, extra_conf=("MaxJobCount=100000",)) as cluster:

        def submit(i: int) -> None:
            cluster.sbatch(
                "true", "--hold", "--time=60", partition="mig", name=f"job {i}",
                comment=f"mig:key=k{i % 50},mem={1 + i % 8}G,iters=1000 some free text",
            )  # fmt: skip

        fast = SlurmClient(env=cluster.env, fast_read=True)
        slow = SlurmClient(env=cluster.env, fast_read=False)
        submitted = 0
        for count in (int(n) for n in args.jobs.split(",")):
            started = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(submit, range(submitted, count)))
            took = time.perf_counter() - started
            print(f"submitted {count - submitted} held jobs in {took:.1f} s ({count} in all)")
            submitted = count
            assert fast.jobs("mig") == sorted(slow.jobs("mig"), key=lambda j: int(j.job_id))
            assert fast.last_read == "fixed-width"
            print(
                f"Slurm {cluster.install.version_text}, {count} jobs; "
                f"load average {os.getloadavg()[0]:.2f}"
            )
            for label, client, argv in (
                ("JSON", slow, ["squeue", "--json", "--states=all"]),
                ("fixed-width", fast, ["squeue", "-h", "--states=all", "-r", "-O", NARROW.format]),
            ):
                times = timed_reads(client, args.repeat)
                alone, size = squeue(cluster, argv)
                print(
                    f"  {label:12s} jobs(): best {min(times):.3f} s, median "
                    f"{sorted(times)[len(times) // 2]:.3f} s over {args.repeat}; squeue "
                    f"alone {alone:.3f} s, {size / 1e6:.1f} MB"
                )
            alone, size = squeue(cluster, ["squeue", "-h", "--states=all", "-r", "-O", WIDE.format])
            print(f"  {'wide -O':12s} squeue alone {alone:.3f} s, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
