"""Machine descriptions: the hardware of a node type, for simulation and planning.

A description (``etc/machines/<name>.yaml``) says which GPUs a node has, on which
PCI bus, NUMA node and CPUs, and how they are connected (NVSwitch, direct NVLink
pairs, PCIe switches).  On real nodes the same facts come from NVML; here they
seed the simulator and let the planner and GRES generator work for nodes that are
not in front of us.  The format is documented in ``etc/machines/README.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from slurm_gpupool.core.mig.catalog import GpuModel, get_model
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.util.resources import machines_dir
from slurm_gpupool.util.validate import NAME, Where, load_yaml, preview

INTERCONNECTS = ("nvswitch", "nvlink", "pcie")
# nvidia-smi topo -m PCIe relations, nearest first (reference §5.1).
PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU of a machine description, as NVML and ``lspci`` would show it."""

    index: int  # NVML index (GPUs enumerate in PCI bus order)
    model: str  # catalog key
    pci_bus_id: str  # NVML form "00000000:07:00.0"
    minor: int  # /dev/nvidia<minor>; may differ from index
    numa_node: int
    cpus: tuple[int, ...]  # logical CPUs local to the GPU (CPU affinity)
    pci_device_id: int = 0  # `lspci -nn` [10de:XXXX]; 0: the model's first id

    @property
    def gpu_model(self) -> GpuModel:
        return get_model(self.model)

    @property
    def device_id(self) -> int:
        """The board's PCI device id (a model can have several: B200 0x2901/0x2909)."""
        return self.pci_device_id or self.gpu_model.pci_device_id


