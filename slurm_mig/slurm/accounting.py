"""Accounting by MIG profile: what each finished run of a job used, for billing.

The Epilog appends one line per finished run to the node's ``private/accounting.jsonl``
(root only): job, run, user, account, job kind (hint key), GPU model and index, profile,
compute slices, seconds on the instance and when it ended (`append`, standard library
only: it is on the Epilog's path), and reports the same record to the planner
(`reports`), whose receiver stores it in ``<state_dir>/accounting.sqlite`` (`row`,
`INSERT_RUN`) adding slice-seconds and energy. With ``[planner] reports`` off the
daemon instead gathers the lines of every node whose run directory it can read (the
nodes of one host, or a shared run directory) once a cycle (`gather`, remembering how
far it read each file). Every run has a *modelled* energy (``energy_j``): the GPU's
power curve over busy compute slices (``power``, SMART-MIG's A100 curve scaled by
board power), a run charged its share of the idle power plus the power its slices add
on an idle GPU. Where the GPU has an energy counter (NVML on a real GPU) the run also
has a *measured* one (``measured_j``): its share of the counter, split across the GPU's
runs by compute slices and time (the rule: `energysplit`), and ``energy_source`` says
"measured"; a simulated GPU, or a counter reading that is no energy, leaves the model
alone, "modelled". `report` sums the store by user, account, profile or key, the
measured figure where a run has one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

LOG = "accounting.jsonl"
STORE = "accounting.sqlite"
MAX_LINE = 4096
MAX_READ = 8 << 20  # bytes gathered from one node per cycle
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@+")
MODELLED, MEASURED = "modelled", "measured"  # a run's energy_source


def _name(value: str | None) -> str:
    """A user or account name from Slurm's environment, bounded to plain characters."""
    text = (value or "").strip()
    return text if 0 < len(text) <= 64 and _NAME_CHARS.issuperset(text) else ""


