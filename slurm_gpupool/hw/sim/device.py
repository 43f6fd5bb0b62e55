"""The simulated library's system and device queries: versions, enumeration, identity, PCI,
memory and utilisation, for a GPU or a MIG device handle."""

from __future__ import annotations

from slurm_gpupool.hw.sim import cabi
from slurm_gpupool.hw.sim.cargs import Kind, NvmlReturn, as_int, deref, encode_handle, put_str, set_handle
from slurm_gpupool.hw.sim.dispatch import SimLibraryBase, c_api

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


class Devices(SimLibraryBase):
    """``nvmlSystem*``, ``nvmlInit``/``nvmlShutdown`` and the device identity queries."""

    # -- system -----------------------------------------------------------------------------
    @c_api("nvmlInitWithFlags")
    def _init(self, flags: Any) -> None:
        if not self.store.exists():
            raise NvmlReturn(9)  # NVML_ERROR_DRIVER_NOT_LOADED: no simulated node here
        self.store.read()
        self._init_count += 1

    @c_api("nvmlShutdown")
    def _shutdown(self) -> None:
        self._init_count = max(0, self._init_count - 1)

    @c_api("nvmlErrorString")
    def _error_string(self, code: Any) -> bytes:
        return cabi.ERROR_TEXT.get(as_int(code), f"Error {as_int(code)}").encode()

    @c_api("nvmlSystemGetDriverVersion")
    def _driver_version(self, buf: Any, size: Any) -> None:
        put_str(buf, size, self._st["driver_version"])

    @c_api("nvmlSystemGetNVMLVersion")
    def _nvml_version(self, buf: Any, size: Any) -> None:
        put_str(buf, size, "12." + self._st["driver_version"])

    @c_api("nvmlSystemGetCudaDriverVersion")
    def _cuda_version(self, ref: Any) -> None:
        deref(ref).value = self._st["cuda_version"]

    # -- device enumeration and identity -------------------------------------------------
    @c_api("nvmlDeviceGetCount_v2")
    def _count(self, ref: Any) -> None:
        deref(ref).value = len(self._gpus())

    @c_api("nvmlDeviceGetHandleByIndex_v2")
    def _by_index(self, index: Any, ref: Any) -> None:
        i = as_int(index)
        if not 0 <= i < len(self._gpus()):
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        set_handle(ref, encode_handle(Kind.DEVICE, i, 0))

    @c_api("nvmlDeviceGetHandleByUUID")
    def _by_uuid(self, uuid: Any, ref: Any) -> None:
        want = (uuid.value if hasattr(uuid, "value") else uuid) or b""
        want = want.decode() if isinstance(want, bytes) else str(want)
        for g in self._gpus():
            if g["uuid"] == want:
                set_handle(ref, encode_handle(Kind.DEVICE, g["index"], 0))
                return
            for gi in g["gis"]:
                for ci in gi["cis"]:
                    if ci["uuid"] == want:
                        set_handle(ref, encode_handle(Kind.MIG, g["index"], ci["serial"]))
                        return
        raise NvmlReturn(cabi.NOT_FOUND)

    @c_api("nvmlDeviceGetHandleByPciBusId_v2")
    def _by_bus(self, bus: Any, ref: Any) -> None:
        from slurm_gpupool.config.machines import normalise_bus_id

        raw = bus.value if hasattr(bus, "value") else bus
        try:
            want = normalise_bus_id(raw.decode() if isinstance(raw, bytes) else str(raw))
        except ValueError:
            raise NvmlReturn(cabi.INVALID_ARGUMENT) from None
        for g in self._gpus():
            if g["pci_bus_id"] == want:
                set_handle(ref, encode_handle(Kind.DEVICE, g["index"], 0))
                return
        raise NvmlReturn(cabi.NOT_FOUND)

    @c_api("nvmlDeviceGetName")
    def _name(self, h: Any, buf: Any, size: Any) -> None:
        g, gi, ci = self._any_dev(h)
        name = self._model(g).nvml_name
        if gi is not None and ci is not None:
            name = f"{name} MIG {self._ci_name(g, gi, ci['slices'])}"
        put_str(buf, size, name)

    @c_api("nvmlDeviceGetUUID")
    def _uuid(self, h: Any, buf: Any, size: Any) -> None:
        g, gi, ci = self._any_dev(h)
        put_str(buf, size, ci["uuid"] if ci is not None else g["uuid"])

    @c_api("nvmlDeviceGetSerial")
    def _serial(self, h: Any, buf: Any, size: Any) -> None:
        put_str(buf, size, self._dev(h)["serial"])

    @c_api("nvmlDeviceGetIndex")
    def _index(self, h: Any, ref: Any) -> None:
        g, gi, ci = self._any_dev(h)
        if ci is None:
            deref(ref).value = g["index"]
            return
        for i, (_, c) in enumerate(self._mig_devices(g)):
            if c["serial"] == ci["serial"]:
                deref(ref).value = i
                return

    @c_api("nvmlDeviceGetMinorNumber")
    def _minor(self, h: Any, ref: Any) -> None:
        deref(ref).value = self._dev(h)["minor"]

    @c_api("nvmlDeviceGetPciInfo_v3")
    def _pci(self, h: Any, ref: Any) -> None:
        g, _, _ = self._any_dev(h)
        info = deref(ref)
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
        total = self._memory_mib(g, gi) << 20
        if gi is not None:
            procs = [p for p in procs if p.get("gi") == gi["id"]]
        used = min(total, sum(p.get("used_memory_mib", 0) << 20 for p in procs))
        m = deref(ref)
        m.total, m.used, m.free = total, used, total - used

    def _memory_mib(self, g: dict, gi: dict | None) -> int:
        """The GPU's memory, or its GPU instance's profile's: from the state's model facts
        (no catalog load), or from the catalog for a state file written before they held it."""
        facts = self._facts(g)
        if gi is None:
            return int(facts.get("memory_mib") or self._model(g).memory_mib)
        known = facts.get("gi_memory_mib", {}).get(str(gi["profile_id"]))
        if known is not None:
            return int(known)
        prof = self._geometry(g).by_id(gi["profile_id"])
        assert prof is not None
        return prof.memory_mib

    @c_api("nvmlDeviceGetComputeMode")
    def _compute_mode(self, h: Any, ref: Any) -> None:
        """``nvidia-smi --query-gpu=compute_mode``: DEFAULT unless a test set another
        (``inject.set_compute_mode``; the simulation answers no ``nvmlDeviceSetComputeMode``)."""
        deref(ref).value = self._dev(h).get("compute_mode", 0)

    @c_api("nvmlDeviceGetUtilizationRates")
    def _utilization(self, h: Any, ref: Any) -> None:
        g = self._dev(h)
        if g["mig"] and g["mig"]["current"] == 1:
            raise NvmlReturn(cabi.NOT_SUPPORTED)  # not available on MIG-enabled GPUs
        u = deref(ref)
        u.gpu, u.memory = g["utilization"]["gpu"], g["utilization"]["memory"]
