"""What the repartitioner asks of and does to Slurm, from the controller.

Reads: nodes (``sinfo --json``), jobs (``squeue --json``), reservations
(``scontrol -o show reservation``), a partition's ``MaxTime``
(``scontrol -o show partition``) and ``scontrol ping``.  Acts: drain and resume
(``scontrol update nodename=...``), reservations (``scontrol create/update/delete
reservation``), ``srun`` inside a reservation, job signal and requeue.

Parsers are pure functions over the commands' text, tested on output recorded
from the sandbox's Slurm 22.05 (``tests/fixtures/slurm/``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ClusterShell.NodeSet import NodeSet

from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.slurm.runner import Result, SlurmRunner

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


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: frozenset[str]
    start: datetime
    end: datetime
    flags: frozenset[str] = field(default_factory=frozenset)


def parse_sinfo_json(text: str) -> dict[str, NodeInfo]:
    """``sinfo --json`` (data parser v0.0.38 on 22.05) → node name → NodeInfo."""
    data = json.loads(text)
    out = {}
    for n in data.get("nodes", []):
        feats = tuple(f for f in (n.get("active_features") or n.get("features") or "").split(",") if f)
        out[n["name"]] = NodeInfo(
            name=n["name"],
            state=str(n.get("state", "unknown")).lower(),
            flags=frozenset(str(f).upper() for f in n.get("state_flags") or ()),
            gres=n.get("gres") or "",
            features=feats,
            reason=n.get("reason") or "",
        )
    return out


def parse_squeue_json(text: str) -> list[JobInfo]:
    """``squeue --json`` → jobs (time limits in minutes there; here seconds, None = unlimited)."""
    data = json.loads(text)
    out = []
    for j in data.get("jobs", []):
        limit = j.get("time_limit")
        limit_s = None if not isinstance(limit, int) or limit >= 0xFFFFFFFE or limit == 0 else limit * 60
        nodes = j.get("nodes") or ""
        out.append(
            JobInfo(
                job_id=int(j["job_id"]),
                state=str(j.get("job_state", "")).upper(),
                nodes=frozenset(NodeSet(nodes)) if nodes else frozenset(),
                user=j.get("user_name") or str(j.get("user_id", "")),
                name=j.get("name") or "",
                time_limit_s=limit_s,
                start_time=int(j.get("start_time") or 0),
                requeue=bool(j.get("requeue")),
                reservation=j.get("resv_name") or "",
            )
        )
    return out


_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z]*)=")


def parse_one_line(line: str) -> dict[str, str]:
    """``scontrol -o show ...``: ``Key=value`` fields, values may hold spaces (``Reason=``)."""
    keys = list(_KEY.finditer(line))
    out = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def parse_reservations(text: str) -> dict[str, Reservation]:
    """``scontrol -o show reservation`` (``No reservations in the system`` → {})."""
    out = {}
    for line in text.splitlines():
        f = parse_one_line(line)
        if "ReservationName" not in f:
            continue
        nodes = f.get("Nodes", "")
        out[f["ReservationName"]] = Reservation(
            name=f["ReservationName"],
            nodes=frozenset(NodeSet(nodes)) if nodes and nodes != "(null)" else frozenset(),
            start=datetime.fromisoformat(f["StartTime"]),
            end=datetime.fromisoformat(f["EndTime"]),
            flags=frozenset(x for x in f.get("Flags", "").split(",") if x),
        )
    return out


def slurm_time(t: datetime) -> str:
    """A datetime as Slurm's ``StartTime=`` wants it (local time, no zone)."""
    if t.tzinfo is not None:
        t = t.astimezone().replace(tzinfo=None)
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def hostlist(nodes: Iterable[str]) -> str:
    return str(NodeSet.fromlist(sorted(nodes))) if nodes else ""


