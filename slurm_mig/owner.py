"""Whose learned records are whose: one owner rule for the nodes and the controller.

A job's owner is its Slurm uid, as ``uid:<n>`` (SLURM_JOB_UID in a hook, ``user_id``
in squeue's JSON on the controller): a number both ends always have and always agree
on, where a user name may be any text a directory service allows (``CAMPUS\\mallory``)
or unknown to one end. `PRIOR` ("") owns the site-wide prior, which no report names.

Standard library only: the hooks import this.
"""

from __future__ import annotations

import sqlite3

__all__ = ["MAX_UID", "PRIOR", "names_to_uids", "owner_of", "valid_uid"]

PRIOR = ""  # the owner of the site-wide prior (records written without one)
MAX_UID = 2**32 - 2  # (uid_t)-1 is "no user"


def valid_uid(uid: object) -> bool:
    """A whole number 0 <= uid <= `MAX_UID` (a bool is not one)."""
    return isinstance(uid, int) and not isinstance(uid, bool) and 0 <= uid <= MAX_UID


def owner_of(uid: object) -> str:
    """The owner of a job of user ``uid``: ``uid:<n>``; `PRIOR` when it is not a uid
    (then the job learns nothing and reads only the prior)."""
    return f"uid:{uid}" if valid_uid(uid) else PRIOR


def names_to_uids(db: sqlite3.Connection, prefix: str = "") -> None:
    """Schema step of the runtime store: owners stored as user names (schema 3) become
    ``uid:<n>`` by this host's user database (the controller's, which Slurm's own
    squeue names users by). A name it does not know stays as it is: no job is ever
    of that owner again, and it is never the prior. Idempotent."""
    import pwd

    for table in ("runtimes", "memory"):
        names = db.execute(
            f"SELECT DISTINCT owner FROM {prefix}{table} WHERE owner != '' AND owner NOT LIKE 'uid:%'"
        ).fetchall()
        for (name,) in names:
            try:
                uid = pwd.getpwnam(name).pw_uid
            except (KeyError, ValueError, TypeError):
                continue
            db.execute(
                f"UPDATE {prefix}{table} SET owner = ? WHERE owner = ?", (owner_of(uid), name)
            )
