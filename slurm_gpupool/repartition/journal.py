"""The repartitioner's journal and lock, in ``paths.controller_dir``.

``journal.json`` is the current (or last) run: its target, its reservation, the
cluster-wide steps done, and every node's step, since when and why.  It is
rewritten atomically before each action (the intent) and after it (the result),
so a run killed at any point is picked up by the next one: every action is
idempotent, and the journal says which of Slurm's states (drains, reservation,
installed files not yet restarted) are ours to finish or undo.  ``journal.log``
keeps one JSON line per step for the audit trail.

Besides steps, a node record carries notes of this process's waits (when its jobs got the
checkpoint signal, when Slurm first showed it switched, when it was released): written
with :meth:`Journal.note`, they count only for the process that took the run
(``taken_epoch``); a process that resumes a killed run starts those waits over.

``SLURM_GPUPOOL_KILL_AT=<step>`` makes the process SIGKILL itself right after
recording that step: the fault injection the convergence tests use (the unit tests
inject a hook that raises instead: ``Journal(kill=...)``).  ``SLURM_GPUPOOL_FAULT_AT=<step>[,<step>...]``
(or ``*``: every point) with ``SLURM_GPUPOOL_FAULT_CMD=<JSON argv>`` runs that command there
instead (once per point; no shell; the point in ``$SLURM_GPUPOOL_FAULT_POINT``) and goes on:
how the real-Slurm tests kill slurmctld or a slurmd at chosen steps, or at every one in a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import syslog
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from slurm_gpupool.errors import BusyError, StateError
from slurm_gpupool.repartition import rules as _steps
from slurm_gpupool.util.atomic import write_json_atomic
from slurm_gpupool.util.clock import SYSTEM, Clock, iso_local
from slurm_gpupool.util.oplog import log as syslog_line

SCHEMA = 1
KILL_ENV = "SLURM_GPUPOOL_KILL_AT"
FAULT_AT_ENV = "SLURM_GPUPOOL_FAULT_AT"
FAULT_CMD_ENV = "SLURM_GPUPOOL_FAULT_CMD"
FAULT_POINT_ENV = "SLURM_GPUPOOL_FAULT_POINT"
_faulted: list[str] = []  # the fault command runs once per point per process

# The steps, named once in rules.py (which reads them purely); here for the journal's readers.
WAITING = _steps.WAITING
APPLYING = _steps.APPLYING
APPLIED = _steps.APPLIED
DRAINED = _steps.DRAINED
VERIFYING = _steps.VERIFYING
DONE = _steps.DONE
FAILED = _steps.FAILED
SKIPPED = _steps.SKIPPED
ROLLED_BACK = _steps.ROLLED_BACK
NODE_STEPS = _steps.NODE_STEPS
OUTCOMES = _steps.OUTCOMES
RESERVED = _steps.RESERVED
GRES_INSTALLING = _steps.GRES_INSTALLING
GRES_INSTALLED = _steps.GRES_INSTALLED
RESTARTING = _steps.RESTARTING
RESTARTED = _steps.RESTARTED
FINISHED = _steps.FINISHED
OTHERS_RESTARTING = _steps.OTHERS_RESTARTING
OTHERS_RESTARTED = _steps.OTHERS_RESTARTED
CLUSTER_STEPS = _steps.CLUSTER_STEPS

# who asked for a run: `repartition --to` (by hand), the schedule, a pin, the elastic step
TRIGGER_BY_HAND = "by hand"
TRIGGER_SCHEDULED = "scheduled"
TRIGGER_PINNED = "pinned"
TRIGGER_ELASTIC = "elastic"


def now_iso(clock: Clock = SYSTEM) -> str:
    return iso_local(clock.time())


# the notes of a wait that count only for the process that wrote them (``next_action._fresh``)
WAIT_NOTES = (
    "apply_failed_at",
    "gpus_busy_at",
    "not_started_at",
    "requeued_at",
    "resumed_at",
    "seen_switched_at",
    "signalled_at",
)


def _is_record(rec: object) -> bool:
    return isinstance(rec, dict) and isinstance(rec.get("step"), str)


def _malformed(data: dict[str, Any]) -> str:
    """What a journal of the right schema lacks that the repartitioner reads without asking
    (a hand edit, another tool's file): said plainly instead of a KeyError (exit 70); "" if
    nothing."""
    nodes, run = data.get("nodes"), data.get("run")
    if not isinstance(nodes, dict) or not all(_is_record(r) for r in nodes.values()):
        return "`nodes` must map each node to a record with its `step`"
    if run is None:
        return ""
    if not isinstance(run, dict):
        return "`run` must be a mapping"
    for key, kind in (("target", str), ("reservation", str), ("nodes", list), ("steps", list)):
        if not isinstance(run.get(key), kind):
            return f"the run's `{key}` is missing or not a {kind.__name__}"
    lost = [n for n in run["nodes"] if n not in nodes]
    return f"no record of the run's node {lost[0]}" if lost else ""


class Journal:
    """One run's record; ``step``/``cluster_step``/``note`` persist before returning.

    ``kill`` is called with each step's name right after it is saved (and ``restart:K``
    by the restarter): :func:`kill_point` by default."""

    def __init__(self, directory: Path, clock: Clock = SYSTEM, kill: Callable[[str], None] | None = None) -> None:
        self.dir = directory
        self.path = directory / "journal.json"
        self.log_path = directory / "journal.log"
        self.data: dict[str, Any] = {"schema": SCHEMA, "run": None, "nodes": {}}
        self.clock = clock
        self.kill = kill or kill_point
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
        wrong = _malformed(data)
        if wrong:
            raise StateError(f"journal {self.path}", f"malformed: {wrong}", hint="move it aside to start over")
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
        now = self.clock.time()
        self.data["run"] = {
            "id": self.clock.now().strftime("%Y%m%dT%H%M%S"),
            "target": target,
            "trigger": trigger,
            "nodes": sorted(nodes),
            "reservation": reservation,
            "started_at": iso_local(now),
            "started_epoch": now,
            "taken_epoch": now,  # when this process took the run (its waits count from then)
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
                "since": iso_local(now),
                "since_epoch": now,
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

    def resume_run(self, extra_nodes: list[str], previous: dict[str, str | None], deadline_epoch: float) -> None:
        """Continue an unfinished run, possibly with more nodes, with a new deadline."""
        run = self.data["run"]
        now = self.clock.time()
        run.update(pid=os.getpid(), taken_epoch=now, deadline_epoch=deadline_epoch)
        for n in extra_nodes:
            if n not in run["nodes"]:
                run["nodes"].append(n)
                self.data["nodes"][n] = {
                    "target": run["target"],
                    "previous": previous.get(n),
                    "layout": previous.get(n),
                    "step": WAITING,
                    "since": iso_local(now),
                    "since_epoch": now,
                    "reason": "",
                    "drained_by_us": False,
                }
        run["nodes"].sort()
        self._save(event={"run": "resume", "target": run["target"]})

    def retake(self) -> None:
        """The clock went back past when this process took the run (an NTP step): take it
        again now.  Its notes are counted only from ``taken_epoch`` on (``next_action``'s
        ``_fresh``), so every note it wrote after the step looked older than the run, never
        counted, and was written again at once: a loop with no wait, a journal write each."""
        now, before = self.clock.time(), float(self.data["run"].get("taken_epoch", 0.0))
        for rec in self.data["nodes"].values():  # an earlier process's notes stay stale, as they were
            for key in WAIT_NOTES:
                if isinstance(rec.get(key), (int, float)) and rec[key] < before:
                    del rec[key]
        self.data["run"]["taken_epoch"] = now
        self._save(event={"run": "retaken", "target": self.data["run"]["target"], "clock_back": True})

    def cluster_step(self, step: str, **extra: Any) -> None:
        """A step of the run as a whole, logged with its wave (``repartition.wave_size``: the
        install, restart and verify steps come again in each wave)."""
        run = self.data["run"]
        if step not in run["steps"]:
            run["steps"].append(step)
        run.update(extra)
        self._save(event={"cluster": step, "wave": run.get("wave", 1), **extra})
        self.kill(step)

    def note_run(self, **extra: Any) -> None:
        """Record facts of the run that are not a step (e.g. why Slurm refused a restart)."""
        self.data["run"].update(extra)
        self._save(event={"cluster": "note", **extra})

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
            now = self.clock.time()
            n.update(step=step, since=iso_local(now), since_epoch=now, reason=reason, **extra)
            self._save(event={"node": name, "step": step, "reason": reason, **extra})
        self.kill(step)

    def note(self, name: str, **extra: Any) -> None:
        """A note on a node that is not a step (its waits: see the module's docstring)."""
        with self._lock:
            self.data["nodes"][name].update(extra)
            self._save(event={"node": name, "note": extra})

    def nodes_at(self, *steps: str) -> list[str]:
        run = self.data["run"] or {"nodes": []}
        return [n for n in run["nodes"] if self.data["nodes"][n]["step"] in steps]

    # -- persistence -------------------------------------------------------------------

    def _save(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.path, self.data)
            # ``at`` in whole seconds for people, ``epoch`` to the millisecond for timing a
            # phase (a wave's verify takes a few seconds)
            now = self.clock.time()
            line = json.dumps({"at": iso_local(now), "epoch": round(now, 3), **event}, sort_keys=True)
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "a") as f:
                f.write(line + "\n")
        failed = event.get("step") == FAILED
        syslog_line(
            "repartition",
            "journal: " + json.dumps(event, sort_keys=True),
            syslog.LOG_WARNING if failed else syslog.LOG_INFO,
        )


