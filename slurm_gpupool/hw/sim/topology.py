"""The simulated library's topology queries: PCIe common ancestors, NVLink state, version and
peers, CPU and memory affinity, NUMA node."""

from __future__ import annotations

from slurm_gpupool.hw.sim import cabi
from slurm_gpupool.hw.sim.cargs import NvmlReturn, as_int, deref
from slurm_gpupool.hw.sim.dispatch import SimLibraryBase, c_api

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


class Topology(SimLibraryBase):
    """``nvmlDeviceGetTopology*``, ``nvmlDeviceGetNvLink*`` and the affinity queries."""

    @c_api("nvmlDeviceGetTopologyCommonAncestor")
    def _common_ancestor(self, h1: Any, h2: Any, ref: Any) -> None:
        a, b = self._dev(h1), self._dev(h2)
        deref(ref).value = a["pcie_levels"][b["index"]]

    def _link(self, h: Any, link: Any) -> tuple[dict, int]:
        g = self._dev(h)
        n = as_int(link)
        if not g["nvlinks"]:
            raise NvmlReturn(cabi.NOT_SUPPORTED)  # no NVLink on this GPU (or no bridge fitted)
        if not 0 <= n < self._model(g).nvlinks:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        return g, n

    @c_api("nvmlDeviceGetNvLinkState")
    def _nvlink_state(self, h: Any, link: Any, ref: Any) -> None:
        g, n = self._link(h, link)
        deref(ref).value = 1 if n < len(g["nvlinks"]) else 0

    @c_api("nvmlDeviceGetNvLinkVersion")
    def _nvlink_version(self, h: Any, link: Any, ref: Any) -> None:
        g, n = self._link(h, link)
        deref(ref).value = self._model(g).nvlink_version

    @c_api("nvmlDeviceGetNvLinkRemotePciInfo_v2")
    def _nvlink_remote(self, h: Any, link: Any, ref: Any) -> None:
        g, n = self._link(h, link)
        if n >= len(g["nvlinks"]):
            raise NvmlReturn(cabi.NOT_SUPPORTED)
        bus_id = g["nvlinks"][n][0]
        info = deref(ref)
        dom, bus, devfn = bus_id.split(":")
        info.busId = bus_id.encode()
        info.busIdLegacy = f"{int(dom, 16):04X}:{bus}:{devfn}".encode()
        info.domain, info.bus, info.device = int(dom, 16), int(bus, 16), int(devfn.split(".")[0], 16)

    @c_api("nvmlDeviceGetNvLinkRemoteDeviceType")
    def _nvlink_remote_type(self, h: Any, link: Any, ref: Any) -> None:
        g, n = self._link(h, link)
        if n >= len(g["nvlinks"]):
            raise NvmlReturn(cabi.NOT_SUPPORTED)
        deref(ref).value = g["nvlinks"][n][1]

    @c_api("nvmlDeviceGetCpuAffinity")
    def _cpu_affinity(self, h: Any, size: Any, ref: Any) -> None:
        g = self._dev(h)
        arr = deref(ref)
        words = as_int(size)
        for cpu in g["cpus"]:
            if cpu // 64 < words:
                arr[cpu // 64] |= 1 << (cpu % 64)

    @c_api("nvmlDeviceGetMemoryAffinity")
    def _mem_affinity(self, h: Any, size: Any, ref: Any, scope: Any) -> None:
        g = self._dev(h)
        arr = deref(ref)
        node = g["numa_node"]
        if node // 64 < as_int(size):
            arr[node // 64] |= 1 << (node % 64)

    @c_api("nvmlDeviceGetNumaNodeId")
    def _numa_id(self, h: Any, ref: Any) -> None:
        self._dev(h)
        raise NvmlReturn(cabi.NOT_SUPPORTED)  # only coherent-memory GPUs (Grace) are NUMA nodes
