"""Where a ``mig-run`` job runs: its Slice, the profile a restart moves to, and the MIG
instances made and destroyed on the node's device backend."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..geometry import MODELS, GeometryError, GpuModel, Profile, can_coexist, get_model
from .options import Options, UsageError

__all__ = [
    "RestartError",
    "Slice",
    "SliceHolder",
    "initial_slice",
    "largest_profile",
    "model_for",
    "node_backend",
    "simulated_backend",
    "target_profile",
]


class RestartError(RuntimeError):
    """A restart that cannot be done (device or Slurm failure): one line, exit status 1."""


@dataclass(frozen=True)
class Slice:
    """Where the job runs: its memory, and the MIG instance when a backend made it."""

    capacity: int
    profile: str | None = None
    uuid: str | None = None
    gpu: int | None = None
    owned: bool = False  # mig-run created it and destroys it at the end


def model_for(opts: Options) -> GpuModel | None:
    """The GPU model named by --gpu-model, else the only model that has --slice."""
    if opts.gpu_model:
        try:
            return get_model(opts.gpu_model)
        except GeometryError as exc:
            raise UsageError(f"--gpu-model: {exc}") from None
    if opts.slice is None:
        return None
    having = [m for m in MODELS.values() if any(p.name == opts.slice for p in m.profiles)]
    if len(having) == 1:
        return having[0]
    if not having:
        known = sorted({p.name for m in MODELS.values() for p in m.profiles})
        raise UsageError(
            f"--slice {opts.slice!r}: no GPU model has this profile; profiles: {', '.join(known)}"
        )
    names = ", ".join(m.name for m in having)
    raise UsageError(f"--slice {opts.slice!r} exists on {names}; add --gpu-model MODEL")


def target_profile(model: GpuModel, need: int, current: int) -> Profile | None:
    """The smallest profile of ``model`` with more memory than ``current`` that covers
    ``need`` (fewest compute slices on a tie), or None."""
    fits = [p for p in model.profiles if p.memory_bytes > current and p.memory_bytes >= need]
    return min(fits, key=lambda p: (p.memory_bytes, p.compute_slices), default=None)


def largest_profile(model: GpuModel) -> Profile:
    """The profile of ``model`` with the most memory (most compute slices on a tie)."""
    return max(model.profiles, key=lambda p: (p.memory_bytes, p.compute_slices))


def simulated_backend(sim_dir: Path, model: GpuModel | None) -> Any:
    """``--sim-dir``: the simulated GPUs there (made of ``model`` when there are none yet)."""
    from ..devices.base import DeviceError
    from ..devices.simulated import SimulatedBackend

    models = None
    if not (sim_dir / "state.json").exists():
        if model is None:
            raise UsageError(f"--sim-dir {sim_dir} has no GPUs yet; add --gpu-model")
        models = [model.name]
    try:
        return SimulatedBackend(sim_dir, models=models)
    except DeviceError as exc:
        raise UsageError(f"--sim-dir: {exc}") from None


def node_backend(opts: Options, env: Mapping[str, str]) -> Any:
    """The node config's backend when ``--config`` names one or when the slice must be
    looked up (no --slice or --capacity: the instance in CUDA_VISIBLE_DEVICES, through
    NVML on a real node); else None."""
    lookup = opts.slice is None and opts.capacity is None
    if opts.config is None and not lookup:
        return None
    from ..config import ConfigError, load_config
    from ..devices.base import DeviceError
    from ..devices.open import open_backend

    node = env.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    try:
        config = load_config(opts.config)
        return open_backend(config, node)
    except ConfigError as exc:
        if opts.config is None:
            return None  # no config here: --slice or --capacity is needed
        raise UsageError(f"--config: {' '.join(str(exc).split())}") from None
    except (DeviceError, ValueError) as exc:
        raise RestartError(f"cannot open the device backend: {exc}") from None


class SliceHolder:
    """The job's current Slice, the GPU model and the device backend (None without one):
    adopts, creates and destroys the instances of one ``mig-run``."""

    def __init__(self, backend: Any, model: GpuModel | None, job: str) -> None:
        self.backend = backend
        self.model = model
        self.job = job
        self.current = Slice(0)

    def adopt(self, env: Mapping[str, str], profile: Profile | None) -> Slice | None:
        """The instance named by CUDA_VISIBLE_DEVICES, if the backend has it."""
        uuid = env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if not uuid.startswith("MIG-"):
            return None
        for inst in self.backend.instances():
            if inst.uuid == uuid:
                if profile is not None and inst.profile != profile.name:
                    raise UsageError(
                        f"--slice {profile.name}, but CUDA_VISIBLE_DEVICES is a {inst.profile} "
                        "instance; drop --slice or run on that profile"
                    )
                gpu_model = {g.index: g.model for g in self.backend.gpus()}[inst.gpu]
                model = self.model or get_model(gpu_model)
                self.model = model
                return Slice(model.profile(inst.profile).memory_bytes, inst.profile, uuid, inst.gpu)
        return None

    def make(self, profile: Profile, avoid: Slice | None = None) -> Slice:
        """A new instance of ``profile``, owned by mig-run."""
        made = self._create(profile, avoid)
        return Slice(profile.memory_bytes, profile.name, made.uuid, made.gpu, owned=True)

    def move_to(self, target: Profile) -> Slice:
        """The job's slice becomes one of ``target``: a new instance (the old one
        destroyed) with a backend, else just the new capacity."""
        old = self.current
        new = Slice(target.memory_bytes, target.name)
        if self.backend is not None:
            new = self.make(target, avoid=old)
            if old.uuid and old.uuid != new.uuid and old.gpu is not None:
                self.destroy(old)
        self.current = new
        return new

    def _create_on(self, gpu: int, profile: Profile) -> Any:
        """An instance of ``profile`` at a free placement on ``gpu``, or None."""
        from ..devices.base import DeviceError

        assert self.model is not None
        taken = [i.placement for i in self.backend.instances(gpu)]
        for pl in profile.placements:
            if can_coexist(self.model, taken + [pl]):
                try:
                    return self.backend.create(gpu, profile.name, pl, job_id=self.job)
                except DeviceError as exc:
                    raise RestartError(f"cannot create {profile.name}: {exc}") from None
        return None

    def _create(self, profile: Profile, avoid: Slice | None) -> Any:
        """An instance of ``profile`` on a GPU of the model: at a free placement, or in
        the place of ``avoid`` (destroyed first) when nothing else is free."""
        assert self.model is not None
        gpus = [g for g in self.backend.gpus() if g.model == self.model.name and g.mig_enabled]
        if avoid is not None and avoid.gpu is not None:
            gpus.sort(key=lambda g: g.index != avoid.gpu)
        for g in gpus:
            made = self._create_on(g.index, profile)
            if made is not None:
                return made
        if avoid is not None and avoid.uuid and avoid.gpu is not None:
            self.destroy(avoid)
            self.current = replace(avoid, uuid=None)
            made = self._create_on(avoid.gpu, profile)
            if made is not None:
                return made
        raise RestartError(f"no free placement for {profile.name} on any {self.model.name} GPU")

    def destroy(self, old: Slice) -> None:
        """Destroy ``old``'s instance (gone already is fine)."""
        from ..devices.base import DeviceError, InstanceNotFound

        try:
            self.backend.destroy(old.gpu, old.uuid, job_id=self.job)
        except InstanceNotFound:
            pass
        except DeviceError as exc:
            raise RestartError(f"cannot destroy the old {old.profile} instance: {exc}") from None

    def release(self, say: Callable[[str], None]) -> None:
        """Destroy the instance mig-run created, at the very end."""
        if self.backend is None or not self.current.owned or not self.current.uuid:
            return
        try:
            self.destroy(self.current)
        except RestartError as exc:
            say(f"warning: {exc}")


