"""A real Slurm cluster on one machine: emulated GPU nodes with simulated GPUs.

Everything lives under one root (default ``/var/tmp/slurm-gpupool-sandbox``, its layout
in :mod:`.paths`): a private munged, a private MariaDB, slurmdbd, slurmctld and one
``slurmd -N NODE`` per emulated node, each node with its own ``NodeAddr=127.0.0.x`` and
``Port=``, its simulated GPUs and its device files.  ``up`` converges to that state and
is idempotent; ``down`` stops exactly the processes ``up`` started, by pid.

This module is the facade the CLI, the tests and the benchmarks use: it says in which
order the steps run, and each step is done by a module of its own: :mod:`.record` and
:mod:`.state` (what the sandbox is; sandbox.json), :mod:`.nodes` (simulated GPU nodes),
:mod:`.configs` (the daemons' files), :mod:`.daemons` and :mod:`.lifecycle` (start, stop,
restart), :mod:`.health` (does it answer), :mod:`.accounting` (``sacctmgr``),
:mod:`.status` and :mod:`.teardown` (``down``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from slurm_gpupool.errors import SlurmUnavailableError, UsageError
from slurm_gpupool.sandbox import health, mariadb, nodes, procs, scale, teardown, users
from slurm_gpupool.sandbox.accounting import Accounting
from slurm_gpupool.sandbox.daemons import DaemonSpec
from slurm_gpupool.sandbox.lifecycle import DaemonControl, UpReport
from slurm_gpupool.sandbox.paths import DEFAULT_ROOT, SandboxPaths, locked, make_dirs, write_if_changed
from slurm_gpupool.sandbox.plan import NodePlan, Ports, env_lines
from slurm_gpupool.sandbox.poolconfig import sandbox_config
from slurm_gpupool.sandbox.record import SandboxRecord
from slurm_gpupool.sandbox.state import default_config_path
from slurm_gpupool.sandbox.status import status_report
from slurm_gpupool.sandbox.tools import PACKAGES, install_packages, missing_packages
from slurm_gpupool.sandbox.users import USERS, SandboxUser
from slurm_gpupool.slurm.cluster import SlurmCluster
from slurm_gpupool.slurm.runner import SlurmRunner


class Sandbox(SandboxRecord):
    """The sandbox cluster under one root: up, restart, status, down (arguments: see
    :class:`~slurm_gpupool.sandbox.record.SandboxRecord`)."""

    users: tuple[SandboxUser, ...] = USERS
    """The unprivileged users ``up`` makes, each in its account; submit as one with
    :func:`~slurm_gpupool.sandbox.users.as_user` (``runuser -u NAME -- sbatch ...``)."""

    @functools.cached_property
    def _daemons(self) -> DaemonControl:
        return DaemonControl(self.paths, self.daemon_env, self._progress)

    # ------------------------------------------------------------ helpers

    def pid_of(self, spec: DaemonSpec) -> int | None:
        return self._daemons.pid_of(spec)

    def daemon_pid(self, name: str) -> int | None:
        """The running daemon ``name``'s pid (``slurmctld``, ``slurmd-a100n1``), None if it
        is not running: from its pid file, the process checked in ``/proc``."""
        return self.pid_of(self._spec(name))

    def node_states(self) -> dict[str, dict[str, str]]:
        """``sinfo``'s node → {state, gres, reason}; empty if slurmctld is down."""
        return health.node_states(self.slurm)

    def slurmd_start_times(self) -> dict[str, float]:
        """Node → ``SlurmdStartTime`` (epoch seconds) from ``scontrol -o show node``."""
        return health.slurmd_start_times(self.slurm)

    def _require_root(self, what: str) -> None:
        if os.geteuid() != 0:
            raise UsageError(
                f"sandbox {what}",
                "needs root (mknod of device files, SlurmUser=root, daemons)",
                hint="run it with sudo",
            )

    # ------------------------------------------------------------ files

    def _prepare_nodes(self, plans: list[NodePlan]) -> None:
        """Simulated GPU state, device files and mig-minors of each node."""
        nodes.prepare_nodes(self.paths, plans)

    def initial_layout(self, cfg: Any) -> str:
        return nodes.initial_layout(cfg, self._requested_layout)

    def _slurm_version(self) -> tuple[int, int, int]:
        """The Slurm the sandbox runs (``slurmd -V``); 22.05 where no Slurm answers."""
        from slurm_gpupool.sandbox import configs

        return configs.sandbox_slurm_version(self.daemon_env())

    def _write_configs(self, plans: list[NodePlan]) -> set[Path]:
        """The sandbox's pool config, the nodes' GPUs and GRES, and the daemons' files.

        Nodes whose simulated GPUs are new get the initial layout applied; then
        gres.conf and the slurm.conf includes come from `gpupool gres install`
        (live node state), exactly as on a real cluster.  Returns changed files.
        Imported here: rendering loads the GRES installer, the support files and the
        submit catalog, which ``stop``, ``start`` and ``status`` (run hundreds of times a
        test run, by the repartitioner's restarts) never use.
        """
        from slurm_gpupool.sandbox import configs

        p = self.paths
        changed: set[Path] = set()
        derived = sandbox_config(self.source_config(), self.root, self.node_addresses())
        if configs.write_pool_config(p, derived, self.state["config"]):
            changed.add(p.pool_config)
        cfg = self.pool_config()
        nodes.apply_initial_layout(p, cfg, plans, self.initial_layout(cfg), self._progress)
        changed |= configs.install_gres(cfg)
        version = self._slurm_version()
        return changed | configs.write_daemon_configs(
            p, self.state["cluster"], self.ports, self.state["db_password"], version
        )

    def write_scale_config(self, n_nodes: int) -> Path:
        """``<root>/scale-pool.yaml``: the pool of ``n_nodes`` DGX/HGX-like nodes that
        ``up --nodes N`` plays (:mod:`.scale`); its path."""
        path = self.root / scale.SCALE_CONFIG_NAME
        with locked(self.paths):
            write_if_changed(path, scale.scale_config_text(n_nodes))
        return path

    # ------------------------------------------------------------ up

    def up(self, install: bool = True) -> UpReport:
        """Bring the whole cluster up, or repair it; a fast no-op if it is already up."""
        self._require_root("up")
        if any(c.isspace() or c in "#'\"=," for c in str(self.root)):
            raise UsageError(f"sandbox root {str(self.root)!r}", "Slurm config files cannot hold this path")
        t0 = time.monotonic()
        report = UpReport(str(self.root))
        with locked(self.paths):
            if install:
                missing = missing_packages()
                if missing:
                    self._progress(f"installing {' '.join(missing)} (apt-get)")
                    install_packages(missing)
                    report.installed_packages = missing
            self._decide_state()
            self._converge(report, stopped=set())
        report.seconds = time.monotonic() - t0
        return report

    def _converge(self, report: UpReport, stopped: set[str], files: bool = True) -> None:
        """Files first, then each daemon in dependency order; start what is not running.

        ``stopped`` names daemons the caller just stopped (they count as restarted).
        A daemon whose configuration changed is restarted; slurmds before slurmctld
        sees the new files, so no slurmd with old GRES meets a slurmctld with new ones.
        The order is a real cluster's: munged, MariaDB (``mariadb-install-db`` once),
        slurmdbd, the unprivileged users (:mod:`.users`) and the accounting records
        (``sacctmgr``), slurmctld (``scontrol ping``),
        the slurmds, then until ``sinfo`` shows every node registered.
        """
        make_dirs(self.paths)
        plans = self._plans()
        self._prepare_nodes(plans)
        changed = self._write_configs(plans) if files else set()
        ctl = self._daemons
        ctl.stop_foreign_slurmds(self.node_map, report)
        p = self.paths
        specs = {d.name: d for d in self.daemons()}
        ctl.ensure(specs["munged"], changed, stopped, report, lambda: procs.unix_open(p.munge_socket), 10)
        if not mariadb.is_initialized(p.mysql_data):
            self._progress("initializing MariaDB")
            mariadb.initialize(p.my_cnf, p.mysql_data, mariadb.run_as_user(), p.out_log("mysqld"))
        db_started = ctl.ensure(specs["mysqld"], changed, stopped, report, lambda: procs.unix_open(p.mysql_socket), 60)
        if db_started or not p.accounting_marker.exists():
            mariadb.bootstrap(p.mysql_socket, self.state["db_password"])
        dbd_port = self.ports.slurmdbd
        dbd_ready = lambda: procs.tcp_open("127.0.0.1", dbd_port)  # noqa: E731
        dbd_answers = lambda: health.dbd_answers(self.slurm)  # noqa: E731
        ctl.ensure(specs["slurmdbd"], changed, stopped, report, dbd_ready, 60, healthy=dbd_answers)
        users.ensure_system_users()
        Accounting(self.slurm, p.log / "slurmdbd.log", self._progress).register(
            self.state["cluster"], p.accounting_marker
        )
        node_specs = [specs[f"slurmd-{n.name}"] for n in plans]
        if changed & {p.slurm_conf, p.nodes_conf, p.gres_conf, p.gres_types_conf}:
            stopped |= set(ctl.stop_many(node_specs))
        ctld_ready = lambda: health.ctld_ready(self.slurm)  # noqa: E731
        ctld = ctl.ensure(specs["slurmctld"], changed, stopped, report, ctld_ready, 60, healthy=ctld_ready)
        started = ctl.start_slurmds(node_specs, report, stopped)
        if ctld or started:
            health.wait_nodes_registered(
                self.slurm,
                [n.name for n in plans],
                started,
                ctl.started_at,
                lambda node: self._spec(f"slurmd-{node}"),
                p.log,
                self._progress,
            )

    # ------------------------------------------------------------ restart

    def restart(self, controller: bool = False, nodes: Iterable[str] | None = None, files: bool = True) -> UpReport:
        """Restart slurmctld and/or the given slurmds (both if neither is given).

        Slurm 22.05 applies changed GRES counts only when slurmctld and the
        node's slurmd restart (``scontrol reconfigure`` is refused), so this is
        what a gres.conf/nodes.conf installer calls.  It stops the named
        daemons, then converges like ``up``: slurm.conf is re-rendered (so
        ``AccountingStorageTRES`` follows the GPU types of gres.conf) and
        anything else that is not running is started too.
        """
        self._require_root("restart")
        t0 = time.monotonic()
        report = UpReport(str(self.root))
        node_list = list(nodes) if nodes is not None else []
        if not controller and not node_list:
            controller, node_list = True, list(self.node_map)
        self._known_nodes(node_list, "restart")
        if not self.exists():
            raise UsageError(f"sandbox at {self.root}", "not set up", hint="gpupool sandbox up")
        if controller and node_list and self.pid_of(self._spec("slurmctld")) is not None:
            self._before_controller_restart(node_list)
        with locked(self.paths):
            stopped = set(self._daemons.stop_many(self._spec(f"slurmd-{n}") for n in node_list))
            if controller and self._daemons.stop(self._spec("slurmctld")):
                stopped.add("slurmctld")
            self._converge(report, stopped=stopped, files=files)
        report.seconds = time.monotonic() - t0
        return report

    def _before_controller_restart(self, nodes: list[str]) -> None:
        """What the repartitioner does before it restarts slurmctld with new GRES: on Slurm
        24.11, wait until it has forgotten the nodes' finished shard jobs (or it crashes)."""

        with contextlib.suppress(SlurmUnavailableError):
            SlurmCluster(SlurmRunner(env=self.daemon_env())).await_forgotten_shard_jobs(nodes, self._progress)

    def stop_nodes(self, nodes: Iterable[str]) -> list[str]:
        """Stop these nodes' slurmd (``systemctl stop slurmd`` on a real node); returns those stopped."""
        self._require_root("stop")
        node_list = self._known_nodes(list(nodes), "stop")
        with locked(self.paths):
            stopped = set(self._daemons.stop_many(self._spec(f"slurmd-{n}") for n in node_list))
            return [n for n in node_list if f"slurmd-{n}" in stopped]

    def start_nodes(self, nodes: Iterable[str]) -> UpReport:
        """Start these nodes' slurmd if they are not running (``systemctl start slurmd``); files untouched."""
        self._require_root("start")
        self._known_nodes(list(nodes), "start")
        t0 = time.monotonic()
        report = UpReport(str(self.root))
        with locked(self.paths):
            self._converge(report, stopped=set(), files=False)
        report.seconds = time.monotonic() - t0
        return report

    # ------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """Each daemon (pid alive?) and each node (slurmd alive? sinfo state and GRES)."""
        return status_report(self)

    # ------------------------------------------------------------ down

    def down(self, purge: bool = False) -> list[str]:
        """Stop what ``up`` started (see :func:`.teardown.stop_all`); ``purge`` also deletes the root."""
        if not self.root.exists():
            return []
        with locked(self.paths):
            stopped = teardown.stop_all(self.paths, self.slurm, self._progress)
            if purge:
                self._purge()
        return stopped

    def _purge(self) -> None:
        teardown.purge(self.root, self._progress)


# ---------------------------------------------------------------- functions


def up(
    root: Path | str | None = None,
    config: Path | str | None = None,
    base_port: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> UpReport:
    """Bring the sandbox up (see :meth:`Sandbox.up`)."""
    return Sandbox(root, config, base_port, progress).up()


def down(root: Path | str | None = None, purge: bool = False) -> list[str]:
    return Sandbox(root).down(purge=purge)


def restart(root: Path | str | None = None, controller: bool = False, nodes: Iterable[str] | None = None) -> UpReport:
    return Sandbox(root).restart(controller=controller, nodes=nodes)


def status(root: Path | str | None = None) -> dict[str, Any]:
    return Sandbox(root).status()


def env(root: Path | str | None = None) -> dict[str, str]:
    return Sandbox(root).env()


__all__ = [
    "DEFAULT_ROOT",
    "PACKAGES",
    "Ports",
    "Sandbox",
    "SandboxPaths",
    "UpReport",
    "default_config_path",
    "down",
    "env",
    "env_lines",
    "restart",
    "status",
    "up",
]
