"""Where everything of one sandbox lives: the tree under its root, made once, locked per run.

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
import fcntl
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from slurm_gpupool.sandbox import mariadb, procs

DEFAULT_ROOT = Path("/var/tmp/slurm-gpupool-sandbox")
ROOT_ENV = procs.MARK_ENV  # SLURM_GPUPOOL_SANDBOX: the root, and the mark on our daemons
SIM_DIR_ENV = "SLURM_GPUPOOL_SIM_DIR"
CONFIG_ENV = "SLURM_GPUPOOL_CONFIG"


@dataclass(frozen=True)
class SandboxPaths:
    """Every file and directory of the sandbox, named once (the layout above)."""

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


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    """Replace ``path`` (temp file, rename) only if its text or mode differ; True if written.

    What was written decides which daemons ``up`` restarts, so an unchanged file stays untouched."""
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


@contextlib.contextmanager
def locked(paths: SandboxPaths) -> Iterator[None]:
    """One ``up``/``down``/``restart`` at a time per root (``flock <root>/.lock``)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def make_dirs(paths: SandboxPaths) -> None:
    """The tree under the root, the munge key (what ``mungekey`` writes) and MariaDB's own
    directories (``chown mysql``: the server drops to that user before it writes them)."""
    p = paths
    os.chmod(p.root, 0o755)
    for d in (p.etc, p.run, p.slurm_run, p.log, p.spool / "slurmctld", p.sim, p.nodes):
        d.mkdir(parents=True, exist_ok=True)
    p.munge_dir.mkdir(mode=0o755, exist_ok=True)
    os.chmod(p.munge_dir, 0o755)  # munged refuses group/other-writable dirs
    if not p.munge_key.exists():
        fd = os.open(p.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))  # what `mungekey` writes: 1 KiB of random bytes (as secrets.token_bytes)
    user = mariadb.run_as_user()  # MariaDB drops to this user: it owns its dir and error log
    p.mysql_dir.mkdir(exist_ok=True)
    shutil.chown(p.mysql_dir, user, user)
    p.mysql_tmp.mkdir(mode=0o700, exist_ok=True)
    shutil.chown(p.mysql_tmp, user, user)
    (p.log / "mysqld.log").touch(mode=0o640)
    shutil.chown(p.log / "mysqld.log", user, user)
