"""The GPU backend over pynvml: the ONLY module of slurm_gpupool that imports pynvml.

It runs unchanged against the real ``libnvidia-ml.so.1`` and against the
simulation (``hw/sim/lib.py``), which it installs beneath pynvml when asked.
NVML errors are classified here, once, into the errors of ``slurm_gpupool.errors``.
Docstrings name the ``nvidia-smi`` command that does the same thing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Iterator

from slurm_gpupool.core.gres.devices import gpu_device_file, mig_device_files
from slurm_gpupool.errors import (
    GpuBusyError,
    GpuOperationError,
    NvmlUnavailableError,
)
from slurm_gpupool.hw.ctypes_util import defer_ctypes_util

defer_ctypes_util()  # before pynvml, whose unused `find_library` import would load subprocess & co.

import pynvml  # noqa: E402

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any

    from slurm_gpupool.model import (
        GpuHealth,
        GpuInfo,
        GpuInstanceInfo,
        GpuProcess,
        NodeInventory,
        Placement,
        Topology,
    )


_LEVEL_NAMES = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_UNAVAILABLE = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    pynvml.NVML_ERROR_UNINITIALIZED,
}
_CPU_WORDS = 16  # affinity masks for up to 1024 CPUs
# what GPM measures for a job, by NVML_GPM_METRIC_* (DCGM's 1002 SM active, 1004 tensor active, 1005 DRAM active)
_GPM_METRICS = (
    ("sm_activity_pct", pynvml.NVML_GPM_METRIC_SM_UTIL),
    ("tensor_activity_pct", pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL),
    ("dram_bw_pct", pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL),
)
_ARCH_NAMES = {5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada", 9: "Hopper", 10: "Blackwell"}
_NO_ID = 0xFFFFFFFF


def _mig_handles(h: Any) -> Iterator[tuple[int, Any]]:
    """(index, handle) of each MIG device of GPU handle ``h``, by
    ``nvmlDeviceGetMigDeviceHandleByIndex`` (what ``nvidia-smi -L`` lists under a GPU)."""
    for mig_index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            yield mig_index, pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, mig_index)
        except pynvml.NVMLError as e:
            if _is(e, pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                return  # Slurm stops at the first missing index too
            raise


def classify(e: Exception, what: str) -> Exception:
    """Turn an NVML exception into our error hierarchy (the one place that does)."""
    if isinstance(e, pynvml.NVMLLibraryMismatchError):
        return NvmlUnavailableError(what, str(e), hint="the NVIDIA driver is older than nvidia-ml-py expects")
    code = getattr(e, "value", None)
    if code in _UNAVAILABLE:
        return NvmlUnavailableError(
            what,
            f"NVML is not available ({e})",
            hint="is the NVIDIA driver loaded on this node? `nvidia-smi` should list the GPUs",
        )
    if code == pynvml.NVML_ERROR_IN_USE:
        return GpuBusyError(what, "in use by another client (processes or instances remain)")
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return GpuOperationError(what, "insufficient permissions", code, hint="run as root")
    return GpuOperationError(what, str(e), code)


@contextlib.contextmanager
def nvml_errors(what: str) -> Iterator[None]:
    try:
        yield
    except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as e:
        raise classify(e, what) from None


def _is(e: pynvml.NVMLError, *codes: int) -> bool:
    return getattr(e, "value", None) in codes


def _ensure_str(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _mig_on(h: Any) -> bool:
    """MIG mode is on now (``nvidia-smi --query-gpu=mig.mode.current``); a GPU without MIG
    answers NOT_SUPPORTED, which is off."""
    try:
        cur, _pend = pynvml.nvmlDeviceGetMigMode(h)
    except pynvml.NVMLError as e:
        if not _is(e, pynvml.NVML_ERROR_NOT_SUPPORTED):
            raise
        return False
    return cur == 1


class NvmlBackend:
    """Reads and changes one node's GPUs through NVML.

    ``library`` replaces ``libnvidia-ml.so.1`` beneath pynvml (the simulation);
    ``reset`` performs a GPU reset (``nvidia-smi --gpu-reset``), which NVML
    itself does not expose.
    """

    def __init__(
        self,
        node: str | None = None,
        *,
        kind: str = "nvml",
        library: Any = None,
        dev_root: str = "/dev",
        reset: Callable[[int, str], None] | None = None,
        reset_timeout_s: float = 120.0,
    ) -> None:
        self.node = node or os.uname().nodename.split(".")[0]
        self.kind = kind
        self.dev_root = dev_root
        self._reset = reset
        self._reset_timeout_s = reset_timeout_s
        self._library = library
        if library is not None:
            pynvml.nvmlLib = library
            pynvml._nvmlGetFunctionPointer_cache.clear()
        try:
            with nvml_errors(f"initialise NVML on {self.node}"):
                pynvml.nvmlInit()
        except BaseException:  # nothing opened: the process's next backend starts from a clean pynvml
            if library is not None and pynvml.nvmlLib is library:
                pynvml.nvmlLib = None
                pynvml._nvmlGetFunctionPointer_cache.clear()
            raise
        self._open = True
        self._gpm_ok: dict[int, bool] = {}  # per GPU: does GPM measure it (asked once)
        self._gpm_last: dict[tuple[int, str | None], Any] = {}  # the previous GPM sample per GPU / MIG device

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        for sample in self._gpm_last.values():
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlGpmSampleFree(sample)
        self._gpm_last.clear()
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
        if self._library is not None and pynvml.nvmlLib is self._library:
            pynvml.nvmlLib = None
            pynvml._nvmlGetFunctionPointer_cache.clear()

    def __enter__(self) -> NvmlBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- small helpers ---------------------------------------------------------------------
    def _handle(self, index: int) -> Any:
        with nvml_errors(f"GPU {index} on {self.node}"):
            return pynvml.nvmlDeviceGetHandleByIndex(index)

    def gpu_count(self) -> int:
        """``nvidia-smi -L | wc -l``."""
        with nvml_errors(f"count GPUs on {self.node}"):
            return int(pynvml.nvmlDeviceGetCount())

    def driver_version(self) -> str:
        with nvml_errors("driver version"):
            return _ensure_str(pynvml.nvmlSystemGetDriverVersion())

    # -- inventory ----------------------------------------------------------------------------
    def inventory(self) -> NodeInventory:
        """Everything ``nvidia-smi -q``, ``nvidia-smi mig -lgi -lci`` and ``topo -m`` show."""
        from slurm_gpupool.model import NodeInventory

        with nvml_errors(f"read GPUs of {self.node}"):
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
            n = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
            gpus = tuple(self._gpu_info(i, h) for i, h in enumerate(handles))
            topo = self._topology(handles, gpus)
        return NodeInventory(
            node=self.node,
            backend=self.kind,
            driver_version=self.driver_version(),
            cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
            gpus=gpus,
            topology=topo,
        )

    def gpu(self, index: int) -> GpuInfo:
        """One GPU's identity and MIG state (``nvidia-smi -i N -q``)."""
        h = self._handle(index)
        with nvml_errors(f"read GPU {index} on {self.node}"):
            return self._gpu_info(index, h)

    def _gpu_info(self, index: int, h: Any) -> GpuInfo:
        from slurm_gpupool.core.mig import catalog
        from slurm_gpupool.model import GpuInfo

        name = _ensure_str(pynvml.nvmlDeviceGetName(h))
        pci = pynvml.nvmlDeviceGetPciInfo(h)
        device_id = pci.pciDeviceId >> 16
        model = catalog.detect(name, device_id)
        minor = pynvml.nvmlDeviceGetMinorNumber(h)
        try:
            cur, pend = pynvml.nvmlDeviceGetMigMode(h)
            capable = True
        except pynvml.NVMLError as e:
            if not _is(e, pynvml.NVML_ERROR_NOT_SUPPORTED):
                raise
            cur = pend = 0
            capable = False
        mask = pynvml.nvmlDeviceGetCpuAffinity(h, _CPU_WORDS)
        cpus = tuple(w * 64 + b for w in range(_CPU_WORDS) for b in range(64) if mask[w] >> b & 1)
        numa: int | None = None
        with contextlib.suppress(pynvml.NVMLError):
            nodes = pynvml.nvmlDeviceGetMemoryAffinity(h, 1, pynvml.NVML_AFFINITY_SCOPE_NODE)
            numa = next((b for b in range(64) if nodes[0] >> b & 1), None)
        instances = self._instances(index, h, minor) if cur == 1 else ()
        return GpuInfo(
            index=index,
            uuid=_ensure_str(pynvml.nvmlDeviceGetUUID(h)),
            name=name,
            model=model.key if model else None,
            pci_bus_id=_ensure_str(pci.busId),
            minor=minor,
            memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(h).total) >> 20,
            numa_node=numa,
            cpus=cpus,
            mig_capable=capable,
            mig_current=cur == 1,
            mig_pending=pend == 1,
            instances=instances,
            pci_device_id=device_id,
        )

    def _gi_profiles(self, h: Any) -> list[Any]:
        """GI profile infos offered by this GPU (``nvidia-smi mig -lgip``)."""
        from slurm_gpupool.core.mig import catalog

        out = []
        # an older nvidia-ml-py's count predates +gfx, -me, +me.all (0xA-0x10): ask for those too
        for enum in range(max(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT, catalog.gi_profile_enum_span())):
            try:
                out.append(pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, enum))
            except pynvml.NVMLError as e:
                if not _is(e, pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                    raise
        return out

    def _instances(self, index: int, h: Any, minor: int) -> tuple[GpuInstanceInfo, ...]:
        """GPU and compute instances (``nvidia-smi mig -lgi`` and ``-lci``)."""
        from slurm_gpupool.model import GpuInstanceInfo, MigDevice, Placement

        uuid_by_ids: dict[tuple[int, int], tuple[str, int]] = {}
        for mig_index, mh in _mig_handles(h):
            ids = (pynvml.nvmlDeviceGetGpuInstanceId(mh), pynvml.nvmlDeviceGetComputeInstanceId(mh))
            uuid_by_ids[ids] = (_ensure_str(pynvml.nvmlDeviceGetUUID(mh)), mig_index)
        result: list[GpuInstanceInfo] = []
        for prof in self._gi_profiles(h):
            arr = (pynvml.c_nvmlGpuInstance_t * max(1, prof.instanceCount))()
            count = ctypes.c_uint(len(arr))
            pynvml.nvmlDeviceGetGpuInstances(h, prof.id, arr, ctypes.byref(count))
            pname = _ensure_str(prof.name).removeprefix("MIG ")
            for k in range(count.value):
                gi = arr[k]
                info = pynvml.nvmlGpuInstanceGetInfo(gi)
                devices = []
                for ci_enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                    try:
                        cprof = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                            gi, ci_enum, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                        )
                    except pynvml.NVMLError as e:
                        if not _is(e, pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                            raise
                        continue
                    carr = (pynvml.c_nvmlComputeInstance_t * max(1, cprof.instanceCount))()
                    ccount = ctypes.c_uint(len(carr))
                    pynvml.nvmlGpuInstanceGetComputeInstances(gi, cprof.id, carr, ctypes.byref(ccount))
                    for c in range(ccount.value):
                        cinfo = pynvml.nvmlComputeInstanceGetInfo(carr[c])
                        uuid, mig_index = uuid_by_ids.get((info.id, cinfo.id), ("", -1))
                        devices.append(
                            MigDevice(
                                gpu_index=index,
                                gi_id=info.id,
                                ci_id=cinfo.id,
                                profile=pname,
                                profile_id=prof.id,
                                placement=Placement(info.placement.start, info.placement.size),
                                ci_profile_id=cprof.id,
                                ci_slices=cprof.sliceCount,
                                uuid=uuid,
                                mig_index=mig_index,
                                memory_mib=int(prof.memorySizeMB),
                                device_files=mig_device_files(minor, info.id, cinfo.id, self.dev_root),
                            )
                        )
                devices.sort(key=lambda d: d.ci_id)
                result.append(
                    GpuInstanceInfo(
                        gpu_index=index,
                        gi_id=info.id,
                        profile=pname,
                        profile_id=prof.id,
                        placement=Placement(info.placement.start, info.placement.size),
                        devices=tuple(devices),
                    )
                )
        result.sort(key=lambda g: (g.placement.start, g.gi_id))
        return tuple(result)

    def _topology(self, handles: list[Any], gpus: tuple[GpuInfo, ...]) -> Topology:
        """NVLink counts per pair and PCIe relations (``nvidia-smi topo -m``).

        Like Slurm's NVML plugin: walk links until NOT_SUPPORTED, skip
        INVALID_ARGUMENT, and count active links whose peer is a local GPU.
        """
        from slurm_gpupool.model import Topology

        n = len(handles)
        bus_to_index = {g.pci_bus_id: g.index for g in gpus}
        links = [[0] * n for _ in range(n)]
        switch_links = [0] * n
        for i, h in enumerate(handles):
            for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
                try:
                    if not pynvml.nvmlDeviceGetNvLinkState(h, link):
                        continue
                    remote_type = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)
                    remote = _ensure_str(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
                except pynvml.NVMLError as e:
                    if _is(e, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                        continue
                    if _is(e, pynvml.NVML_ERROR_NOT_SUPPORTED):
                        break
                    raise
                if remote_type == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                    switch_links[i] += 1
                elif remote in bus_to_index:
                    links[i][bus_to_index[remote]] += 1
        pcie = [
            [
                "X"
                if i == j
                else _LEVEL_NAMES.get(pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]), "SYS")
                for j in range(n)
            ]
            for i in range(n)
        ]
        return Topology(
            nvlinks=tuple(tuple(r) for r in links),
            nvswitch_links=tuple(switch_links),
            pcie=tuple(tuple(r) for r in pcie),
        )

    # -- processes and health -----------------------------------------------------------------
    def process_records(self, index: int) -> list[dict[str, int | None]]:
        """Compute processes on a GPU, with their MIG instance (``nvidia-smi --query-compute-apps``):
        the fields of :class:`~slurm_gpupool.model.GpuProcess` as plain dicts (the Epilog's
        path: no dataclasses, #29)."""
        h = self._handle(index)
        with nvml_errors(f"list processes on GPU {index} of {self.node}"):
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        out = []
        for p in procs:
            gi = getattr(p, "gpuInstanceId", _NO_ID)
            ci = getattr(p, "computeInstanceId", _NO_ID)
            mem = p.usedGpuMemory
            out.append(
                {
                    "pid": int(p.pid),
                    "used_memory_mib": None if mem is None else int(mem) >> 20,
                    "gi_id": None if gi == _NO_ID else int(gi),
                    "ci_id": None if ci == _NO_ID else int(ci),
                }
            )
        return out

    def processes(self, index: int) -> list[GpuProcess]:
        """:meth:`process_records` as :class:`~slurm_gpupool.model.GpuProcess` values."""
        from slurm_gpupool.model import GpuProcess

        return [GpuProcess(**r) for r in self.process_records(index)]  # type: ignore[arg-type]

    def health_counters(self, index: int) -> dict[str, Any]:
        """ECC, retired pages / remapped rows and temperature.

        Like ``nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,TEMPERATURE``; a
        counter NVML does not support here (e.g. remapped rows with MIG on) is None.
        The fields of :class:`~slurm_gpupool.model.GpuHealth` as a plain dict: the job hooks
        check these without loading the model's dataclasses (~15 ms a job, #29).
        """
        h = self._handle(index)

        def opt(fn: Callable[..., Any], *args: Any) -> Any:
            try:
                return fn(h, *args)
            except pynvml.NVMLError as e:
                if _is(e, pynvml.NVML_ERROR_NOT_SUPPORTED):
                    return None
                raise classify(e, f"health of GPU {index} on {self.node}") from None

        ecc_unc_v = opt(
            pynvml.nvmlDeviceGetTotalEccErrors, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
        )
        ecc_unc_a = opt(
            pynvml.nvmlDeviceGetTotalEccErrors, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC
        )
        ecc_cor_v = opt(
            pynvml.nvmlDeviceGetTotalEccErrors, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC
        )
        dbe = opt(pynvml.nvmlDeviceGetRetiredPages, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        sbe = opt(pynvml.nvmlDeviceGetRetiredPages, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        pending = opt(pynvml.nvmlDeviceGetRetiredPagesPendingStatus)
        remap = opt(pynvml.nvmlDeviceGetRemappedRows)
        temp = opt(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
        slowdown = opt(pynvml.nvmlDeviceGetTemperatureThreshold, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        return dict(
            gpu_index=index,
            ecc_uncorrected_volatile=ecc_unc_v,
            ecc_uncorrected_aggregate=ecc_unc_a,
            ecc_corrected_volatile=ecc_cor_v,
            retired_pages_dbe=None if dbe is None else len(dbe),
            retired_pages_sbe=None if sbe is None else len(sbe),
            retired_pages_pending=None if pending is None else bool(pending),
            remapped_rows_uncorrectable=None if remap is None else int(remap[1]),
            remapped_rows_pending=None if remap is None else bool(remap[2]),
            remapped_rows_failure=None if remap is None else bool(remap[3]),
            temperature_c=temp,
            temperature_slowdown_c=slowdown,
        )

    def health(self, index: int) -> GpuHealth:
        """:meth:`health_counters` as a :class:`~slurm_gpupool.model.GpuHealth`."""
        from slurm_gpupool.model import GpuHealth

        return GpuHealth(**self.health_counters(index))

    def mig_state(self, index: int) -> tuple[bool, list[str]]:
        """(MIG mode on, the UUIDs of the GPU's MIG devices): what ``nvidia-smi -L`` lists under
        it, walked the way Slurm walks them.  The hooks' drift check needs only this, not
        :meth:`gpu`'s whole instance tree (a dozen NVML calls instead of ~150)."""
        h = self._handle(index)
        with nvml_errors(f"read MIG devices of GPU {index} on {self.node}"):
            if not _mig_on(h):
                return False, []
            uuids = [_ensure_str(pynvml.nvmlDeviceGetUUID(mh)) for _, mh in _mig_handles(h)]
        return True, uuids

    def device_usage(self, index: int, mig_uuid: str | None = None) -> dict[str, int | None]:
        """Memory in use and, for a whole GPU, utilization (``nvidia-smi --query-gpu=memory.used,utilization.gpu``).

        NVML has no utilization for MIG devices; None where it cannot say.
        """
        what = f"usage of GPU {index} on {self.node}"
        with nvml_errors(what):
            h = pynvml.nvmlDeviceGetHandleByUUID(mig_uuid) if mig_uuid else self._handle(index)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            util: int | None = None
            if not mig_uuid:
                try:
                    util = int(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
                except pynvml.NVMLError as e:
                    if not _is(e, pynvml.NVML_ERROR_NOT_SUPPORTED):
                        raise
        return {
            "memory_used_mib": int(mem.used) >> 20,
            "memory_total_mib": int(mem.total) >> 20,
            "utilization_pct": util,
        }

    # -- activity (GPM) -----------------------------------------------------------------------
    def activity_support(self, index: int) -> tuple[bool, str]:
        """Whether GPM measures this GPU and its MIG instances (``nvidia-smi dmon --gpm-metrics 2,5,10``
        works), and if not, why: GPM needs a Hopper or later GPU and an R520+ driver."""
        h = self._handle(index)
        try:
            with nvml_errors(f"GPM support of GPU {index} on {self.node}"):
                if pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
                    return True, ""
                arch = _ARCH_NAMES.get(int(pynvml.nvmlDeviceGetArchitecture(h)), "an older architecture")
        except GpuOperationError as e:
            if e.nvml_code in (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_NOT_SUPPORTED):
                return False, f"the driver has no GPM (NVML error {e.nvml_code}): R520 or later is needed"
            raise
        return False, f"GPM needs a Hopper or later GPU; GPU {index} is {arch}"

    def activity(self, index: int, mig_uuid: str | None = None) -> dict[str, float | None] | None:
        """SM activity, tensor activity and DRAM bandwidth (percent) of a GPU or of the GPU instance
        of a MIG device, since this backend's previous call for it (``dcgmi dmon -e 1002,1004,1005``;
        ``nvidia-smi dmon --gpm-metrics 2,5,10``; per instance: ``--gpm-options``).

        None where GPM cannot measure (before Hopper: :meth:`activity_support` says why) and at
        the first call, which only takes the first sample.  A metric NVML refuses is None.
        """
        if not self._gpm_ok.setdefault(index, self.activity_support(index)[0]):
            return None
        h = self._handle(index)
        key = (index, mig_uuid)
        with nvml_errors(f"GPM sample of {mig_uuid or f'GPU {index}'} on {self.node}"):
            sample = pynvml.nvmlGpmSampleAlloc()
            try:
                if mig_uuid:
                    gi_id = pynvml.nvmlDeviceGetGpuInstanceId(pynvml.nvmlDeviceGetHandleByUUID(mig_uuid))
                    pynvml.nvmlGpmMigSampleGet(h, gi_id, sample)
                else:
                    pynvml.nvmlGpmSampleGet(h, sample)
            except pynvml.NVMLError:
                pynvml.nvmlGpmSampleFree(sample)
                raise
            prev = self._gpm_last.pop(key, None)
            self._gpm_last[key] = sample
            if prev is None:
                return None
            get = pynvml.c_nvmlGpmMetricsGet_t()
            get.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            get.numMetrics = len(_GPM_METRICS)
            get.sample1, get.sample2 = prev, sample
            for i, (_, metric) in enumerate(_GPM_METRICS):
                get.metrics[i].metricId = metric
            try:
                pynvml.nvmlGpmMetricsGet(get)
            except pynvml.NVMLError as e:
                if _is(e, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                    return None  # the instance was re-created between the samples: start again
                raise
            finally:
                pynvml.nvmlGpmSampleFree(prev)
        return {
            name: round(float(get.metrics[i].value), 1) if get.metrics[i].nvmlReturn == pynvml.NVML_SUCCESS else None
            for i, (name, _) in enumerate(_GPM_METRICS)
        }

    # -- read-only facts for scripts/gpu-check ------------------------------------------------
    def gi_profile_table(self, index: int) -> list[dict[str, Any]] | None:
        """The GPU-instance profiles the GPU offers, by NVML enum, with their possible
        placements (``nvidia-smi mig -lgip`` and ``-lgipp``): getters only.  None when the
        GPU does not report them (no MIG, or MIG mode off: NVML answers NOT_SUPPORTED then)."""
        h = self._handle(index)
        from slurm_gpupool.core.mig import catalog

        out: list[dict[str, Any]] = []
        with nvml_errors(f"read MIG profiles of GPU {index} on {self.node}"):
            if not _mig_on(h):
                return None
            for enum in range(max(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT, catalog.gi_profile_enum_span())):
                try:
                    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)  # the ...InfoV symbol
                except pynvml.NVMLError as e:
                    if not _is(e, pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                        raise
                    continue
                count = ctypes.c_uint(0)  # NULL array first: NVML says how many placements there are
                pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, None, ctypes.byref(count))
                arr = (pynvml.c_nvmlGpuInstancePlacement_t * max(1, count.value))()
                count = ctypes.c_uint(len(arr))
                pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, arr, ctypes.byref(count))
                out.append(
                    {
                        "nvml_enum": enum,
                        "profile_id": int(info.id),
                        "name": _ensure_str(info.name).removeprefix("MIG "),
                        "compute_slices": int(info.sliceCount),
                        "max_count": int(info.instanceCount),
                        "sm_count": int(info.multiprocessorCount),
                        "copy_engines": int(info.copyEngineCount),
                        "decoders": int(info.decoderCount),
                        "jpegs": int(info.jpegCount),
                        "ofas": int(info.ofaCount),
                        "memory_mib": int(info.memorySizeMB),
                        "placements": [[int(arr[k].start), int(arr[k].size)] for k in range(count.value)],
                    }
                )
        return out

    def compute_mode(self, index: int) -> int | None:
        """``nvidia-smi --query-gpu=compute_mode`` (0 DEFAULT, 2 PROHIBITED, 3
        EXCLUSIVE_PROCESS); None where NVML does not say.  Read only: we never set it."""
        h = self._handle(index)
        with nvml_errors(f"read the compute mode of GPU {index} on {self.node}"):
            try:
                return int(pynvml.nvmlDeviceGetComputeMode(h))
            except pynvml.NVMLError as e:
                if not _is(e, pynvml.NVML_ERROR_NOT_SUPPORTED):
                    raise
                return None

    def gpm_support(self, index: int) -> bool | None:
        """Whether the GPU supports GPU Performance Monitoring (``nvmlGpmQueryDeviceSupport``,
        as :meth:`activity_support` asks it); None if this pynvml lacks the call."""
        if getattr(pynvml, "nvmlGpmQueryDeviceSupport", None) is None:
            return None
        return self.activity_support(index)[0]

    # -- changes ----------------------------------------------------------------------------
    def set_mig_mode(self, index: int, enabled: bool) -> tuple[bool, bool, int]:
        """``nvidia-smi -i N -mig 1|0``; returns (current, pending, activation status)."""
        h = self._handle(index)
        with nvml_errors(f"set MIG mode on GPU {index} of {self.node}"):
            status = pynvml.nvmlDeviceSetMigMode(
                h, pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
            )
            cur, pend = pynvml.nvmlDeviceGetMigMode(h)
        return cur == 1, pend == 1, int(status)

    def reset_gpu(self, index: int) -> None:
        """``nvidia-smi --gpu-reset -i <bus id>``: applies a pending MIG mode on Ampere."""
        gpu = self.gpu(index)
        if self._reset is not None:
            self._reset(index, gpu.pci_bus_id)
            return
        import subprocess

        cmd = ["nvidia-smi", "--gpu-reset", "-i", gpu.pci_bus_id]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=self._reset_timeout_s)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise GpuOperationError(f"reset GPU {index} on {self.node}", str(e)) from None
        if res.returncode != 0:
            why = (res.stdout + res.stderr).strip() or f"exit code {res.returncode}"
            if "in use" in why.lower():
                raise GpuBusyError(f"reset GPU {index} on {self.node}", why)
            raise GpuOperationError(f"reset GPU {index} on {self.node}", why)

    def create_gpu_instance(self, index: int, profile_id: int, placement: Placement) -> int:
        """``nvidia-smi mig -i N -cgi <profile_id>:<start>``; returns the GI ID NVML chose."""
        h = self._handle(index)
        what = f"create GPU instance (profile {profile_id} at {placement}) on GPU {index} of {self.node}"
        with nvml_errors(what):
            p = pynvml.c_nvmlGpuInstancePlacement_t(placement.start, placement.size)
            gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, ctypes.byref(p))
            return int(pynvml.nvmlGpuInstanceGetInfo(gi).id)

    def create_compute_instance(self, index: int, gi_id: int, ci_slices: int) -> tuple[int, str]:
        """``nvidia-smi mig -i N -gi G -cci <profile>``; returns (CI ID, MIG UUID)."""
        from slurm_gpupool.core.mig import catalog

        h = self._handle(index)
        what = f"create compute instance in GI {gi_id} on GPU {index} of {self.node}"
        with nvml_errors(what):
            gi = pynvml.nvmlDeviceGetGpuInstanceById(h, gi_id)
            cprof = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, catalog.ci_profile_id(ci_slices), pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
            ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, cprof.id)
            ci_id = int(pynvml.nvmlComputeInstanceGetInfo(ci).id)
            for mig_index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, mig_index)
                except pynvml.NVMLError as e:
                    if _is(e, pynvml.NVML_ERROR_NOT_FOUND):
                        break
                    raise
                if (pynvml.nvmlDeviceGetGpuInstanceId(mh), pynvml.nvmlDeviceGetComputeInstanceId(mh)) == (gi_id, ci_id):
                    return ci_id, _ensure_str(pynvml.nvmlDeviceGetUUID(mh))
        return ci_id, ""

    def destroy_compute_instance(self, index: int, gi_id: int, ci_id: int) -> None:
        """``nvidia-smi mig -i N -gi G -ci C -dci``."""
        h = self._handle(index)
        with nvml_errors(f"destroy compute instance {gi_id}/{ci_id} on GPU {index} of {self.node}"):
            gi = pynvml.nvmlDeviceGetGpuInstanceById(h, gi_id)
            pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id))

    def destroy_gpu_instance(self, index: int, gi_id: int) -> None:
        """``nvidia-smi mig -i N -gi G -dgi``."""
        h = self._handle(index)
        with nvml_errors(f"destroy GPU instance {gi_id} on GPU {index} of {self.node}"):
            pynvml.nvmlGpuInstanceDestroy(pynvml.nvmlDeviceGetGpuInstanceById(h, gi_id))

    def device_file(self, minor: int) -> str:
        return gpu_device_file(minor, self.dev_root)
