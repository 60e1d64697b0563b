"""The loopback Slurm of the end-to-end tests lives in the package (``make demo`` starts
one too): slurm_mig/demo/localslurm.py."""

from slurm_mig.demo.localslurm import (  # noqa: F401
    SLURM_BINARIES,
    ClusterError,
    LocalSlurm,
    find_binary,
    free_port,
    skip_reason,
)
