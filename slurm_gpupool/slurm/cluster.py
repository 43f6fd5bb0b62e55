"""What the repartitioner asks of and does to Slurm, from the controller.

Reads: nodes (``sinfo --json``), jobs (``squeue --json``), reservations
(``scontrol -o show reservation``), a partition's ``MaxTime``
(``scontrol -o show partition``) and ``scontrol ping``.  Acts: drain and resume
(``scontrol update nodename=...``), reservations (``scontrol create/update/delete
reservation``), ``srun`` inside a reservation, job signal and requeue.

Parsers are pure functions over the commands' text, tested on output recorded
from the sandbox on each supported release (``tests/fixtures/slurm/<series>/``);
what differs between data parser versions is read in :mod:`.json_output`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ClusterShell.NodeSet import NodeSet

from slurm_gpupool.core.hostlist import slurm_hostlist
from slurm_gpupool.core.node_gres import gres_by_type
from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.slurm import json_output as jo
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
    gres_used: str = ""  # gpu:1g.5gb:2(IDX:0-1),shard:v100_shared:1(IDX:0) (22.05), shard:a30:3(3/4,0/4) (24.11+)
    tres_used: str = ""  # cpu=2,gres/shard=3 (22.05 only: later sinfo --json has no TRES)

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
class Reservation:
    name: str
    nodes: frozenset[str]
    start: datetime
    end: datetime
    flags: frozenset[str] = field(default_factory=frozenset)


def _node_info(name: str, n: dict, group: dict | None = None) -> NodeInfo:
    """One node from a v0.0.38 ``nodes`` entry, or a name of a v0.0.4x ``sinfo`` group."""
    if group is None:
        base, flags = jo.state(n.get("state"), n.get("state_flags"))
        features = jo.text_list(n.get("active_features") or n.get("features"))
        gres, reason = jo.text(n.get("gres"), "total"), jo.text(n.get("reason"))
        used, tres_used = jo.text(n.get("gres_used")), jo.text(n.get("tres_used"))
    else:  # (sinfo --json groups nodes by GRES used too: every node of a group has the group's)
        base, flags = jo.state((group.get("node") or {}).get("state"))
        feats = group.get("features") or {}
        features = jo.text_list(feats.get("active") or feats.get("total"))
        gres, reason = jo.text(group.get("gres"), "total"), jo.text(group.get("reason"))
        used, tres_used = jo.text(group.get("gres"), "used"), ""
    return NodeInfo(
        name=name,
        state=base,
        flags=flags,
        gres=gres,
        features=features,
        reason=reason,
        gres_used=used,
        tres_used=tres_used,
    )


def parse_sinfo_json(text: str) -> dict[str, NodeInfo]:
    """``sinfo --json`` (or ``scontrol --json show nodes``) → node name → NodeInfo.

    v0.0.38 (22.05) lists ``nodes``; v0.0.40 and later list ``sinfo`` groups, a
    node once per partition it is in.  No node at all is an error: a cluster
    without nodes is a misread, and would make the repartitioner switch nothing.
    """
    doc = jo.load(text, "sinfo --json")
    out: dict[str, NodeInfo] = {}
    if isinstance(doc.get("sinfo"), list):
        for group in doc["sinfo"]:
            for name in ((group.get("nodes") or {}).get("nodes")) or []:
                out.setdefault(name, _node_info(name, {}, group))
    elif isinstance(doc.get("nodes"), list):
        for n in doc["nodes"]:
            if isinstance(n, dict) and n.get("name"):
                out[n["name"]] = _node_info(n["name"], n)
    if not out:
        raise jo.unknown_layout(doc, "sinfo --json", "node")
    return out


def parse_squeue_json(text: str) -> list[JobInfo]:
    """``squeue --json`` → jobs (time limits in minutes there; here seconds, None = unlimited)."""
    doc = jo.load(text, "squeue --json")
    if not isinstance(doc.get("jobs"), list):
        raise jo.unknown_layout(doc, "squeue --json", '"jobs" list')
    out = []
    for j in doc["jobs"]:
        limit = None if jo.is_infinite(j.get("time_limit")) else jo.number(j.get("time_limit"))
        base, _flags = jo.state(j.get("job_state"))
        nodes = j.get("nodes") or ""
        out.append(
            JobInfo(
                job_id=int(j["job_id"]),
                state=base.upper(),
                nodes=frozenset(NodeSet(nodes)) if nodes else frozenset(),
                user=j.get("user_name") or str(j.get("user_id", "")),
                name=j.get("name") or "",
                time_limit_s=limit * 60 if limit else None,
                start_time=jo.number(j.get("start_time")) or 0,
                requeue=bool(j.get("requeue")),
                reservation=j.get("resv_name") or "",
                gres=jo.text(j.get("tres_per_node")),
                priority=jo.number(j.get("priority")),
                state_reason=jo.text(j.get("state_reason")),
                node_count=jo.number(j.get("node_count")) or 1,
                tres_per_job=jo.text(j.get("tres_per_job")),
                qos=jo.text(j.get("qos")),
                submit_time=jo.number(j.get("submit_time")) or 0,
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
    """For ``Nodes=`` and ``-w``: see :func:`~slurm_gpupool.core.hostlist.slurm_hostlist`."""
    return slurm_hostlist(nodes)


READ_ATTEMPTS = 3
# what Slurm's clients print when a connection to slurmctld failed midway (not a refusal)
TRANSIENT = ("Connection reset by peer", "Socket timed out", "Resource temporarily unavailable")


class SlurmCluster:
    """The controller-side Slurm operations, over an injectable command runner."""

    def __init__(self, runner: SlurmRunner | None = None) -> None:
        self.runner = runner or SlurmRunner()

    def _run(self, argv: Sequence[str], what: str, timeout_s: float | None = None) -> Result:
        return self.runner.run(argv, timeout_s=timeout_s).check(what)

    def _read(self, argv: Sequence[str], what: str) -> Result:
        """A query (sinfo, squeue, scontrol show), asked again when slurmctld dropped the
        connection: a busy slurmctld (24.11 right after a restart) resets one now and then,
        and one lost answer must not fail a node's switch."""
        r = self.runner.run(argv)
        for attempt in range(1, READ_ATTEMPTS):
            if r.returncode == 0 or not any(t in r.stderr for t in TRANSIENT):
                break
            time.sleep(attempt)
            r = self.runner.run(argv)
        return r.check(what)

    # -- reading -------------------------------------------------------------------------

    def nodes(self) -> dict[str, NodeInfo]:
        """``sinfo --json``."""
        return parse_sinfo_json(self._read(["sinfo", "--json"], "sinfo --json").stdout)

    def jobs(self) -> list[JobInfo]:
        """``squeue --json --states=all``: every user's jobs, the finished ones slurmctld still
        remembers included (22.05 lists them anyway, 24.11 only with ``--states=all``)."""
        return parse_squeue_json(self._read(["squeue", "--json", "--states=all"], "squeue --json").stdout)

    def reservations(self) -> dict[str, Reservation]:
        """``scontrol -o show reservation``."""
        return parse_reservations(self._read(["scontrol", "-o", "show", "reservation"], "show reservation").stdout)

    def partition_max_time_s(self, partition: str | None) -> int | None:
        """The partition's ``MaxTime`` (the default partition if None); None when UNLIMITED."""
        from slurm_gpupool.core.durations import parse_slurm_time_s

        out = self._read(["scontrol", "-o", "show", "partition"], "show partition").stdout
        for line in out.splitlines():
            f = parse_one_line(line)
            if (partition and f.get("PartitionName") == partition) or (not partition and f.get("Default") == "YES"):
                return parse_slurm_time_s(f.get("MaxTime", "UNLIMITED"))
        raise SlurmUnavailableError(f"partition {partition or '(default)'}", "not found in scontrol show partition")

    def config(self) -> dict[str, str]:
        """``scontrol show config`` as key → value (``MinJobAge`` → ``300 sec``)."""
        out = self._run(["scontrol", "show", "config"], "show config").stdout
        pairs = (line.partition("=") for line in out.splitlines())
        return {k.strip(): v.strip() for k, sep, v in pairs if sep and k.strip() and " " not in k.strip()}

    def version(self) -> tuple[int, int, int]:
        from slurm_gpupool.slurm.runner import slurm_version

        return slurm_version(self.runner)

    def await_forgotten_shard_jobs(
        self, nodes: Iterable[str], progress: Callable[[str], None], poll_s: float = 1.0
    ) -> list[int]:
        """Before a slurmctld restart with new GRES for ``nodes``: on releases where it is
        unsafe (:func:`~slurm_gpupool.slurm.runner.restart_crashes_on_finished_shard_jobs`),
        wait until slurmctld has forgotten the finished shard jobs of those nodes.

        It forgets a job MinJobAge after the job ended (300 s by default); the wait is
        bounded by that plus two minutes.  Returns the jobs still remembered then (the
        caller restarts anyway, with a warning)."""
        from slurm_gpupool.slurm.runner import restart_crashes_on_finished_shard_jobs

        changing = set(nodes)
        if not changing or not restart_crashes_on_finished_shard_jobs(self.version()):
            return []

        def remembered() -> list[int]:
            return [j.job_id for j in self.jobs() if j.finished and j.uses_shards and j.nodes & changing]

        found = remembered()
        if not found:
            return []
        age = self.config().get("MinJobAge", "300").split()[0]
        limit_s = (int(age) if age.isdigit() else 300) + 120
        progress(
            f"waiting up to {limit_s} s until slurmctld forgets finished shard job(s) "
            f"{', '.join(map(str, found))} (MinJobAge): restarting it before then crashes this Slurm release"
        )
        deadline = time.monotonic() + limit_s
        while found and time.monotonic() < deadline:
            time.sleep(poll_s)
            found = remembered()
        if found:
            progress(f"warning: slurmctld still remembers shard job(s) {', '.join(map(str, found))}; restarting")
        return found

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

    def release(self, job_id: int, priority: int | None = None) -> Result:
        """``scontrol release JOB`` (and ``update jobid=JOB priority=P`` if given)."""
        r = self.runner.run(["scontrol", "release", str(job_id)])
        if r.returncode == 0 and priority:
            r = self.runner.run(["scontrol", "update", f"jobid={job_id}", f"priority={priority}"])
        return r
