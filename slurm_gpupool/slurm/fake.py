"""A Slurm made of dictionaries, shipped beside the real backend (as go-nvml ships its mock).

:class:`FakeSlurm` implements :class:`~slurm_gpupool.slurm.protocol.Slurm` from its own
state: nodes with GRES and features, jobs (each may end at a given time), reservations.
What the real commands would do elsewhere is injected: ``srun`` runs a handler (the unit
tests run the real ``gpupool node apply`` in process on simulated GPUs); a node's slurmd
that starts shows what the installed node lines (``nodes_conf``) say, as slurmctld would,
unless it is dead.  Faults: slurmctld down or refusing its files, a dead slurmd, a node
that answers late, and a "kill -9" at a chosen moment (:class:`Killed`); slurmctld or one
slurmd killed with -9 (:meth:`FakeSlurm.crash_controller`, :meth:`FakeSlurm.kill_slurmd`).

**What a slurmctld killed with -9 keeps** (Slurm 22.05.8, measured on the sandbox):
slurmctld writes its state (``node_state``, ``resv_state``, ``job_state`` in
StateSaveLocation) from a thread that saves a change at once if it saved nothing in the
last 5 s (``SAVE_MAX_WAIT``), else 5 s after its last save; a graceful stop (SIGTERM,
``systemctl restart``) saves everything.  Killed with -9, it comes back with the state of
its last save: a reservation made, a node drained or resumed, a reservation deleted or a
job submitted less than 5 s after an earlier save is undone (a drain reappears, a deleted
reservation is back, the job is gone and its running processes killed as orphans); what
is older survives.  The fake saves the same way on its clock (``save_interval_s``; None:
only :meth:`FakeSlurm.save_state` and a graceful restart save, the worst case).  A killed
slurmd leaves its jobs running (slurmstepd) and its node's drain as it was.  An srun is a
job while it runs: one whose end was not saved comes back RUNNING (``Reason=Prolog``) with
no srun behind it, and stays until cancelled; a reservation that holds a job cannot be
deleted ("Requested reservation is in use"), as measured on 22.05.  Saved while it was still
pending (submitted, not yet allocated), it comes back PENDING, again with nothing behind it
(seen on 24.11: ``Reason=Reservation`` once its node had left the reservation).

:class:`FakeClock` is time that moves only when someone waits.  The real-Slurm tests
(``tests/integration/test_repartition_*.py``) prove what this stands in for.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, tzinfo
from pathlib import Path

from ClusterShell.NodeSet import NodeSet

from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.slurm.runner import Result
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation, WillRun, gres_counts

SrunHandler = Callable[[str, Sequence[str]], Result]  # (node, argv) -> what srun printed
SAVE_MAX_WAIT_S = 5.0  # slurmctld's state save thread (src/slurmctld/state_save.c): a change waits at most this


class Killed(BaseException):
    """The process was killed (SIGKILL) at this point: nothing after it runs.  A
    BaseException, so no ``except Exception`` of the code under test stops it."""


class FakeClock:
    """Time that moves only when someone waits (threads share it).  ``limit_s``: waiting past
    that much time since ``start`` is an error (a run that never ends fails its test, not hangs)."""

    def __init__(self, start: float, limit_s: float | None = None) -> None:
        self.t, self._lock = start, threading.Lock()
        self.end = None if limit_s is None else start + limit_s

    def time(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        time.sleep(0)  # let other threads run
        with self._lock:
            self.t += max(seconds, 0.001)
            if self.end is not None and self.t > self.end:
                raise TimeoutError(f"fake clock: past its limit ({self.t - self.end:.0f} s beyond)")

    def now(self, tz: tzinfo | None = None) -> datetime:
        return datetime.fromtimestamp(self.t, tz)


@dataclass
class Node:
    state: str = "idle"
    flags: set[str] = field(default_factory=set)
    gres: str = ""
    features: tuple[str, ...] = ()
    reason: str = ""
    gres_used: str = ""  # sinfo's GresUsed (gpu:1g.5gb:2(IDX:0-1))
    partitions: tuple[str, ...] = ("gpu",)


class FakeSlurm:
    """One controller and its nodes; ``calls`` records every change asked of it."""

    def __init__(
        self, nodes: Iterable[str], clock: FakeClock, srun: SrunHandler | None = None, nodes_conf: Path | None = None
    ) -> None:
        self.clock, self.srun_handler, self.nodes_conf = clock, srun, nodes_conf
        self.nodes_ = {n: Node() for n in nodes}
        self.jobs_: list[JobInfo] = []
        self.ends: dict[int, float] = {}  # job -> when it completes (gone from squeue)
        self.resv: dict[str, Reservation] = {}
        self.ctld_up = True
        self.dead_slurmd: set[str] = set()
        self.late: dict[str, int] = {}  # node -> reads it still shows NOT_RESPONDING after a restart
        self.calls: list[tuple] = []
        # what `sbatch --test-only` answers (None: a refusal saying the fake has no answer)
        self.will_run_reply: WillRun | None = None
        self.kill_at: str | None = None  # "srun": killed while srun runs
        self._lock = threading.RLock()
        # slurmctld's saved state (see the module's docstring): what a kill -9 comes back with
        self.save_interval_s: float | None = SAVE_MAX_WAIT_S
        self.killed_slurmd: set[str] = set()  # killed with -9, not started again (yet)
        self.crashes = 0
        self._next_job = 100_000  # srun's jobs (the tests' own jobs have small ids)
        self._saved: tuple | None = None
        self._last_save = float("-inf")
        self._dirty = False

    # -- slurmctld's state save, and its kill -9 ----------------------------------------------

    def _changed(self) -> None:
        """A change slurmctld keeps in its state files (a drain, a reservation, a job)."""
        self._dirty = True
        self._tick()

    def _tick(self) -> None:
        """What slurmctld's save thread has written by now (see the module's docstring)."""
        if self.save_interval_s is None or not self._dirty:
            return
        if self.clock.time() >= self._last_save + self.save_interval_s:
            self.save_state()

    def save_state(self) -> None:
        """slurmctld writes its state files now (as at a graceful stop)."""
        with self._lock:
            nodes = {n: (v.flags & {"DRAIN"}, v.reason) for n, v in self.nodes_.items()}
            self._saved = (nodes, dict(self.resv), list(self.jobs_), dict(self.ends))
            self._last_save, self._dirty = self.clock.time(), False

    def crash_controller(self, up_again: bool = True) -> None:
        """slurmctld killed with -9 (``up_again``: and started again at once, as systemd or an
        admin would): it comes back with its last saved state.  Drains, reservations and jobs
        changed since are as they were then; each node's slurmd registers again (a node whose
        installed node line differs from the GRES it showed is INVAL until its slurmd restarts)."""
        with self._lock:
            self._tick()
            self.crashes += 1
            self.calls.append(("crash", "slurmctld", self.clock.time()))
            if self._saved is not None:
                nodes, resv, jobs, ends = copy.deepcopy(self._saved)
                for name, (drain, reason) in nodes.items():
                    n = self.nodes_[name]
                    n.flags = (n.flags - {"DRAIN"}) | drain
                    n.reason = reason
                self.resv, self.jobs_, self.ends = resv, jobs, ends
            self._dirty = False
            self.ctld_up = up_again
            if up_again:
                self._registered_again()

    def _registered_again(self) -> None:
        """A new slurmctld reads the installed node lines; running slurmds register again.  A
        slurmd with the old gres.conf makes the node INVAL, and where it has fewer of a GRES
        than the line, drained: "gres/gpu:v100_shared count too low (0 < 4)" (22.05).  Its
        slurmd started again with the new files lifts INVAL; the drain stays."""
        lines = self._node_lines()
        for name, n in self.nodes_.items():
            if n.state == "down" or name in self.killed_slurmd:
                continue
            gres, features = lines.get(name, (n.gres, n.features))
            want, have = gres_counts(gres), gres_counts(n.gres)
            if want != have:  # slurmd has the old gres.conf: INVAL
                n.flags.add("INVALID")
                low = [(k, have.get(k, 0), c) for k, c in sorted(want.items()) if have.get(k, 0) < c]
                if low:
                    key, got, line = low[0]
                    n.flags.add("DRAIN")
                    n.reason = f"gres/{key} count too low ({got} < {line})"
            else:
                n.features = features

    def kill_slurmd(self, node: str) -> None:
        """A node's slurmd killed with -9: its jobs run on (slurmstepd), its drain stays; srun
        cannot start there; slurmctld shows it not responding (after SlurmdTimeout: at once
        here) until a start command (``start-slurmd``, ``systemctl start slurmd``) runs."""
        with self._lock:
            self.killed_slurmd.add(node)
            self.calls.append(("crash", node, self.clock.time()))
            self.nodes_[node].state = "down"
            self.nodes_[node].flags.add("NOT_RESPONDING")

    def _node_lines(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        out: dict[str, tuple[str, tuple[str, ...]]] = {}
        if self.nodes_conf is None:
            return out
        for line in self.nodes_conf.read_text().splitlines():
            if line.startswith("NodeName="):
                fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
                for name in NodeSet(fields["NodeName"]):
                    out[name] = (fields.get("Gres", ""), tuple(fields.get("Features", "").split(",")))
        return out

    # -- what the caller reads (sinfo, squeue, scontrol show) --------------------------------

    def _need_ctld(self, what: str) -> None:
        if not self.ctld_up:
            raise SlurmUnavailableError(what, "Unable to contact slurm controller (connect failure)")

    def nodes(self) -> dict[str, NodeInfo]:
        self._need_ctld("sinfo --json")
        with self._lock:
            self._tick()
            now = datetime.fromtimestamp(self.clock.time())
            out = {}
            for name, n in self.nodes_.items():
                flags = set(n.flags)
                if self.late.get(name, 0) > 0:
                    self.late[name] -= 1
                    flags.add("NOT_RESPONDING")
                if any(name in r.nodes and r.start <= now for r in self.resv.values()):
                    flags.add("MAINTENANCE")
                out[name] = NodeInfo(
                    name,
                    n.state,
                    frozenset(flags),
                    n.gres,
                    n.features,
                    n.reason,
                    gres_used=n.gres_used,
                    partitions=n.partitions,
                )
            return out

    def jobs(self) -> list[JobInfo]:
        self._need_ctld("squeue --json")
        with self._lock:
            now = self.clock.time()
            self.jobs_ = [j for j in self.jobs_ if self.ends.get(j.job_id, float("inf")) > now]
            return list(self.jobs_)

    def add_job(self, job: JobInfo, ends_at: float | None = None) -> None:
        """A job Slurm shows until ``ends_at`` (None: until removed)."""
        with self._lock:
            self.jobs_.append(job)
            if ends_at is not None:
                self.ends[job.job_id] = ends_at
            self._changed()

    def reservations(self) -> dict[str, Reservation]:
        self._need_ctld("show reservation")
        with self._lock:
            self._tick()
            return dict(self.resv)

    def partition_max_time_s(self, partition: str | None) -> int | None:
        return 86400

    def ping(self) -> bool:
        return self.ctld_up

    def will_run(self, argv: Sequence[str]) -> WillRun:
        self._need_ctld("sbatch --test-only")
        self.calls.append(("will_run", tuple(argv)))
        return self.will_run_reply or WillRun(None, refused="the fake Slurm was given no --test-only answer")

    def config(self) -> dict[str, str]:
        return {"MinJobAge": "300 sec"}

    def version(self) -> tuple[int, int, int]:
        return (22, 5, 8)

    def await_forgotten_shard_jobs(
        self, nodes: Iterable[str], progress: Callable[[str], None], poll_s: float = 1.0
    ) -> list[int]:
        return []

    # -- what the caller changes (scontrol update/create/delete, srun, scancel) --------------

    def drain(self, nodes: Iterable[str], reason: str) -> None:
        self._need_ctld("drain")
        nodes = sorted(nodes)
        with self._lock:
            for n in nodes:
                self.nodes_[n].flags.add("DRAIN")
                self.nodes_[n].reason = reason
            self.calls.append(("drain", tuple(nodes)))
            self._changed()

    def resume(self, nodes: Iterable[str]) -> None:
        self._need_ctld("resume")
        nodes = sorted(nodes)
        with self._lock:
            for n in nodes:
                self.nodes_[n].flags.discard("DRAIN")
                self.nodes_[n].reason = ""
            self.calls.append(("resume", tuple(nodes)))
            self._changed()

    def create_reservation(self, name: str, nodes: Iterable[str], start: datetime | None, duration_s: int) -> None:
        self._need_ctld("create reservation")
        nodes = frozenset(nodes)
        if not nodes:  # scontrol: "CoreCnt, Nodes, NodeCnt, BurstBuffer, Licenses or Watts must be specified"
            raise SlurmUnavailableError(f"create reservation {name}", "Nodes must be specified")
        begin = start or datetime.fromtimestamp(self.clock.time())
        with self._lock:
            self.resv[name] = Reservation(
                name, nodes, begin, begin + timedelta(seconds=duration_s), frozenset({"MAINT"})
            )
            self.calls.append(("reserve", name, tuple(sorted(nodes)), start is not None))
            self._changed()

    def update_reservation(
        self,
        name: str,
        nodes: Iterable[str] | None = None,
        start: datetime | None = None,
        duration_s: int | None = None,
    ) -> None:
        self._need_ctld("update reservation")
        with self._lock:
            if name not in self.resv:  # scontrol: "Reservation not found" (as the real one says)
                raise SlurmUnavailableError(f"update reservation {name}", "Requested reservation is invalid")
            r = self.resv[name]
            r = replace(r, nodes=frozenset(nodes) if nodes is not None else r.nodes, start=start or r.start)
            if duration_s is not None:
                r = replace(r, end=r.start + timedelta(seconds=duration_s))
            self.resv[name] = r
            self.calls.append(("update", name, tuple(sorted(r.nodes)), self.clock.time()))
            self._changed()

    def delete_reservation(self, name: str) -> None:
        self._need_ctld("delete reservation")
        with self._lock:
            if any(j.reservation == name and not j.finished for j in self.jobs()):
                raise SlurmUnavailableError(f"delete reservation {name}", "Requested reservation is in use")
            self.resv.pop(name, None)
            self.calls.append(("delete", name, self.clock.time()))
            self._changed()

    def srun(self, node: str, reservation: str, argv: Sequence[str], timeout_s: float, job_name: str) -> Result:
        """The injected handler runs the command "on" the node (exit 1 without one).  As real
        srun, it starts nothing without the reservation, on a drained node (22.05: even inside
        a MAINT reservation) or where slurmd does not answer, and says why (exit 1)."""
        self._need_ctld("srun")
        if self.kill_at == "srun":
            raise Killed
        with self._lock:
            info = self.nodes_[node]
            refused = (
                "Requested reservation is invalid"
                if reservation not in self.resv
                else "Required node not available (down, drained or reserved)"
                if info.flags & {"DRAIN", "NOT_RESPONDING", "INVALID"} or info.state == "down"
                else ""
            )
        if refused:
            r = Result(tuple(argv), 1, "", f"srun: error: Unable to allocate resources: {refused}\n")
        elif self.srun_handler is None:
            r = Result(tuple(argv), 1, "", "srun: no handler in this fake")
        else:
            with self._lock:
                self._next_job += 1
                job = JobInfo(
                    job_id=self._next_job,
                    state="PENDING",
                    nodes=frozenset({node}),
                    user="root",
                    name=job_name,
                    time_limit_s=None,
                    start_time=int(self.clock.time()),
                    requeue=False,
                    reservation=reservation,
                    state_reason="None",
                )
            self.add_job(job)  # submitted: pending until slurmctld allocates it
            with self._lock:
                self.jobs_ = [replace(j, state="RUNNING", state_reason="") if j is job else j for j in self.jobs_]
                self._changed()
            try:
                r = self.srun_handler(node, argv)
            finally:
                self._forget(job.job_id)  # its end: saved like any change
        self.calls.append(("srun", node, r.returncode, r.stderr[-300:]))
        return r

    def cancel_job(self, job_id: int) -> None:
        """``scancel JOB``: gone from squeue (at once here)."""
        self._need_ctld("scancel")
        self.calls.append(("cancel", job_id))
        self._forget(job_id)

    def _forget(self, job_id: int) -> None:
        with self._lock:
            self.jobs_ = [j for j in self.jobs_ if j.job_id != job_id]
            self._changed()

    def signal_job(self, job_id: int, signal: str) -> None:
        self.calls.append(("signal", job_id, signal))

    def requeue(self, job_id: int) -> Result:
        self.calls.append(("requeue", job_id))
        return Result(("scontrol",), 0, "", "")

    def release(self, job_id: int, priority: int | None = None) -> Result:
        self.calls.append(("release", job_id, priority))
        with self._lock:
            self.jobs_ = [
                replace(j, priority=priority or 1, state_reason="None") if j.job_id == job_id else j for j in self.jobs_
            ]
        return Result(("scontrol",), 0, "", "")

    # -- the daemons (what the site's restart commands do) ------------------------------------

    def stop_slurmds(self, nodes: Iterable[str]) -> None:
        """Their slurmd stopped: slurmctld shows them down, not responding (jobs run on)."""
        with self._lock:
            for name in nodes:
                n = self.nodes_[name]
                n.state = "down"
                n.flags.add("NOT_RESPONDING")

    def restart_controller(self, ok: bool = True) -> None:
        """slurmctld restarted (a graceful stop saves its state first); ``ok=False``: it
        refused its files and stays down.  A slurmctld down after a kill -9 comes back with
        what it had saved."""
        with self._lock:
            if self.ctld_up:
                self.save_state()
            self.ctld_up = ok

    def register_from_files(self, nodes: Iterable[str]) -> None:
        """Their slurmd started: each shows what its installed node line says (a dead one: down)."""
        if self.nodes_conf is None:
            raise ValueError("this FakeSlurm was made without nodes_conf")
        wanted = set(nodes)
        with self._lock:
            for line in self.nodes_conf.read_text().splitlines():
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
                    self.killed_slurmd.discard(name)
                    n.state = "idle"
                    n.flags -= {"NOT_RESPONDING", "INVALID"}
                    n.gres = fields.get("Gres", "")
                    n.features = tuple(fields.get("Features", "").split(","))
