"""slurm-mig: plans NVIDIA MIG repartitioning for Slurm batch jobs.

``slurm_mig.step()`` marks an iteration for ``mig-run``'s memory probe; it is loaded
on first use so that ``import slurm_mig`` imports nothing heavy.
"""


def __getattr__(name: str) -> object:
    if name == "step":
        from .memory import step

        return step
    raise AttributeError(f"module 'slurm_mig' has no attribute {name!r}")
