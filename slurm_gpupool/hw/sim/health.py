"""The simulated library's processes and health queries: running compute processes, ECC mode
and counts, retired pages (Volta), remapped rows (Ampere on), temperatures and thresholds."""

from __future__ import annotations

from slurm_gpupool.hw.sim import cabi
from slurm_gpupool.hw.sim.cargs import NvmlReturn, as_int, deref
from slurm_gpupool.hw.sim.dispatch import SimLibraryBase, c_api

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


class Health(SimLibraryBase):
    """``nvmlDeviceGetComputeRunningProcesses``, ECC, retired pages, remapped rows, temperature."""

    # -- processes ------------------------------------------------------------------------------
    @c_api("nvmlDeviceGetComputeRunningProcesses_v3")
    def _processes(self, h: Any, count_ref: Any, arr: Any) -> None:
        g, gi, ci = self._any_dev(h)
        procs = self._live_processes(g)
        if gi is not None and ci is not None:
            procs = [p for p in procs if p.get("gi") == gi["id"] and p.get("ci") == ci["id"]]
        count = deref(count_ref)
        if not procs:
            count.value = 0
            return
        if arr is None or count.value < len(procs):
            count.value = len(procs)
            raise NvmlReturn(cabi.INSUFFICIENT_SIZE)
        mig_on = g["mig"] is not None and g["mig"]["current"] == 1
        for i, p in enumerate(procs):
            arr[i].pid = p["pid"]
            arr[i].usedGpuMemory = p.get("used_memory_mib", 0) << 20
            arr[i].gpuInstanceId = p.get("gi", cabi.NO_MIG_ID) if mig_on else cabi.NO_MIG_ID
            arr[i].computeInstanceId = p.get("ci", cabi.NO_MIG_ID) if mig_on else cabi.NO_MIG_ID
        count.value = len(procs)

    # -- health -----------------------------------------------------------------------------------
    @c_api("nvmlDeviceGetEccMode")
    def _ecc_mode(self, h: Any, cur: Any, pend: Any) -> None:
        self._dev(h)
        deref(cur).value, deref(pend).value = 1, 1

    @c_api("nvmlDeviceGetTotalEccErrors")
    def _ecc_total(self, h: Any, err_type: Any, counter: Any, ref: Any) -> None:
        g = self._dev(h)
        et, ct = as_int(err_type), as_int(counter)
        if et not in (0, 1) or ct not in (0, 1):
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        kind = "corrected" if et == 0 else "uncorrected"
        deref(ref).value = g["health"]["ecc"][kind][ct]

    def _volta_only(self, g: dict) -> None:
        if self._facts(g)["architecture"] != "volta":
            raise NvmlReturn(cabi.NOT_SUPPORTED)  # Ampere+ remap rows instead of retiring pages

    @c_api("nvmlDeviceGetRetiredPages")
    def _retired(self, h: Any, cause: Any, count_ref: Any, arr: Any) -> None:
        g = self._dev(h)
        self._volta_only(g)
        c = as_int(cause)
        if c not in (0, 1):
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        pages = g["health"]["retired_pages"]["sbe" if c == 0 else "dbe"]
        count = deref(count_ref)
        if arr is None or count.value < len(pages):
            count.value = len(pages)
            if pages:
                raise NvmlReturn(cabi.INSUFFICIENT_SIZE)
            return
        for i, addr in enumerate(pages):
            arr[i] = addr
        count.value = len(pages)

    @c_api("nvmlDeviceGetRetiredPagesPendingStatus")
    def _retired_pending(self, h: Any, ref: Any) -> None:
        g = self._dev(h)
        self._volta_only(g)
        deref(ref).value = g["health"]["retired_pending"]

    @c_api("nvmlDeviceGetRemappedRows")
    def _remapped(self, h: Any, corr: Any, unc: Any, pend: Any, fail: Any) -> None:
        g = self._dev(h)
        if self._facts(g)["architecture"] == "volta":
            raise NvmlReturn(cabi.NOT_SUPPORTED)
        if g["mig"] and g["mig"]["current"] == 1 and g["gis"]:
            raise NvmlReturn(cabi.NOT_SUPPORTED)  # not available with active MIG instances
        r = g["health"]["remapped_rows"]
        deref(corr).value = r["correctable"]
        deref(unc).value = r["uncorrectable"]
        deref(pend).value = r["pending"]
        deref(fail).value = r["failure"]

    @c_api("nvmlDeviceGetTemperature")
    def _temperature(self, h: Any, sensor: Any, ref: Any) -> None:
        g = self._dev(h)
        if as_int(sensor) != 0:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        deref(ref).value = g["health"]["temperature_c"]

    @c_api("nvmlDeviceGetTemperatureThreshold")
    def _temperature_threshold(self, h: Any, which: Any, ref: Any) -> None:
        g = self._dev(h)
        m = self._facts(g)
        values = {0: m["temp_shutdown_c"], 1: m["temp_slowdown_c"], 2: 95, 3: m["temp_slowdown_c"] - 3}
        w = as_int(which)
        if w not in values:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        deref(ref).value = values[w]
