"""LocalSlurm's accounting commands (``accounting=True``): sacctmgr against its
slurmdbd, and accounts, users and QOS added and waited for until slurmctld has them."""

from __future__ import annotations

import pwd
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .processes import ClusterError

if TYPE_CHECKING:
    from .localslurm import LocalSlurm


class AccountCommands:
    """LocalSlurm's accounting methods (a mixin: LocalSlurm is its only user)."""

    def sacctmgr(self: LocalSlurm, *args: str, timeout: float = 30.0) -> str:
        """``sacctmgr -i ARGS`` against this cluster's slurmdbd; its output
        (ClusterError with sacctmgr's message when it fails)."""
        if not self.accounting:
            raise ClusterError(
                "sacctmgr: this cluster has no accounting (LocalSlurm(accounting=True))"
            )
        return self.run("sacctmgr", "-i", *args, timeout=timeout).stdout

    def add_account(
        self: LocalSlurm, name: str, parent: str | None = None, fairshare: int | str | None = None
    ) -> None:
        """Add account ``name`` (under ``parent``, default root) with ``fairshare``
        (its RawShares), and wait until slurmctld has it."""
        args = ["add", "account", name]
        if parent is not None:
            args.append(f"parent={parent}")
        if fairshare is not None:
            args.append(f"fairshare={fairshare}")
        self.sacctmgr(*args)
        self._wait_assoc_mgr(["flags=assoc", f"accounts={name}"], f"Account={name} ")

    def add_user(
        self: LocalSlurm,
        user: str,
        account: str,
        fairshare: int | str | None = None,
        qos: str | Sequence[str] | None = None,
        default_qos: str | None = None,
    ) -> None:
        """Give ``user`` an association in ``account`` (its RawShares ``fairshare``, the
        QOS it may use, its default QOS), and wait until slurmctld has it. nobody is
        added by uid (65534): Slurm 25.05+ maps the name nobody to no user."""
        if user == "nobody":
            user = str(pwd.getpwnam(user).pw_uid)
        args = ["add", "user", user, f"account={account}"]
        if fairshare is not None:
            args.append(f"fairshare={fairshare}")
        if qos is not None:
            args.append(f"qos={qos if isinstance(qos, str) else ','.join(qos)}")
        if default_qos is not None:
            args.append(f"defaultqos={default_qos}")
        self.sacctmgr(*args)
        self._wait_assoc_mgr(
            ["flags=assoc", f"accounts={account}", f"users={user}"], f"UserName={user}("
        )

    def add_qos(self: LocalSlurm, name: str, **limits: object) -> None:
        """Add QOS ``name`` with ``limits`` as sacctmgr spells them (MaxJobsPerUser=1,
        Priority=10, ...), and wait until slurmctld has it."""
        self.sacctmgr("add", "qos", name, *(f"{k}={v}" for k, v in limits.items()))
        self._wait_assoc_mgr(["flags=qos", f"qos={name}"], f"QOS={name}(")

    def _wait_assoc_mgr(
        self: LocalSlurm, args: Sequence[str], text: str, timeout: float = 10.0
    ) -> None:
        """Wait until ``scontrol show assoc_mgr ARGS`` shows ``text``: slurmdbd pushes
        each change to the registered slurmctld (nothing to wait for before it runs)."""
        ctld = self._procs.get("slurmctld")
        if ctld is None or ctld.poll() is not None:
            return

        def shown() -> bool:
            res = self.run("scontrol", "show", "assoc_mgr", *args, check=False)
            return text in res.stdout

        self.wait_for(shown, timeout, f"slurmctld to show {text!r} (assoc_mgr {' '.join(args)})")
