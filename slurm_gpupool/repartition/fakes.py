"""The site's restart commands, acting on a :class:`~slurm_gpupool.slurm.fake.FakeSlurm`.

:class:`FakeRestarter` is the real :class:`~slurm_gpupool.repartition.restarts.Restarter`
(its batches, its order, its kill points ``restart:K`` and ``others:K``) with commands
that act on the fake instead of systemd: ``stop-slurmd NODES`` stops their slurmd (down,
their jobs run on), ``restart-slurmctld`` restarts slurmctld, which stays down when it
refuses its files (``refuses()``), and ``start-slurmd NODES`` starts them (each shows what
its installed node line says).  The unit tests' stand-in for ``gpupool sandbox stop|
restart|start``; ``log`` keeps every command run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ClusterShell.NodeSet import NodeSet

from slurm_gpupool.config.model import RepartitionSettings
from slurm_gpupool.repartition.restarts import CommandResult, Restarter
from slurm_gpupool.slurm.fake import FakeSlurm, Killed


class FakeRestarter(Restarter):
    def __init__(
        self,
        slurm: FakeSlurm,
        settings: RepartitionSettings | None = None,
        kill: Callable[[str], None] | None = None,
    ) -> None:
        commands = replace(
            settings or RepartitionSettings(),
            stop_slurmd=("stop-slurmd", "{nodes}"),
            restart_slurmctld=("restart-slurmctld",),
            start_slurmd=("start-slurmd", "{nodes}"),
        )
        super().__init__(commands, run=self._command, kill=kill or (lambda point: None))
        self.slurm = slurm
        self.refuses: Callable[[], bool] = lambda: False  # slurmctld refuses the installed files
        self.killed_in_ctld_restart = False  # "kill -9" halfway through it: slurmctld stays down
        self.log: list[list[str]] = []

    def _command(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        self.log.append(list(argv))
        verb, nodes = argv[0], list(NodeSet(argv[1])) if len(argv) > 1 else []
        if verb == "stop-slurmd":
            self.slurm.stop_slurmds(nodes)
        elif verb == "start-slurmd":
            self.slurm.register_from_files(nodes)
        elif verb == "restart-slurmctld":
            if self.killed_in_ctld_restart:
                self.slurm.restart_controller(ok=False)
                raise Killed
            if self.refuses():
                self.slurm.restart_controller(ok=False)
                return CommandResult(list(argv), 1, "slurmctld: fatal: Parse error in nodes.conf", 0.1)
            self.slurm.restart_controller()
        return CommandResult(list(argv), 0, "", 0.01)

    def restarted(self, verb: str) -> list[list[str]]:
        """The nodes of each ``stop-slurmd`` or ``start-slurmd`` command run, in order."""
        return [list(NodeSet(a[1])) for a in self.log if a[0] == verb]
