"""A MIG backend with no GPU: NVIDIA's placement rules from ``geometry``, state on disk.

The state of a node's simulated GPUs lives in ``state_dir/state.json`` so that separate
hook processes (prolog, epilog) and restarts see the same instances, as they would on
real hardware. Files under ``state_dir``:

- ``state.json``: GPUs (model, uuid, MIG mode), live instances, a generation counter.
- ``lock``: every read or write of ``state.json`` holds an ``fcntl.flock`` on it.
- ``gpu<N>.lock``: held for the whole of a create/destroy/mode change on GPU N, so that
  reconfigurations of one GPU run one after another, as NVML serialises them. The Table 1
  latency is slept while holding it (but not ``lock``, so other GPUs go on).
- ``audit.jsonl``: one JSON line per successful create/destroy: ``op, gpu, profile,
  placement {start, size}, uuid, job_id, start, end, pid`` (``start``: the GPU lock was
  taken and the operation began; ``end``: its instance exists or is gone).
- ``gi-numbering`` (optional): ``creation`` makes GPU-instance ids the smallest free
  one (a driver that does not number by placement; the Prolog must notice).
- GPU-instance ids otherwise follow the placement and the capability minors are
  NVIDIA's (``migcaps``; `mig_minors` gives the table).
- ``fault.json`` (optional, simulator feature for tests and demos of failure handling):
  ``{"op": "create"|"destroy"|"any", "error": "<DeviceError subclass name>",
  "message": "...", "hint": "...", "gpu": N, "times": K}``. While it exists the named
  operation (on GPU N only when ``gpu`` is given) raises that error class with that
  message; with ``times`` it fires K times and then removes itself.

Only the standard library is used: the Slurm hooks import this module.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .. import geometry
from ..geometry import GeometryError, Placement
from . import migcaps
from .base import (
    DeviceError,
    DeviceUnavailable,
    GpuInfo,
    InstanceInUse,
    InstanceNotFound,
    InvalidRequest,
    MigBackend,
    MigDisabled,
    MigInstance,
    NoPermission,
    PlacementConflict,
)

STATE_VERSION = 1
_UUID_NAMESPACE = bytes.fromhex("4f1c7d2e8a595b0e9c3a6d2b7e0f1a55")


def _uuid5(name: str) -> str:
    """RFC 4122 version-5 UUID of ``name`` in our namespace, as uuid.uuid5 computes it
    (written out because importing uuid costs the hooks about 12 ms)."""
    b = bytearray(hashlib.sha1(_UUID_NAMESPACE + name.encode()).digest()[:16])
    b[6] = (b[6] & 0x0F) | 0x50
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_FAULT_OPS = ("create", "destroy", "any")
FAULT_ERRORS: dict[str, type[DeviceError]] = {
    cls.__name__: cls
    for cls in (
        DeviceError,
        PlacementConflict,
        InstanceNotFound,
        InvalidRequest,
        InstanceInUse,
        NoPermission,
        MigDisabled,
        DeviceUnavailable,
    )
}


def gpu_uuid_for(node_key: str, index: int) -> str:
    """The simulated ``GPU-...`` uuid of GPU ``index`` of the node whose state dir is named ``node_key``."""
    return "GPU-" + _uuid5(f"{node_key}/gpu/{index}")


def mig_uuid_for(gpu_uuid: str, gi_id: int, generation: int) -> str:
    """Deterministic ``MIG-...`` uuid: uuid5 of (GPU uuid, GPU instance id, generation)."""
    return "MIG-" + _uuid5(f"{gpu_uuid}/{gi_id}/{generation}")


def _model_names(models: Sequence[str]) -> list[str]:
    out = []
    for i, name in enumerate(models):
        try:
            out.append(geometry.get_model(name).name)
        except GeometryError as exc:
            raise DeviceError(
                f"simulated GPU {i}: {exc}",
                hint="use a model name of slurm_mig.geometry (e.g. A100-40GB) in [nodes]",
            ) from None
    return out


_GPU_KEYS = {"index": int, "model": str, "uuid": str, "mig_enabled": bool}
_INSTANCE_KEYS = {"gpu": int, "gi_id": int, "ci_id": int, "uuid": str, "profile": str}


def _check_shape(state: object) -> None:
    """ValueError naming what is missing or of the wrong type in ``state.json`` (valid
    JSON of another shape must read as unreadable, not fail later on a missing key)."""
    if not isinstance(state, dict):
        raise ValueError(f"expected an object, got {type(state).__name__}")
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"version {state.get('version')!r}, expected {STATE_VERSION}")
    if not isinstance(state.get("generation"), int):
        raise ValueError("'generation' is not a whole number")
    for name, keys in (("gpus", _GPU_KEYS), ("instances", _INSTANCE_KEYS)):
        items = state.get(name)
        if not isinstance(items, list):
            raise ValueError(f"'{name}' is not a list")
        for i, item in enumerate(items):
            bad = [k for k, t in keys.items() if not isinstance(_get(item, k), t)]
            if name == "instances" and not isinstance(_get(_get(item, "placement"), "size"), int):
                bad.append("placement")
            if bad:
                raise ValueError(f"{name}[{i}] lacks {', '.join(bad)} (or has the wrong type)")


def _get(item: object, key: str) -> object:
    return item.get(key) if isinstance(item, dict) else None


class SimulatedBackend(MigBackend):
    """MIG GPUs simulated on disk with NVIDIA's placement rules and Table 1 latencies."""

    def __init__(
        self,
        state_dir: Path,
        models: Sequence[str] | None = None,
        latency_scale: float = 0.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if latency_scale < 0:
            raise ValueError(f"latency_scale must be >= 0, got {latency_scale}")
        self.state_dir = Path(state_dir)
        self.latency_scale = float(latency_scale)
        self._clock = clock
        self._sleep = sleep
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DeviceUnavailable(
                f"cannot create the simulated GPU directory {self.state_dir}: {exc.strerror}",
                hint="create it, writable by the user the hooks run as (root)",
            ) from None
        wanted = None if models is None else _model_names(models)
        with self._locked(exclusive=True):
            if not self.state_path.exists():
                if wanted is None:
                    raise DeviceError(
                        f"no simulated GPUs in {self.state_dir} (no state.json)",
                        hint="give the GPU models (config [nodes]) on first use",
                    )
                self._write(self._fresh_state(wanted))
                return
            state = self._read()
        on_disk = [g["model"] for g in state["gpus"]]
        if wanted is not None and wanted != on_disk:
            raise DeviceError(
                f"simulated GPUs in {self.state_path} are {on_disk} but the config names {wanted}",
                hint=f"fix [nodes] in the config, or remove {self.state_dir} to start "
                "with fresh GPUs",
            )

    # -- paths and state ------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def audit_path(self) -> Path:
        return self.state_dir / "audit.jsonl"

    @property
    def fault_path(self) -> Path:
        return self.state_dir / "fault.json"

    def _fresh_state(self, models: list[str]) -> dict:
        key = self.state_dir.name
        return {
            "version": STATE_VERSION,
            "generation": 0,
            "gpus": [
                {"index": i, "model": m, "uuid": gpu_uuid_for(key, i), "mig_enabled": True}
                for i, m in enumerate(models)
            ],
            "instances": [],
        }

    @contextmanager
    def _flock(self, path: Path, exclusive: bool) -> Iterator[None]:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError:
            fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _locked(self, exclusive: bool = True):
        return self._flock(self.state_dir / "lock", exclusive)

    def _gpu_locked(self, gpu: int):
        return self._flock(self.state_dir / f"gpu{gpu}.lock", True)

    def _read(self) -> dict:
        try:
            state = json.loads(self.state_path.read_text())
            _check_shape(state)
            return state
        except (OSError, ValueError, AttributeError, RecursionError) as exc:
            raise DeviceUnavailable(
                f"simulated GPU state {self.state_path} is unreadable: {exc}",
                hint=f"restore it, or remove {self.state_dir} to start with fresh GPUs",
            ) from None

    def _write(self, state: dict) -> None:
        tmp = self.state_dir / f".state.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.state_path)

    def _audit(self, record: dict) -> None:
        with open(self.audit_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")

    # -- checks ---------------------------------------------------------------------

    def _gpu(self, state: dict, gpu: int) -> dict:
        n = len(state["gpus"])
        if not isinstance(gpu, int) or not 0 <= gpu < n:
            raise InvalidRequest(
                f"GPU {gpu} does not exist: this node has {n} simulated GPU(s)",
                hint="check the GPU index against [nodes] in the config",
            )
        return state["gpus"][gpu]

    def _check_fault(self, op: str, gpu: int) -> None:
        """Raise the injected error of ``fault.json`` when it applies to ``op`` on ``gpu``."""
        if not self.fault_path.exists():
            return
        try:
            fault = json.loads(self.fault_path.read_text())
            fop, name = fault.get("op", "any"), fault["error"]
            cls = FAULT_ERRORS[name]
            if fop not in _FAULT_OPS:
                raise ValueError(f"op {fop!r} is not one of {', '.join(_FAULT_OPS)}")
            times = None if fault.get("times") is None else int(fault["times"])
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DeviceError(
                f"fault injection file {self.fault_path} is malformed: {exc!s}",
                hint=f'write {{"op": "create", "error": one of {", ".join(FAULT_ERRORS)}, '
                '"message": "..."} or remove the file',
            ) from None
        if fop not in (op, "any"):
            return
        if fault.get("gpu") is not None and fault["gpu"] != gpu:
            return
        if times is not None:
            if times <= 1:
                self.fault_path.unlink(missing_ok=True)
            else:
                fault["times"] = times - 1
                self.fault_path.write_text(json.dumps(fault) + "\n")
        message = fault.get("message") or f"injected {name} on {op}"
        raise cls(f"GPU {gpu}: {message}", hint=fault.get("hint", ""))

    @staticmethod
    def _instance(rec: dict) -> MigInstance:
        pl = rec["placement"]
        return MigInstance(
            gpu=rec["gpu"],
            profile=rec["profile"],
            placement=Placement(pl["start"], pl["size"]),
            uuid=rec["uuid"],
            gi_id=rec["gi_id"],
            ci_id=rec["ci_id"],
        )

    # -- the interface --------------------------------------------------------------

    def gpus(self) -> list[GpuInfo]:
        """The simulated GPUs in index order."""
        with self._locked(exclusive=False):
            state = self._read()
        return [GpuInfo(g["index"], g["model"], g["uuid"], g["mig_enabled"]) for g in state["gpus"]]

    def instances(self, gpu: int | None = None) -> list[MigInstance]:
        """Live instances, of one GPU or all, sorted by (gpu, placement)."""
        with self._locked(exclusive=False):
            state = self._read()
        if gpu is not None:
            self._gpu(state, gpu)
        found = [self._instance(r) for r in state["instances"] if gpu is None or r["gpu"] == gpu]
        return sorted(found, key=lambda i: (i.gpu, i.placement))

    def create(
        self, gpu: int, profile: str, placement: Placement, job_id: str | None = None
    ) -> MigInstance:
        """Create ``profile`` at ``placement`` on ``gpu`` as NVML would, sleeping Table 1's
        create time x ``latency_scale`` with the GPU's reconfiguration lock held."""
        with self._locked(exclusive=False):
            self._gpu(self._read(), gpu)
        with self._gpu_locked(gpu):
            start = self._clock()
            with self._locked():
                state = self._read()
                g = self._gpu(state, gpu)
                self._check_fault("create", gpu)
                prof = self._validate(state, g, profile, placement)
                gi_id = self._gi_id(state, g, placement)
            model = geometry.get_model(g["model"])
            self._sleep_for(model.create_time(prof.compute_slices))
            with self._locked():
                state = self._read()
                g = self._gpu(state, gpu)
                self._validate(state, g, profile, placement)  # nobody else holds the GPU lock
                state["generation"] += 1
                rec = {
                    "gpu": gpu,
                    "gi_id": gi_id,
                    "ci_id": 0,
                    "uuid": mig_uuid_for(g["uuid"], gi_id, state["generation"]),
                    "profile": prof.name,
                    "placement": placement.to_json(),
                    "job_id": job_id,
                    "created": self._clock(),
                }
                state["instances"].append(rec)
                self._write(state)
                end = self._clock()
                self._audit(self._audit_record("create", rec, job_id, start, end))
        return self._instance(rec)

    def destroy(self, gpu: int, uuid: str, job_id: str | None = None) -> None:
        """Destroy the instance ``uuid`` of ``gpu`` (its compute instance first, as NVML
        needs), sleeping Table 1's destroy time x ``latency_scale``."""
        with self._locked(exclusive=False):
            self._gpu(self._read(), gpu)
        with self._gpu_locked(gpu):
            start = self._clock()
            with self._locked():
                state = self._read()
                g = self._gpu(state, gpu)
                self._check_fault("destroy", gpu)
                rec = self._find(state, gpu, uuid)
            prof = geometry.get_model(g["model"]).profile(rec["profile"])
            self._sleep_for(geometry.get_model(g["model"]).destroy_time(prof.compute_slices))
            with self._locked():
                state = self._read()
                rec = self._find(state, gpu, uuid)
                state["instances"].remove(rec)
                self._write(state)
                end = self._clock()
                self._audit(self._audit_record("destroy", rec, job_id, start, end))

    def energy_mj(self, gpu: int) -> int | None:
        """None: a simulated GPU has no energy counter (accounting models its energy)."""
        return None

    def health(self) -> list[str]:
        """MIG-off GPUs and an active fault injection; [] when all is well."""
        with self._locked(exclusive=False):
            state = self._read()
        problems = [
            f"GPU {g['index']} ({g['model']}): MIG mode is off "
            f"(hint: nvidia-smi -i {g['index']} -mig 1 on an idle GPU)"
            for g in state["gpus"]
            if not g["mig_enabled"]
        ]
        if self.fault_path.exists():
            try:
                fault = json.loads(self.fault_path.read_text())
                what = (
                    f"{fault.get('op', 'any')} raises {fault.get('error')}: "
                    f"{fault.get('message', '')}"
                )
            except (OSError, ValueError, AttributeError):
                what = "the file is malformed"
            problems.append(f"fault injection active ({self.fault_path}): {what}")
        return problems

    def mig_minors(self) -> str:
        """NVIDIA's capability minor table for this node's GPUs (``migcaps``)."""
        with self._locked(exclusive=False):
            n = len(self._read()["gpus"])
        return migcaps.render_minors(n)

    def set_mig_mode(self, gpu: int, enabled: bool) -> None:
        """Turn MIG mode on or off (tests, demos); off needs a GPU without instances."""
        with self._locked(exclusive=False):
            self._gpu(self._read(), gpu)
        with self._gpu_locked(gpu), self._locked():
            state = self._read()
            g = self._gpu(state, gpu)
            live = [r for r in state["instances"] if r["gpu"] == gpu]
            if not enabled and live:
                raise InstanceInUse(
                    f"GPU {gpu}: cannot turn MIG mode off: {len(live)} MIG instance(s) exist",
                    hint="destroy the instances first",
                )
            g["mig_enabled"] = bool(enabled)
            self._write(state)

    # -- helpers --------------------------------------------------------------------

    def _gi_id(self, state: dict, g: dict, placement: Placement) -> int:
        """The GPU-instance id by placement (``migcaps``), or with ``gi-numbering``
        reading ``creation``, the smallest free id from 1 (0: whole GPU), as a driver
        that numbers by creation order would."""
        model = geometry.get_model(g["model"])
        try:
            numbering = (self.state_dir / "gi-numbering").read_text().strip()
        except OSError:
            numbering = "placement"
        if numbering != "creation":
            return migcaps.gi_id_for(model, placement)
        if placement.size == model.memory_slices:
            return 0
        live = {r["gi_id"] for r in state["instances"] if r["gpu"] == g["index"]}
        return next(i for i in range(1, migcaps.GI_PER_GPU + 1) if i not in live)

    def _sleep_for(self, seconds: float) -> None:
        if self.latency_scale > 0:
            self._sleep(seconds * self.latency_scale)

    def _validate(self, state: dict, g: dict, profile: str, placement: Placement):
        gpu, model = g["index"], geometry.get_model(g["model"])
        if not g["mig_enabled"]:
            raise MigDisabled(
                f"GPU {gpu} ({model.name}): MIG mode is off",
                hint=f"nvidia-smi -i {gpu} -mig 1 on an idle GPU",
            )
        try:
            prof = model.profile(profile)
        except GeometryError:
            names = ", ".join(p.name for p in model.all_profiles)
            raise InvalidRequest(
                f"GPU {gpu} ({model.name}) has no MIG profile {profile!r}: Invalid Argument",
                hint=f"profiles of {model.name}: {names}",
            ) from None
        if placement not in prof.placements:
            legal = ", ".join(f"{p.start}:{p.size}" for p in prof.placements)
            raise InvalidRequest(
                f"GPU {gpu} ({model.name}): {prof.name} cannot be placed at "
                f"{placement.start}:{placement.size}: Invalid Argument",
                hint=f"{prof.name} placements (start:size in memory slices) are {legal}",
            )
        in_way = [
            r
            for r in state["instances"]
            if r["gpu"] == gpu and placement.overlaps(Placement(**r["placement"]))
        ]
        if in_way:
            raise PlacementConflict(
                f"GPU {gpu}: cannot create {prof.name} at {placement.start}:{placement.size}: "
                f"Insufficient Resources; in the way: {_describe(in_way)}",
                hint="destroy the instance in the way first, or pick a free placement",
            )
        same = [r for r in state["instances"] if r["gpu"] == gpu and r["profile"] == prof.name]
        if len(same) >= prof.instance_count:  # NVML: INSUFFICIENT_RESOURCES (+me: one a GPU)
            raise PlacementConflict(
                f"GPU {gpu}: cannot create {prof.name} at {placement.start}:{placement.size}: "
                f"Insufficient Resources; the GPU holds at most {prof.instance_count} "
                f"{prof.name} ({_describe(same)})",
                hint=f"destroy a {prof.name} first, or use another profile",
            )
        return prof

    def _find(self, state: dict, gpu: int, uuid: str) -> dict:
        for r in state["instances"]:
            if r["gpu"] == gpu and r["uuid"] == uuid:
                return r
        elsewhere = [r["gpu"] for r in state["instances"] if r["uuid"] == uuid]
        where = f" (it is on GPU {elsewhere[0]})" if elsewhere else ""
        raise InstanceNotFound(
            f"GPU {gpu}: no MIG instance {uuid}{where}: Not Found",
            hint=f"destroy it on GPU {elsewhere[0]}" if elsewhere else "it is gone already",
        )

    @staticmethod
    def _audit_record(op: str, rec: dict, job_id, start: float, end: float) -> dict:
        return {
            "op": op,
            "gpu": rec["gpu"],
            "profile": rec["profile"],
            "placement": rec["placement"],
            "uuid": rec["uuid"],
            "job_id": job_id,
            "start": start,
            "end": end,
            "pid": os.getpid(),
        }


def _describe(recs: list[dict]) -> str:
    return "; ".join(
        f"{r['profile']} at {r['placement']['start']}:{r['placement']['size']} ({r['uuid']})"
        for r in sorted(recs, key=lambda r: r["placement"]["start"])
    )
