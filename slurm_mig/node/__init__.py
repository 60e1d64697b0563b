"""What runs on every GPU node, as root: the Slurm Prolog, TaskProlog and Epilog
(`hooks`), what they decide with (the token checks, the node's records of its instances,
the job's environment) and what they send the planner (`reports`).

Standard library, ``geometry``, ``config``, the device backends and `slurm_mig.slurm`'s
shared vocabulary only: nothing of `slurm_mig.daemon`, the planner or the simulator
(tests/test_imports.py), so that a hook on the job start path stays light and a node
needs none of the controller's code."""
