"""A Slurm made of dictionaries, for the repartitioner's rules (tests/unit/test_switch_rules.py).

It answers what the repartitioner asks (``sinfo``, ``squeue``, reservations, ``srun``)
from its own state: nodes with GRES and features, jobs, reservations.  ``srun`` runs the
real ``gpupool node apply`` in this process on simulated GPUs, and a restart makes each
restarted node show what the installed ``nodes.conf`` says, as slurmctld would, unless
its slurmd is dead.  Faults: slurmctld down, a dead slurmd, a node that answers late,
and a "kill -9" at a chosen moment (:class:`Killed`, which the executor does not catch).
The real-Slurm tests (tests/integration/test_repartition_*.py) prove what this stands in for.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import NodeSet

from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.repartition.restarts import CommandResult
from slurm_gpupool.slurm.runner import Result
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation

_SRUN = threading.Lock()


class Killed(BaseException):
    """The repartitioner killed (SIGKILL) at this point: nothing after it runs."""


class FakeClock:
    """Time that moves only when someone waits (threads share it)."""

    def __init__(self, start: float) -> None:
        self.now, self._lock = start, threading.Lock()

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        time.sleep(0.001)  # let the other threads run: waits in parallel do not add up
        with self._lock:
            self.now += max(seconds, 0.001)


@dataclass
class Node:
    state: str = "idle"
    flags: set[str] = field(default_factory=set)
    gres: str = ""
    features: tuple[str, ...] = ()
    reason: str = ""


class FakeSlurm:
    def __init__(self, cfg: Any, config_path: Path, sim_dir: Path, clock: FakeClock) -> None:
        self.cfg, self.config_path, self.sim_dir, self.clock = cfg, config_path, sim_dir, clock
        self.nodes_ = {n: Node() for n in cfg.all_nodes()}
        self.jobs_: list[JobInfo] = []
        self.resv: dict[str, Reservation] = {}
        self.ctld_up = True
        self.dead_slurmd: set[str] = set()
        self.late: dict[str, int] = {}  # node -> reads it still shows NOT_RESPONDING after a restart
        self.calls: list[tuple] = []
        self.kill_at: str | None = None  # "srun" / "restart" / "install"
        self._lock = threading.RLock()

    # -- what the repartitioner reads --------------------------------------------------

    def _need_ctld(self, what: str) -> None:
        if not self.ctld_up:
            raise SlurmUnavailableError(what, "Unable to contact slurm controller (connect failure)")

    def nodes(self) -> dict[str, NodeInfo]:
        self._need_ctld("sinfo --json")
        with self._lock:
            out = {}
            for name, n in self.nodes_.items():
                flags = set(n.flags)
                if self.late.get(name, 0) > 0:
                    self.late[name] -= 1
                    flags.add("NOT_RESPONDING")
                now = datetime.fromtimestamp(self.clock.time())
                if any(name in r.nodes and r.start <= now for r in self.resv.values()):
                    flags.add("MAINTENANCE")
                out[name] = NodeInfo(name, n.state, frozenset(flags), n.gres, n.features, n.reason)
            return out

    def jobs(self) -> list[JobInfo]:
        self._need_ctld("squeue --json")
        return list(self.jobs_)

    def reservations(self) -> dict[str, Reservation]:
        self._need_ctld("show reservation")
        return dict(self.resv)

    def partition_max_time_s(self, partition: str | None) -> int | None:
        return 86400

    def ping(self) -> bool:
        return self.ctld_up

    def config(self) -> dict[str, str]:
        return {"MinJobAge": "300 sec"}

    def version(self) -> tuple[int, int, int]:
        return (22, 5, 8)

    def await_forgotten_shard_jobs(self, nodes: Any, progress: Any, poll_s: float = 1.0) -> list[int]:
        return []

    # -- what it does ------------------------------------------------------------------

    def drain(self, nodes: Any, reason: str) -> None:
        self._need_ctld("drain")
        with self._lock:
            for n in nodes:
                self.nodes_[n].flags.add("DRAIN")
                self.nodes_[n].reason = reason
            self.calls.append(("drain", tuple(sorted(nodes))))

    def resume(self, nodes: Any) -> None:
        self._need_ctld("resume")
        with self._lock:
            for n in nodes:
                self.nodes_[n].flags.discard("DRAIN")
                self.nodes_[n].reason = ""
            self.calls.append(("resume", tuple(sorted(nodes))))

    def create_reservation(self, name: str, nodes: Any, start: datetime | None, duration_s: int) -> None:
        self._need_ctld("create reservation")
        if not nodes:  # scontrol: "CoreCnt, Nodes, NodeCnt, BurstBuffer, Licenses or Watts must be specified"
            raise SlurmUnavailableError(f"create reservation {name}", "Nodes must be specified")
        begin = start or datetime.fromtimestamp(self.clock.time())
        self.resv[name] = Reservation(name, frozenset(nodes), begin, begin + timedelta(seconds=duration_s), {"MAINT"})
        self.calls.append(("reserve", name, tuple(sorted(nodes)), start is not None))

    def update_reservation(self, name: str, nodes: Any = None, start: Any = None, duration_s: Any = None) -> None:
        self._need_ctld("update reservation")
        r = self.resv[name]
        r = replace(r, nodes=frozenset(nodes) if nodes is not None else r.nodes, start=start or r.start)
        if duration_s is not None:
            r = replace(r, end=r.start + timedelta(seconds=duration_s))
        self.resv[name] = r
        self.calls.append(("update", name, tuple(sorted(r.nodes)), self.clock.time()))

    def delete_reservation(self, name: str) -> None:
        self._need_ctld("delete reservation")
        self.resv.pop(name, None)
        self.calls.append(("delete", name, self.clock.time()))

    def srun(self, node: str, reservation: str, argv: Any, timeout_s: float) -> Result:
        """``gpupool node apply LAYOUT --json`` on the node: the real command, in-process."""
        self._need_ctld("srun")
        if self.kill_at == "srun":
            raise Killed
        from slurm_gpupool.cli.main import main

        out, err = io.StringIO(), io.StringIO()
        # one at a time: each real srun is a process of its own; here NVML's state is shared
        with _SRUN, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--node", node, "--sim-dir", str(self.sim_dir), "--config", str(self.config_path), *argv[-4:]])
        self.calls.append(("srun", node, code, err.getvalue()[-300:]))
        return Result(tuple(argv), code, out.getvalue(), err.getvalue())

    def signal_job(self, job_id: int, signal: str) -> None:
        self.calls.append(("signal", job_id, signal))

    def requeue(self, job_id: int) -> Result:
        self.calls.append(("requeue", job_id))
        return Result(("scontrol",), 0, "", "")

    def release(self, job_id: int, priority: int | None = None) -> Result:
        self.calls.append(("release", job_id, priority))
        self.jobs_ = [
            replace(j, priority=priority or 1, state_reason="None") if j.job_id == job_id else j for j in self.jobs_
        ]
        return Result(("scontrol",), 0, "", "")

    # -- what a restart does -----------------------------------------------------------

    def register_from_files(self, nodes: Any) -> None:
        """Restarted nodes show what the installed node lines say (a dead slurmd: down)."""
        lines = self.cfg.slurm.path("nodes_include").read_text().splitlines()
        wanted = set(nodes)
        with self._lock:
            for line in lines:
                if not line.startswith("NodeName="):
                    continue
                fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
                for name in NodeSet(fields["NodeName"]):
                    if name not in wanted:
                        continue
                    n = self.nodes_[name]
                    if name in self.dead_slurmd:
                        n.state, n.flags = "down", n.flags | {"NOT_RESPONDING"}
                        continue
                    n.state = "idle"
                    n.flags.discard("NOT_RESPONDING")
                    n.gres = fields.get("Gres", "")
                    n.features = tuple(fields.get("Features", "").split(","))


class FakeRestarter:
    """The site's restart commands: slurmctld comes back (unless broken) and re-registers nodes."""

    def __init__(self, slurm: FakeSlurm) -> None:
        self.slurm, self.broken, self.restarts = slurm, False, []
        self.slurmd_only: list[list[str]] = []  # restarts without slurmctld (the unswitched nodes)

    def commands(self, nodes: Any, controller: bool = True) -> list[list[str]]:
        return [["restart", *sorted(nodes)]]

    def slurmd_commands(self, nodes: Any) -> list[list[str]]:
        return [["restart-slurmd", *sorted(nodes)]]

    def restart_slurmds(self, nodes: Any) -> CommandResult | None:
        return self._slurmds(sorted(nodes))

    def restart(self, nodes: Any, controller: bool = True) -> CommandResult | None:
        self.restarts.append(sorted(nodes))
        if self.slurm.kill_at == "restart":
            self.slurm.ctld_up = False  # killed halfway: slurmctld stopped, not started again
            raise Killed
        if self.broken:
            self.slurm.ctld_up = False
            return CommandResult(["systemctl", "restart", "slurmctld"], 1, "slurmctld: fatal: bad config", 0.1)
        self.slurm.ctld_up = True
        self.slurm.register_from_files(nodes)
        return None

    def _slurmds(self, nodes: list[str]) -> CommandResult | None:
        self.slurmd_only.append(nodes)
        if self.slurm.kill_at == "others":  # killed between the stop and the start
            for n in nodes:
                self.slurm.nodes_[n].state = "down"
                self.slurm.nodes_[n].flags.add("NOT_RESPONDING")
            raise Killed
        self.slurm.register_from_files(nodes)
        return None
