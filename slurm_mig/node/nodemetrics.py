"""Node metrics from the Prolog and Epilog, in node_exporter's textfile format.

Each hook run adds its events (instances created, adopted, destroyed and the seconds
they took, device faults, refusals, restarted runs) to counters kept in the node's
private state, reads which instances the node's records hold now, and writes the
whole set as Prometheus text to ``[hooks] metrics_file`` (default
``<run_dir>/node-metrics.prom``) through a temporary file and a rename, so that
node_exporter's textfile collector never reads half a file. No HTTP and no
``prometheus_client`` here (the hooks stay light): the text format is written by hand.
Best effort: a metric that cannot be written is one warning, never a failed hook.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ..geometry import GeometryError, get_model
from ..safefs import write_atomic

PREFIX = "slurm_mig_node_"
COUNTERS_FILE = "metrics-counters.json"
MAX_KEYS = 512  # counter series kept; more (a config gone wrong) are dropped
LOCK_WAIT = 0.5  # seconds a hook waits for another hook's metrics update

# event -> (metric, help, label name of the event's label); "seconds" events also
# add to <metric>_seconds_total
EVENTS = {
    "create": ("instance_creates", "MIG instances created by the Prolog", "profile"),
    "adopt": ("instance_adoptions", "kept MIG instances adopted by the next job", "profile"),
    "destroy": ("instance_destroys", "MIG instances destroyed by the hooks", "profile"),
    "fault": ("device_faults", "node faults that drained the node", "hook"),
    "refusal": ("refusals", "jobs the Prolog refused an instance", "action"),
    "restart": ("job_restarts", "job runs prepared after a requeue (restart count > 0)", "cause"),
    "report_drop": ("reports_dropped", "undelivered reports a full spool dropped", "kind"),
}
TIMED = frozenset({"create", "destroy"})


def _escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Sequence[tuple[str, object]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def add_events(
    counters: dict[str, float], events: Iterable[tuple[str, str, float]]
) -> dict[str, float]:
    """``counters`` (``"event|label"`` -> count, ``"event|label|s"`` -> seconds) with
    ``events`` (event, label, seconds) added; unknown events are ignored."""
    out = dict(counters)
    for event, label, seconds in events:
        if event not in EVENTS:
            continue
        key = f"{event}|{label}"
        if key not in out and len(out) >= MAX_KEYS:
            continue
        out[key] = out.get(key, 0.0) + 1
        if event in TIMED:
            out[key + "|s"] = out.get(key + "|s", 0.0) + max(0.0, float(seconds))
    return out


def render(
    node: str,
    models: Sequence[str],
    instances: Iterable[tuple[int, str, str]],
    counters: Mapping[str, float],
    now: float,
) -> str:
    """The Prometheus text: gauges of the node's instances ((gpu, profile, "job" or
    "kept") each) and slices, and every counter."""
    lines: list[str] = []

    def family(name: str, kind: str, text: str) -> None:
        lines.append(f"# HELP {PREFIX}{name} {text}")
        lines.append(f"# TYPE {PREFIX}{name} {kind}")

    count: dict[tuple[int, str, str], int] = {}
    busy = [0] * len(models)
    held = [0] * len(models)
    for gpu, profile, state in instances:
        count[(gpu, profile, state)] = count.get((gpu, profile, state), 0) + 1
        if 0 <= gpu < len(models):
            try:
                slices = get_model(models[gpu]).profile(profile).compute_slices
            except GeometryError:
                continue
            held[gpu] += slices
            if state == "job":
                busy[gpu] += slices
    family("instances", "gauge", "MIG instances on the node by GPU, profile and state")
    for (gpu, profile, state), n in sorted(count.items()):
        labels = _labels([("node", node), ("gpu", gpu), ("profile", profile), ("state", state)])
        lines.append(f"{PREFIX}instances{labels} {n}")
    for name, values, text in (
        ("slices_busy", busy, "compute slices of instances that run a job"),
        ("slices_held", held, "compute slices of every live instance (jobs and kept)"),
        ("slices_total", None, "compute slices of the GPU"),
    ):
        family(name, "gauge", text)
        for gpu, model in enumerate(models):
            try:
                value = values[gpu] if values is not None else get_model(model).compute_slices
            except GeometryError:
                continue
            labels = _labels([("node", node), ("gpu", gpu), ("model", model)])
            lines.append(f"{PREFIX}{name}{labels} {value}")
    for event, (name, text, label) in EVENTS.items():
        series = sorted(
            (k.split("|")[1], v)
            for k, v in counters.items()
            if k.startswith(event + "|") and k.count("|") == 1
        )
        family(f"{name}_total", "counter", text)
        for value, n in series:
            lines.append(f"{PREFIX}{name}_total{_labels([('node', node), (label, value)])} {n:g}")
        if event in TIMED:
            family(f"{name}_seconds_total", "counter", f"seconds spent: {text}")
            for value, _ in series:
                s = counters.get(f"{event}|{value}|s", 0.0)
                labels = _labels([("node", node), (label, value)])
                lines.append(f"{PREFIX}{name}_seconds_total{labels} {s:.6f}")
    family("metrics_updated_timestamp_seconds", "gauge", "when a hook last wrote these metrics")
    lines.append(f"{PREFIX}metrics_updated_timestamp_seconds{_labels([('node', node)])} {now:.3f}")
    return "\n".join(lines) + "\n"


def _read_counters(fd: int) -> dict[str, float]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 1 << 20)
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(k): float(v)
        for k, v in list(data.items())[: MAX_KEYS * 2]
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def _lock(fd: int, wait: float) -> bool:
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)


def update(
    private_dir: Path,
    target: Path,
    node: str,
    models: Sequence[str],
    instances: Iterable[tuple[int, str, str]],
    events: Iterable[tuple[str, str, float]],
    now: float,
) -> str | None:
    """Add ``events`` to the node's counters and rewrite ``target``; None, or why not."""
    try:
        fd = os.open(private_dir / COUNTERS_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        return f"metrics not written: cannot open {private_dir / COUNTERS_FILE}: {exc.strerror}"
    try:
        if not _lock(fd, LOCK_WAIT):
            return "metrics not written: another hook held the metrics lock"
        counters = add_events(_read_counters(fd), events)
        data = json.dumps(counters, sort_keys=True).encode()
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, data)
        text = render(node, models, instances, counters, now)
        try:
            write_atomic(target, text, 0o644)  # node_exporter reads it as its own user
        except OSError as exc:
            return f"metrics not written to {target}: {exc.strerror or exc}"
        return None
    except OSError as exc:
        return f"metrics not written: {exc.strerror or exc}"
    finally:
        os.close(fd)


def record(config, node: str, events: Sequence[tuple[str, str, float]]) -> str | None:
    """The hooks' one call: update the node's metrics from its records and ``events``;
    None, or a warning to log."""
    from .nodestate import NodeState, NodeStateError

    try:
        models = config.gpu_models(node)
        state = NodeState(config.run_dir_for(node))
        instances = [(r.gpu, r.profile, "job") for r in state.jobs() for _ in r.uuids]
        instances += [(k.gpu, k.profile, "kept") for k in state.kept()]
    except (ValueError, NodeStateError) as exc:  # ConfigError is a ValueError
        return f"metrics not written: {exc}"
    if not state.private.is_dir():
        return None  # no hook has prepared this node yet
    return update(
        state.private, config.metrics_file_for(node), node, models, instances, events, time.time()
    )