def entry_row(entry: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The accounting record of ``entry`` (the Epilog's runtime record) with the job's
    user and account from Slurm's environment: a log line, or a node report's data."""
    return {
        **{k: entry.get(k) for k in ("job_id", "restart", "key", "gpu", "model", "profile")},
        "seconds": entry.get("seconds"),
        "end": entry.get("end"),
        "user": _name(env.get("SLURM_JOB_USER")),
        "account": _name(env.get("SLURM_JOB_ACCOUNT")),
        # the run's share of the GPU's energy counter (`energysplit`), where there is one
        **({"measured_j": entry["measured_j"]} if entry.get("measured_j") is not None else {}),
    }


def append(private_dir: Path, entry: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """Append the run of ``entry`` (the Epilog's runtime record) with its user and
    account; None, or why not."""
    record = entry_row(entry, env)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    if len(line) > MAX_LINE:
        return "accounting record too long; not written"
    try:
        fd = os.open(
            private_dir / LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600
        )
    except OSError as exc:
        return f"accounting not written: {exc.strerror or exc}"
    try:
        os.write(fd, line)
    except OSError as exc:
        return f"accounting not written: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return None


def energy_joules(model_name: str, slices: int, seconds: float) -> float | None:
    """Modelled energy of a run on ``slices`` compute slices for ``seconds``."""
    from ..geometry import GeometryError, get_model
    from ..power import power_curve

    try:
        model = get_model(model_name)
    except GeometryError:
        return None
    curve = power_curve(model)
    k = max(0, min(slices, model.compute_slices))
    watts = curve[0] * k / model.compute_slices + (curve[k] - curve[0])
    return round(watts * max(0.0, seconds), 3)


def measured_joules(model_name: str, seconds: float, value: object) -> float | None:
    """A node's measured energy of a run (``value``) as the store keeps it: a finite
    number of joules from 0 to twice the GPU's board power over the run (the bound the
    Epilog checked, ``energysplit.bound_mj``), else None (the run is then modelled)."""
    import math

    from ..power import max_watts
    from .energysplit import bound_mj

    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    joules = float(value)
    if not math.isfinite(joules) or joules < 0:
        return None
    if joules > bound_mj(seconds, max_watts(model_name)) / 1000.0:
        return None
    return round(joules, 3)


# Schema versions of accounting.sqlite (``PRAGMA user_version``, ``storeschema``): 0: the
# layout before versioning (tables runs and offsets), or a new file; 1: the same tables
# and an index on the runs' end (what `report --since` selects by); 2: runs.measured_j,
# the run's measured energy (NULL: modelled only; rows from before stay "modelled").
RUNS_TABLE = (  # the runs of version 1; version 2 adds measured_j at the end
    "CREATE TABLE IF NOT EXISTS {schema}runs (job_id TEXT, restart INTEGER, node TEXT,"
    " user TEXT, account TEXT, key TEXT, model TEXT, gpu INTEGER, profile TEXT,"
    " slices INTEGER, seconds REAL, slice_seconds REAL, energy_j REAL, energy_source TEXT,"
    " end REAL, PRIMARY KEY (job_id, restart))"
)
INSERT_RUN = "INSERT OR IGNORE INTO {schema}runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"


OFFSETS_TABLE = (
    "CREATE TABLE IF NOT EXISTS {schema}offsets (path TEXT PRIMARY KEY, inode INTEGER, pos INTEGER)"
)


def schema():
    """accounting.sqlite's layouts (``storeschema.Schema``), built when first needed: the
    Epilog imports this module and never opens the store."""
    from .. import storeschema as ss

    return ss.Schema(
        "accounting store",
        {
            1: ss.script(
                f"{RUNS_TABLE};{OFFSETS_TABLE};"
                "CREATE INDEX IF NOT EXISTS {schema}runs_by_end ON runs (end)"
            ),
            2: ss.add_column("runs", "measured_j", "REAL"),
        },
    )


def _open(state_dir: Path):
    """A connection to the store, migrated to the current schema (a newer one:
    ``storeschema.SchemaError``, the file left as it was)."""
    import sqlite3

    from .. import storeschema

    path = state_dir / STORE
    storeschema.check_file(path, schema())
    db = sqlite3.connect(path, timeout=2.0)
    try:
        storeschema.migrate(db, schema(), path)
    except BaseException:
        db.close()
        raise
    return db


def row(node: str, d: Mapping[str, Any]) -> tuple | None:
    """The store's row of one accounting record of ``node``; None when it is not one."""
    return _row(node, d)


def _row(node: str, d: Mapping[str, Any]) -> tuple | None:
    from ..geometry import GeometryError, get_model

    try:
        model = str(d["model"])
        profile = str(d["profile"])
        seconds = float(d["seconds"])
        slices = get_model(model).profile(profile).compute_slices
        measured = measured_joules(model, seconds, d.get("measured_j"))
        return (
            str(d["job_id"])[:64],
            int(d["restart"]),
            node,
            str(d.get("user") or "")[:64],
            str(d.get("account") or "")[:64],
            str(d.get("key") or "")[:128],
            model,
            int(d["gpu"]),
            profile,
            slices,
            seconds,
            round(seconds * slices, 3),
            energy_joules(model, slices, seconds),
            MODELLED if measured is None else MEASURED,
            float(d["end"]),
            measured,
        )
    except (KeyError, TypeError, ValueError, GeometryError):
        return None


def gather(state_dir: Path, logs: Mapping[str, Path]) -> int:
    """Add the new lines of each node's log (node -> path) to the store; the rows added
    (a run already there is kept)."""
    db = _open(state_dir)
    added = 0
    try:
        with db:
            for node, path in logs.items():
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                got = db.execute(
                    "SELECT inode, pos FROM offsets WHERE path = ?", (str(path),)
                ).fetchone()
                pos = got[1] if got and got[0] == st.st_ino and got[1] <= st.st_size else 0
                with open(path, "rb") as f:
                    f.seek(pos)
                    data = f.read(MAX_READ)
                end = data.rfind(b"\n") + 1
                for raw in data[:end].splitlines():
                    try:
                        row = _row(node, json.loads(raw))
                    except ValueError:
                        row = None
                    if row is not None:
                        cur = db.execute(INSERT_RUN.format(schema=""), row)
                        added += cur.rowcount
                db.execute(
                    "INSERT OR REPLACE INTO offsets VALUES (?, ?, ?)",
                    (str(path), st.st_ino, pos + end),
                )
    finally:
        db.close()
    return added


GROUPS = {"user": "user", "account": "account", "profile": "profile", "key": "key"}


def report(state_dir: Path, by: str = "user", since: float | None = None) -> list[dict[str, Any]]:
    """Totals per ``by`` (user | account | profile | key) of the runs that ended at or
    after ``since``: runs, restarts, seconds, slice-seconds, GPU-hours-equivalent
    (slice-seconds / the model's slices / 3600), energy (``energy_kwh``: each run's
    measured figure where it has one, else its modelled one; ``energy``: "measured",
    "modelled" or "mixed" as the runs were; ``modelled_kwh``: the model for all; and
    ``measured_runs``)."""
    column = GROUPS[by]
    path = Path(state_dir) / STORE
    if not path.exists():
        return []
    db = _open(Path(state_dir))
    try:
        rows = db.execute(
            f"SELECT {column}, model, COUNT(*), SUM(restart > 0), SUM(seconds),"
            " SUM(slice_seconds), SUM(COALESCE(measured_j, energy_j)), SUM(energy_j),"
            " SUM(measured_j IS NOT NULL), GROUP_CONCAT(DISTINCT profile)"
            f" FROM runs WHERE end >= ? GROUP BY {column}, model ORDER BY {column}, model",
            (since if since is not None else float("-inf"),),
        ).fetchall()
    finally:
        db.close()
    from ..geometry import GeometryError, get_model

    out = []
    for name, model, runs, restarts, seconds, slice_s, energy, modelled, measured, profiles in rows:
        try:
            full = get_model(model).compute_slices
        except GeometryError:
            full = 7
        out.append(
            {
                by: name or "(none)",
                "model": model,
                "runs": runs,
                "restarts": int(restarts or 0),
                "seconds": round(seconds or 0.0, 3),
                "slice_seconds": round(slice_s or 0.0, 3),
                "gpu_hours": round((slice_s or 0.0) / full / 3600, 6),
                "energy_kwh": round((energy or 0.0) / 3.6e6, 6),
                "energy": source(runs, int(measured or 0)),
                "modelled_kwh": round((modelled or 0.0) / 3.6e6, 6),
                "measured_runs": int(measured or 0),
                "profiles": ",".join(sorted((profiles or "").split(","))),
            }
        )
    return out


def source(runs: int, measured: int) -> str:
    """What a total's energy is: "measured" (every run), "modelled" (none) or "mixed"."""
    if measured <= 0:
        return MODELLED
    return MEASURED if measured >= runs else "mixed"


def node_logs(config: Any) -> dict[str, Path]:
    """node -> its accounting log, for the nodes whose run directory this host can see."""
    return {
        node: config.run_dir_for(node) / "private" / LOG
        for node in config.nodes
        if (config.run_dir_for(node) / "private" / LOG).exists()
    }


def rows_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    import csv
    import io

    if not rows:
        return ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()
