"""Pure planning of the sandbox: node map, ports, addresses, config contexts.

No I/O here except loading machine descriptions (``find_machine``), so the
rules (which node gets which address, what goes in AccountingStorageTRES) can
be unit-tested without a cluster.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_gpupool.errors import ConfigError, UsageError
from slurm_gpupool.machines import MachineSpec, find_machine

DEFAULT_NODES: dict[str, str] = {
    "a100n1": "dgx-a100",
    "a100n2": "dgx-a100",
    "h100n1": "hgx-h100",
    "a30n1": "pcie-a30",
    "v100n1": "dgx1-v100",
}
DEFAULT_BASE_PORT = 16800
MAX_NODES = 200  # NodeAddr 127.0.0.2 .. 127.0.0.201
_NODE_RE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


def parse_node_map(text: str) -> dict[str, str]:
    """``a100n1=dgx-a100,h100n1=hgx-h100`` → ``{"a100n1": "dgx-a100", ...}`` (order kept)."""
    out: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, machine = item.partition("=")
        if not sep or not name.strip() or not machine.strip():
            raise UsageError(f"--nodes {text!r}", f"{item!r} is not NODE=MACHINE")
        if name.strip() in out:
            raise UsageError(f"--nodes {text!r}", f"node {name.strip()!r} given twice")
        out[name.strip()] = machine.strip()
    if not out:
        raise UsageError(f"--nodes {text!r}", "no nodes given")
    return out


def validate_node_map(nodes: Mapping[str, str]) -> dict[str, MachineSpec]:
    """Each node name is a valid Slurm node name and each machine description exists."""
    if not nodes:
        raise UsageError("sandbox nodes", "at least one node is needed")
    if len(nodes) > MAX_NODES:
        raise UsageError("sandbox nodes", f"at most {MAX_NODES} nodes")
    out: dict[str, MachineSpec] = {}
    for name, machine in nodes.items():
        if not _NODE_RE.match(name):
            raise UsageError(
                f"sandbox node {name!r}", "not a valid node name (lower-case letters, digits, '-'; a letter first)"
            )
        out[name] = find_machine(machine)
        if not out[name].gpus:
            raise ConfigError(out[name].source, "gpus", f"machine {machine!r} has no GPUs")
    return out


@dataclass(frozen=True)
class Ports:
    """Every port from one base, so two sandboxes (or a real Slurm on 6817-6819) do not clash."""

    base: int = DEFAULT_BASE_PORT

    @property
    def mysql(self) -> int:
        return self.base + 6

    @property
    def slurmctld(self) -> int:
        return self.base + 17

    @property
    def slurmdbd(self) -> int:
        return self.base + 19

    @property
    def slurmd_base(self) -> int:
        return self.base + 100

    def slurmd(self, index: int) -> int:
        return self.slurmd_base + index


@dataclass(frozen=True)
class GpuPlan:
    minor: int
    type: str
    file: str


@dataclass(frozen=True)
class NodePlan:
    """One emulated node: name, machine, where its slurmd listens, its whole-GPU GRES."""

    name: str
    machine: MachineSpec
    index: int
    addr: str
    port: int
    gpus: tuple[GpuPlan, ...]

    @property
    def gres(self) -> list[str]:
        counts: dict[str, int] = {}
        for g in self.gpus:
            counts[g.type] = counts.get(g.type, 0) + 1
        return [f"gpu:{t}:{n}" for t, n in counts.items()]

    def context(self) -> dict[str, Any]:
        m = self.machine
        return {
            "name": self.name,
            "addr": self.addr,
            "port": self.port,
            "cpus": m.cpus_total,
            "sockets": m.sockets,
            "cores_per_socket": m.cores_per_socket,
            "threads_per_core": m.threads_per_core,
            "real_memory_mib": m.memory_mib,
            "gres": self.gres,
            "features": [m.name],
            "gpus": [{"minor": g.minor, "type": g.type, "file": g.file} for g in self.gpus],
        }


def assign_slots(nodes: Iterable[str], old: Mapping[str, int] | None = None) -> dict[str, int]:
    """A stable slot per node: kept from ``old``, new nodes take the lowest free slots."""
    names = list(nodes)
    kept = {n: int(i) for n, i in (old or {}).items() if n in names}
    free = (i for i in range(MAX_NODES) if i not in kept.values())
    return {n: kept[n] if n in kept else next(free) for n in names}


def node_address(slot: int, ports: Ports) -> tuple[str, int]:
    """Slot i listens on ``NodeAddr=127.0.0.(i+2)``, ``Port=<slurmd base>+i``."""
    return f"127.0.0.{slot + 2}", ports.slurmd(slot)


def plan_nodes(
    machines: Mapping[str, MachineSpec],
    slots: Mapping[str, int],
    ports: Ports,
    nodes_dir: Path,
    gpu_type: Callable[[str], str],
) -> list[NodePlan]:
    """The nodes in map order, each with its address, port and whole GPUs (``gpu_type`` names them)."""
    plans = []
    for name, m in machines.items():
        dev = nodes_dir / name / "dev"
        gpus = tuple(GpuPlan(g.minor, gpu_type(g.model), f"{dev}/nvidia{g.minor}") for g in m.gpus)
        addr, port = node_address(slots[name], ports)
        plans.append(NodePlan(name, m, slots[name], addr, port, gpus))
    return plans


_GRES_TYPE_RE = re.compile(r"(?i)(?:^|\s)Type=(\S+)")
_GRES_NAME_GPU_RE = re.compile(r"(?i)(?:^|\s)Name=gpu(?:\s|$)")


def gpu_types_in_gres_conf(text: str) -> list[str]:
    """Sorted distinct ``Type=`` of the ``Name=gpu`` lines of a gres.conf."""
    types = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        if _GRES_NAME_GPU_RE.search(line):
            m = _GRES_TYPE_RE.search(line)
            if m:
                types.add(m.group(1))
    return sorted(types)


def accounting_tres(gpu_types: Iterable[str]) -> list[str]:
    """``AccountingStorageTRES``: typed GPU usage is recorded only for the types listed."""
    return ["gres/gpu", *(f"gres/gpu:{t}" for t in sorted(set(gpu_types))), "gres/shard"]


def env_lines(env: Mapping[str, str]) -> str:
    """``export NAME=value`` lines for a POSIX shell."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
