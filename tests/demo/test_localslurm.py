"""LocalSlurm's private nodes without starting Slurm: where a node's files lie on the
host and the command line that gives a node its own directories
(tests/e2e/test_private_nodes.py proves them on a real Slurm)."""

from __future__ import annotations

from pathlib import Path

from slurm_mig.demo.localslurm import LocalSlurm


def test_node_path_maps_node_local_paths_and_leaves_others() -> None:
    c = LocalSlurm(nodes=("a", "b"), root=Path("/tmp/x/slurm"), private_nodes=True,
                   node_dirs=(Path("/tmp/x/run"), Path("/tmp/x/state")))  # fmt: skip
    assert c.private_dirs() == [
        Path("/tmp/x/slurm/spool"),
        Path("/tmp/x/run"),
        Path("/tmp/x/state"),
    ]
    assert c.node_path("a", "/tmp/x/run/private/lock") == Path(
        "/tmp/x/slurm/nodes/a/run/private/lock"
    )
    assert c.node_path("b", "/tmp/x/run") == Path("/tmp/x/slurm/nodes/b/run")
    assert c.node_path("a", c.spool_dir) == Path("/tmp/x/slurm/nodes/a/spool")
    assert c.node_path("a", "/tmp/x/runner") == Path("/tmp/x/runner")  # not under run
    assert c.node_path("a", "/tmp/x/etc/config.toml") == Path("/tmp/x/etc/config.toml")


def test_node_argv_mounts_each_private_dir_then_runs_the_command() -> None:
    c = LocalSlurm(nodes=("a",), root=Path("/tmp/x/slurm"), private_nodes=True,
                   node_dirs=(Path("/tmp/x/run dir"),))  # fmt: skip
    argv = c.node_argv("a", ["slurmd", "-D"])
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert argv[-3:] == ["sh", "slurmd", "-D"]
    script = argv[argv.index("-c") + 1]
    assert "mount --bind /tmp/x/slurm/nodes/a/spool /tmp/x/slurm/spool" in script
    assert "mount --bind '/tmp/x/slurm/nodes/a/run dir' '/tmp/x/run dir'" in script
    assert script.startswith("set -e") and script.endswith('exec "$@"')


def test_shared_nodes_change_nothing() -> None:
    c = LocalSlurm(nodes=("a",), root=Path("/tmp/x/slurm"), node_dirs=(Path("/tmp/x/run"),))
    assert c.private_dirs() == []
    assert c.node_path("a", "/tmp/x/run/f") == Path("/tmp/x/run/f")
    assert c.node_argv("a", ["true"]) == ["true"]


def test_job_python_for_root_and_for_a_user() -> None:
    c = LocalSlurm(root=Path("/tmp/x/slurm"))
    assert c.job_python(None) == c.job_python("0") == c.python
    assert c.job_python("65534") in (c.python, "/usr/bin/python3")
