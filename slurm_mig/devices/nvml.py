"""MIG backend on the real driver through nvidia-ml-py (``import pynvml``).

Profile IDs differ between chips, so none is written here: each GPU's profiles are found
by asking NVML for every ``NVML_GPU_INSTANCE_PROFILE_*`` constant (0 upward until
INVALID_ARGUMENT) and matched to ``geometry`` by the constant's class, slice count and
memory. Every NVML error becomes one of ``base``'s errors with a hint an admin can act
on. pynvml is imported only when a backend is used: the hooks import this module.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from .. import geometry
from ..geometry import GeometryError, GpuModel, Placement
from .base import (
    DeviceError,
    DeviceUnavailable,
    GpuInfo,
    InstanceNotFound,
    InvalidRequest,
    MigBackend,
    MigDisabled,
    MigInstance,
    PlacementConflict,
)
from .boards import detect_model
from .nvmlprofiles import NvmlProfile, match_profile, nvml_slices
from .nvmlsession import DEFAULT_HINT, NvmlSession, nvml_text

if TYPE_CHECKING:
    from .catalogue import Catalogue

__all__ = ["NvmlBackend", "NvmlProfile", "detect_model", "read_catalogue"]

_MAX_PROFILE_CONSTANT = 64  # a guard: NVML answers INVALID_ARGUMENT long before
_GIB = 1024**3
_MIB = 1024**2


class NvmlBackend(NvmlSession, MigBackend):
    """Create and destroy MIG instances at explicit placements through NVML.

    Each call initialises NVML and shuts it down again; ``with NvmlBackend() as b:``
    keeps one session open for several calls.
    """

    def __init__(self, pynvml_module: Any = None) -> None:
        super().__init__(pynvml_module)
        self._tables: dict[str, list[NvmlProfile]] = {}  # GPU uuid -> profiles

    # -- devices and profiles -------------------------------------------------------

    def _handle(self, gpu: int) -> Any:
        count = self._call("count GPUs", None, "nvmlDeviceGetCount")
        if not isinstance(gpu, int) or not 0 <= gpu < count:
            raise InvalidRequest(
                f"GPU {gpu} does not exist: NVML sees {count} GPU(s) on this node",
                hint="check the GPU index against [nodes] in the config",
            )
        return self._call("open the GPU", gpu, "nvmlDeviceGetHandleByIndex", gpu)

    def _describe(self, gpu: int, handle: Any) -> tuple[str, str, str | None, bool, bool]:
        """(NVML name, uuid, geometry model or None, MIG on, MIG mode change pending)."""
        nvml = self.nvml
        name = nvml_text(self._call("read the GPU name", gpu, "nvmlDeviceGetName", handle))
        uuid = nvml_text(self._call("read the GPU uuid", gpu, "nvmlDeviceGetUUID", handle))
        try:
            mem = self._call("read memory", gpu, "nvmlDeviceGetMemoryInfo", handle).total
        except DeviceError:
            mem = None
        try:
            mode = self._try("nvmlDeviceGetMigMode", handle, ok=("NOT_SUPPORTED",))
        except nvml.NVMLError as exc:
            raise self._error(exc, "read the MIG mode", gpu) from None
        on = mode is not None and mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
        pending = mode is not None and mode[1] != mode[0]
        return name, uuid, detect_model(name, mem), on, pending

    def _profiles(self, gpu: int, handle: Any, uuid: str, model: GpuModel) -> list[NvmlProfile]:
        """Every GPU-instance profile the driver has on this GPU, matched to geometry."""
        if uuid in self._tables:
            return self._tables[uuid]
        nvml = self.nvml
        names = {
            v: k.removeprefix("NVML_GPU_INSTANCE_PROFILE_")
            for k, v in vars(nvml).items()
            if k.startswith("NVML_GPU_INSTANCE_PROFILE_") and not k.endswith("_COUNT")
        }
        found = []
        for const in range(_MAX_PROFILE_CONSTANT):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, const)
            except nvml.NVMLError as exc:
                code = self._code_name(getattr(exc, "value", -1))
                if code == "INVALID_ARGUMENT":
                    break
                if code == "NOT_SUPPORTED":
                    continue
                raise self._error(exc, "read the MIG profiles", gpu) from None
            cls = names.get(const)
            nvml_name = nvml_text(getattr(info, "name", b"")).removeprefix("MIG ").strip()
            geo = match_profile(model, cls, nvml_name, info.sliceCount, info.memorySizeMB * _MIB)
            found.append(
                NvmlProfile(
                    constant=const,
                    nvml_class=cls,
                    id=int(info.id),
                    name=geo.name if geo else (nvml_name or f"profile-{info.id}"),
                    slice_count=int(info.sliceCount),
                    instance_count=int(info.instanceCount),
                    memory_bytes=int(info.memorySizeMB) * _MIB,
                    geometry=geo,
                    nvml_name=nvml_name,
                )
            )
        self._tables[uuid] = found
        return found

    def _placements(
        self, gpu: int, handle: Any, prof: NvmlProfile, model: GpuModel
    ) -> list[Placement]:
        """The profile's possible placements, in memory slices (``model.from_nvml``)."""
        nvml = self.nvml
        count = ctypes.c_uint(0)
        what = f"list the placements of {prof.name}"
        self._call(
            what,
            gpu,
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            handle,
            prof.id,
            None,
            ctypes.byref(count),
        )
        n = count.value
        array = (nvml.c_nvmlGpuInstancePlacement_t * max(n, 1))()
        count = ctypes.c_uint(n)
        self._call(
            what,
            gpu,
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            handle,
            prof.id,
            array,
            ctypes.byref(count),
        )
        return [nvml_slices(model, gpu, array[i].start, array[i].size) for i in range(count.value)]

    def _gpu_instances(
        self, gpu: int, handle: Any, table: list[NvmlProfile], model: GpuModel
    ) -> list[tuple]:
        """(GI handle, gi id, profile, placement) of every GPU instance on the GPU."""
        nvml = self.nvml
        out = []
        for prof in table:
            array = (nvml.c_nvmlGpuInstance_t * max(prof.instance_count, 1))()
            count = ctypes.c_uint(0)
            self._call(
                "list GPU instances",
                gpu,
                "nvmlDeviceGetGpuInstances",
                handle,
                prof.id,
                array,
                ctypes.byref(count),
            )
            for i in range(count.value):
                gi = array[i]
                info = self._call("read a GPU instance", gpu, "nvmlGpuInstanceGetInfo", gi)
                pl = nvml_slices(model, gpu, int(info.placement.start), int(info.placement.size))
                out.append((gi, int(info.id), prof, pl))
        return sorted(out, key=lambda t: t[3])

    def _compute_instances(self, gpu: int | None, gi: Any) -> list[tuple[Any, int]]:
        """(CI handle, ci id) of every compute instance of a GPU instance."""
        nvml = self.nvml
        out = []
        seen_ids = set()
        known = getattr(nvml, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 0)
        for const in range(_MAX_PROFILE_CONSTANT):
            try:
                info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, const, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
            except nvml.NVMLError as exc:
                code = self._code_name(getattr(exc, "value", -1))
                if code == "INVALID_ARGUMENT" and const >= known:
                    break  # past every profile the driver has
                if code in ("NOT_SUPPORTED", "INVALID_ARGUMENT"):
                    continue  # not in a GPU instance of this size
                raise self._error(exc, "read the compute-instance profiles", gpu) from None
            if info.id in seen_ids:
                continue
            seen_ids.add(info.id)
            array = (nvml.c_nvmlComputeInstance_t * max(int(info.instanceCount), 1))()
            count = ctypes.c_uint(0)
            self._call(
                "list compute instances",
                gpu,
                "nvmlGpuInstanceGetComputeInstances",
                gi,
                info.id,
                array,
                ctypes.byref(count),
            )
            for i in range(count.value):
                ci = array[i]
                cinfo = self._call("read a compute instance", gpu, "nvmlComputeInstanceGetInfo", ci)
                out.append((ci, int(cinfo.id)))
        return sorted(out, key=lambda t: t[1])

    def _mig_uuids(self, gpu: int, handle: Any) -> dict[tuple[int, int], str]:
        """(gi id, ci id) -> "MIG-..." for every MIG device of the GPU."""
        nvml = self.nvml
        n = self._call("count MIG devices", gpu, "nvmlDeviceGetMaxMigDeviceCount", handle)
        out = {}
        for i in range(n):
            try:
                mig = self._try("nvmlDeviceGetMigDeviceHandleByIndex", handle, i, ok=("NOT_FOUND",))
                if mig is None:
                    continue
                gi_id = nvml.nvmlDeviceGetGpuInstanceId(mig)
                ci_id = nvml.nvmlDeviceGetComputeInstanceId(mig)
                out[(int(gi_id), int(ci_id))] = nvml_text(nvml.nvmlDeviceGetUUID(mig))
            except nvml.NVMLError as exc:
                raise self._error(exc, "list MIG devices", gpu) from None
        return out

    def _state(self, gpu: int) -> tuple[Any, str, GpuModel, list[NvmlProfile]]:
        """Handle, uuid, model and profiles of a MIG GPU; MigDisabled if it is not one."""
        handle = self._handle(gpu)
        name, uuid, model_name, on, _ = self._describe(gpu, handle)
        if model_name is None:
            raise MigDisabled(
                f"GPU {gpu} ({name}) is not a MIG GPU slurm-mig knows",
                hint="list only MIG GPUs (" + ", ".join(geometry.MODELS) + ") in [nodes]",
            )
        if not on:
            raise MigDisabled(
                f"GPU {gpu} ({name}): MIG mode is off",
                hint=f"nvidia-smi -i {gpu} -mig 1 on an idle GPU",
            )
        model = geometry.get_model(model_name)
        return handle, uuid, model, self._profiles(gpu, handle, uuid, model)

    def _live(
        self, gpu: int, handle: Any, table: list[NvmlProfile], model: GpuModel
    ) -> list[tuple]:
        """(MigInstance, GI handle, [CI handles]) of every GPU instance of the GPU.

        A GPU instance without a compute instance (left by a crash or by hand) has no
        MIG device; it is reported with uuid ``gi<N>-no-ci`` so it can be destroyed."""
        uuids = self._mig_uuids(gpu, handle)
        out = []
        for gi, gi_id, prof, pl in self._gpu_instances(gpu, handle, table, model):
            cis = self._compute_instances(gpu, gi)
            if cis:
                ci_id = cis[0][1]
                uuid = uuids.get((gi_id, ci_id), f"gi{gi_id}-ci{ci_id}-no-uuid")
            else:
                ci_id, uuid = -1, f"gi{gi_id}-no-ci"
            inst = MigInstance(gpu, prof.name, pl, uuid, gi_id, ci_id)
            out.append((inst, gi, [c for c, _ in cis]))
        return out

    # -- the interface --------------------------------------------------------------

    def gpus(self) -> list[GpuInfo]:
        """The node's GPUs in index order; ``model`` is NVML's name where geometry has none."""
        with self._session():
            count = self._call("count GPUs", None, "nvmlDeviceGetCount")
            out = []
            for i in range(count):
                handle = self._call("open the GPU", i, "nvmlDeviceGetHandleByIndex", i)
                name, uuid, model, on, _ = self._describe(i, handle)
                out.append(GpuInfo(i, model or name, uuid, on))
            return out

    def instances(self, gpu: int | None = None) -> list[MigInstance]:
        """Live instances (GPU instance + its compute instance), sorted by (gpu, placement);
        none on a GPU whose MIG mode is off."""
        with self._session():
            if gpu is None:
                indices = range(self._call("count GPUs", None, "nvmlDeviceGetCount"))
            else:
                indices = [gpu]
            out = []
            for i in indices:
                try:
                    handle, _, model, table = self._state(i)
                except MigDisabled:
                    continue  # MIG off or not a MIG GPU: no instances
                out.extend(inst for inst, _, _ in self._live(i, handle, table, model))
            return sorted(out, key=lambda x: (x.gpu, x.placement))

    def create(
        self, gpu: int, profile: str, placement: Placement, job_id: str | None = None
    ) -> MigInstance:
        """GPU instance of ``profile`` at ``placement``, then its full compute instance."""
        nvml = self.nvml
        with self._session():
            handle, _, model, table = self._state(gpu)
            prof = self._profile(gpu, model, table, profile)
            legal = self._placements(gpu, handle, prof, model)
            if placement not in legal:
                text = ", ".join(f"{p.start}:{p.size}" for p in legal)
                raise InvalidRequest(
                    f"GPU {gpu} ({model.name}): {prof.name} cannot be placed at "
                    f"{placement.start}:{placement.size}: NVML Invalid Argument",
                    hint=f"{prof.name} placements (start:size in memory slices) are {text}",
                )
            c_pl = nvml.c_nvmlGpuInstancePlacement_t()
            units = model.to_nvml(placement)  # RTX PRO 6000 counts 3 units a slice
            c_pl.start, c_pl.size = units.start, units.size
            what = f"create {prof.name} at {placement.start}:{placement.size}"
            try:
                gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                    handle, prof.id, ctypes.byref(c_pl)
                )
            except nvml.NVMLError as exc:
                err = self._error(exc, what, gpu)
                if isinstance(err, PlacementConflict):
                    err = self._conflict(gpu, handle, table, model, placement, err)
                raise err from None
            try:
                ci = self._create_ci(gpu, gi, prof)
                gi_id = int(self._call(what, gpu, "nvmlGpuInstanceGetInfo", gi).id)
                ci_id = int(self._call(what, gpu, "nvmlComputeInstanceGetInfo", ci).id)
                uuid = self._mig_uuids(gpu, handle).get((gi_id, ci_id))
                if uuid is None:
                    raise DeviceUnavailable(
                        f"GPU {gpu}: {what}: NVML shows no MIG device for GPU instance "
                        f"{gi_id} / compute instance {ci_id}",
                        hint=DEFAULT_HINT,
                    )
            except DeviceError:
                self._rollback(gi)
                raise
            return MigInstance(gpu, prof.name, placement, uuid, gi_id, ci_id)

    def destroy(self, gpu: int, uuid: str, job_id: str | None = None) -> None:
        """Destroy the compute instance(s), then the GPU instance; InstanceNotFound if absent."""
        with self._session():
            handle, _, model, table = self._state(gpu)
            for inst, gi, cis in self._live(gpu, handle, table, model):
                if inst.uuid != uuid:
                    continue
                what = f"destroy {inst.profile} at {inst.placement.start}:{inst.placement.size}"
                for ci in cis:
                    self._call(what, gpu, "nvmlComputeInstanceDestroy", ci)
                self._call(what, gpu, "nvmlGpuInstanceDestroy", gi)
                return
            raise InstanceNotFound(
                f"GPU {gpu}: no MIG instance {uuid}: NVML Not Found",
                hint="it is gone already; nothing to destroy",
            )

    def catalogue(self, gpu: int) -> Catalogue:
        """GPU ``gpu``'s MIG catalogue as its driver reports it: every
        ``NVML_GPU_INSTANCE_PROFILE_*`` constant (0 upward until INVALID_ARGUMENT) with its
        name, slices, memory, instance count and placements (in memory slices where the
        model is known: ``model.from_nvml``). DeviceError when the driver cannot be asked
        (MigDisabled when MIG is off)."""
        from .catalogue import Catalogue, CatalogueProfile, profile_name, suffix_of

        with self._session() as nvml:
            handle = self._handle(gpu)
            name, _, model_name, _, _ = self._describe(gpu, handle)
            model = geometry.get_model(model_name) if model_name else None
            names = {
                v: k.removeprefix("NVML_GPU_INSTANCE_PROFILE_")
                for k, v in vars(nvml).items()
                if k.startswith("NVML_GPU_INSTANCE_PROFILE_") and not k.endswith("_COUNT")
            }
            read = getattr(nvml, "nvmlDeviceGetGpuInstanceProfileInfoV", None) or (
                nvml.nvmlDeviceGetGpuInstanceProfileInfo
            )
            found: list[CatalogueProfile] = []
            for const in range(_MAX_PROFILE_CONSTANT):
                try:
                    info = read(handle, const)
                except nvml.NVMLError as exc:
                    code = self._code_name(getattr(exc, "value", -1))
                    if code == "INVALID_ARGUMENT":
                        break
                    if code == "NOT_SUPPORTED" and const > 0:
                        continue  # not on this chip; at 0 MIG is off or absent
                    raise self._error(exc, "read the MIG profiles", gpu) from None
                cls = names.get(const)
                memory = int(info.memorySizeMB) * _MIB
                pname = nvml_text(getattr(info, "name", b"")).removeprefix("MIG ").strip()
                pid = int(info.id)
                found.append(
                    CatalogueProfile(
                        name=pname or profile_name(int(info.sliceCount), memory, suffix_of(cls)),
                        nvml_class=cls,
                        profile_id=pid,
                        slices=int(info.sliceCount),
                        memory_bytes=memory,
                        instances=int(info.instanceCount),
                        placements=self._possible(gpu, handle, pid, pname, model),
                        named=bool(pname),
                    )
                )
        return Catalogue(name, tuple(found), model_name)

    def _possible(
        self, gpu: int, handle: Any, profile_id: int, name: str, model: GpuModel | None
    ) -> tuple[Placement, ...]:
        """A profile's placements by id, sorted; in NVML units if the model is unknown."""
        nvml = self.nvml
        what = f"list the placements of {name or f'profile {profile_id}'}"
        fn = "nvmlDeviceGetGpuInstancePossiblePlacements"
        count = ctypes.c_uint(0)
        self._call(what, gpu, fn, handle, profile_id, None, ctypes.byref(count))
        array = (nvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        count = ctypes.c_uint(count.value)
        self._call(what, gpu, fn, handle, profile_id, array, ctypes.byref(count))
        raw = [(int(array[i].start), int(array[i].size)) for i in range(count.value)]
        if model is None:
            return tuple(sorted(Placement(a, b) for a, b in raw))
        return tuple(sorted(nvml_slices(model, gpu, a, b) for a, b in raw))

    def energy_mj(self, gpu: int) -> int | None:
        """``nvmlDeviceGetTotalEnergyConsumption`` of the (parent) GPU: millijoules since
        the driver loaded; None where the GPU or driver has no counter (NOT_SUPPORTED,
        FUNCTION_NOT_FOUND) or it answers something that is no 64-bit count."""
        with self._session():
            handle = self._handle(gpu)
            try:
                value = self._try(
                    "nvmlDeviceGetTotalEnergyConsumption",
                    handle,
                    ok=("NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "NO_DATA", "NOT_READY"),
                )
            except self.nvml.NVMLError as exc:
                raise self._error(exc, "read the energy counter", gpu) from None
            except AttributeError:  # a pynvml without the function
                return None
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return value if 0 <= value < 2**64 else None

    def health(self) -> list[str]:
        """MIG mode off or pending, unknown GPUs, GPU instances without a compute
        instance, and any NVML failure; [] when all is well."""
        problems = []
        try:
            with self._session():
                count = self._call("count GPUs", None, "nvmlDeviceGetCount")
                for i in range(count):
                    try:
                        problems.extend(self._gpu_health(i))
                    except DeviceError as exc:
                        problems.append(str(exc))
        except DeviceError as exc:
            problems.append(str(exc))
        return problems

    # -- helpers --------------------------------------------------------------------

    def _gpu_health(self, gpu: int) -> list[str]:
        handle = self._call("open the GPU", gpu, "nvmlDeviceGetHandleByIndex", gpu)
        name, uuid, model_name, on, pending = self._describe(gpu, handle)
        out = []
        if model_name is None:
            return [f"GPU {gpu} ({name}): not a MIG GPU slurm-mig knows; it is left alone"]
        if pending:
            out.append(
                f"GPU {gpu} ({name}): a MIG mode change is pending "
                f"(hint: reset the GPU: nvidia-smi -r -i {gpu})"
            )
        if not on:
            out.append(
                f"GPU {gpu} ({name}): MIG mode is off "
                f"(hint: nvidia-smi -i {gpu} -mig 1 on an idle GPU)"
            )
            return out
        model = geometry.get_model(model_name)
        table = self._profiles(gpu, handle, uuid, model)
        planned = {p.geometry.name for p in table if p.geometry}
        missing = [p.name for p in model.profiles if p.name not in planned]
        if missing:
            out.append(
                f"GPU {gpu} ({name}): NVML has no profile matching {', '.join(missing)} "
                f"of {model.name} (hint: compare nvidia-smi mig -lgip -i {gpu} with the model)"
            )
        for inst, _, cis in self._live(gpu, handle, table, model):
            if not cis:
                out.append(
                    f"GPU {gpu}: GPU instance {inst.gi_id} ({inst.profile} at "
                    f"{inst.placement.start}:{inst.placement.size}) has no compute instance "
                    f"(hint: slurm-mig destroys it as {inst.uuid} when it needs the slices)"
                )
        return out

    def _profile(
        self, gpu: int, model: GpuModel, table: list[NvmlProfile], name: str
    ) -> NvmlProfile:
        """The driver's profile called ``name``: by the driver's own name first (a plan made
        with ``catalogue.driver_wins``), else geometry's (an earlier driver's name too)."""
        for p in table:
            if p.nvml_name and p.nvml_name == name:
                return p
        try:
            wanted = model.profile(name)
        except GeometryError:
            names = ", ".join(p.name for p in model.all_profiles)
            raise InvalidRequest(
                f"GPU {gpu} ({model.name}) has no MIG profile {name!r}: NVML Invalid Argument",
                hint=f"profiles of {model.name}: {names}",
            ) from None
        for p in table:
            if p.geometry == wanted:
                return p
        raise InvalidRequest(
            f"GPU {gpu} ({model.name}): the driver reports no profile like {name} "
            f"({wanted.compute_slices} slices, {wanted.memory_bytes / _GIB:.1f} GiB)",
            hint=f"compare nvidia-smi mig -lgip -i {gpu} with the model in [nodes]",
        )

    def _create_ci(self, gpu: int, gi: Any, prof: NvmlProfile) -> Any:
        """The compute instance spanning the whole GPU instance."""
        nvml = self.nvml
        what = f"create the compute instance of {prof.name}"
        const = getattr(nvml, f"NVML_COMPUTE_INSTANCE_PROFILE_{prof.slice_count}_SLICE", None)
        if const is None:
            raise DeviceUnavailable(
                f"GPU {gpu}: {what}: pynvml has no compute-instance profile of "
                f"{prof.slice_count} slices",
                hint="upgrade nvidia-ml-py",
            )
        info = self._call(
            what,
            gpu,
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            gi,
            const,
            nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        )
        return self._call(what, gpu, "nvmlGpuInstanceCreateComputeInstance", gi, info.id)

    def _rollback(self, gi: Any) -> None:
        """Destroy a GPU instance whose compute instance could not be set up."""
        nvml = self.nvml
        try:
            for ci, _ in self._compute_instances(None, gi):
                nvml.nvmlComputeInstanceDestroy(ci)
            nvml.nvmlGpuInstanceDestroy(gi)
        except (nvml.NVMLError, DeviceError):
            pass  # health() reports a GPU instance left without compute instance

    def _conflict(
        self,
        gpu: int,
        handle: Any,
        table: list,
        model: GpuModel,
        placement: Placement,
        err: DeviceError,
    ) -> DeviceError:
        """Name the instances in the way in a PlacementConflict."""
        try:
            in_way = [
                inst
                for inst, _, _ in self._live(gpu, handle, table, model)
                if inst.placement.overlaps(placement)
            ]
        except DeviceError:
            return err
        if not in_way:
            same = ", ".join(sorted({p.name for p in table}))
            return PlacementConflict(
                f"{err.message}; no instance overlaps it, the profile's instance count "
                f"is used up (profiles: {same})",
                hint=err.hint,
            )
        desc = "; ".join(
            f"{i.profile} at {i.placement.start}:{i.placement.size} ({i.uuid})" for i in in_way
        )
        return PlacementConflict(f"{err.message}; in the way: {desc}", hint=err.hint)


def read_catalogue(gpu: int, pynvml_module: Any = None) -> Catalogue:
    """The MIG catalogue of GPU ``gpu`` read through NVML (``NvmlBackend.catalogue``);
    DeviceError (a message and a hint, as the NVML backend raises them) when the driver
    cannot be asked."""
    return NvmlBackend(pynvml_module).catalogue(gpu)
