"""Restarting Slurm's daemons with the site's commands (``repartition.restart_*``).

Slurm 22.05 takes a node's new GRES counts only when its slurmd is down while
slurmctld restarts, then starts (measured in the sandbox: a running slurmd that
re-registers with a restarted slurmctld leaves the node INVAL with its old GRES).
So: stop the changed nodes' slurmd (batches), restart slurmctld once, start the
slurmds (batches).  systemd and ClusterShell's ``clush`` by default; the sandbox
puts its own commands in its config.  Argument lists only, never a shell;
``{nodes}`` becomes a folded hostlist, one command per batch of ``restart_batch``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from slurm_gpupool.config.model import RepartitionSettings
from slurm_gpupool.core.policy.switch_plan import batches
from slurm_gpupool.repartition.journal import kill_point
from slurm_gpupool.slurm.types import hostlist
from slurm_gpupool.util.clock import SYSTEM, Clock


@dataclass
class CommandResult:
    argv: list[str]
    returncode: int
    output: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def why(self) -> str:
        last = [line for line in self.output.strip().splitlines() if line.strip()]
        return last[-1] if last else f"{self.argv[0]} exited {self.returncode}"


def run_command(argv: Sequence[str], timeout_s: float, clock: Clock = SYSTEM) -> CommandResult:
    """A restart command in a session of its own: whatever kills the repartitioner (a
    killed cron job's process group, Ctrl-C) does not stop a restart halfway."""
    t0 = clock.time()
    try:
        p = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
            start_new_session=True,
        )
        out, rc = (p.stdout + p.stderr), p.returncode
    except FileNotFoundError:
        out, rc = f"{argv[0]}: command not found", 127
    except subprocess.TimeoutExpired:
        out, rc = f"timed out after {timeout_s:.0f} s", 124
    return CommandResult(list(argv), rc, out, clock.time() - t0)


@dataclass
class Restarter:
    """Stop slurmds (batches), restart slurmctld once, start slurmds (batches); stops at the first failure.

    ``kill`` is called after each command (``restart:K``, ``others:K``): the fault injection
    of the convergence tests (:func:`~slurm_gpupool.repartition.journal.kill_point`)."""

    settings: RepartitionSettings
    run: Callable[[Sequence[str], float], CommandResult] = run_command
    done: list[CommandResult] = field(default_factory=list)
    kill: Callable[[str], None] = kill_point

    def commands(self, nodes: Sequence[str], controller: bool = True) -> list[list[str]]:
        groups = [hostlist(g) for g in batches(sorted(nodes), self.settings.restart_batch)]

        def each(template: Sequence[str]) -> list[list[str]]:
            return [[a.replace("{nodes}", hl) for a in template] for hl in groups]

        ctld = [list(self.settings.restart_slurmctld)] if controller else []
        return [*each(self.settings.stop_slurmd), *ctld, *each(self.settings.start_slurmd)]

    def slurmd_commands(self, nodes: Sequence[str]) -> list[list[str]]:
        """Without slurmctld nothing orders the batches: each is stopped and started at once,
        so only ``restart_batch`` slurmds are ever down together."""
        out = []
        for hl in (hostlist(g) for g in batches(sorted(nodes), self.settings.restart_batch)):
            for template in (self.settings.stop_slurmd, self.settings.start_slurmd):
                out.append([a.replace("{nodes}", hl) for a in template])
        return out

    def restart_slurmds(self, nodes: Sequence[str]) -> CommandResult | None:
        """Restart slurmd only, batch by batch; a batch's start runs even when its stop failed
        (a stop that failed on one node may have stopped the others).  The first failure is
        returned (None: all succeeded)."""
        failed = None
        for k, argv in enumerate(self.slurmd_commands(nodes)):
            r = self.run(argv, float(self.settings.command_timeout_s))
            self.done.append(r)
            failed = failed or (None if r.ok else r)
            self.kill(f"others:{k}")
        return failed

    def restart(self, nodes: Sequence[str], controller: bool = True) -> CommandResult | None:
        """Run every command; the first that fails is returned (None: all succeeded)."""
        for k, argv in enumerate(self.commands(nodes, controller)):
            r = self.run(argv, float(self.settings.command_timeout_s))
            self.done.append(r)
            if not r.ok:
                return r
            self.kill(f"{'restart' if controller else 'others'}:{k}")
        return None
