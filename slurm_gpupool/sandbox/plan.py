"""Pure planning of the sandbox: node names, ports, addresses.

No I/O here except loading machine descriptions (``find_machine``), so the
rules (which node gets which address and port) can be unit-tested without a
cluster.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurm_gpupool.errors import ConfigError, UsageError

if TYPE_CHECKING:  # the machine descriptions load only where a plan is made, not per `sandbox stop`
    from slurm_gpupool.config.machines import MachineSpec

DEFAULT_BASE_PORT = 16800
MAX_NODES = 200  # NodeAddr 127.0.0.2 .. 127.0.0.201
_NODE_RE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


def validate_node_map(nodes: Mapping[str, str]) -> dict[str, MachineSpec]:
    """Each node name is a valid Slurm node name and each machine description exists."""
    from slurm_gpupool.config.machines import find_machine

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
class NodePlan:
    """One emulated node: name, machine, and where its slurmd listens."""

    name: str
    machine: MachineSpec
    index: int
    addr: str
    port: int


def assign_slots(nodes: Iterable[str], old: Mapping[str, int] | None = None) -> dict[str, int]:
    """A stable slot per node: kept from ``old``, new nodes take the lowest free slots."""
    names = list(nodes)
    wanted = set(names)
    kept = {n: int(i) for n, i in (old or {}).items() if n in wanted}
    taken = set(kept.values())  # a set: linear in nodes, not quadratic (#29: 128 nodes)
    free = (i for i in range(MAX_NODES) if i not in taken)
    return {n: kept[n] if n in kept else next(free) for n in names}


def node_address(slot: int, ports: Ports) -> tuple[str, int]:
    """Slot i listens on ``NodeAddr=127.0.0.(i+2)``, ``Port=<slurmd base>+i``."""
    return f"127.0.0.{slot + 2}", ports.slurmd(slot)


def plan_nodes(machines: Mapping[str, MachineSpec], slots: Mapping[str, int], ports: Ports) -> list[NodePlan]:
    """The nodes in map order, each with its address and port."""
    plans = []
    for name, m in machines.items():
        addr, port = node_address(slots[name], ports)
        plans.append(NodePlan(name, m, slots[name], addr, port))
    return plans


def env_lines(env: Mapping[str, str]) -> str:
    """``export NAME=value`` lines for a POSIX shell."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
