"""Which daemons make the sandbox, in start order, and the command line of each.

Every one runs in the foreground mode of its program, so the pid we record is the
daemon itself: ``munged --foreground``, ``mariadbd --defaults-file``, ``slurmdbd -D``,
``slurmctld -D`` and one ``slurmd -D -N NODE`` per emulated node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from slurm_gpupool.sandbox import mariadb
from slurm_gpupool.sandbox.paths import SandboxPaths
from slurm_gpupool.sandbox.plan import Ports
from slurm_gpupool.sandbox.tools import program

# pid file name → the names its process may have in /proc/<pid>/comm
DAEMON_NAMES: dict[str, tuple[str, ...]] = {
    "munged": ("munged",),
    "mysqld": ("mariadbd", "mysqld"),
    "slurmdbd": ("slurmdbd",),
    "slurmctld": ("slurmctld",),
    "slurmd": ("slurmd",),
}
DAEMON_COMMS = ("munged", "mariadbd", "mysqld", "slurmctld", "slurmscriptd", "slurmd", "slurmdbd", "slurmstepd")


@dataclass(frozen=True)
class DaemonSpec:
    name: str  # pid file name: munged, mysqld, slurmdbd, slurmctld, slurmd-<node>
    comm: str  # /proc/<pid>/comm
    argv: list[str]
    logs: tuple[Path, ...]  # shown when it fails to come up
    configs: tuple[Path, ...] = ()  # a change in one of these needs a restart
    node: str | None = None
    port: int | None = None  # the TCP port it listens on (checked free before a start)


def _logs(p: SandboxPaths, name: str) -> tuple[Path, Path]:
    """A daemon's own log and its captured stdout/stderr: what a failed start shows."""
    return (p.log / f"{name}.log", p.out_log(name))


def daemon_specs(
    p: SandboxPaths, ports: Ports, nodes: Iterable[str], addresses: Mapping[str, tuple[str, int]]
) -> list[DaemonSpec]:
    """Every daemon of the sandbox, in start order; ``addresses`` gives each node's slurmd port."""
    conf = (p.slurm_conf, p.nodes_conf, p.gres_conf, p.gres_types_conf)
    specs = [
        DaemonSpec(
            "munged",
            "munged",
            [
                program("munged"),
                "--foreground",
                f"--socket={p.munge_socket}",
                f"--key-file={p.munge_key}",
                f"--pid-file={p.munge_dir / 'munged.pid'}",
                f"--seed-file={p.munge_dir / 'munged.seed'}",
                f"--log-file={p.log / 'munged.log'}",
            ],
            (p.out_log("munged"),),
        ),
        DaemonSpec(
            "mysqld",
            Path(program("mariadbd", "mysqld")).name,
            mariadb.server_argv(p.my_cnf, mariadb.run_as_user()),
            _logs(p, "mysqld"),
            (p.my_cnf,),
            port=ports.mysql,
        ),
        DaemonSpec(
            "slurmdbd",
            "slurmdbd",
            [program("slurmdbd"), "-D"],
            _logs(p, "slurmdbd"),
            (p.slurmdbd_conf,),
            port=ports.slurmdbd,
        ),
        DaemonSpec(
            "slurmctld",
            "slurmctld",
            [program("slurmctld"), "-D", "-f", str(p.slurm_conf)],
            _logs(p, "slurmctld"),
            conf,
            port=ports.slurmctld,
        ),
    ]
    for node in nodes:
        specs.append(
            DaemonSpec(
                f"slurmd-{node}",
                "slurmd",
                [program("slurmd"), "-D", "-N", node, "-f", str(p.slurm_conf)],
                _logs(p, f"slurmd-{node}"),
                conf,
                node,
                addresses[node][1],
            )
        )
    return specs