@dataclass(frozen=True)
class MachineSpec:
    """A machine description (``etc/machines``): its CPUs, memory, GPUs and links, for rendering and the simulation."""

    name: str
    description: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mib: int
    numa_cpus: dict[int, tuple[int, ...]]
    interconnect: str
    gpus: tuple[GpuSpec, ...]
    nvlink_pairs: dict[tuple[int, int], int] = field(default_factory=dict)
    nvswitch_links_per_gpu: int = 0
    pcie_switches: tuple[tuple[int, ...], ...] = ()
    source: str = ""

    @property
    def cpus_total(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    def nvlinks(self, a: int, b: int) -> int:
        """Direct NVLink links between GPUs a and b (0 through NVSwitch or PCIe)."""
        if a == b:
            return 0
        return self.nvlink_pairs.get((min(a, b), max(a, b)), 0)

    def nvlink_connected(self, a: int, b: int) -> bool:
        """Whether a and b talk over NVLink, directly or through NVSwitch."""
        if self.interconnect == "nvswitch":
            return a != b
        return self.nvlinks(a, b) > 0

    def pcie_level(self, a: int, b: int) -> str:
        """The PCIe relation of two GPUs, as ``nvidia-smi topo -m`` prints it."""
        for group in self.pcie_switches:
            if a in group and b in group:
                return "PIX"
        ga, gb = self.gpus[a], self.gpus[b]
        if ga.numa_node == gb.numa_node:
            return "PHB" if len(self.numa_cpus) == 1 else "NODE"
        if self.socket_of_cpu(ga.cpus[0]) == self.socket_of_cpu(gb.cpus[0]):
            return "NODE"
        return "SYS"

    def core_of_cpu(self, cpu: int) -> int:
        """Slurm's core index of a logical CPU (Linux numbers hyperthreads last)."""
        return cpu % (self.sockets * self.cores_per_socket)

    def socket_of_cpu(self, cpu: int) -> int:
        return self.core_of_cpu(cpu) // self.cores_per_socket

    def socket_cores(self, socket: int) -> range:
        return range(socket * self.cores_per_socket, (socket + 1) * self.cores_per_socket)


# Slurm keeps sockets, cores and threads in 16 bits and a node's CPUs below 65,536; no GPU
# server comes near these, and a larger figure is a typo that would build lists of billions
MAX_SOCKETS, MAX_CORES_PER_SOCKET, MAX_THREADS_PER_CORE, MAX_CPUS = 64, 1024, 8, 65535
MAX_GPUS, MAX_MINOR, MAX_NUMA_NODE, MAX_MEMORY_MIB = 64, 254, 1023, 1 << 40
_CPU_RANGE = re.compile(r"([0-9]{1,5})(?:-([0-9]{1,5}))?")


def _cpulist(text: Any, where: Where, ncpus: int = MAX_CPUS) -> tuple[int, ...]:
    """Parse a Linux CPU list such as ``0-15,128-143``: each CPU below ``ncpus``, checked
    before a range is expanded."""
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise where.error(f"not a CPU list: {preview(text)} (expected e.g. 0-15,128-143)")
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = _CPU_RANGE.fullmatch(part)
        if m is None:
            raise where.error(f"not a CPU list: {preview(text)} (expected e.g. 0-15,128-143)")
        lo, hi = int(m[1]), int(m[2] or m[1])
        if hi >= ncpus:
            raise where.error(f"CPU {hi} beyond the {ncpus} CPUs of cpu:")
        if hi < lo:
            raise where.error(f"CPU range {part!r} runs backwards")
        out.extend(range(lo, hi + 1))
    return tuple(out)


def _count(w: Where, raw: dict, key: str, low: int, high: int) -> int:
    """``raw[key]``, an integer from ``low`` to ``high``."""
    n = w.require(raw, key, int)
    if not low <= n <= high:
        raise w.key(key).error(f"must be {low} to {high}, not {n}")
    return int(n)


_BUS_ID = re.compile(r"(?:[0-9A-Fa-f]{1,8}:)?[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7]")


def normalise_bus_id(bus_id: str) -> str:
    """``07:00.0`` or ``0000:07:00.0`` → NVML's ``00000000:07:00.0``."""
    parts = bus_id.strip().upper().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    dom, bus, devfn = parts
    return f"{int(dom, 16):08X}:{bus.zfill(2)}:{devfn}"


_TOP_KEYS = {
    "machine",
    "description",
    "cpu",
    "memory_mib",
    "numa",
    "interconnect",
    "nvswitch",
    "nvlink",
    "pcie",
    "gpus",
}


def parse_machine(raw: Any, source: str) -> MachineSpec:
    """Validate a decoded machine description; every error names file and key."""
    top = Where(source)
    top.check_type(raw, dict)
    top.only_keys(raw, _TOP_KEYS)
    name = top.require(raw, "machine", str)
    cpu = top.require(raw, "cpu", dict)
    w_cpu = top.key("cpu")
    w_cpu.only_keys(cpu, {"sockets", "cores_per_socket", "threads_per_core"})
    sockets = _count(w_cpu, cpu, "sockets", 1, MAX_SOCKETS)
    cores = _count(w_cpu, cpu, "cores_per_socket", 1, MAX_CORES_PER_SOCKET)
    threads = _count(w_cpu, cpu, "threads_per_core", 1, MAX_THREADS_PER_CORE)
    ncpus = sockets * cores * threads
    if ncpus > MAX_CPUS:
        raise w_cpu.error(f"{ncpus} CPUs: Slurm counts at most {MAX_CPUS} on a node")
    memory_mib = _count(top, raw, "memory_mib", 1, MAX_MEMORY_MIB)
    numa_raw = top.require(raw, "numa", dict)
    numa: dict[int, tuple[int, ...]] = {}
    for k, v in numa_raw.items():
        wk = top.key("numa").key(k)
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_NUMA_NODE:
            raise wk.error(f"a NUMA node is a number 0 to {MAX_NUMA_NODE}")
        numa[k] = _cpulist(v, wk, ncpus)
    interconnect = top.require(raw, "interconnect", str)
    if interconnect not in INTERCONNECTS:
        raise top.key("interconnect").error(f"must be one of {', '.join(INTERCONNECTS)}, not {interconnect!r}")
    gpus_raw = top.require(raw, "gpus", list)
    if not 1 <= len(gpus_raw) <= MAX_GPUS:
        raise top.key("gpus").error(f"a machine has 1 to {MAX_GPUS} GPUs, not {len(gpus_raw)}")
    gpus: list[GpuSpec] = []
    for i, g in enumerate(gpus_raw):
        wg = top.key("gpus").index(i)
        wg.check_type(g, dict)
        wg.only_keys(g, {"model", "pci_bus_id", "minor", "numa_node", "pci_device_id"})
        model = wg.require(g, "model", str)
        try:
            gm = get_model(model)
        except ConfigError as e:
            raise wg.key("model").error(f"{e.why} {model!r}", e.hint) from None
        dev = wg.optional(g, "pci_device_id", int, 0)
        if not 0 <= dev <= 0xFFFF:
            raise wg.key("pci_device_id").error(f"not a PCI device id: {dev}")
        if dev and dev not in gm.pci_device_ids:
            ids = ", ".join(f"0x{i:04X}" for i in gm.pci_device_ids)
            raise wg.key("pci_device_id").error(f"0x{dev:04X} is not a {gm.key} id ({ids})")
        text = wg.require(g, "pci_bus_id", str)
        if not _BUS_ID.fullmatch(text.strip()):
            raise wg.key("pci_bus_id").error(f"not a PCI bus id: {preview(text)}", hint='e.g. "07:00.0"')
        bus = normalise_bus_id(text)
        numa_node = wg.require(g, "numa_node", int)
        if numa_node not in numa:
            raise wg.key("numa_node").error(f"NUMA node {numa_node} is not listed under numa:")
        minor = wg.optional(g, "minor", int, i)
        if not 0 <= minor <= MAX_MINOR:
            raise wg.key("minor").error(f"a device minor is 0 to {MAX_MINOR}, not {minor}")
        gpus.append(GpuSpec(i, model, bus, minor, numa_node, numa[numa_node], dev))
    w_gpus = top.key("gpus")
    if len({g.pci_bus_id for g in gpus}) != len(gpus):
        raise w_gpus.error("two GPUs share a PCI bus id")
    if len({g.minor for g in gpus}) != len(gpus):
        raise w_gpus.error("two GPUs share a device minor")
    if [g.pci_bus_id for g in gpus] != sorted(g.pci_bus_id for g in gpus):
        raise w_gpus.error("list GPUs in PCI bus order (that is the NVML index order)")

    pairs: dict[tuple[int, int], int] = {}
    for j, row in enumerate(top.optional(raw, "nvlink", list, [])):
        wl = top.key("nvlink").index(j)
        if not (isinstance(row, list) and len(row) == 3 and all(isinstance(x, int) for x in row)):
            raise wl.error("expected [gpu_a, gpu_b, links]")
        a, b, n = row
        if not (0 <= a < len(gpus) and 0 <= b < len(gpus)) or a == b or n <= 0:
            raise wl.error(f"bad link {row}: GPUs must be distinct indices, links > 0")
        pairs[(min(a, b), max(a, b))] = n
    for idx, g in enumerate(gpus):
        used = sum(n for (a, b), n in pairs.items() if idx in (a, b))
        if used > g.gpu_model.nvlinks:
            raise top.key("nvlink").error(f"GPU {idx} uses {used} links but a {g.model} has {g.gpu_model.nvlinks}")
    switch_links = 0
    if interconnect == "nvswitch":
        sw = top.require(raw, "nvswitch", dict)
        top.key("nvswitch").only_keys(sw, {"links_per_gpu"})
        switch_links = _count(top.key("nvswitch"), sw, "links_per_gpu", 1, 18)
    elif interconnect == "nvlink" and not pairs:
        raise top.key("nvlink").error("interconnect is nvlink but no links are listed")
    pcie = top.optional(raw, "pcie", dict, {})
    top.key("pcie").only_keys(pcie, {"switches"})
    ws = top.key("pcie").key("switches")
    groups = ws.check_type(pcie.get("switches", []), list)
    for j, grp in enumerate(groups):
        ok = isinstance(grp, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in grp)
        if not ok or not all(0 <= x < len(gpus) for x in grp):
            raise ws.index(j).error(f"expected a list of GPU indices 0..{len(gpus) - 1}")
    switches = tuple(tuple(grp) for grp in groups)
    return MachineSpec(
        name=name,
        description=top.optional(raw, "description", str, ""),
        sockets=sockets,
        cores_per_socket=cores,
        threads_per_core=threads,
        memory_mib=memory_mib,
        numa_cpus=numa,
        interconnect=interconnect,
        gpus=tuple(gpus),
        nvlink_pairs=pairs,
        nvswitch_links_per_gpu=switch_links,
        pcie_switches=switches,
        source=source,
    )


def load_machine_file(path: Path) -> MachineSpec:

    return parse_machine(load_yaml(path), str(path))


@cache
def _load_cached(path: str) -> MachineSpec:
    return load_machine_file(Path(path))


def find_machine(name: str, search: tuple[Path, ...] = ()) -> MachineSpec:
    """A machine description by name, from ``search`` dirs first, then the built-ins."""

    if not NAME.fullmatch(name):
        raise ConfigError("machine descriptions", name[:70], "not a machine description name")
    dirs = (*search, machines_dir())
    for d in dirs:
        p = d / f"{name}.yaml"
        if p.is_file():
            return _load_cached(str(p.resolve()))
    known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml")})
    raise ConfigError(
        "machine descriptions",
        name,
        "no such machine description",
        hint=f"looked in {', '.join(str(d) for d in dirs)}; known: {', '.join(known)}",
    )


def builtin_machine_names() -> list[str]:
    return sorted(p.stem for p in machines_dir().glob("*.yaml"))