def _profile_of(opts: Options, model: GpuModel | None) -> Profile | None:
    """The profile ``--slice`` names, if any."""
    if opts.slice is None:
        return None
    assert model is not None
    try:
        return model.profile(opts.slice)
    except GeometryError as exc:
        raise UsageError(f"--slice: {exc}") from None


def initial_slice(
    opts: Options,
    env: Mapping[str, str],
    holder: SliceHolder,
    place: Callable[[SliceHolder, Profile], Slice],
) -> Slice:
    """The slice the job starts on: the instance it runs in, ``place`` for --slice, the
    --capacity, or the MIG instance in CUDA_VISIBLE_DEVICES; UsageError when unknown."""
    profile = _profile_of(opts, holder.model)
    if holder.backend is not None and profile is not None:
        current = holder.adopt(env, profile)
        if current is not None:
            return current
    if profile is not None:
        if opts.capacity is None and profile.memory_bytes <= opts.context:
            raise UsageError(
                f"--slice {profile.name} has {profile.memory_bytes} bytes, not above the "
                f"context overhead ({opts.context} bytes of --context); pick a larger slice"
            )
        return place(holder, profile)
    if opts.capacity is not None:
        return Slice(opts.capacity)
    adopted = holder.adopt(env, None) if holder.backend is not None else None
    if adopted is not None:
        if adopted.capacity <= opts.context:
            raise UsageError(
                f"the {adopted.profile} slice has {adopted.capacity} bytes, not above the "
                f"context overhead ({opts.context} bytes of --context)"
            )
        return adopted
    raise UsageError(
        "the job's memory is unknown; give --slice PROFILE or --capacity SIZE "
        "(or run in a MIG instance that the node's config backend knows)"
    )
