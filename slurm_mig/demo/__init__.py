"""Demo and test tooling, kept out of the product's path: a loopback Slurm
(``localslurm``), the live run of the Rodinia batch on it (``live``, ``livedemo``) and
the demo job each of its sbatch jobs runs (``job``). Nothing under ``slurm_mig.slurm``,
``planner`` or ``devices`` imports this package."""
