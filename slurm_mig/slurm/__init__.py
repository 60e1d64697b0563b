"""Slurm integration: the client, the hint grammar, signed assignments, the hooks and
the planner daemon. Nothing here imports numpy, torch or statsmodels at module level
except the daemon (the hooks' path stays light)."""