def kill_point(step: str) -> None:
    """Fault injection for the convergence tests: SIGKILL ourselves when ``$SLURM_GPUPOOL_KILL_AT``
    names this point (a journaled step, or ``restart:K``/``others:K``: after the K-th restart command);
    run ``$SLURM_GPUPOOL_FAULT_CMD`` (a JSON argv, e.g. one that kills slurmctld with -9) the first
    time a point ``$SLURM_GPUPOOL_FAULT_AT`` names is passed, and go on."""
    if os.environ.get(KILL_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
    if fault_due(os.environ.get(FAULT_AT_ENV, ""), step, _faulted):
        _faulted.append(step)
        argv = json.loads(os.environ.get(FAULT_CMD_ENV, "[]"))
        if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
            env = {**os.environ, FAULT_POINT_ENV: step}
            subprocess.run(argv, check=False, timeout=600, stdin=subprocess.DEVNULL, capture_output=True, env=env)


def fault_due(spec: str, step: str, done: list[str]) -> bool:
    """Whether ``$SLURM_GPUPOOL_FAULT_AT`` (``spec``: points, comma-separated, or ``*``) names
    ``step`` and its fault has not run yet (``done``): each point's fault runs once, at its
    first passage (a node step is passed once per switching node)."""
    named = {p.strip() for p in spec.split(",") if p.strip()}
    return (step in named or "*" in named) and step not in done


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
