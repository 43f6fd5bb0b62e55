"""Compute instances and MIG device handles of the simulated library: CI profiles and
placements inside a GPU instance, create, destroy, list, and the MIG device a CI is seen as
(index, parent, IDs, attributes)."""

from __future__ import annotations

import ctypes

from slurm_gpupool.hw.sim import cabi
from slurm_gpupool.hw.sim.cargs import (
    CARG,
    Kind,
    NvmlReturn,
    as_int,
    decode_handle,
    deref,
    encode_handle,
    handle_value,
    put_handles,
    set_handle,
    set_ptr_field,
)
from slurm_gpupool.hw.sim.dispatch import SimLibraryBase, c_api
from slurm_gpupool.hw.sim.state import mig_uuid

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


def _catalog() -> Any:
    """The MIG catalog, loaded on first use: a hook's calls never need it (#29)."""
    from slurm_gpupool.core.mig import catalog

    return catalog


class ComputeInstances(SimLibraryBase):
    """The ``nvmlGpuInstance*ComputeInstance*`` calls and the MIG device handle queries."""

    # -- compute instances ---------------------------------------------------------------------
    def _ci_slices(self, g: dict, gi: dict, enum: Any) -> int:
        e = as_int(enum)
        if not 0 <= e < cabi.CI_ENUM_COUNT:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        slices = _catalog().ci_slices_for_enum(e)
        prof = self._profile_by_id(g, gi["profile_id"])
        if slices is None or slices not in _catalog().ci_sizes(prof.compute_slices):
            raise NvmlReturn(cabi.NOT_SUPPORTED)
        return slices

    @c_api("nvmlGpuInstanceGetComputeInstanceProfileInfoV")
    def _ci_profile(self, h: Any, enum: Any, eng: Any, ref: Any) -> None:
        g, gi = self._gi(h)
        if as_int(eng) != 0:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        slices = self._ci_slices(g, gi, enum)
        prof = self._profile_by_id(g, gi["profile_id"])
        info = deref(ref)
        if info.version != cabi.CI_PROFILE_INFO_V2:
            raise NvmlReturn(cabi.ARGUMENT_VERSION_MISMATCH)
        info.id = _catalog().ci_profile_id(slices)
        info.sliceCount = slices
        info.instanceCount = prof.compute_slices // slices
        info.multiprocessorCount = prof.sm_count * slices // prof.compute_slices
        info.sharedCopyEngineCount = prof.copy_engines
        info.sharedDecoderCount = prof.decoders
        info.sharedEncoderCount = 0
        info.sharedJpegCount = prof.jpegs
        info.sharedOfaCount = prof.ofas
        info.name = f"MIG {self._ci_name(g, gi, slices)}".encode()

    def _ci_starts(self, g: dict, gi: dict, slices: int) -> list[int]:
        prof = self._profile_by_id(g, gi["profile_id"])
        return list(range(0, prof.compute_slices - slices + 1, slices))

    def _ci_free(self, gi: dict, start: int, slices: int) -> bool:
        return all(not (c["start"] < start + slices and start < c["start"] + c["slices"]) for c in gi["cis"])

    @c_api("nvmlGpuInstanceGetComputeInstanceRemainingCapacity")
    def _ci_remaining(self, h: Any, pid: Any, ref: Any) -> None:
        g, gi = self._gi(h)
        slices = self._ci_slices(g, gi, pid)
        deref(ref).value = sum(1 for s in self._ci_starts(g, gi, slices) if self._ci_free(gi, s, slices))

    @c_api("nvmlGpuInstanceGetComputeInstancePossiblePlacements")
    def _ci_placements(self, h: Any, pid: Any, arr: Any, count_ref: Any) -> None:
        g, gi = self._gi(h)
        slices = self._ci_slices(g, gi, pid)
        starts = self._ci_starts(g, gi, slices)
        count = deref(count_ref)
        if arr is None:
            count.value = len(starts)
            return
        if len(arr) < len(starts):
            count.value = len(starts)
            raise NvmlReturn(cabi.INSUFFICIENT_SIZE)
        for i, s in enumerate(starts):
            arr[i].start, arr[i].size = s, slices
        count.value = len(starts)

    def _create_ci(self, g: dict, gi: dict, slices: int, start: int | None) -> dict:
        starts = self._ci_starts(g, gi, slices)
        if start is None:
            start = next((s for s in starts if self._ci_free(gi, s, slices)), None)
            if start is None:
                raise NvmlReturn(cabi.INSUFFICIENT_RESOURCES)
        elif start not in starts:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        if not self._ci_free(gi, start, slices):
            raise NvmlReturn(cabi.INSUFFICIENT_RESOURCES)
        taken = {c["id"] for c in gi["cis"]}
        serial = self._next_serial()
        ci = {
            "id": min(set(range(8)) - taken),
            "profile_id": _catalog().ci_profile_id(slices),
            "slices": slices,
            "start": start,
            "serial": serial,
            "uuid": mig_uuid(g["uuid"], serial),
        }
        gi["cis"].append(ci)
        gi["cis"].sort(key=lambda c: c["id"])
        return ci

    @c_api("nvmlGpuInstanceCreateComputeInstance", mutates=True, root=True)
    def _create_ci_default(self, h: Any, pid: Any, ref: Any) -> None:
        g, gi = self._gi(h)
        ci = self._create_ci(g, gi, self._ci_slices(g, gi, pid), None)
        set_handle(ref, encode_handle(Kind.CI, g["index"], ci["serial"]))

    @c_api("nvmlGpuInstanceCreateComputeInstanceWithPlacement", mutates=True, root=True)
    def _create_ci_placed(self, h: Any, pid: Any, placement: Any, ref: Any) -> None:
        g, gi = self._gi(h)
        slices = self._ci_slices(g, gi, pid)
        if not isinstance(placement, CARG | ctypes._Pointer):
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        p = deref(placement)
        if p.size != slices:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        ci = self._create_ci(g, gi, slices, p.start)
        set_handle(ref, encode_handle(Kind.CI, g["index"], ci["serial"]))

    @c_api("nvmlComputeInstanceDestroy", mutates=True, root=True)
    def _destroy_ci(self, h: Any) -> None:
        g, gi, ci = self._ci(h)
        if any(p.get("gi") == gi["id"] and p.get("ci") == ci["id"] for p in self._live_processes(g)):
            raise NvmlReturn(cabi.IN_USE)
        gi["cis"].remove(ci)

    @c_api("nvmlGpuInstanceGetComputeInstances")
    def _list_cis(self, h: Any, pid: Any, arr: Any, count_ref: Any) -> None:
        g, gi = self._gi(h)
        slices = self._ci_slices(g, gi, pid)
        if arr is None:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        found = [c for c in gi["cis"] if c["slices"] == slices]
        put_handles(arr, count_ref, [encode_handle(Kind.CI, g["index"], c["serial"]) for c in found])

    @c_api("nvmlGpuInstanceGetComputeInstanceById")
    def _ci_by_id(self, h: Any, ci_id: Any, ref: Any) -> None:
        g, gi = self._gi(h)
        for c in gi["cis"]:
            if c["id"] == as_int(ci_id):
                set_handle(ref, encode_handle(Kind.CI, g["index"], c["serial"]))
                return
        raise NvmlReturn(cabi.NOT_FOUND)

    @c_api("nvmlComputeInstanceGetInfo_v2")
    def _ci_info(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._ci(h)
        info = deref(ref)
        set_ptr_field(info, "device", encode_handle(Kind.DEVICE, g["index"], 0))
        set_ptr_field(info, "gpuInstance", encode_handle(Kind.GI, g["index"], gi["serial"]))
        info.id = ci["id"]
        info.profileId = ci["profile_id"]
        info.placement.start, info.placement.size = ci["start"], ci["slices"]

    # -- MIG device handles ---------------------------------------------------------------------
    @c_api("nvmlDeviceIsMigDeviceHandle")
    def _is_mig(self, h: Any, ref: Any) -> None:
        kind, _, _ = decode_handle(handle_value(h))
        self._any_dev(h)
        deref(ref).value = 1 if kind == Kind.MIG else 0

    @c_api("nvmlDeviceGetGpuInstanceId")
    def _mig_gi_id(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._any_dev(h)
        if gi is None:
            raise NvmlReturn(cabi.NOT_SUPPORTED)
        deref(ref).value = gi["id"]

    @c_api("nvmlDeviceGetComputeInstanceId")
    def _mig_ci_id(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._any_dev(h)
        if ci is None:
            raise NvmlReturn(cabi.NOT_SUPPORTED)
        deref(ref).value = ci["id"]

    @c_api("nvmlDeviceGetMaxMigDeviceCount")
    def _max_mig(self, h: Any, ref: Any) -> None:
        g = self._dev(h)
        enabled = g["mig"] is not None and g["mig"]["current"] == 1
        deref(ref).value = self._facts(g)["max_mig_devices"] if enabled else 0

    @c_api("nvmlDeviceGetMigDeviceHandleByIndex")
    def _mig_by_index(self, h: Any, index: Any, ref: Any) -> None:
        g = self._dev(h)
        self._require_mig_enabled(g)
        devs = self._mig_devices(g)
        i = as_int(index)
        if not 0 <= i < len(devs):
            raise NvmlReturn(cabi.NOT_FOUND)
        set_handle(ref, encode_handle(Kind.MIG, g["index"], devs[i][1]["serial"]))

    @c_api("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
    def _mig_parent(self, h: Any, ref: Any) -> None:
        g, gi, _ = self._any_dev(h)
        if gi is None:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        set_handle(ref, encode_handle(Kind.DEVICE, g["index"], 0))

    @c_api("nvmlDeviceGetAttributes_v2")
    def _attributes(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._any_dev(h)
        a = deref(ref)
        model = self._model(g)
        if gi is None or ci is None:
            a.multiprocessorCount = 0
            a.memorySizeMB = model.memory_mib
            geo = model.mig
            a.gpuInstanceSliceCount = geo.compute_slices if geo else 0
            a.computeInstanceSliceCount = a.gpuInstanceSliceCount
            return
        prof = self._profile_by_id(g, gi["profile_id"])
        a.multiprocessorCount = prof.sm_count * ci["slices"] // prof.compute_slices
        a.sharedCopyEngineCount = prof.copy_engines
        a.sharedDecoderCount = prof.decoders
        a.sharedEncoderCount = 0
        a.sharedJpegCount = prof.jpegs
        a.sharedOfaCount = prof.ofas
        a.gpuInstanceSliceCount = prof.compute_slices
        a.computeInstanceSliceCount = ci["slices"]
        a.memorySizeMB = prof.memory_mib
