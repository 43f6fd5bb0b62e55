"""A simulated ``libnvidia-ml.so.1``, installed beneath the real ``pynvml``.

The simulation sits one layer below pynvml: pynvml's Python wrappers look up C
symbols on ``pynvml.nvmlLib`` and call them with ctypes arguments.  This class
answers those symbols.  So every pynvml function name, return struct, constant,
quirk (``nvmlDeviceIsMigDeviceHandle`` returning a ``c_uint``) and
``NVMLError_*`` subclass seen by our code is the genuine one, and
``hw/nvml.py`` runs unchanged on real GPUs and here.

Behaviour follows ``reference/mig-nvml-facts.md``:

* enum vs profile ID: ``...ProfileInfo`` is keyed by enum, everything else by ID;
* placements on the memory-slice axis; overlap, no room or count exhausted →
  INSUFFICIENT_RESOURCES; a placement not in the profile's list → INVALID_ARGUMENT;
* destroying a GI with CIs, or a CI/GI with processes → IN_USE;
* MIG mode current vs pending: on Ampere the reset inside SetMigMode fails while
  other clients hold the GPU, so the change stays pending until a GPU reset;
  Hopper applies it at once;
* MIG calls on a GPU without MIG, or with MIG disabled → NOT_SUPPORTED;
* create/destroy/set-mode need root → NO_PERMISSION;
* stale handles after destroy or reset → INVALID_ARGUMENT.

Faults can be injected per call (see ``inject.py``).  It imports no pynvml.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any

from slurm_gpupool.core.mig import catalog
from slurm_gpupool.hw.sim.state import SimStore, mig_uuid

# NVML return codes: the C ABI, so this file needs no pynvml.
SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
RESET_REQUIRED = 16
IN_USE = 19
INSUFFICIENT_RESOURCES = 23
ARGUMENT_VERSION_MISMATCH = 25
UNKNOWN = 999

GI_PROFILE_INFO_V2 = 0x02000098
CI_PROFILE_INFO_V2 = 0x02000088
GI_ENUM_COUNT = 0x12
CI_ENUM_COUNT = 0x9
NO_MIG_ID = 0xFFFFFFFF

_ERROR_TEXT = {
    IN_USE: "In use by another client",
    INSUFFICIENT_RESOURCES: "Insufficient resources",
    ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
}

# Handle encoding: kind in the top byte, GPU index below it, then a serial.
KIND_DEVICE, KIND_GI, KIND_CI, KIND_MIG = 1, 2, 3, 4
_CARG = type(ctypes.byref(ctypes.c_int()))


class _Ret(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _encode(kind: int, gpu: int, serial: int) -> int:
    return (kind << 56) | (gpu << 48) | serial


def _decode(value: int) -> tuple[int, int, int]:
    return value >> 56, (value >> 48) & 0xFF, value & ((1 << 48) - 1)


def _handle_value(h: Any) -> int:
    if h is None or isinstance(h, int | _CARG):
        raise _Ret(INVALID_ARGUMENT)
    try:
        return ctypes.cast(h, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        raise _Ret(INVALID_ARGUMENT) from None


def _out(ref: Any) -> Any:
    """The object a C out-pointer argument points at (``byref(x)`` or ``pointer(x)``)."""
    if isinstance(ref, _CARG):
        return ref._obj  # type: ignore[attr-defined]
    if isinstance(ref, ctypes._Pointer):
        if not ref:
            raise _Ret(INVALID_ARGUMENT)
        return ref.contents
    if isinstance(ref, ctypes.Array):
        return ref
    raise _Ret(INVALID_ARGUMENT)


def _set_handle(ref: Any, value: int) -> None:
    obj = _out(ref)
    ctypes.memmove(ctypes.addressof(obj), ctypes.byref(ctypes.c_uint64(value)), 8)


def _set_ptr_field(struct: Any, name: str, value: int) -> None:
    ftype = dict(struct._fields_)[name]
    setattr(struct, name, ctypes.cast(ctypes.c_void_p(value), ftype))


def _int(x: Any) -> int:
    return int(x.value) if hasattr(x, "value") else int(x)


def _put_str(buf: Any, size: Any, text: str) -> None:
    data = text.encode()
    if len(data) + 1 > _int(size):
        raise _Ret(INSUFFICIENT_SIZE)
    buf.value = data


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2 :].split()[19])  # after "pid (comm) ": state is field 3


def _pid_alive(pid: int, start: int | None = None) -> bool:
    """Real NVML lists only live processes; a pid reused by another process is not the one registered."""
    now = process_start(pid)
    return now is not None and (start is None or now == start)


_API: dict[str, tuple[Callable[..., Any], bool, bool]] = {}


def c_api(name: str, mutates: bool = False, root: bool = False) -> Callable:
    """Register a method as the C symbol ``name``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        _API[name] = (fn, mutates, root)
        return fn

    return deco


