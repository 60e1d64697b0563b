"""LocalSlurm's accounting configuration (no Slurm started: tests/e2e/test_accounting.py
runs it) and extra_conf replacing default slurm.conf lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_mig.demo.localslurm import ClusterError, LocalSlurm


def _conf(root: Path, **kwargs) -> tuple[LocalSlurm, list[str]]:
    cluster = LocalSlurm(root=root, **kwargs)
    cluster._write_conf()
    return cluster, cluster.conf.read_text().splitlines()


def _values(lines: list[str], key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in lines if line.split("=", 1)[0] == key]


def test_accounting_points_slurmctld_at_its_slurmdbd(tmp_path: Path) -> None:
    cluster, lines = _conf(tmp_path, accounting=True)
    assert _values(lines, "AccountingStorageType") == ["accounting_storage/slurmdbd"]
    assert _values(lines, "AccountingStorageHost") == ["127.0.0.1"]
    assert _values(lines, "AccountingStoragePort") == [str(cluster.dbd_port)]
    assert cluster.dbd_port > 0
    assert _values(lines, "AccountingStorageEnforce") == ["associations,limits,qos"]
    assert _values(lines, "JobAcctGatherType") == ["jobacct_gather/none"]
    assert _values(lines, "ClusterName") == [cluster.cluster_name]
    assert not [line for line in lines if line.startswith("Priority")]  # the tests' choice


def test_without_accounting_no_accounting_lines(tmp_path: Path) -> None:
    _, lines = _conf(tmp_path)
    assert not [line for line in lines if line.startswith("AccountingStorage")]


def test_extra_conf_replaces_a_default_line_and_adds_the_rest(tmp_path: Path) -> None:
    extra = [
        "accountingstorageenforce=associations",  # slurm.conf keys ignore case
        "PriorityType=priority/multifactor",
        "PriorityWeightFairshare=10000",
        "SchedulerParameters=bf_interval=5",
    ]
    _, lines = _conf(tmp_path, accounting=True, extra_conf=extra)
    keys = [line.split("=", 1)[0].lower() for line in lines]
    assert keys.count("accountingstorageenforce") == 1
    assert "accountingstorageenforce=associations" in lines
    assert _values(lines, "SchedulerParameters") == ["bf_interval=5"]
    assert _values(lines, "PriorityType") == ["priority/multifactor"]
    assert _values(lines, "PriorityWeightFairshare") == ["10000"]
    assert len([line for line in lines if line.startswith("NodeName=")]) == 1


def test_extra_node_and_partition_lines_add_to_the_defaults(tmp_path: Path) -> None:
    extra = ["NodeName=extra1 CPUs=1 State=UNKNOWN", "PartitionName=more Nodes=extra1"]
    _, lines = _conf(tmp_path, nodes=("node1",), extra_conf=extra)
    assert len([line for line in lines if line.startswith("NodeName=")]) == 2
    assert len([line for line in lines if line.startswith("PartitionName=")]) == 3


def test_sacctmgr_without_accounting_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"accounting=True"):
        LocalSlurm(root=tmp_path).sacctmgr("show", "assoc")
