"""A real Slurm cluster on one machine: emulated GPU nodes with simulated GPUs.

Everything lives under one root (default ``/var/tmp/slurm-gpupool-sandbox``):
a private munged, a private MariaDB, slurmdbd, slurmctld and one ``slurmd -N
NODE`` per emulated node, each node with its own ``NodeAddr=127.0.0.x`` and
``Port=``, its simulated GPUs (``sim/<node>.json``) and its device files
(``nodes/<node>/dev``, real character devices).  ``up`` converges to that state
and is idempotent; ``down`` stops exactly the processes ``up`` started, by pid.

Layout of the root::

    sandbox.json            node map, ports, DB password (mode 600)
    etc/                    slurm.conf, nodes.conf, gres.conf, slurmdbd.conf (600), my.cnf
    munge/                  munge.key, munge.socket, seed
    mysql/                  datadir and socket (owned by mysql)
    run/<daemon>.pid        the pids we started; run/slurm/ holds Slurm's own pid files
    log/                    every daemon's log; <daemon>.out is its stdout/stderr
    spool/                  StateSaveLocation and SlurmdSpoolDir (per node)
    sim/<node>.json         simulated GPUs (SLURM_GPUPOOL_SIM_DIR)
    nodes/<node>/dev, proc  the node's /dev/nvidia* and /proc/driver/nvidia-caps
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_gpupool.config.load import load_config
from slurm_gpupool.controller.gres_install import install, installed_paths, render
from slurm_gpupool.controller.support_files import install_support_files
from slurm_gpupool.errors import BusyError, SlurmUnavailableError, StateError, UsageError
from slurm_gpupool.hw import open_backend
from slurm_gpupool.hw.sim.state import create_node_state
from slurm_gpupool.node.apply import apply_node
from slurm_gpupool.node.state import state_file
from slurm_gpupool.sandbox import devices, mariadb, procs
from slurm_gpupool.sandbox.plan import (
    DEFAULT_BASE_PORT,
    NodePlan,
    Ports,
    assign_slots,
    env_lines,
    node_address,
    plan_nodes,
    validate_node_map,
)
from slurm_gpupool.sandbox.poolconfig import node_map, sandbox_config
from slurm_gpupool.sandbox.tools import PACKAGES, install_packages, missing_packages, program
from slurm_gpupool.slurm.cluster import SlurmCluster
from slurm_gpupool.slurm.runner import SlurmRunner, slurm_version
from slurm_gpupool.slurm.versions import preempt_user_signal_setting
from slurm_gpupool.util.resources import etc_dir, templates_dir

DEFAULT_ROOT = Path("/var/tmp/slurm-gpupool-sandbox")
CONFIG_ENV = "SLURM_GPUPOOL_CONFIG"


def hook_programs() -> dict[str, str]:
    """Absolute paths of the installed hook programs (this interpreter's scripts dir)."""
    import sysconfig

    scripts = Path(sysconfig.get_path("scripts"))
    out = {}
    for name in ("prolog", "epilog", "taskprolog", "healthcheck"):
        path = scripts / f"gpupool-{name}"
        if not path.exists():
            raise StateError(
                f"hook program {path}", "not installed", hint="pip install the package (scripts/bootstrap)"
            )
        out[name] = str(path)
    return out


def default_config_path() -> str:
    """The shipped example config: the sandbox's embedded default."""

    return str((etc_dir() / "gpupool.yaml").resolve())


ROOT_ENV = procs.MARK_ENV  # SLURM_GPUPOOL_SANDBOX: the root, and the mark on our daemons
SIM_DIR_ENV = "SLURM_GPUPOOL_SIM_DIR"
CLUSTER = "gpupool"
ACCOUNT = "sandbox"
DEF_MEM_PER_CPU_MIB = 1024
# The marker of the block the Ansible role manages in slurm.conf (its _gpupool_marker)
ANSIBLE_ROLE_MARKER = "# {mark} slurm_gpupool (managed by Ansible, role gpupool)"
STATE_SCHEMA = 1

# pid file name → the names its process may have in /proc/<pid>/comm
DAEMON_NAMES: dict[str, tuple[str, ...]] = {
    "munged": ("munged",),
    "mysqld": ("mariadbd", "mysqld"),
    "slurmdbd": ("slurmdbd",),
    "slurmctld": ("slurmctld",),
    "slurmd": ("slurmd",),
}
DAEMON_COMMS = ("munged", "mariadbd", "mysqld", "slurmctld", "slurmscriptd", "slurmd", "slurmdbd", "slurmstepd")


# ---------------------------------------------------------------- paths


@dataclass(frozen=True)
class SandboxPaths:
    root: Path

    etc = property(lambda self: self.root / "etc")
    slurm_conf = property(lambda self: self.etc / "slurm.conf")
    slurmdbd_conf = property(lambda self: self.etc / "slurmdbd.conf")
    nodes_conf = property(lambda self: self.etc / "nodes.conf")
    gres_conf = property(lambda self: self.etc / "gres.conf")
    gres_types_conf = property(lambda self: self.etc / "gres-types.conf")
    pool_config = property(lambda self: self.etc / "gpupool.yaml")
    my_cnf = property(lambda self: self.etc / "my.cnf")
    state_file = property(lambda self: self.root / "sandbox.json")
    lock_file = property(lambda self: self.root / ".lock")
    munge_dir = property(lambda self: self.root / "munge")
    munge_key = property(lambda self: self.munge_dir / "munge.key")
    munge_socket = property(lambda self: self.munge_dir / "munge.socket")
    mysql_dir = property(lambda self: self.root / "mysql")
    mysql_data = property(lambda self: self.mysql_dir / "data")
    mysql_socket = property(lambda self: self.mysql_dir / "mysqld.sock")
    mysql_tmp = property(lambda self: self.mysql_dir / "tmp")
    run = property(lambda self: self.root / "run")
    slurm_run = property(lambda self: self.run / "slurm")
    log = property(lambda self: self.root / "log")
    spool = property(lambda self: self.root / "spool")
    sim = property(lambda self: self.root / "sim")
    nodes = property(lambda self: self.root / "nodes")
    accounting_marker = property(lambda self: self.run / "accounting.done")

    def pidfile(self, daemon: str) -> Path:
        return self.run / f"{daemon}.pid"

    def out_log(self, daemon: str) -> Path:
        return self.log / f"{daemon}.out"

    def node_dev(self, node: str) -> Path:
        return self.nodes / node / "dev"

    def node_proc(self, node: str) -> Path:
        return self.nodes / node / "proc"

    def sim_state(self, node: str) -> Path:
        return self.sim / f"{node}.json"


def default_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


# ---------------------------------------------------------------- daemons


@dataclass(frozen=True)
class DaemonSpec:
    name: str  # pid file name: munged, mysqld, slurmdbd, slurmctld, slurmd-<node>
    comm: str  # /proc/<pid>/comm
    argv: list[str]
    logs: tuple[Path, ...]  # shown when it fails to come up
    configs: tuple[Path, ...] = ()  # a change in one of these needs a restart
    node: str | None = None
    port: int | None = None  # the TCP port it listens on (checked free before a start)


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


DAEMON_ANSWER_S = 10  # a running daemon that does not answer a query within this is restarted by `up`


class Sandbox:
    """The sandbox cluster under one root.

    ``config`` is the pool config whose nodes the sandbox plays (each node set
    needs a machine description); when it is None, the config of the last ``up``
    is kept, else the shipped ``etc/gpupool.yaml``.  ``layout`` is applied to
    nodes whose simulated GPUs are new (default: the schedule's default layout).
    """

    def __init__(
        self,
        root: Path | str | None = None,
        config: Path | str | None = None,
        base_port: int | None = None,
        progress: Callable[[str], None] | None = None,
        layout: str | None = None,
    ) -> None:
        self.paths = SandboxPaths(Path(root).absolute() if root else default_root().absolute())
        self.root = self.paths.root
        self._requested_config = str(Path(config).resolve()) if config else None
        self._requested_layout = layout
        self._requested_port = base_port
        self._progress = progress or (lambda _msg: None)
        self._state: dict[str, Any] | None = None
        self._started_at: dict[str, float] = {}  # node → wall time its slurmd was started

    # ------------------------------------------------------------ state

    def _read_state(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.paths.state_file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise StateError(f"sandbox state {self.paths.state_file}", f"unreadable: {e}") from None
        if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
            raise StateError(
                f"sandbox state {self.paths.state_file}",
                f"unknown schema (expected {STATE_SCHEMA})",
                hint="gpupool sandbox down --purge, then up",
            )
        return data

    @property
    def state(self) -> dict[str, Any]:
        """The recorded state, or what ``up`` would record."""
        if self._state is None:
            self._state = self._read_state() or {
                "schema": STATE_SCHEMA,
                "config": default_config_path(),
                "nodes": {},
                "base_port": DEFAULT_BASE_PORT,
                "cluster": CLUSTER,
                "db_password": "",
            }
        return self._state

    @property
    def node_map(self) -> dict[str, str]:
        return dict(self.state["nodes"])

    @property
    def ports(self) -> Ports:
        return Ports(int(self.state["base_port"]))

    def exists(self) -> bool:
        return self.paths.state_file.is_file()

    def env(self) -> dict[str, str]:
        """What a shell needs to use this cluster (``eval "$(gpupool sandbox env)"``)."""
        return {
            "SLURM_CONF": str(self.paths.slurm_conf),
            SIM_DIR_ENV: str(self.paths.sim),
            ROOT_ENV: str(self.root),
            CONFIG_ENV: str(self.paths.pool_config),
        }

    def source_config(self) -> Any:
        """The user's pool config that the sandbox plays (validated)."""

        return load_config(self.state["config"])

    def pool_config(self) -> Any:
        """The sandbox's own pool config (``<root>/etc/gpupool.yaml``)."""

        return load_config(self.paths.pool_config)

    def daemon_env(self) -> dict[str, str]:
        """Our environment minus any inherited ``SLURM_*`` (e.g. from inside a job), plus the sandbox's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(self.env())
        return env

    def node_addresses(self) -> dict[str, tuple[str, int]]:
        """Node → (NodeAddr, Port): a generator of nodes.conf must keep these for the sandbox."""
        slots = assign_slots(self.node_map, self.state.get("slots"))
        return {name: node_address(slot, self.ports) for name, slot in slots.items()}

    # ------------------------------------------------------------ helpers

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One ``up``/``down``/``restart`` at a time per root (``flock <root>/.lock``)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.paths.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def slurm(self, *argv: str, timeout_s: float = 20, input_text: str | None = None) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster (``SLURM_CONF`` set)."""
        try:
            return subprocess.run(
                [program(argv[0]), *argv[1:]],
                env=self.daemon_env(),
                input=input_text,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SlurmUnavailableError(f"{' '.join(argv)}", f"timed out after {timeout_s:.0f} s") from None

    def _healthcheck_shim(self, program: str, changed: set[Path]) -> str:
        """slurmd runs the HealthCheckProgram with SLURMD_NODENAME as its only variable,
        so a program there finds /etc/slurm/slurm.conf, not the sandbox's.  This shim
        (what a site with slurm.conf elsewhere would install too) names it."""
        shim = self.paths.etc / "gpupool-healthcheck"
        text = (
            "#!/bin/sh\n"
            "# Written by `gpupool sandbox up`: slurmd gives the HealthCheckProgram no SLURM_CONF.\n"
            f"SLURM_CONF={self.paths.slurm_conf}; export SLURM_CONF\n"
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH\n"
            f'exec {program} "$@"\n'
        )
        if self._write_if_changed(shim, text, 0o755):
            changed.add(shim)
        return str(shim)

    def _write_if_changed(self, path: Path, text: str, mode: int = 0o644) -> bool:
        try:
            if path.read_text() == text and (path.stat().st_mode & 0o777) == mode:
                return False
        except OSError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        return True

    def _render(self, template: str, **context: Any) -> str:
        import jinja2

        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(templates_dir() / "sandbox")),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
            autoescape=False,
        )
        return env.get_template(template).render(**context)

    def _plans(self) -> list[NodePlan]:
        machines = validate_node_map(self.node_map)
        slots = assign_slots(self.node_map, self.state.get("slots"))
        return plan_nodes(machines, slots, self.ports)

    def daemons(self) -> list[DaemonSpec]:
        """Every daemon of the sandbox, in start order."""
        p = self.paths
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
                (p.log / "mysqld.log", p.out_log("mysqld")),
                (p.my_cnf,),
                port=self.ports.mysql,
            ),
            DaemonSpec(
                "slurmdbd",
                "slurmdbd",
                [program("slurmdbd"), "-D"],
                (p.log / "slurmdbd.log", p.out_log("slurmdbd")),
                (p.slurmdbd_conf,),
                port=self.ports.slurmdbd,
            ),
            DaemonSpec(
                "slurmctld",
                "slurmctld",
                [program("slurmctld"), "-D", "-f", str(p.slurm_conf)],
                (p.log / "slurmctld.log", p.out_log("slurmctld")),
                conf,
                port=self.ports.slurmctld,
            ),
        ]
        addresses = self.node_addresses()
        for node in self.node_map:
            specs.append(
                DaemonSpec(
                    f"slurmd-{node}",
                    "slurmd",
                    [program("slurmd"), "-D", "-N", node, "-f", str(p.slurm_conf)],
                    (p.log / f"slurmd-{node}.log", p.out_log(f"slurmd-{node}")),
                    conf,
                    node,
                    addresses[node][1],
                )
            )
        return specs

    def _spec(self, name: str) -> DaemonSpec:
        for d in self.daemons():
            if d.name == name:
                return d
        raise UsageError(f"sandbox daemon {name!r}", "no such daemon")

    def pid_of(self, spec: DaemonSpec) -> int | None:
        return procs.running_pid(self.paths.pidfile(spec.name), self.root, spec.comm)

    def _start(self, spec: DaemonSpec) -> int:
        self._progress(f"starting {spec.name}")
        if spec.port is not None and procs.tcp_open("127.0.0.1", spec.port):
            raise SlurmUnavailableError(
                f"{spec.name} of the sandbox",
                f"port {spec.port} is already taken by another program (another sandbox, or a system service?)",
                hint="stop it, or move this sandbox: gpupool sandbox down; gpupool sandbox up --port-base N",
            )
        cwd = self.paths.log
        return procs.spawn(
            spec.argv, self.paths.out_log(spec.name), self.paths.pidfile(spec.name), self.daemon_env(), cwd
        )

    def _stop(self, spec: DaemonSpec, timeout_s: float = 20) -> bool:
        pid = self.pid_of(spec)
        stopped = False
        if pid is not None:
            self._progress(f"stopping {spec.name} (pid {pid})")
            stopped = procs.stop(pid, timeout_s)
        with contextlib.suppress(FileNotFoundError):
            self.paths.pidfile(spec.name).unlink()
        return stopped

    # ------------------------------------------------------------ up

    def _require_root(self, what: str) -> None:
        if os.geteuid() != 0:
            raise UsageError(
                f"sandbox {what}",
                "needs root (mknod of device files, SlurmUser=root, daemons)",
                hint="run it with sudo",
            )

    def _decide_state(self) -> bool:
        """Merge the requested node map and port into the recorded state; True if they changed."""

        old = self._read_state()
        new = dict(old) if old else dict(self.state)
        if self._requested_config is not None:
            new["config"] = self._requested_config
        new.setdefault("config", default_config_path())
        new["nodes"] = node_map(load_config(new["config"]))
        if self._requested_port is not None:
            new["base_port"] = int(self._requested_port)
        if not new.get("db_password"):
            new["db_password"] = secrets.token_hex(16)
        validate_node_map(new["nodes"])
        new["slots"] = assign_slots(new["nodes"], new.get("slots"))
        changed = old is None or any(old.get(k) != new[k] for k in ("config", "nodes", "base_port", "slots"))
        self._state = new
        self._write_if_changed(self.paths.state_file, json.dumps(new, indent=1) + "\n", 0o600)
        return changed

    def _prepare_nodes(self, plans: list[NodePlan]) -> None:
        """Simulated GPU state, device files and mig-minors of each node."""

        for plan in plans:
            state_path = self.paths.sim_state(plan.name)
            dev = self.paths.node_dev(plan.name)
            overwrite = False
            if state_path.exists():
                try:
                    overwrite = json.loads(state_path.read_text()).get("machine") != plan.machine.name
                except (OSError, ValueError):
                    overwrite = True
            if overwrite:  # the node now plays another machine: start it afresh
                shutil.rmtree(self.paths.nodes / plan.name, ignore_errors=True)
            create_node_state(state_path, plan.name, plan.machine, overwrite=overwrite, dev_root=str(dev))
            (self.paths.spool / f"slurmd-{plan.name}").mkdir(parents=True, exist_ok=True)
            devices.ensure_char_devices(dev, devices.device_plan(g.minor for g in plan.machine.gpus))
            devices.ensure_mig_minors(self.paths.node_proc(plan.name))

    def _write_configs(self, plans: list[NodePlan]) -> set[Path]:
        """The sandbox's pool config, the nodes' GPUs and GRES, and the daemons' files.

        Nodes whose simulated GPUs are new get the initial layout applied; then
        gres.conf and the slurm.conf includes come from `gpupool gres install`
        (live node state), exactly as on a real cluster.  Returns changed files.
        """
        import yaml

        p = self.paths
        changed: set[Path] = set()
        derived = sandbox_config(self.source_config(), self.root, self.node_addresses())
        text = "# Written by `gpupool sandbox up` from " + self.state["config"] + "; edits are overwritten.\n"
        text += yaml.safe_dump(derived, sort_keys=False)
        if self._write_if_changed(p.pool_config, text):
            changed.add(p.pool_config)
        cfg = self.pool_config()
        self._apply_initial_layout(cfg, plans)
        changed |= self._install_gres(cfg)
        common = {
            "root": str(self.root),
            "cluster": self.state["cluster"],
            "controller_host": socket.gethostname().split(".")[0],
            "ports": self.ports,
            "munge_socket": str(p.munge_socket),
        }
        hooks = hook_programs()
        hooks["healthcheck"] = self._healthcheck_shim(hooks["healthcheck"], changed)
        slurm_conf = self._render(
            "slurm.conf.j2",
            **common,
            hooks=hooks,
            role_marker=ANSIBLE_ROLE_MARKER,
            nodes_conf=str(p.nodes_conf),
            gres_types_conf=str(p.gres_types_conf),
            def_mem_per_cpu_mib=DEF_MEM_PER_CPU_MIB,
            preempt_user_signal=preempt_user_signal_setting(self._slurm_version()),
        )
        if self._write_if_changed(p.slurm_conf, slurm_conf):
            changed.add(p.slurm_conf)
        dbd = self._render(
            "slurmdbd.conf.j2",
            **common,
            db_user=mariadb.DB_USER,
            db_password=self.state["db_password"],
            db_name=mariadb.DB_NAME,
        )
        if self._write_if_changed(p.slurmdbd_conf, dbd, 0o600):
            changed.add(p.slurmdbd_conf)
        my_cnf = self._render(
            "my.cnf.j2",
            datadir=str(p.mysql_data),
            socket=str(p.mysql_socket),
            pidfile=str(p.mysql_dir / "mysqld.pid"),
            log=str(p.log / "mysqld.log"),
            tmpdir=str(p.mysql_tmp),
            port=self.ports.mysql,
        )
        if self._write_if_changed(p.my_cnf, my_cnf):
            changed.add(p.my_cnf)
        return changed

    def _slurm_version(self) -> tuple[int, int, int]:
        """The Slurm the sandbox runs (``slurmd -V`` before its slurm.conf exists); the oldest
        release we support, as ``gres install`` assumes, where no Slurm answers."""

        try:
            return slurm_version(SlurmRunner(env=self.daemon_env()))
        except SlurmUnavailableError:
            return (22, 5, 0)

    def initial_layout(self, cfg: Any) -> str:
        if self._requested_layout:
            return self._requested_layout
        if cfg.schedule is not None:
            return str(cfg.schedule.default)
        return str(cfg.layout_names()[0])

    def _apply_initial_layout(self, cfg: Any, plans: list[NodePlan]) -> None:
        """`gpupool node apply` on nodes that have no node state yet (fresh GPUs)."""

        layout = self.initial_layout(cfg)
        for plan in plans:
            state_dir = cfg.paths.for_node("state_dir", plan.name)
            if state_file(state_dir).exists():
                continue
            if not cfg.covers(layout, plan.name):
                raise UsageError(f"sandbox layout {layout}", f"does not cover node {plan.name}")
            self._progress(f"{plan.name}: node apply {layout}")
            with open_backend(plan.name, self.paths.sim) as backend:
                report = apply_node(backend, cfg, layout, state_dir)
            if report.failed:
                raise StateError(f"sandbox node {plan.name}", f"initial `node apply {layout}` failed")

    def _install_gres(self, cfg: Any) -> set[Path]:
        """`gpupool gres install --live` into <root>/etc; returns the files it changed."""

        paths = installed_paths(cfg)
        before = {p: p.read_text() if p.exists() else None for p in paths.values()}
        rendered = render(cfg, cfg.all_nodes(), None)
        install(cfg, rendered, backup=False)
        install_support_files(cfg, rendered.installed_layout())
        return {p for p in paths.values() if p.read_text() != before[p]}

    def _make_dirs(self) -> None:
        p = self.paths
        os.chmod(self.root, 0o755)
        for d in (p.etc, p.run, p.slurm_run, p.log, p.spool / "slurmctld", p.sim, p.nodes):
            d.mkdir(parents=True, exist_ok=True)
        p.munge_dir.mkdir(mode=0o755, exist_ok=True)
        os.chmod(p.munge_dir, 0o755)  # munged refuses group/other-writable dirs
        if not p.munge_key.exists():
            fd = os.open(p.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(1024))  # what `mungekey` writes: 1 KiB of random bytes
        user = mariadb.run_as_user()  # MariaDB drops to this user: it owns its dir and error log
        p.mysql_dir.mkdir(exist_ok=True)
        shutil.chown(p.mysql_dir, user, user)
        p.mysql_tmp.mkdir(mode=0o700, exist_ok=True)
        shutil.chown(p.mysql_tmp, user, user)
        (p.log / "mysqld.log").touch(mode=0o640)
        shutil.chown(p.log / "mysqld.log", user, user)

    def up(self, install: bool = True) -> UpReport:
        """Bring the whole cluster up, or repair it; a fast no-op if it is already up."""
        self._require_root("up")
        if any(c.isspace() or c in "#'\"=," for c in str(self.root)):
            raise UsageError(f"sandbox root {str(self.root)!r}", "Slurm config files cannot hold this path")
        t0 = time.monotonic()
        report = UpReport(str(self.root))
        with self._locked():
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
        """
        self._make_dirs()
        plans = self._plans()
        self._prepare_nodes(plans)
        changed = self._write_configs(plans) if files else set()
        self._stop_foreign_slurmds(report)
        p = self.paths
        specs = {d.name: d for d in self.daemons()}
        self._ensure(specs["munged"], changed, stopped, report, lambda: procs.unix_open(p.munge_socket), 10)
        if not mariadb.is_initialized(p.mysql_data):
            self._progress("initializing MariaDB")
            mariadb.initialize(p.my_cnf, p.mysql_data, mariadb.run_as_user(), p.out_log("mysqld"))
        db_started = self._ensure(
            specs["mysqld"], changed, stopped, report, lambda: procs.unix_open(p.mysql_socket), 60
        )
        if db_started or not p.accounting_marker.exists():
            mariadb.bootstrap(p.mysql_socket, self.state["db_password"])
        dbd_port = self.ports.slurmdbd
        dbd_ready = lambda: procs.tcp_open("127.0.0.1", dbd_port)  # noqa: E731
        self._ensure(specs["slurmdbd"], changed, stopped, report, dbd_ready, 60, healthy=self._dbd_answers)
        self._register_accounting()
        node_specs = [specs[f"slurmd-{n.name}"] for n in plans]
        if changed & {p.slurm_conf, p.nodes_conf, p.gres_conf, p.gres_types_conf}:
            stopped |= {spec.name for spec in node_specs if self._stop(spec)}
        ctld_ready = self._ctld_ready
        ctld = self._ensure(specs["slurmctld"], changed, stopped, report, ctld_ready, 60, healthy=ctld_ready)
        started = self._start_slurmds(node_specs, report, stopped)
        if ctld or started:
            self._wait_nodes_responding([n.name for n in plans], started)

    def _ctld_ready(self) -> bool:
        """``scontrol ping`` says UP (a bare TCP probe would log errors in slurmctld.log)."""
        try:
            proc = self.slurm("scontrol", "ping", timeout_s=5)
        except SlurmUnavailableError:  # timed out: not ready (wait_until checks the pid and the deadline)
            return False
        return proc.returncode == 0 and "is UP" in proc.stdout

    def _dbd_answers(self) -> bool:
        """slurmdbd answers a query (a TCP probe is not enough: the kernel completes a
        connection to a hung or stopped daemon's listening socket)."""
        try:
            proc = self.slurm("sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster", timeout_s=DAEMON_ANSWER_S)
        except SlurmUnavailableError:
            return False
        return proc.returncode == 0

    def _ensure(
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
            if healthy is None or healthy():
                report.running.append(spec.name)
                return False
            self._progress(f"{spec.name} (pid {pid}) runs but does not answer: restarting it")
        if pid is not None:
            self._stop(spec)
            stopped.add(spec.name)
        (report.restarted if spec.name in stopped else report.started).append(spec.name)
        pid = self._start(spec)
        procs.wait_until(ready, what=f"{spec.name} of the sandbox", timeout_s=timeout_s, pid=pid, logs=spec.logs)
        return True

    def _start_slurmds(self, specs: list[DaemonSpec], report: UpReport, stopped: set[str]) -> dict[str, int]:
        """Start the slurmds that are not running; node → pid of those started."""
        started: dict[str, int] = {}
        for spec in specs:
            if self.pid_of(spec) is not None:
                report.running.append(spec.name)
                continue
            (report.restarted if spec.name in stopped else report.started).append(spec.name)
            self._started_at[spec.node or spec.name] = time.time()
            started[spec.node or spec.name] = self._start(spec)
        return started

    def _stop_foreign_slurmds(self, report: UpReport) -> None:
        """Stop the slurmds of nodes no longer in the map (their pid files remain from an older up)."""
        wanted = {f"slurmd-{n}" for n in self.node_map}
        for pidfile in sorted(self.paths.run.glob("slurmd-*.pid")):
            name = pidfile.stem
            if name in wanted:
                continue
            pid = procs.running_pid(pidfile, self.root, "slurmd")
            if pid is not None:
                self._progress(f"stopping {name} (no longer a node of the sandbox)")
                procs.stop(pid)
                report.stopped.append(name)
            pidfile.unlink(missing_ok=True)

    def _register_accounting(self) -> None:
        """``sacctmgr -i add cluster|account|user``, once (a marker file remembers)."""
        marker = self.paths.accounting_marker
        if marker.exists():
            return
        self._progress("registering the cluster in accounting")
        cluster = self.state["cluster"]

        def listed(*argv: str) -> set[str]:
            proc = self._sacctmgr("-n", "-P", *argv)
            return {line.strip() for line in proc.stdout.splitlines() if line.strip()}

        self._add_cluster(cluster, lambda: cluster in listed("show", "cluster", "format=Cluster"))
        if ACCOUNT not in listed("show", "account", "format=Account"):
            self._sacctmgr(
                "-i", "add", "account", ACCOUNT, f"Cluster={cluster}", "Description=sandbox", "Organization=gpupool"
            )
        assoc = listed("show", "assoc", f"cluster={cluster}", f"account={ACCOUNT}", "format=User")
        if "root" not in assoc:
            self._sacctmgr("-i", "add", "user", "root", f"Account={ACCOUNT}", f"Cluster={cluster}", check=True)
            self._sacctmgr("-i", "modify", "user", "where", "name=root", "set", f"DefaultAccount={ACCOUNT}")
        marker.write_text("ok\n")

    def _add_cluster(self, cluster: str, present: Callable[[], bool]) -> None:
        """``sacctmgr -i add cluster``, retried until ``show cluster`` lists it.

        slurmdbd 22.05 on a fresh database sometimes answers the first add with "Problem
        adding clusters: Unspecified error" (its log: "We should have gotten a result") while
        it is still creating the cluster's tables; the add either landed or works a moment later.
        """
        deadline = time.monotonic() + 30
        while not present():
            proc = self._sacctmgr("-i", "add", "cluster", cluster)
            if proc.returncode == 0 or present():
                return
            if time.monotonic() > deadline:
                raise SlurmUnavailableError(
                    f"sacctmgr -i add cluster {cluster}",
                    (proc.stderr or proc.stdout).strip() + procs.log_excerpt([self.paths.log / "slurmdbd.log"]),
                )
            time.sleep(1)

    def _sacctmgr(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
        deadline = time.monotonic() + 30
        while True:  # slurmdbd accepts connections a moment before it answers them
            proc = self.slurm("sacctmgr", *argv, timeout_s=30)
            text = proc.stdout + proc.stderr
            transient = proc.returncode != 0 and ("connection" in text.lower() or "unable to" in text.lower())
            if not transient or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if check and proc.returncode != 0:
            raise SlurmUnavailableError(
                f"sacctmgr {' '.join(argv)}",
                (proc.stderr or proc.stdout).strip() + procs.log_excerpt([self.paths.log / "slurmdbd.log"]),
            )
        return proc

    def node_states(self) -> dict[str, dict[str, str]]:
        """``sinfo -N -h -o '%N|%T|%G|%E'`` as node → {state, gres, reason}; empty if slurmctld is down."""
        proc = self.slurm("sinfo", "-N", "-h", "-o", "%N|%T|%G|%E", timeout_s=10)
        if proc.returncode != 0:
            return {}
        out = {}
        for line in proc.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == 4:
                out[parts[0]] = {"state": parts[1], "gres": parts[2], "reason": parts[3]}
        return out

    def slurmd_start_times(self) -> dict[str, float]:
        """Node → ``SlurmdStartTime`` (epoch seconds) from ``scontrol -o show node``."""
        proc = self.slurm("scontrol", "-o", "show", "node", timeout_s=10)
        out: dict[str, float] = {}
        for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            with contextlib.suppress(KeyError, ValueError):
                stamp = datetime.datetime.strptime(fields["SlurmdStartTime"], "%Y-%m-%dT%H:%M:%S")
                out[fields["NodeName"]] = stamp.timestamp()
        return out

    def _wait_nodes_responding(self, nodes: list[str], started: dict[str, int], timeout_s: float = 60) -> None:
        """Until slurmctld sees every node registered: a state without ``*`` and not UNKNOWN/DOWN.

        (A restarted slurmctld shows recovered nodes as UNKNOWN until they register,
        and schedules nothing on them before.)  Fails fast if a slurmd just started dies.
        """
        self._progress("waiting for the nodes to register")
        last: dict[str, dict[str, str]] = {}
        t0_wall = min(self._started_at.get(n, time.time()) for n in started) if started else time.time()

        def ready() -> bool:
            nonlocal last
            for node, pid in started.items():
                if not procs.is_alive(pid):
                    spec = self._spec(f"slurmd-{node}")
                    raise SlurmUnavailableError(
                        f"{spec.name} of the sandbox", "the process exited" + procs.log_excerpt(spec.logs)
                    )
            last = self.node_states()
            if not all(
                n in last
                and not last[n]["state"].endswith("*")
                and not last[n]["state"].startswith(("unknown", "down", "future"))
                for n in nodes
            ):
                return False
            if not started:
                return True
            # a restarted slurmd has registered once slurmctld shows its new start time
            since = self.slurmd_start_times()
            return all(since.get(n, 0) >= int(t0_wall) for n in started)

        try:
            procs.wait_until(ready, what="sandbox nodes", timeout_s=timeout_s, interval_s=0.25)
        except SlurmUnavailableError as e:
            if e.what != "sandbox nodes":
                raise
            states = ", ".join(f"{n}={last.get(n, {}).get('state', 'missing')}" for n in nodes)
            bad = [n for n in nodes if n not in last or last[n]["state"].startswith(("unknown", "down"))]
            excerpt = "".join(procs.log_excerpt([self.paths.log / f"slurmd-{n}.log"]) for n in bad[:1])
            excerpt += procs.log_excerpt([self.paths.log / "slurmctld.log"])
            raise SlurmUnavailableError(
                "sandbox nodes", f"not all nodes registered: {states}" + excerpt, e.hint
            ) from None

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
        with self._locked():
            stopped = {f"slurmd-{n}" for n in node_list if self._stop(self._spec(f"slurmd-{n}"))}
            if controller and self._stop(self._spec("slurmctld")):
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
        with self._locked():
            return [n for n in node_list if self._stop(self._spec(f"slurmd-{n}"))]

    def start_nodes(self, nodes: Iterable[str]) -> UpReport:
        """Start these nodes' slurmd if they are not running (``systemctl start slurmd``); files untouched."""
        self._require_root("start")
        self._known_nodes(list(nodes), "start")
        t0 = time.monotonic()
        report = UpReport(str(self.root))
        with self._locked():
            self._converge(report, stopped=set(), files=False)
        report.seconds = time.monotonic() - t0
        return report

    def _known_nodes(self, node_list: list[str], what: str) -> list[str]:
        unknown = [n for n in node_list if n not in self.node_map]
        if unknown:
            raise UsageError(
                f"sandbox {what} --nodes {','.join(node_list)}",
                f"not a sandbox node: {', '.join(unknown)}",
                hint=f"nodes: {','.join(self.node_map)}",
            )
        return node_list

    # ------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """Each daemon (pid alive?) and each node (slurmd alive? sinfo state and GRES)."""
        daemons = []
        pids: dict[str, int | None] = {}
        for spec in self.daemons() if self.exists() else []:
            pid = self.pid_of(spec)
            pids[spec.name] = pid
            if spec.node is None:
                daemons.append({"name": spec.name, "pid": pid, "running": pid is not None, "log": str(spec.logs[0])})
        ctld_up = pids.get("slurmctld") is not None
        states = self.node_states() if ctld_up else {}
        nodes = []
        for name, machine in self.node_map.items() if self.exists() else []:
            addr, port = self.node_addresses()[name]
            pid = pids.get(f"slurmd-{name}")
            st = states.get(name, {})
            nodes.append(
                {
                    "name": name,
                    "machine": machine,
                    "addr": addr,
                    "port": port,
                    "slurmd_pid": pid,
                    "slurmd_running": pid is not None,
                    "state": st.get("state", "unknown" if ctld_up else "n/a"),
                    "gres": st.get("gres", ""),
                    "reason": st.get("reason", ""),
                }
            )
        all_up = self.exists() and all(d["running"] for d in daemons) and all(n["slurmd_running"] for n in nodes)
        return {
            "root": str(self.root),
            "exists": self.exists(),
            "up": bool(all_up),
            "env": self.env(),
            "daemons": daemons,
            "nodes": nodes,
        }

    # ------------------------------------------------------------ down

    def _cancel_jobs(self) -> None:
        """``scancel`` every job, so slurmstepd kills job processes itself; then wait briefly."""
        proc = self.slurm("squeue", "-h", "-o", "%i", timeout_s=10)
        ids = proc.stdout.split() if proc.returncode == 0 else []
        if not ids:
            return
        self._progress(f"cancelling {len(ids)} job(s)")
        self.slurm("scancel", *ids, timeout_s=20)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            proc = self.slurm("squeue", "-h", "-t", "all", "-o", "%i %T", timeout_s=10)
            if proc.returncode != 0 or not any(
                w in proc.stdout for w in ("RUNNING", "COMPLETING", "PENDING", "CONFIGURING")
            ):
                return
            time.sleep(0.2)

    def down(self, purge: bool = False) -> list[str]:
        """Stop what ``up`` started (by pid: TERM, wait, KILL) and remove pid files.

        Order: jobs, slurmctld (saves its state), slurmds, slurmdbd, MariaDB, munged.
        Then anything left that carries this root's mark (a slurmstepd, a daemon
        whose pid file was lost).  ``purge`` also deletes the root directory.
        """
        if not self.root.exists():
            return []
        stopped: list[str] = []
        with self._locked():
            recorded = sorted(p.stem for p in self.paths.run.glob("*.pid")) if self.paths.run.is_dir() else []
            order = ["slurmctld", *sorted(n for n in recorded if n.startswith("slurmd-")), "slurmdbd", "mysqld"]
            order += ["munged"]
            ctld_pid = procs.read_pid(self.paths.pidfile("slurmctld"))
            if ctld_pid and procs.is_alive(ctld_pid) and procs.belongs_to(ctld_pid, self.root):
                with contextlib.suppress(SlurmUnavailableError):
                    self._cancel_jobs()
            for name in order:
                pidfile = self.paths.pidfile(name)
                comm = DAEMON_NAMES.get("slurmd" if name.startswith("slurmd-") else name)
                pid = procs.running_pid(pidfile, self.root, comm)
                if pid is not None:
                    self._progress(f"stopping {name} (pid {pid})")
                    procs.stop(pid, timeout_s=30 if name == "mysqld" else 15)
                    stopped.append(name)
                pidfile.unlink(missing_ok=True)
            for pidfile in self.paths.run.glob("*.pid") if self.paths.run.is_dir() else []:
                pidfile.unlink(missing_ok=True)  # stale: its process is gone or not ours
            for pidfile in self.paths.slurm_run.glob("*.pid") if self.paths.slurm_run.is_dir() else []:
                pidfile.unlink(missing_ok=True)
            (self.paths.munge_dir / "munged.pid").unlink(missing_ok=True)
            for pid in procs.sampler_processes(self.root):
                self._progress(f"stopping usage sampler (pid {pid})")
                procs.stop(pid, timeout_s=10)
                stopped.append(f"sampler[{pid}]")
            leftovers = procs.sandbox_processes(self.root, DAEMON_COMMS)
            for pid, program_name in leftovers:
                self._progress(f"stopping leftover {program_name} (pid {pid})")
                procs.stop(pid, timeout_s=10)
                stopped.append(f"{program_name}[{pid}]")
            if purge:
                self._purge()
        return stopped

    def _purge(self) -> None:
        root = self.root.resolve()
        if root == Path("/") or len(root.parts) < 3:
            raise UsageError(f"sandbox root {root}", "refusing to delete a top-level directory")
        looks_ours = (root / "sandbox.json").exists() or not any(p.name not in {".lock"} for p in root.iterdir())
        if not looks_ours:
            raise UsageError(
                f"sandbox root {root}", "has no sandbox.json: not deleting a directory that is not a sandbox"
            )
        self._progress(f"deleting {root}")
        for attempt in range(5):  # a job step that outlived its slurmd may still write there
            try:
                shutil.rmtree(root)
                return
            except OSError as e:  # a file that appeared (not empty) or vanished meanwhile
                if not root.exists():
                    return
                if attempt == 4:
                    raise BusyError(
                        f"sandbox root {root}",
                        f"cannot delete it: {e.strerror} ({e.filename})",
                        hint=f"a process may still use it (fuser -vm {root}); try again",
                    ) from None
                time.sleep(1)


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
    "down",
    "env",
    "env_lines",
    "restart",
    "status",
    "up",
]