class SimNvmlLibrary:
    """Stands in for the ``CDLL("libnvidia-ml.so.1")`` object pynvml loads."""

    def __init__(self, store: SimStore, euid: int | None = None) -> None:
        self.store = store
        self._euid = euid
        self._init_count = 0
        self._entries: dict[str, Callable[..., int]] = {}
        self._st: dict[str, Any] = {}  # state for the call in progress

    # -- symbol lookup -------------------------------------------------------------
    def __getattr__(self, name: str) -> Callable[..., int]:
        if name.startswith("_") or name not in _API:
            raise AttributeError(name)  # pynvml turns this into FUNCTION_NOT_FOUND
        entries = self.__dict__["_entries"]
        if name not in entries:
            # A plain function, not a bound method: pynvml sets ``fn.restype`` on some.
            def entry(*args: Any) -> int:
                return self._call(name, args)

            entry.__name__ = name
            entries[name] = entry
        return entries[name]

    def _call(self, name: str, args: tuple[Any, ...]) -> int:
        fn, mutates, root = _API[name]
        try:
            if name not in ("nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString") and self._init_count <= 0:
                return UNINITIALIZED
            if name == "nvmlErrorString":
                return fn(self, *args)
            if root and (self._euid if self._euid is not None else os.geteuid()) != 0:
                return NO_PERMISSION
            fault = self._due_fault(name, args)
            if fault:
                return fault
            if mutates:
                with self.store.modify() as st:
                    self._st = st
                    st["calls"][name] = st["calls"].get(name, 0) + 1
                    fn(self, *args)
            else:
                self._st = self.store.read()
                fn(self, *args)
            return SUCCESS
        except _Ret as r:
            return r.code
        finally:
            self._st = {}

    def _due_fault(self, name: str, args: tuple[Any, ...]) -> int:
        """Return an injected error code for this call, counting it down, or 0."""
        st = self.store.read()
        faults = [f for f in st.get("faults", []) if f["call"] == name]
        if not faults:
            return 0
        gpu = self._gpu_of(args[0]) if args else None
        code = 0
        with self.store.modify() as w:
            for f in w["faults"]:
                if f["call"] != name or (f.get("gpu") is not None and f["gpu"] != gpu):
                    continue
                if f.get("after", 0) > 0:
                    f["after"] -= 1
                    continue
                if f.get("times", 1) > 0:
                    f["times"] = f.get("times", 1) - 1
                    code = f.get("code", UNKNOWN)
                    break
            w["faults"] = [f for f in w["faults"] if f.get("times", 1) > 0]
        return code

    def _gpu_of(self, h: Any) -> int | None:
        try:
            kind, gpu, _ = _decode(_handle_value(h))
        except _Ret:
            return None
        return gpu if kind else None

    # -- handle resolution --------------------------------------------------------------
    def _gpus(self) -> list[dict[str, Any]]:
        return self._st["gpus"]

    def _dev(self, h: Any) -> dict[str, Any]:
        """A physical GPU handle → its state; MIG or other handles are invalid here."""
        kind, gpu, _ = _decode(_handle_value(h))
        if kind != KIND_DEVICE or gpu >= len(self._gpus()):
            raise _Ret(INVALID_ARGUMENT)
        return self._gpus()[gpu]

    def _any_dev(self, h: Any) -> tuple[dict[str, Any], dict | None, dict | None]:
        """A GPU or MIG device handle → (gpu, gi, ci); gi/ci are None for a GPU."""
        kind, gpu, serial = _decode(_handle_value(h))
        if kind == KIND_DEVICE:
            return self._dev(h), None, None
        if kind == KIND_MIG:
            g, gi, ci = self._find_ci(gpu, serial)
            return g, gi, ci
        raise _Ret(INVALID_ARGUMENT)

    def _find_gi(self, gpu: int, serial: int) -> tuple[dict, dict]:
        if gpu >= len(self._gpus()):
            raise _Ret(INVALID_ARGUMENT)
        g = self._gpus()[gpu]
        for gi in g["gis"]:
            if gi["serial"] == serial:
                return g, gi
        raise _Ret(INVALID_ARGUMENT)  # stale: destroyed or reset

    def _find_ci(self, gpu: int, serial: int) -> tuple[dict, dict, dict]:
        if gpu >= len(self._gpus()):
            raise _Ret(INVALID_ARGUMENT)
        g = self._gpus()[gpu]
        for gi in g["gis"]:
            for ci in gi["cis"]:
                if ci["serial"] == serial:
                    return g, gi, ci
        raise _Ret(INVALID_ARGUMENT)

    def _gi(self, h: Any) -> tuple[dict, dict]:
        kind, gpu, serial = _decode(_handle_value(h))
        if kind != KIND_GI:
            raise _Ret(INVALID_ARGUMENT)
        return self._find_gi(gpu, serial)

    def _ci(self, h: Any) -> tuple[dict, dict, dict]:
        kind, gpu, serial = _decode(_handle_value(h))
        if kind != KIND_CI:
            raise _Ret(INVALID_ARGUMENT)
        return self._find_ci(gpu, serial)

    @staticmethod
    def _model(g: dict) -> catalog.GpuModel:
        return catalog.get_model(g["model"])

    def _geometry(self, g: dict, need_enabled: bool = True) -> catalog.MigGeometry:
        geo = self._model(g).mig
        if geo is None or g["mig"] is None:
            raise _Ret(NOT_SUPPORTED)
        if need_enabled and g["mig"]["current"] != 1:
            raise _Ret(NOT_SUPPORTED)
        return geo

    def _next_serial(self) -> int:
        s = self._st["next_serial"]
        self._st["next_serial"] = s + 1
        return s

    @staticmethod
    def _mig_devices(g: dict) -> list[tuple[dict, dict]]:
        """MIG devices in index order: by (GI ID, CI ID), as transcripts show."""
        out = [(gi, ci) for gi in g["gis"] for ci in gi["cis"]]
        out.sort(key=lambda p: (p[0]["id"], p[1]["id"]))
        return out

    def _live_processes(self, g: dict) -> list[dict]:
        return [p for p in g["processes"] if _pid_alive(p["pid"], p.get("start"))]

    # -- system -----------------------------------------------------------------------------
    @c_api("nvmlInitWithFlags")
    def _init(self, flags: Any) -> None:
        if not self.store.exists():
            raise _Ret(9)  # NVML_ERROR_DRIVER_NOT_LOADED: no simulated node here
        self.store.read()
        self._init_count += 1

    @c_api("nvmlShutdown")
    def _shutdown(self) -> None:
        self._init_count = max(0, self._init_count - 1)

    @c_api("nvmlErrorString")
    def _error_string(self, code: Any) -> bytes:
        return _ERROR_TEXT.get(_int(code), f"Error {_int(code)}").encode()

    @c_api("nvmlSystemGetDriverVersion")
    def _driver_version(self, buf: Any, size: Any) -> None:
        _put_str(buf, size, self._st["driver_version"])

    @c_api("nvmlSystemGetNVMLVersion")
    def _nvml_version(self, buf: Any, size: Any) -> None:
        _put_str(buf, size, "12." + self._st["driver_version"])

    @c_api("nvmlSystemGetCudaDriverVersion")
    def _cuda_version(self, ref: Any) -> None:
        _out(ref).value = self._st["cuda_version"]

    # -- device enumeration and identity -------------------------------------------------
    @c_api("nvmlDeviceGetCount_v2")
    def _count(self, ref: Any) -> None:
        _out(ref).value = len(self._gpus())

    @c_api("nvmlDeviceGetHandleByIndex_v2")
    def _by_index(self, index: Any, ref: Any) -> None:
        i = _int(index)
        if not 0 <= i < len(self._gpus()):
            raise _Ret(INVALID_ARGUMENT)
        _set_handle(ref, _encode(KIND_DEVICE, i, 0))

    @c_api("nvmlDeviceGetHandleByUUID")
    def _by_uuid(self, uuid: Any, ref: Any) -> None:
        want = (uuid.value if hasattr(uuid, "value") else uuid) or b""
        want = want.decode() if isinstance(want, bytes) else str(want)
        for g in self._gpus():
            if g["uuid"] == want:
                _set_handle(ref, _encode(KIND_DEVICE, g["index"], 0))
                return
            for gi in g["gis"]:
                for ci in gi["cis"]:
                    if ci["uuid"] == want:
                        _set_handle(ref, _encode(KIND_MIG, g["index"], ci["serial"]))
                        return
        raise _Ret(NOT_FOUND)

    @c_api("nvmlDeviceGetHandleByPciBusId_v2")
    def _by_bus(self, bus: Any, ref: Any) -> None:
        from slurm_gpupool.config.machines import normalise_bus_id

        raw = bus.value if hasattr(bus, "value") else bus
        try:
            want = normalise_bus_id(raw.decode() if isinstance(raw, bytes) else str(raw))
        except ValueError:
            raise _Ret(INVALID_ARGUMENT) from None
        for g in self._gpus():
            if g["pci_bus_id"] == want:
                _set_handle(ref, _encode(KIND_DEVICE, g["index"], 0))
                return
        raise _Ret(NOT_FOUND)

    @c_api("nvmlDeviceGetName")
    def _name(self, h: Any, buf: Any, size: Any) -> None:
        g, gi, ci = self._any_dev(h)
        name = self._model(g).nvml_name
        if gi is not None and ci is not None:
            name = f"{name} MIG {self._ci_name(g, gi, ci['slices'])}"
        _put_str(buf, size, name)

    def _ci_name(self, g: dict, gi: dict, ci_slices: int) -> str:
        prof = self._geometry(g, need_enabled=False).by_id(gi["profile_id"])
        assert prof is not None
        return prof.name if ci_slices == prof.compute_slices else f"{ci_slices}c.{prof.name}"

    @c_api("nvmlDeviceGetUUID")
    def _uuid(self, h: Any, buf: Any, size: Any) -> None:
        g, gi, ci = self._any_dev(h)
        _put_str(buf, size, ci["uuid"] if ci is not None else g["uuid"])

    @c_api("nvmlDeviceGetSerial")
    def _serial(self, h: Any, buf: Any, size: Any) -> None:
        _put_str(buf, size, self._dev(h)["serial"])

    @c_api("nvmlDeviceGetIndex")
    def _index(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._any_dev(h)
        if ci is None:
            _out(ref).value = g["index"]
            return
        for i, (_, c) in enumerate(self._mig_devices(g)):
            if c["serial"] == ci["serial"]:
                _out(ref).value = i
                return

    @c_api("nvmlDeviceGetMinorNumber")
    def _minor(self, h: Any, ref: Any) -> None:
        _out(ref).value = self._dev(h)["minor"]

    @c_api("nvmlDeviceGetPciInfo_v3")
    def _pci(self, h: Any, ref: Any) -> None:
        g, _, _ = self._any_dev(h)
        info = _out(ref)
        dom, bus, devfn = g["pci_bus_id"].split(":")
        info.busId = g["pci_bus_id"].encode()
        info.busIdLegacy = f"{int(dom, 16):04X}:{bus}:{devfn}".encode()
        info.domain = int(dom, 16)
        info.bus = int(bus, 16)
        info.device = int(devfn.split(".")[0], 16)
        info.pciDeviceId = ((g.get("pci_device_id") or self._model(g).pci_device_id) << 16) | 0x10DE
        info.pciSubSystemId = 0x145F10DE

    @c_api("nvmlDeviceGetMemoryInfo")
    def _memory(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._any_dev(h)
        procs = self._live_processes(g)
        if gi is not None:
            prof = self._geometry(g).by_id(gi["profile_id"])
            assert prof is not None
            total = prof.memory_mib << 20
            procs = [p for p in procs if p.get("gi") == gi["id"]]
        else:
            total = self._model(g).memory_mib << 20
        used = min(total, sum(p.get("used_memory_mib", 0) << 20 for p in procs))
        m = _out(ref)
        m.total, m.used, m.free = total, used, total - used

    @c_api("nvmlDeviceGetUtilizationRates")
    def _utilization(self, h: Any, ref: Any) -> None:
        g = self._dev(h)
        if g["mig"] and g["mig"]["current"] == 1:
            raise _Ret(NOT_SUPPORTED)  # not available on MIG-enabled GPUs
        u = _out(ref)
        u.gpu, u.memory = g["utilization"]["gpu"], g["utilization"]["memory"]

    # -- MIG mode -------------------------------------------------------------------------
    @c_api("nvmlDeviceGetMigMode")
    def _get_mig_mode(self, h: Any, cur: Any, pend: Any) -> None:
        g = self._dev(h)
        if g["mig"] is None:
            raise _Ret(NOT_SUPPORTED)
        _out(cur).value = g["mig"]["current"]
        _out(pend).value = g["mig"]["pending"]

    @c_api("nvmlDeviceSetMigMode", mutates=True, root=True)
    def _set_mig_mode(self, h: Any, mode: Any, status_ref: Any) -> None:
        g = self._dev(h)
        if g["mig"] is None:
            raise _Ret(NOT_SUPPORTED)
        want = _int(mode)
        if want not in (0, 1):
            raise _Ret(INVALID_ARGUMENT)
        status = _out(status_ref)
        if want == 0 and g["gis"]:
            raise _Ret(IN_USE)  # destroy compute and GPU instances first
        g["mig"]["pending"] = want
        if g["mig"]["current"] == want:
            status.value = SUCCESS
        elif self._live_processes(g) or (self._model(g).mig_mode_needs_reset and g["clients"] > 0):
            status.value = IN_USE  # the reset failed: "In use by another client"; stays pending
        else:
            g["mig"]["current"] = want
            status.value = SUCCESS

    # -- GPU-instance profiles and placements -----------------------------------------------
    def _fill_gi_profile(self, g: dict, prof: catalog.MigProfile, info: Any, v2: bool) -> None:
        if v2:
            if info.version != GI_PROFILE_INFO_V2:
                raise _Ret(ARGUMENT_VERSION_MISMATCH)
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
        e = _int(enum)
        if not 0 <= e < GI_ENUM_COUNT:
            raise _Ret(INVALID_ARGUMENT)
        prof = self._geometry(g).by_enum(e)
        if prof is None:
            raise _Ret(NOT_SUPPORTED)  # e.g. REV2 1g on an A30
        return prof

    def _profile_by_id(self, g: dict, pid: Any, need_enabled: bool = True) -> catalog.MigProfile:
        prof = self._geometry(g, need_enabled).by_id(_int(pid))
        if prof is None:
            raise _Ret(INVALID_ARGUMENT)
        return prof

    @c_api("nvmlDeviceGetGpuInstanceProfileInfoV")
    def _gi_profile_v2(self, h: Any, enum: Any, ref: Any) -> None:
        g = self._dev(h)
        self._fill_gi_profile(g, self._profile_by_enum(g, enum), _out(ref), v2=True)

    @c_api("nvmlDeviceGetGpuInstanceProfileInfo")
    def _gi_profile_v1(self, h: Any, enum: Any, ref: Any) -> None:
        g = self._dev(h)
        self._fill_gi_profile(g, self._profile_by_enum(g, enum), _out(ref), v2=False)

    @c_api("nvmlDeviceGetGpuInstanceProfileInfoByIdV")
    def _gi_profile_by_id(self, h: Any, pid: Any, ref: Any) -> None:
        g = self._dev(h)
        self._fill_gi_profile(g, self._profile_by_id(g, pid), _out(ref), v2=True)

    @c_api("nvmlDeviceGetGpuInstancePossiblePlacements_v2")
    def _gi_placements(self, h: Any, pid: Any, arr: Any, count_ref: Any) -> None:
        g = self._dev(h)
        prof = self._profile_by_id(g, pid, need_enabled=False)  # independent of mode and occupancy
        count = _out(count_ref)
        starts = prof.placement_starts
        if arr is None:
            count.value = len(starts)
            return
        if count.value < len(starts) or len(arr) < len(starts):
            count.value = len(starts)
            raise _Ret(INSUFFICIENT_SIZE)
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
        _out(ref).value = max(0, min(len(free), by_compute, prof.max_count - same))

    def _create_gi(self, g: dict, prof: catalog.MigProfile, start: int) -> dict:
        geo = self._geometry(g)
        if not self._room_for(g, geo, prof, start):
            raise _Ret(INSUFFICIENT_RESOURCES)
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
                _set_handle(ref, _encode(KIND_GI, g["index"], gi["serial"]))
                return
        raise _Ret(INSUFFICIENT_RESOURCES)

    @c_api("nvmlDeviceCreateGpuInstanceWithPlacement", mutates=True, root=True)
    def _create_gi_placed(self, h: Any, pid: Any, placement: Any, ref: Any) -> None:
        g = self._dev(h)
        prof = self._profile_by_id(g, pid)
        if not isinstance(placement, _CARG | ctypes._Pointer):
            raise _Ret(INVALID_ARGUMENT)  # the C API takes a pointer to the placement
        p = _out(placement)
        if p.size != prof.memory_slices or p.start not in prof.placement_starts:
            raise _Ret(INVALID_ARGUMENT)
        gi = self._create_gi(g, prof, p.start)
        _set_handle(ref, _encode(KIND_GI, g["index"], gi["serial"]))

    @c_api("nvmlGpuInstanceDestroy", mutates=True, root=True)
    def _destroy_gi(self, h: Any) -> None:
        g, gi = self._gi(h)
        if gi["cis"] or any(p.get("gi") == gi["id"] for p in self._live_processes(g)):
            raise _Ret(IN_USE)
        g["gis"].remove(gi)

    @c_api("nvmlDeviceGetGpuInstances")
    def _list_gis(self, h: Any, pid: Any, arr: Any, count_ref: Any) -> None:
        g = self._dev(h)
        prof = self._profile_by_id(g, pid)
        if arr is None:
            raise _Ret(INVALID_ARGUMENT)
        found = [gi for gi in g["gis"] if gi["profile_id"] == prof.profile_id]
        count = _out(count_ref)
        if len(arr) < len(found):
            count.value = len(found)
            raise _Ret(INSUFFICIENT_SIZE)
        for i, gi in enumerate(found):
            ctypes.memmove(
                ctypes.addressof(arr) + i * 8,
                ctypes.byref(ctypes.c_uint64(_encode(KIND_GI, g["index"], gi["serial"]))),
                8,
            )
        count.value = len(found)

    @c_api("nvmlDeviceGetGpuInstanceById")
    def _gi_by_id(self, h: Any, gi_id: Any, ref: Any) -> None:
        g = self._dev(h)
        self._geometry(g)
        for gi in g["gis"]:
            if gi["id"] == _int(gi_id):
                _set_handle(ref, _encode(KIND_GI, g["index"], gi["serial"]))
                return
        raise _Ret(NOT_FOUND)

    @c_api("nvmlGpuInstanceGetInfo")
    def _gi_info(self, h: Any, ref: Any) -> None:
        g, gi = self._gi(h)
        info = _out(ref)
        _set_ptr_field(info, "device", _encode(KIND_DEVICE, g["index"], 0))
        info.id = gi["id"]
        info.profileId = gi["profile_id"]
        info.placement.start, info.placement.size = gi["start"], gi["size"]

    # -- compute instances ---------------------------------------------------------------------
    def _ci_slices(self, g: dict, gi: dict, enum: Any) -> int:
        e = _int(enum)
        if not 0 <= e < CI_ENUM_COUNT:
            raise _Ret(INVALID_ARGUMENT)
        slices = catalog.ci_slices_for_enum(e)
        prof = self._profile_by_id(g, gi["profile_id"])
        if slices is None or slices not in catalog.ci_sizes(prof.compute_slices):
            raise _Ret(NOT_SUPPORTED)
        return slices

    @c_api("nvmlGpuInstanceGetComputeInstanceProfileInfoV")
    def _ci_profile(self, h: Any, enum: Any, eng: Any, ref: Any) -> None:
        g, gi = self._gi(h)
        if _int(eng) != 0:
            raise _Ret(INVALID_ARGUMENT)
        slices = self._ci_slices(g, gi, enum)
        prof = self._profile_by_id(g, gi["profile_id"])
        info = _out(ref)
        if info.version != CI_PROFILE_INFO_V2:
            raise _Ret(ARGUMENT_VERSION_MISMATCH)
        info.id = catalog.ci_profile_id(slices)
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
        _out(ref).value = sum(1 for s in self._ci_starts(g, gi, slices) if self._ci_free(gi, s, slices))

    @c_api("nvmlGpuInstanceGetComputeInstancePossiblePlacements")
    def _ci_placements(self, h: Any, pid: Any, arr: Any, count_ref: Any) -> None:
        g, gi = self._gi(h)
        slices = self._ci_slices(g, gi, pid)
        starts = self._ci_starts(g, gi, slices)
        count = _out(count_ref)
        if arr is None:
            count.value = len(starts)
            return
        if len(arr) < len(starts):
            count.value = len(starts)
            raise _Ret(INSUFFICIENT_SIZE)
        for i, s in enumerate(starts):
            arr[i].start, arr[i].size = s, slices
        count.value = len(starts)

    def _create_ci(self, g: dict, gi: dict, slices: int, start: int | None) -> dict:
        starts = self._ci_starts(g, gi, slices)
        if start is None:
            start = next((s for s in starts if self._ci_free(gi, s, slices)), None)
            if start is None:
                raise _Ret(INSUFFICIENT_RESOURCES)
        elif start not in starts:
            raise _Ret(INVALID_ARGUMENT)
        if not self._ci_free(gi, start, slices):
            raise _Ret(INSUFFICIENT_RESOURCES)
        taken = {c["id"] for c in gi["cis"]}
        serial = self._next_serial()
        ci = {
            "id": min(set(range(8)) - taken),
            "profile_id": catalog.ci_profile_id(slices),
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
        _set_handle(ref, _encode(KIND_CI, g["index"], ci["serial"]))

    @c_api("nvmlGpuInstanceCreateComputeInstanceWithPlacement", mutates=True, root=True)
    def _create_ci_placed(self, h: Any, pid: Any, placement: Any, ref: Any) -> None:
        g, gi = self._gi(h)
        slices = self._ci_slices(g, gi, pid)
        if not isinstance(placement, _CARG | ctypes._Pointer):
            raise _Ret(INVALID_ARGUMENT)
        p = _out(placement)
        if p.size != slices:
            raise _Ret(INVALID_ARGUMENT)
        ci = self._create_ci(g, gi, slices, p.start)
        _set_handle(ref, _encode(KIND_CI, g["index"], ci["serial"]))

    @c_api("nvmlComputeInstanceDestroy", mutates=True, root=True)
    def _destroy_ci(self, h: Any) -> None:
        g, gi, ci = self._ci(h)
        if any(p.get("gi") == gi["id"] and p.get("ci") == ci["id"] for p in self._live_processes(g)):
            raise _Ret(IN_USE)
        gi["cis"].remove(ci)

    @c_api("nvmlGpuInstanceGetComputeInstances")
    def _list_cis(self, h: Any, pid: Any, arr: Any, count_ref: Any) -> None:
        g, gi = self._gi(h)
        slices = self._ci_slices(g, gi, pid)
        if arr is None:
            raise _Ret(INVALID_ARGUMENT)
        found = [c for c in gi["cis"] if c["slices"] == slices]
        count = _out(count_ref)
        if len(arr) < len(found):
            count.value = len(found)
            raise _Ret(INSUFFICIENT_SIZE)
        for i, c in enumerate(found):
            ctypes.memmove(
                ctypes.addressof(arr) + i * 8,
                ctypes.byref(ctypes.c_uint64(_encode(KIND_CI, g["index"], c["serial"]))),
                8,
            )
        count.value = len(found)

    @c_api("nvmlGpuInstanceGetComputeInstanceById")
    def _ci_by_id(self, h: Any, ci_id: Any, ref: Any) -> None:
        g, gi = self._gi(h)
        for c in gi["cis"]:
            if c["id"] == _int(ci_id):
                _set_handle(ref, _encode(KIND_CI, g["index"], c["serial"]))
                return
        raise _Ret(NOT_FOUND)

    @c_api("nvmlComputeInstanceGetInfo_v2")
    def _ci_info(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._ci(h)
        info = _out(ref)
        _set_ptr_field(info, "device", _encode(KIND_DEVICE, g["index"], 0))
        _set_ptr_field(info, "gpuInstance", _encode(KIND_GI, g["index"], gi["serial"]))
        info.id = ci["id"]
        info.profileId = ci["profile_id"]
        info.placement.start, info.placement.size = ci["start"], ci["slices"]

    # -- MIG device handles ---------------------------------------------------------------------
    @c_api("nvmlDeviceIsMigDeviceHandle")
    def _is_mig(self, h: Any, ref: Any) -> None:
        kind, _, _ = _decode(_handle_value(h))
        self._any_dev(h)
        _out(ref).value = 1 if kind == KIND_MIG else 0

    @c_api("nvmlDeviceGetGpuInstanceId")
    def _mig_gi_id(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._any_dev(h)
        if gi is None:
            raise _Ret(NOT_SUPPORTED)
        _out(ref).value = gi["id"]

    @c_api("nvmlDeviceGetComputeInstanceId")
    def _mig_ci_id(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._any_dev(h)
        if ci is None:
            raise _Ret(NOT_SUPPORTED)
        _out(ref).value = ci["id"]

    @c_api("nvmlDeviceGetMaxMigDeviceCount")
    def _max_mig(self, h: Any, ref: Any) -> None:
        g = self._dev(h)
        geo = self._model(g).mig
        enabled = geo is not None and g["mig"] is not None and g["mig"]["current"] == 1
        _out(ref).value = geo.max_mig_devices if enabled and geo else 0

    @c_api("nvmlDeviceGetMigDeviceHandleByIndex")
    def _mig_by_index(self, h: Any, index: Any, ref: Any) -> None:
        g = self._dev(h)
        self._geometry(g)
        devs = self._mig_devices(g)
        i = _int(index)
        if not 0 <= i < len(devs):
            raise _Ret(NOT_FOUND)
        _set_handle(ref, _encode(KIND_MIG, g["index"], devs[i][1]["serial"]))

    @c_api("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
    def _mig_parent(self, h: Any, ref: Any) -> None:
        g, gi, _ = self._any_dev(h)
        if gi is None:
            raise _Ret(INVALID_ARGUMENT)
        _set_handle(ref, _encode(KIND_DEVICE, g["index"], 0))

    @c_api("nvmlDeviceGetAttributes_v2")
    def _attributes(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._any_dev(h)
        a = _out(ref)
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

    # -- processes ------------------------------------------------------------------------------
    @c_api("nvmlDeviceGetComputeRunningProcesses_v3")
    def _processes(self, h: Any, count_ref: Any, arr: Any) -> None:
        g, gi, ci = self._any_dev(h)
        procs = self._live_processes(g)
        if gi is not None and ci is not None:
            procs = [p for p in procs if p.get("gi") == gi["id"] and p.get("ci") == ci["id"]]
        count = _out(count_ref)
        if not procs:
            count.value = 0
            return
        if arr is None or count.value < len(procs):
            count.value = len(procs)
            raise _Ret(INSUFFICIENT_SIZE)
        mig_on = g["mig"] is not None and g["mig"]["current"] == 1
        for i, p in enumerate(procs):
            arr[i].pid = p["pid"]
            arr[i].usedGpuMemory = p.get("used_memory_mib", 0) << 20
            arr[i].gpuInstanceId = p.get("gi", NO_MIG_ID) if mig_on else NO_MIG_ID
            arr[i].computeInstanceId = p.get("ci", NO_MIG_ID) if mig_on else NO_MIG_ID
        count.value = len(procs)

    # -- topology ------------------------------------------------------------------------------
    @c_api("nvmlDeviceGetTopologyCommonAncestor")
    def _common_ancestor(self, h1: Any, h2: Any, ref: Any) -> None:
        a, b = self._dev(h1), self._dev(h2)
        _out(ref).value = a["pcie_levels"][b["index"]]

    def _link(self, h: Any, link: Any) -> tuple[dict, int]:
        g = self._dev(h)
        n = _int(link)
        if not g["nvlinks"]:
            raise _Ret(NOT_SUPPORTED)  # no NVLink on this GPU (or no bridge fitted)
        if not 0 <= n < self._model(g).nvlinks:
            raise _Ret(INVALID_ARGUMENT)
        return g, n

    @c_api("nvmlDeviceGetNvLinkState")
    def _nvlink_state(self, h: Any, link: Any, ref: Any) -> None:
        g, n = self._link(h, link)
        _out(ref).value = 1 if n < len(g["nvlinks"]) else 0

    @c_api("nvmlDeviceGetNvLinkVersion")
    def _nvlink_version(self, h: Any, link: Any, ref: Any) -> None:
        g, n = self._link(h, link)
        _out(ref).value = self._model(g).nvlink_version

    @c_api("nvmlDeviceGetNvLinkRemotePciInfo_v2")
    def _nvlink_remote(self, h: Any, link: Any, ref: Any) -> None:
        g, n = self._link(h, link)
        if n >= len(g["nvlinks"]):
            raise _Ret(NOT_SUPPORTED)
        bus_id = g["nvlinks"][n][0]
        info = _out(ref)
        dom, bus, devfn = bus_id.split(":")
        info.busId = bus_id.encode()
        info.busIdLegacy = f"{int(dom, 16):04X}:{bus}:{devfn}".encode()
        info.domain, info.bus, info.device = int(dom, 16), int(bus, 16), int(devfn.split(".")[0], 16)

    @c_api("nvmlDeviceGetNvLinkRemoteDeviceType")
    def _nvlink_remote_type(self, h: Any, link: Any, ref: Any) -> None:
        g, n = self._link(h, link)
        if n >= len(g["nvlinks"]):
            raise _Ret(NOT_SUPPORTED)
        _out(ref).value = g["nvlinks"][n][1]

    @c_api("nvmlDeviceGetCpuAffinity")
    def _cpu_affinity(self, h: Any, size: Any, ref: Any) -> None:
        g = self._dev(h)
        arr = _out(ref)
        words = _int(size)
        for cpu in g["cpus"]:
            if cpu // 64 < words:
                arr[cpu // 64] |= 1 << (cpu % 64)

    @c_api("nvmlDeviceGetMemoryAffinity")
    def _mem_affinity(self, h: Any, size: Any, ref: Any, scope: Any) -> None:
        g = self._dev(h)
        arr = _out(ref)
        node = g["numa_node"]
        if node // 64 < _int(size):
            arr[node // 64] |= 1 << (node % 64)

    @c_api("nvmlDeviceGetNumaNodeId")
    def _numa_id(self, h: Any, ref: Any) -> None:
        self._dev(h)
        raise _Ret(NOT_SUPPORTED)  # only coherent-memory GPUs (Grace) are NUMA nodes

    # -- health -----------------------------------------------------------------------------------
    @c_api("nvmlDeviceGetEccMode")
    def _ecc_mode(self, h: Any, cur: Any, pend: Any) -> None:
        self._dev(h)
        _out(cur).value, _out(pend).value = 1, 1

    @c_api("nvmlDeviceGetTotalEccErrors")
    def _ecc_total(self, h: Any, err_type: Any, counter: Any, ref: Any) -> None:
        g = self._dev(h)
        et, ct = _int(err_type), _int(counter)
        if et not in (0, 1) or ct not in (0, 1):
            raise _Ret(INVALID_ARGUMENT)
        kind = "corrected" if et == 0 else "uncorrected"
        _out(ref).value = g["health"]["ecc"][kind][ct]

    def _volta_only(self, g: dict) -> None:
        if self._model(g).architecture != "volta":
            raise _Ret(NOT_SUPPORTED)  # Ampere+ remap rows instead of retiring pages

    @c_api("nvmlDeviceGetRetiredPages")
    def _retired(self, h: Any, cause: Any, count_ref: Any, arr: Any) -> None:
        g = self._dev(h)
        self._volta_only(g)
        c = _int(cause)
        if c not in (0, 1):
            raise _Ret(INVALID_ARGUMENT)
        pages = g["health"]["retired_pages"]["sbe" if c == 0 else "dbe"]
        count = _out(count_ref)
        if arr is None or count.value < len(pages):
            count.value = len(pages)
            if pages:
                raise _Ret(INSUFFICIENT_SIZE)
            return
        for i, addr in enumerate(pages):
            arr[i] = addr
        count.value = len(pages)

    @c_api("nvmlDeviceGetRetiredPagesPendingStatus")
    def _retired_pending(self, h: Any, ref: Any) -> None:
        g = self._dev(h)
        self._volta_only(g)
        _out(ref).value = g["health"]["retired_pending"]

    @c_api("nvmlDeviceGetRemappedRows")
    def _remapped(self, h: Any, corr: Any, unc: Any, pend: Any, fail: Any) -> None:
        g = self._dev(h)
        if self._model(g).architecture == "volta":
            raise _Ret(NOT_SUPPORTED)
        if g["mig"] and g["mig"]["current"] == 1 and g["gis"]:
            raise _Ret(NOT_SUPPORTED)  # not available with active MIG instances
        r = g["health"]["remapped_rows"]
        _out(corr).value = r["correctable"]
        _out(unc).value = r["uncorrectable"]
        _out(pend).value = r["pending"]
        _out(fail).value = r["failure"]

    @c_api("nvmlDeviceGetTemperature")
    def _temperature(self, h: Any, sensor: Any, ref: Any) -> None:
        g = self._dev(h)
        if _int(sensor) != 0:
            raise _Ret(INVALID_ARGUMENT)
        _out(ref).value = g["health"]["temperature_c"]

    @c_api("nvmlDeviceGetTemperatureThreshold")
    def _temperature_threshold(self, h: Any, which: Any, ref: Any) -> None:
        g = self._dev(h)
        m = self._model(g)
        values = {0: m.temp_shutdown_c, 1: m.temp_slowdown_c, 2: 95, 3: m.temp_slowdown_c - 3}
        w = _int(which)
        if w not in values:
            raise _Ret(INVALID_ARGUMENT)
        _out(ref).value = values[w]


def supported_symbols() -> tuple[str, ...]:
    """The libnvidia-ml symbols the simulation answers (others: FUNCTION_NOT_FOUND)."""
    return tuple(sorted(_API))
