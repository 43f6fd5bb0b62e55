"""Value objects shared across layers: what a node's GPUs look like right now.

They carry no behaviour beyond small derived views, and serialise to plain
dicts for ``--json`` output and state files.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class Placement:
    """``nvmlGpuInstancePlacement_t``: ``start`` and ``size`` on the memory-slice axis."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"  # nvidia-smi mig -lgi "Placement Start:Size"


@dataclass(frozen=True)
class MigDevice:
    """One compute instance: what CUDA sees as one MIG device (``nvidia-smi -L``)."""

    gpu_index: int
    gi_id: int
    ci_id: int
    profile: str  # GI profile name, e.g. "3g.40gb"
    profile_id: int
    placement: Placement
    ci_profile_id: int
    ci_slices: int
    uuid: str
    mig_index: int  # nvmlDeviceGetMigDeviceHandleByIndex index
    memory_mib: int
    device_files: tuple[str, ...]  # /dev/nvidiaN, GI cap, CI cap (gres.conf MultipleFiles)


@dataclass(frozen=True)
class GpuInstanceInfo:
    """A GPU instance (``nvidia-smi mig -lgi``) with its compute instances."""

    gpu_index: int
    gi_id: int
    profile: str
    profile_id: int
    placement: Placement
    devices: tuple[MigDevice, ...] = ()


@dataclass(frozen=True)
class GpuProcess:
    """A process on a GPU (``nvidia-smi --query-compute-apps``): ``node apply`` leaves a busy
    GPU alone, and the Epilog finds what a job left behind."""

    pid: int
    used_memory_mib: int | None
    gi_id: int | None = None
    ci_id: int | None = None


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU (``nvidia-smi -q``), including its MIG state."""

    index: int
    uuid: str
    name: str
    model: str | None  # catalog key, None if the catalog does not know the GPU
    pci_bus_id: str
    minor: int
    memory_mib: int
    numa_node: int | None
    cpus: tuple[int, ...]
    mig_capable: bool
    mig_current: bool
    mig_pending: bool
    instances: tuple[GpuInstanceInfo, ...] = ()
    pci_device_id: int = 0  # `lspci -nn` [10de:XXXX]: what identifies the model

    @property
    def device_file(self) -> str:
        return f"/dev/nvidia{self.minor}"

    @property
    def mig_devices(self) -> tuple[MigDevice, ...]:
        return tuple(d for gi in self.instances for d in gi.devices)

    @property
    def mig_change_pending(self) -> bool:
        return self.mig_current != self.mig_pending


@dataclass(frozen=True)
class Topology:
    """GPU-to-GPU connectivity (``nvidia-smi topo -m``).

    ``nvlinks[i][j]`` counts direct links; ``nvswitch`` means every GPU reaches
    every other through NVSwitch; ``pcie[i][j]`` is PIX/PXB/PHB/NODE/SYS or X.
    """

    nvlinks: tuple[tuple[int, ...], ...]
    nvswitch_links: tuple[int, ...]
    pcie: tuple[tuple[str, ...], ...]

    def cell(self, i: int, j: int) -> str:
        if i == j:
            return "X"
        if self.nvswitch_links[i] and self.nvswitch_links[j]:
            return f"NV{min(self.nvswitch_links[i], self.nvswitch_links[j])}"
        if self.nvlinks[i][j]:
            return f"NV{self.nvlinks[i][j]}"
        return self.pcie[i][j]

    def nvlink_connected(self, i: int, j: int) -> bool:
        return i != j and self.cell(i, j).startswith("NV")


@dataclass(frozen=True)
class NodeInventory:
    """Everything NVML says of one node (``nvidia-smi -q``): the input of ``node apply``,
    ``node assert`` and ``inventory``."""

    node: str
    backend: str  # "nvml" or "sim"
    driver_version: str
    cuda_version: str
    gpus: tuple[GpuInfo, ...]
    topology: Topology
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["topology"]["matrix"] = [
            [self.topology.cell(i, j) for j in range(len(self.gpus))] for i in range(len(self.gpus))
        ]
        return d


@dataclass(frozen=True)
class GpuHealth:
    """Health counters of one GPU, each None when NVML does not support it here."""

    gpu_index: int
    ecc_uncorrected_volatile: int | None
    ecc_uncorrected_aggregate: int | None
    ecc_corrected_volatile: int | None
    retired_pages_dbe: int | None
    retired_pages_sbe: int | None
    retired_pages_pending: bool | None
    remapped_rows_uncorrectable: int | None
    remapped_rows_pending: bool | None
    remapped_rows_failure: bool | None
    temperature_c: int | None
    temperature_slowdown_c: int | None
    recent_xids: tuple[int, ...] = ()
