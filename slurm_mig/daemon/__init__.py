"""The planner daemon (``slurm-mig planner``), on the controller: the cycle (`cycle`:
Slurm's view in, actions out), applying it to Slurm (`apply`, `applier`), the runtime
estimates, the receiver of the nodes' reports, the lease of the active daemon and its
standby, and what it serves (status, the web pages, Prometheus metrics).

It learns what a node knows only from the node's reports (`receiver`), never from the
node's disk, except with ``[planner] reports`` off, where `receiver.node_records` reads
the nodes' record files a single host can see."""
