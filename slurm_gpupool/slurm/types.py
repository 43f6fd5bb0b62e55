"""What Slurm tells us, as plain values: nodes, jobs, reservations and GRES strings.

Pure (no subprocess): the repartitioner's rules and the simulator read these without
loading a Slurm backend.  Filled by the parsers (``slurm/parse.py``) from
``sinfo --json``, ``squeue --json`` and ``scontrol show reservation``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from slurm_gpupool.core.gres.hostlist import slurm_hostlist
from slurm_gpupool.core.gres.node_gres import gres_by_type

LAYOUT_FEATURE_PREFIX = "layout_"  # gres render puts layout_<name> on each node line


@dataclass(frozen=True)
class NodeInfo:
    """One node as ``sinfo --json`` shows it."""

    name: str
    state: str  # base state, lower case: idle, mixed, allocated, down, ...
    flags: frozenset[str]  # DRAIN, MAINTENANCE, RESERVED, NOT_RESPONDING, INVALID, ...
    gres: str  # gpu:1g.5gb:28(S:0-1),gpu:a100:2(S:0-1),shard:...
    features: tuple[str, ...]
    reason: str
    gres_used: str = ""  # gpu:1g.5gb:2(IDX:0-1),shard:v100_shared:1(IDX:0) (22.05), shard:a30:3(3/4,0/4) (24.11+)
    tres_used: str = ""  # cpu=2,gres/shard=3 (22.05 only: later sinfo --json has no TRES)
    partitions: tuple[str, ...] = ()  # the partitions the node is in (sinfo's PARTITION column)

    @property
    def layout(self) -> str | None:
        """The layout the node's installed GRES come from (its ``layout_<name>`` feature)."""
        found = [f[len(LAYOUT_FEATURE_PREFIX) :] for f in self.features if f.startswith(LAYOUT_FEATURE_PREFIX)]
        return found[0] if len(found) == 1 else None

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def usable(self) -> bool:
        """Not down, future or invalid (a node that misses one ping is still usable)."""
        return self.state not in ("down", "unknown", "future") and not (self.flags & {"INVALID", "INVALID_REG"})

    @property
    def responding(self) -> bool:
        return self.usable and "NOT_RESPONDING" not in self.flags

    def gres_counts(self) -> dict[str, int]:
        """``gpu:1g.5gb:28(S:0-1),shard:8`` → {"gpu:1g.5gb": 28, "shard": 8}."""
        return gres_counts(self.gres)

    def gres_total(self) -> dict[tuple[str, str], int]:
        """Configured GRES by (name, type): {("gpu", "1g.5gb"): 28, ("shard", "v100_shared"): 16}."""
        return gres_by_type(self.gres)

    def gres_allocated(self) -> dict[tuple[str, str], int]:
        """GRES in use by (name, type), from ``gres_used``.

        Slurm 22.05 prints a shard type's use as the number of GPUs its shards are on
        (3 shards of one GPU: ``shard:v100_shared:1(IDX:0)``, measured); its node TRES
        has the true total (``gres/shard=3``), which goes to the node's one shard type.
        Later releases print each GPU's ``used/total`` shards, which are summed."""
        used = gres_by_type(self.gres_used)
        if self.tres_used:
            tres = dict(item.partition("=")[::2] for item in self.tres_used.split(",") if "=" in item)
            shard_types = [t for (name, t), n in self.gres_total().items() if name == "shard" and n > 0]
            if len(shard_types) == 1 and tres.get("gres/shard", "0").isdigit():
                used = {k: v for k, v in used.items() if k[0] != "shard"}
                used[("shard", shard_types[0])] = int(tres.get("gres/shard", "0"))
        return used


def gres_counts(text: str) -> dict[str, int]:
    """Per GRES name[:type] the count, zero counts dropped and shards summed.

    slurmd reports shards per GPU type (``shard:1g.6gb:0,shard:a30_shared:8``)
    while a node line declares ``shard:8``: both become {"shard": 8}."""
    out: dict[str, int] = {}
    for item in re.sub(r"\([^)]*\)", "", text or "").split(","):
        item = item.strip()
        if not item or item in ("(null)", "N/A"):
            continue
        parts = item.split(":")
        key, count = (":".join(parts[:-1]), int(parts[-1])) if parts[-1].isdigit() else (item, 1)
        if key.startswith("shard"):
            key = "shard"
        if count:
            out[key] = out.get(key, 0) + count
    return out


def requested_gres(text: str) -> dict[tuple[str, str], int]:
    """A job's ``tres_per_node`` or ``tres_per_job`` GPU and shard request by (name, type):
    ``gres:gpu:1g.5gb:2`` (22.05), ``gres/gpu:1g.5gb:2,gres/shard:2`` (23.11+), ``gres/gpu:2``."""
    out: dict[tuple[str, str], int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        for prefix in ("gres:", "gres/"):
            item = item.removeprefix(prefix)
        parts = item.split(":")
        count = 1
        if len(parts) > 1 and parts[-1].isdigit():
            count, parts = int(parts[-1]), parts[:-1]
        if parts[0] in ("gpu", "shard") and count:
            key = (parts[0], ":".join(parts[1:]))
            out[key] = out.get(key, 0) + count
    return out


@dataclass(frozen=True)
class JobInfo:
    """One job as ``squeue --json`` shows it."""

    job_id: int
    state: str  # RUNNING, PENDING, COMPLETING, ...
    nodes: frozenset[str]
    user: str
    name: str
    time_limit_s: int | None
    start_time: int
    requeue: bool
    reservation: str
    gres: str = ""  # tres_per_node: gres:gpu:a100:2 (22.05), gres/shard:2 (23.11+)
    priority: int | None = None
    state_reason: str = ""
    node_count: int = 1  # nodes it runs on, or asks for while pending
    tres_per_job: str = ""  # --gpus=...: gres/gpu:a100:2 (or gres:gpu:a100:2 on 22.05)
    qos: str = ""  # its QOS: a service tier's is gpupool_<tier> (docs/tiers.md)
    submit_time: int = 0  # epoch seconds (how long a pending job has waited: the elastic policy)

    @property
    def finished(self) -> bool:
        """Ended, though slurmctld still remembers it (for MinJobAge)."""
        return self.state in FINISHED_STATES

    @property
    def uses_shards(self) -> bool:
        return "shard" in self.gres


FINISHED_STATES = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}
)


@dataclass(frozen=True)
class WillRun:
    """What ``sbatch --test-only`` says of a job: when, where and with how many CPUs it would
    start (Slurm's own estimate, backfill included), or why Slurm would not take it."""

    start: datetime | None  # naive local time, as Slurm prints it; None: refused
    cpus: int = 0
    nodes: frozenset[str] = frozenset()
    partition: str = ""
    refused: str = ""  # Slurm's reason (and job_submit.lua's message) when start is None
    preempts: tuple[int, ...] = ()  # jobs it would preempt to start then
    by_sbatch: bool = False  # refused by sbatch itself (a malformed option), before slurmctld saw it
    reason: str = ""  # slurmctld's own reason ("allocation failure: ..."), beside job_submit.lua's words


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: frozenset[str]
    start: datetime
    end: datetime
    flags: frozenset[str] = field(default_factory=frozenset)


def hostlist(nodes: Iterable[str]) -> str:
    """For ``Nodes=`` and ``-w``: see :func:`~slurm_gpupool.core.gres.hostlist.slurm_hostlist`."""
    return slurm_hostlist(nodes)