class SlurmCluster:
    """The controller-side Slurm operations, over an injectable command runner."""

    def __init__(self, runner: SlurmRunner | None = None) -> None:
        self.runner = runner or SlurmRunner()

    def _run(self, argv: Sequence[str], what: str, timeout_s: float | None = None) -> Result:
        return self.runner.run(argv, timeout_s=timeout_s).check(what)

    # -- reading -------------------------------------------------------------------------

    def nodes(self) -> dict[str, NodeInfo]:
        """``sinfo --json``."""
        return parse_sinfo_json(self._run(["sinfo", "--json"], "sinfo --json").stdout)

    def jobs(self) -> list[JobInfo]:
        """``squeue --json`` (all users, all states)."""
        return parse_squeue_json(self._run(["squeue", "--json"], "squeue --json").stdout)

    def reservations(self) -> dict[str, Reservation]:
        """``scontrol -o show reservation``."""
        return parse_reservations(self._run(["scontrol", "-o", "show", "reservation"], "show reservation").stdout)

    def partition_max_time_s(self, partition: str | None) -> int | None:
        """The partition's ``MaxTime`` (the default partition if None); None when UNLIMITED."""
        from slurm_gpupool.core.durations import parse_slurm_time_s

        out = self._run(["scontrol", "-o", "show", "partition"], "show partition").stdout
        for line in out.splitlines():
            f = parse_one_line(line)
            if (partition and f.get("PartitionName") == partition) or (not partition and f.get("Default") == "YES"):
                return parse_slurm_time_s(f.get("MaxTime", "UNLIMITED"))
        raise SlurmUnavailableError(f"partition {partition or '(default)'}", "not found in scontrol show partition")

    def ping(self) -> bool:
        """``scontrol ping`` says the primary controller is UP."""
        try:
            r = self.runner.run(["scontrol", "ping"], timeout_s=10)
        except SlurmUnavailableError:
            return False
        return r.returncode == 0 and "is UP" in r.stdout

    # -- acting --------------------------------------------------------------------------

    def drain(self, nodes: Iterable[str], reason: str) -> None:
        """``scontrol update nodename=... state=drain reason=...``."""
        hl = hostlist(nodes)
        if hl:
            self._run(["scontrol", "update", f"nodename={hl}", "state=drain", f"reason={reason}"], f"drain {hl}")

    def resume(self, nodes: Iterable[str]) -> None:
        """``scontrol update nodename=... state=resume``; a node not drained is left as it is."""
        hl = hostlist(nodes)
        if hl:
            r = self.runner.run(["scontrol", "update", f"nodename={hl}", "state=resume"])
            if r.returncode != 0 and "Invalid node state specified" not in r.stderr:
                r.check(f"resume {hl}")

    def create_reservation(self, name: str, nodes: Iterable[str], start: datetime | None, duration_s: int) -> None:
        """A MAINT reservation for root that ignores running jobs (they finish; new ones wait)."""
        argv = [
            "scontrol",
            "create",
            "reservation",
            f"ReservationName={name}",
            f"StartTime={slurm_time(start) if start else 'now'}",
            f"Duration={max(1, duration_s // 60)}",
            f"Nodes={hostlist(nodes)}",
            "Flags=MAINT,IGNORE_JOBS",
            "Users=root",
        ]
        self._run(argv, f"create reservation {name}")

    def update_reservation(
        self,
        name: str,
        nodes: Iterable[str] | None = None,
        start: datetime | None = None,
        duration_s: int | None = None,
    ) -> None:
        argv = ["scontrol", "update", f"ReservationName={name}"]
        if nodes is not None:
            argv.append(f"Nodes={hostlist(nodes)}")
        if start is not None:
            argv.append(f"StartTime={slurm_time(start)}")
        if duration_s is not None:
            argv.append(f"Duration={max(1, duration_s // 60)}")
        self._run(argv, f"update reservation {name}")

    def delete_reservation(self, name: str) -> None:
        r = self.runner.run(["scontrol", "delete", f"ReservationName={name}"])
        if r.returncode != 0 and "not exist" not in (r.stderr + r.stdout).lower() and "invalid" not in r.stderr.lower():
            r.check(f"delete reservation {name}")

    def srun(self, node: str, reservation: str, argv: Sequence[str], timeout_s: float) -> Result:
        """``srun --reservation=R -w NODE -N1 -n1 ARGV``: run ARGV on the node, as the caller (root)."""
        cmd = [
            "srun",
            f"--reservation={reservation}",
            f"--nodelist={node}",
            "--nodes=1",
            "--ntasks=1",
            "--immediate=60",
            f"--job-name=gpupool-{argv[-1] if argv else 'run'}",
            "--quiet",
            *argv,
        ]
        return self.runner.run(cmd, timeout_s=timeout_s)

    def signal_job(self, job_id: int, signal: str) -> None:
        """``scancel --batch --signal=SIG JOB``: the checkpoint hint before a requeue."""
        self.runner.run(["scancel", "--batch", f"--signal={signal}", str(job_id)])

    def requeue(self, job_id: int) -> Result:
        """``scontrol requeue JOB``."""
        return self.runner.run(["scontrol", "requeue", str(job_id)])
