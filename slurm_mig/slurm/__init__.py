"""The Slurm vocabulary the nodes' hooks (`slurm_mig.node`) and the planner daemon
(`slurm_mig.daemon`) share: the client and its parsers of squeue/scontrol output, job
records and the AdminComment, the signed assignment and its token, the GRES records,
the report wire format and the node's record types, notifications, the site's limits
and accounting. Nothing here imports numpy, torch or statsmodels, nor anything of the
node's or the daemon's packages."""
