"""MIG mode and GPU instances of the simulated library: profiles by enum or ID, placements on
the memory-slice axis, room and remaining capacity, create, destroy, list
(``reference/mig-nvml-facts.md``)."""

from __future__ import annotations

import ctypes

from slurm_gpupool.hw.sim import cabi
from slurm_gpupool.hw.sim.cargs import (
    CARG,
    Kind,
    NvmlReturn,
    as_int,
    deref,
    encode_handle,
    put_handles,
    set_handle,
    set_ptr_field,
)
from slurm_gpupool.hw.sim.dispatch import SimLibraryBase, c_api

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any

    from slurm_gpupool.core.mig import catalog


class GpuInstances(SimLibraryBase):
    """``nvmlDevice{Get,Set}MigMode`` and the ``nvmlDevice*GpuInstance*`` calls."""

    # -- MIG mode -------------------------------------------------------------------------
    @c_api("nvmlDeviceGetMigMode")
    def _get_mig_mode(self, h: Any, cur: Any, pend: Any) -> None:
        g = self._dev(h)
        if g["mig"] is None:
            raise NvmlReturn(cabi.NOT_SUPPORTED)
        deref(cur).value = g["mig"]["current"]
        deref(pend).value = g["mig"]["pending"]

    @c_api("nvmlDeviceSetMigMode", mutates=True, root=True)
    def _set_mig_mode(self, h: Any, mode: Any, status_ref: Any) -> None:
        g = self._dev(h)
        if g["mig"] is None:
            raise NvmlReturn(cabi.NOT_SUPPORTED)
        want = as_int(mode)
        if want not in (0, 1):
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        status = deref(status_ref)
        if want == 0 and g["gis"]:
            raise NvmlReturn(cabi.IN_USE)  # destroy compute and GPU instances first
        g["mig"]["pending"] = want
        if g["mig"]["current"] == want:
            status.value = cabi.SUCCESS
        elif self._live_processes(g) or (self._model(g).mig_mode_needs_reset and g["clients"] > 0):
            status.value = cabi.IN_USE  # the reset failed: "In use by another client"; stays pending
        else:
            g["mig"]["current"] = want
            status.value = cabi.SUCCESS

    # -- GPU-instance profiles and placements -----------------------------------------------
    def _fill_gi_profile(self, g: dict, prof: catalog.MigProfile, info: Any, v2: bool) -> None:
        if v2:
            if info.version != cabi.GI_PROFILE_INFO_V2:
                raise NvmlReturn(cabi.ARGUMENT_VERSION_MISMATCH)
            info.name = f"MIG {prof.name}".encode()
        info.id = prof.profile_id
        info.isP2pSupported = 0
        info.sliceCount = prof.compute_slices
        info.instanceCount = prof.max_count
        info.multiprocessorCount = prof.sm_count
        info.copyEngineCount = prof.copy_engines
        info.decoderCount = prof.decoders
        info.encoderCount = 0
        info.jpegCount = prof.jpegs
        info.ofaCount = prof.ofas
        info.memorySizeMB = prof.memory_mib

    def _profile_by_enum(self, g: dict, enum: Any) -> catalog.MigProfile:
        e = as_int(enum)
        if not 0 <= e < cabi.GI_ENUM_COUNT:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        prof = self._geometry(g).by_enum(e)
        if prof is None:
            raise NvmlReturn(cabi.NOT_SUPPORTED)  # e.g. REV2 1g on an A30
        return prof

    @c_api("nvmlDeviceGetGpuInstanceProfileInfoV")
    def _gi_profile_v2(self, h: Any, enum: Any, ref: Any) -> None:
        g = self._dev(h)
        self._fill_gi_profile(g, self._profile_by_enum(g, enum), deref(ref), v2=True)

    @c_api("nvmlDeviceGetGpuInstanceProfileInfo")
    def _gi_profile_v1(self, h: Any, enum: Any, ref: Any) -> None:
        g = self._dev(h)
        self._fill_gi_profile(g, self._profile_by_enum(g, enum), deref(ref), v2=False)

    @c_api("nvmlDeviceGetGpuInstanceProfileInfoByIdV")
    def _gi_profile_by_id(self, h: Any, pid: Any, ref: Any) -> None:
        g = self._dev(h)
        self._fill_gi_profile(g, self._profile_by_id(g, pid), deref(ref), v2=True)

    @c_api("nvmlDeviceGetGpuInstancePossiblePlacements_v2")
    def _gi_placements(self, h: Any, pid: Any, arr: Any, count_ref: Any) -> None:
        g = self._dev(h)
        prof = self._profile_by_id(g, pid, need_enabled=False)  # independent of mode and occupancy
        count = deref(count_ref)
        starts = prof.placement_starts
        if arr is None:
            count.value = len(starts)
            return
        if count.value < len(starts) or len(arr) < len(starts):
            count.value = len(starts)
            raise NvmlReturn(cabi.INSUFFICIENT_SIZE)
        for i, s in enumerate(starts):
            arr[i].start, arr[i].size = s, prof.memory_slices
        count.value = len(starts)

    @staticmethod
    def _used_compute(g: dict, geo: catalog.MigGeometry) -> int:
        return sum(p.compute_slices for gi in g["gis"] if (p := geo.by_id(gi["profile_id"])) is not None)

    def _room_for(self, g: dict, geo: catalog.MigGeometry, prof: catalog.MigProfile, start: int) -> bool:
        """Whether a GI of ``prof`` at ``start`` fits next to the existing ones."""
        lo, hi = start, start + prof.memory_slices
        for gi in g["gis"]:
            if gi["start"] < hi and lo < gi["start"] + gi["size"]:
                return False
            other = geo.by_id(gi["profile_id"])
            if other is not None and prof.excludes(other):
                return False  # one +me instance per GPU; +me.all only beside -me ones
        if self._used_compute(g, geo) + prof.compute_slices > geo.compute_slices:
            return False
        same = sum(1 for gi in g["gis"] if gi["profile_id"] == prof.profile_id)
        return same < prof.max_count

    @c_api("nvmlDeviceGetGpuInstanceRemainingCapacity")
    def _gi_remaining(self, h: Any, pid: Any, ref: Any) -> None:
        g = self._dev(h)
        geo = self._geometry(g)
        prof = self._profile_by_id(g, pid)
        free = [s for s in prof.placement_starts if self._room_for(g, geo, prof, s)]
        # starts are aligned to the profile size, so free placements never overlap
        # each other, except for the budget of compute slices and max count
        by_compute = (geo.compute_slices - self._used_compute(g, geo)) // prof.compute_slices
        same = sum(1 for gi in g["gis"] if gi["profile_id"] == prof.profile_id)
        deref(ref).value = max(0, min(len(free), by_compute, prof.max_count - same))

    def _create_gi(self, g: dict, prof: catalog.MigProfile, start: int) -> dict:
        geo = self._geometry(g)
        if not self._room_for(g, geo, prof, start):
            raise NvmlReturn(cabi.INSUFFICIENT_RESOURCES)
        from slurm_gpupool.core.mig import catalog

        gi_id = catalog.gi_slot_id(geo, start, prof.memory_slices)
        taken = {gi["id"] for gi in g["gis"]}
        if gi_id in taken:
            gi_id = min(set(range(15)) - taken)
        gi = {
            "id": gi_id,
            "profile_id": prof.profile_id,
            "start": start,
            "size": prof.memory_slices,
            "serial": self._next_serial(),
            "cis": [],
        }
        g["gis"].append(gi)
        g["gis"].sort(key=lambda x: x["id"])
        return gi

    @c_api("nvmlDeviceCreateGpuInstance", mutates=True, root=True)
    def _create_gi_default(self, h: Any, pid: Any, ref: Any) -> None:
        g = self._dev(h)
        prof = self._profile_by_id(g, pid)
        geo = self._geometry(g)
        # The driver's own choice: highest free start first (as observed for 1g).
        for start in sorted(prof.placement_starts, reverse=True):
            if self._room_for(g, geo, prof, start):
                gi = self._create_gi(g, prof, start)
                set_handle(ref, encode_handle(Kind.GI, g["index"], gi["serial"]))
                return
        raise NvmlReturn(cabi.INSUFFICIENT_RESOURCES)

    @c_api("nvmlDeviceCreateGpuInstanceWithPlacement", mutates=True, root=True)
    def _create_gi_placed(self, h: Any, pid: Any, placement: Any, ref: Any) -> None:
        g = self._dev(h)
        prof = self._profile_by_id(g, pid)
        if not isinstance(placement, CARG | ctypes._Pointer):
            raise NvmlReturn(cabi.INVALID_ARGUMENT)  # the C API takes a pointer to the placement
        p = deref(placement)
        if p.size != prof.memory_slices or p.start not in prof.placement_starts:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        gi = self._create_gi(g, prof, p.start)
        set_handle(ref, encode_handle(Kind.GI, g["index"], gi["serial"]))

    @c_api("nvmlGpuInstanceDestroy", mutates=True, root=True)
    def _destroy_gi(self, h: Any) -> None:
        g, gi = self._gi(h)
        if gi["cis"] or any(p.get("gi") == gi["id"] for p in self._live_processes(g)):
            raise NvmlReturn(cabi.IN_USE)
        g["gis"].remove(gi)

    @c_api("nvmlDeviceGetGpuInstances")
    def _list_gis(self, h: Any, pid: Any, arr: Any, count_ref: Any) -> None:
        g = self._dev(h)
        prof = self._profile_by_id(g, pid)
        if arr is None:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        found = [gi for gi in g["gis"] if gi["profile_id"] == prof.profile_id]
        put_handles(arr, count_ref, [encode_handle(Kind.GI, g["index"], gi["serial"]) for gi in found])

    @c_api("nvmlDeviceGetGpuInstanceById")
    def _gi_by_id(self, h: Any, gi_id: Any, ref: Any) -> None:
        g = self._dev(h)
        self._geometry(g)
        for gi in g["gis"]:
            if gi["id"] == as_int(gi_id):
                set_handle(ref, encode_handle(Kind.GI, g["index"], gi["serial"]))
                return
        raise NvmlReturn(cabi.NOT_FOUND)

    @c_api("nvmlGpuInstanceGetInfo")
    def _gi_info(self, h: Any, ref: Any) -> None:
        g, gi = self._gi(h)
        info = deref(ref)
        set_ptr_field(info, "device", encode_handle(Kind.DEVICE, g["index"], 0))
        info.id = gi["id"]
        info.profileId = gi["profile_id"]
        info.placement.start, info.placement.size = gi["start"], gi["size"]
