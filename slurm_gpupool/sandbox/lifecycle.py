"""Start, stop and keep up the sandbox's daemons, by the pid files under ``<root>/run``.

What ``systemctl start|stop|restart`` does on a real cluster: start a daemon that
does not run (its port checked free first), restart one whose files changed or
that runs but does not answer, and wait until it answers before the next one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.sandbox import procs
from slurm_gpupool.sandbox.daemons import DaemonSpec
from slurm_gpupool.sandbox.paths import SandboxPaths

# how long ``up`` asks a running daemon again before it restarts it as hung: a busy one (a
# slurmctld on a loaded machine missing its 5 s ``scontrol ping``) answers late, a hung one never
ANSWER_GRACE_S = 30.0


def answers_within(
    healthy: Callable[[], bool],
    grace_s: float,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> bool:
    """``healthy()`` asked again, a second apart, until it says yes or ``grace_s`` has passed
    (the worst case for a hung daemon: the grace plus one probe's own timeout)."""
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    deadline = clock() + grace_s
    while not healthy():
        if clock() >= deadline:
            return False
        sleep(1.0)
    return True


@dataclass
class UpReport:
    root: str
    started: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    installed_packages: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "started": self.started,
            "restarted": self.restarted,
            "running": self.running,
            "stopped": self.stopped,
            "installed_packages": self.installed_packages,
            "seconds": round(self.seconds, 2),
        }


class DaemonControl:
    """The daemons of one root: ``env`` gives each spawned daemon its environment."""

    def __init__(self, paths: SandboxPaths, env: Callable[[], dict[str, str]], progress: Callable[[str], None]):
        self.paths = paths
        self._env = env
        self._progress = progress
        self.started_at: dict[str, float] = {}  # node → wall time its slurmd was started

    def pid_of(self, spec: DaemonSpec) -> int | None:
        return procs.running_pid(self.paths.pidfile(spec.name), self.paths.root, spec.comm)

    def start(self, spec: DaemonSpec) -> int:
        self._progress(f"starting {spec.name}")
        if spec.port is not None and procs.tcp_open("127.0.0.1", spec.port):
            raise SlurmUnavailableError(
                f"{spec.name} of the sandbox",
                f"port {spec.port} is already taken by another program (another sandbox, or a system service?)",
                hint="stop it, or move this sandbox: gpupool sandbox down; gpupool sandbox up --port-base N",
            )
        cwd = self.paths.log
        return procs.spawn(spec.argv, self.paths.out_log(spec.name), self.paths.pidfile(spec.name), self._env(), cwd)

    def stop(self, spec: DaemonSpec, timeout_s: float = 20) -> bool:
        """TERM, wait, KILL (by pid, never by name); True if it was running."""
        pid = self.pid_of(spec)
        stopped = False
        if pid is not None:
            self._progress(f"stopping {spec.name} (pid {pid})")
            stopped = procs.stop(pid, timeout_s)
        with contextlib.suppress(FileNotFoundError):
            self.paths.pidfile(spec.name).unlink()
        return stopped

    def stop_many(self, specs: Iterable[DaemonSpec], timeout_s: float = 20) -> list[str]:
        """Stop these daemons together (TERM all, one wait, KILL the rest); the names that ran."""
        running = {spec.name: pid for spec in specs if (pid := self.pid_of(spec)) is not None}
        if running:
            self._progress(f"stopping {len(running)} daemons: {', '.join(running)}")
        stopped = procs.stop_many(running.values(), timeout_s)
        for name in running:
            with contextlib.suppress(FileNotFoundError):
                self.paths.pidfile(name).unlink()
        return [name for name, pid in running.items() if pid in stopped]

    def ensure(
        self,
        spec: DaemonSpec,
        changed: set[Path],
        stopped: set[str],
        report: UpReport,
        ready: Callable[[], bool],
        timeout_s: float,
        healthy: Callable[[], bool] | None = None,
    ) -> bool:
        """Start ``spec`` if it is not running (restart it if its config changed, or if it
        runs but ``healthy`` says it does not answer: a crashed slurmdbd left "already up");
        True if (re)started."""
        pid = self.pid_of(spec)
        if pid is not None and not (changed & set(spec.configs)):
            if healthy is None or answers_within(healthy, ANSWER_GRACE_S):
                report.running.append(spec.name)
                return False
            self._progress(f"{spec.name} (pid {pid}) runs but does not answer: restarting it")
        if pid is not None:
            self.stop(spec)
            stopped.add(spec.name)
        (report.restarted if spec.name in stopped else report.started).append(spec.name)
        pid = self.start(spec)
        procs.wait_until(ready, what=f"{spec.name} of the sandbox", timeout_s=timeout_s, pid=pid, logs=spec.logs)
        return True

    def start_slurmds(self, specs: list[DaemonSpec], report: UpReport, stopped: set[str]) -> dict[str, int]:
        """Start the slurmds that are not running; node → pid of those started."""
        started: dict[str, int] = {}
        for spec in specs:
            if self.pid_of(spec) is not None:
                report.running.append(spec.name)
                continue
            (report.restarted if spec.name in stopped else report.started).append(spec.name)
            self.started_at[spec.node or spec.name] = time.time()
            started[spec.node or spec.name] = self.start(spec)
        return started

    def stop_foreign_slurmds(self, nodes: Iterable[str], report: UpReport) -> None:
        """Stop the slurmds of nodes no longer in ``nodes`` (their pid files remain from an older up)."""
        wanted = {f"slurmd-{n}" for n in nodes}
        for pidfile in sorted(self.paths.run.glob("slurmd-*.pid")):
            name = pidfile.stem
            if name in wanted:
                continue
            pid = procs.running_pid(pidfile, self.paths.root, "slurmd")
            if pid is not None:
                self._progress(f"stopping {name} (no longer a node of the sandbox)")
                procs.stop(pid)
                report.stopped.append(name)
            pidfile.unlink(missing_ok=True)
