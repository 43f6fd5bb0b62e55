"""The repartitioner's journal and lock, in ``paths.controller_dir``.

``journal.json`` is the current (or last) run: its target, its reservation, the
cluster-wide steps done, and every node's step, since when and why.  It is
rewritten atomically before each action (the intent) and after it (the result),
so a run killed at any point is picked up by the next one: every action is
idempotent, and the journal says which of Slurm's states (drains, reservation,
installed files not yet restarted) are ours to finish or undo.  ``journal.log``
keeps one JSON line per step for the audit trail.

``SLURM_GPUPOOL_KILL_AT=<step>`` makes the process SIGKILL itself right after
recording that step: the fault injection the convergence tests use.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import syslog
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slurm_gpupool.errors import BusyError, StateError
from slurm_gpupool.util.atomic import write_json_atomic
from slurm_gpupool.util.oplog import log as syslog_line

SCHEMA = 1
KILL_ENV = "SLURM_GPUPOOL_KILL_AT"

# Node steps, in order; the last four are outcomes.
WAITING = "waiting"  # in the reservation, its jobs still running
APPLYING = "applying"  # node apply running through srun
APPLIED = "applied"  # GPUs in the target layout, state copied to the controller
DRAINED = "drained"  # drained for the restart
VERIFYING = "verifying"
DONE = "done"
FAILED = "failed"  # left drained, with the reason
SKIPPED = "skipped"  # busy past the deadline (or down): tried again next run
ROLLED_BACK = "rolled_back"  # back in its previous layout, resumed
NODE_STEPS = (WAITING, APPLYING, APPLIED, DRAINED, VERIFYING, DONE, FAILED, SKIPPED, ROLLED_BACK)
OUTCOMES = (DONE, FAILED, SKIPPED, ROLLED_BACK)

# who asked for a run: `repartition --to` (by hand), the schedule, a pin, the elastic step
TRIGGER_BY_HAND = "by hand"
TRIGGER_SCHEDULED = "scheduled"
TRIGGER_PINNED = "pinned"
TRIGGER_ELASTIC = "elastic"

# Cluster steps of a run, in order.
RESERVED = "reserved"
GRES_INSTALLING = "gres_installing"
GRES_INSTALLED = "gres_installed"
RESTARTING = "restarting"
RESTARTED = "restarted"
FINISHED = "finished"
OTHERS_RESTARTING = "others_restarting"  # slurmd on the nodes that did not switch (new slurm.conf)
OTHERS_RESTARTED = "others_restarted"
CLUSTER_STEPS = (
    RESERVED,
    GRES_INSTALLING,
    GRES_INSTALLED,
    RESTARTING,
    RESTARTED,
    OTHERS_RESTARTING,
    OTHERS_RESTARTED,
    FINISHED,
)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class Journal:
    """One run's record; ``record``/``step`` persist before returning."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.path = directory / "journal.json"
        self.log_path = directory / "journal.log"
        self.data: dict[str, Any] = {"schema": SCHEMA, "run": None, "nodes": {}}
        self._lock = threading.RLock()  # nodes are switched by parallel threads

    def load(self) -> Journal:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return self
        except (OSError, ValueError) as e:
            raise StateError(f"journal {self.path}", f"unreadable: {e}", hint="move it aside to start over") from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise StateError(f"journal {self.path}", f"unknown schema (expected {SCHEMA})")
        self.data = data
        return self

    # -- the run -----------------------------------------------------------------------

    @property
    def run(self) -> dict[str, Any] | None:
        return self.data.get("run")

    def unfinished(self) -> dict[str, Any] | None:
        r = self.run
        return r if r and FINISHED not in r.get("steps", []) else None

    def start(
        self,
        target: str,
        nodes: list[str],
        reservation: str,
        deadline_epoch: float,
        previous: dict[str, str | None],
        stale_reservations: list[str] | None = None,
        trigger: str = TRIGGER_BY_HAND,
    ) -> None:
        """``trigger``: who asked for the switch (by hand, scheduled, pinned, elastic), which
        ``gpupool status`` gives as the reason a node is in a layout the schedule does not have due."""
        self.data["run"] = {
            "id": time.strftime("%Y%m%dT%H%M%S"),
            "target": target,
            "trigger": trigger,
            "nodes": sorted(nodes),
            "reservation": reservation,
            "started_at": now_iso(),
            "started_epoch": time.time(),
            "deadline_epoch": deadline_epoch,
            "pid": os.getpid(),
            "steps": [],
            "restart_nodes": [],
            "stale_reservations": list(stale_reservations or []),
        }
        for n in nodes:
            prev = self.data["nodes"].get(n, {})
            midway = prev.get("step") not in (None, *OUTCOMES)
            self.data["nodes"][n] = {
                "target": target,
                # a node an earlier run left midway keeps the layout it had before that run
                "previous": prev.get("previous") if midway else previous.get(n),
                "layout": previous.get(n),
                "step": WAITING,
                "since": now_iso(),
                "since_epoch": time.time(),
                "reason": "",
                "drained_by_us": bool(prev.get("drained_by_us")) and midway,
                "trigger": trigger,
            }
        # "previous" lets the reports know each node's layout before its first switch
        self._save(
            event={
                "run": "start",
                "target": target,
                "trigger": trigger,
                "nodes": sorted(nodes),
                "previous": dict(previous),
            }
        )

    def resume_run(self, extra_nodes: list[str], previous: dict[str, str | None]) -> None:
        """Continue an unfinished run, possibly with more nodes."""
        run = self.data["run"]
        run["pid"] = os.getpid()
        for n in extra_nodes:
            if n not in run["nodes"]:
                run["nodes"].append(n)
                self.data["nodes"][n] = {
                    "target": run["target"],
                    "previous": previous.get(n),
                    "layout": previous.get(n),
                    "step": WAITING,
                    "since": now_iso(),
                    "since_epoch": time.time(),
                    "reason": "",
                    "drained_by_us": False,
                }
        run["nodes"].sort()
        self._save(event={"run": "resume", "target": run["target"]})

    def cluster_step(self, step: str, **extra: Any) -> None:
        run = self.data["run"]
        if step not in run["steps"]:
            run["steps"].append(step)
        run.update(extra)
        self._save(event={"cluster": step, **extra})
        self._maybe_die(step)

    def next_wave(self) -> None:
        """A wave is committed: the next one installs, restarts and verifies again."""
        run = self.data["run"]
        run["wave"] = run.get("wave", 1) + 1
        self.clear_steps(GRES_INSTALLING, GRES_INSTALLED, RESTARTING, RESTARTED)

    def has(self, step: str) -> bool:
        return bool(self.run) and step in self.data["run"]["steps"]

    def clear_steps(self, *steps: str) -> None:
        run = self.data["run"]
        run["steps"] = [s for s in run["steps"] if s not in steps]
        self._save(event={"cluster": "clear", "steps": list(steps)})

    # -- nodes -------------------------------------------------------------------------

    def node(self, name: str) -> dict[str, Any]:
        return self.data["nodes"][name]

    def step(self, name: str, step: str, reason: str = "", **extra: Any) -> None:
        """Record a node's step (and reason); persisted before returning."""
        assert step in NODE_STEPS, step
        with self._lock:
            n = self.data["nodes"][name]
            n.update(step=step, since=now_iso(), since_epoch=time.time(), reason=reason, **extra)
            self._save(event={"node": name, "step": step, "reason": reason, **extra})
        self._maybe_die(step)

    def nodes_at(self, *steps: str) -> list[str]:
        run = self.data["run"] or {"nodes": []}
        return [n for n in run["nodes"] if self.data["nodes"][n]["step"] in steps]

    # -- persistence -------------------------------------------------------------------

    def _save(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.path, self.data)
            line = json.dumps({"at": now_iso(), **event}, sort_keys=True)
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "a") as f:
                f.write(line + "\n")
        failed = event.get("step") == FAILED
        syslog_line(
            "repartition",
            "journal: " + json.dumps(event, sort_keys=True),
            syslog.LOG_WARNING if failed else syslog.LOG_INFO,
        )

    @staticmethod
    def _maybe_die(step: str) -> None:
        kill_point(step)


def kill_point(step: str) -> None:
    """Fault injection for the convergence tests: SIGKILL ourselves when ``$SLURM_GPUPOOL_KILL_AT``
    names this point (a journaled step, or ``restart:K``/``others:K``: after the K-th restart command)."""
    if os.environ.get(KILL_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def run_lock(directory: Path) -> Iterator[None]:
    """Two repartition runs never overlap (exit 75 with the holder's pid)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "repartition.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise BusyError(f"repartition lock {path}", f"another run (pid {holder}) holds it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)
