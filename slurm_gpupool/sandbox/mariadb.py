"""A private MariaDB for slurmdbd: own datadir, socket, port and pid under the root.

It never touches a system database: ``mariadb-install-db --defaults-file=<root>/etc/my.cnf``
creates the datadir, ``mariadbd --defaults-file=...`` serves it on 127.0.0.1:<port>,
and root (through the Unix socket, ``unix_socket`` authentication) creates the
slurmdbd database and user.
"""

from __future__ import annotations

import pwd
import shutil
import subprocess
from pathlib import Path

from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.sandbox.procs import tail
from slurm_gpupool.sandbox.tools import program

DB_NAME = "slurm_acct_db"
DB_USER = "slurm"


def run_as_user() -> str:
    """``mysql`` if the package created it (what ``mysqld_safe --user=mysql`` does), else root."""
    try:
        pwd.getpwnam("mysql")
        return "mysql"
    except KeyError:
        return "root"


def is_initialized(datadir: Path) -> bool:
    return (datadir / "mysql").is_dir()


def initialize(defaults_file: Path, datadir: Path, user: str, log: Path, timeout_s: float = 120) -> None:
    """``mariadb-install-db``: system tables only, no test db, root by socket auth."""
    argv = [
        program("mariadb-install-db", "mysql_install_db"),
        f"--defaults-file={defaults_file}",
        f"--user={user}",
        "--skip-test-db",
        "--auth-root-authentication-method=socket",
    ]
    for attempt in (1, 2):  # seen once in CI: "Unknown table 'mysql.tmp_user_sys'"; a clean retry works
        with open(log, "ab") as out:
            try:
                proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired:
                raise SlurmUnavailableError("MariaDB initialization", f"timed out after {timeout_s:.0f} s") from None
        if proc.returncode == 0:
            return
        if attempt == 1:
            shutil.rmtree(datadir, ignore_errors=True)  # mariadb-install-db makes it again
    if proc.returncode != 0:
        raise SlurmUnavailableError(
            f"MariaDB initialization of {datadir}",
            f"mariadb-install-db exited {proc.returncode}\n--- last lines of {log} ---\n{tail(log)}",
        )


def server_argv(defaults_file: Path, user: str) -> list[str]:
    """The server in the foreground (``--defaults-file`` must come first)."""
    return [program("mariadbd", "mysqld"), f"--defaults-file={defaults_file}", f"--user={user}"]


def bootstrap_sql(password: str) -> str:
    """Idempotent: the slurmdbd database and a user allowed from 127.0.0.1 (we skip name resolution)."""
    if "'" in password or "\\" in password:
        raise ValueError("password must not contain quotes or backslashes")
    host = "127.0.0.1"
    return "\n".join(
        [
            f"CREATE DATABASE IF NOT EXISTS {DB_NAME};",
            f"CREATE USER IF NOT EXISTS '{DB_USER}'@'{host}' IDENTIFIED BY '{password}';",
            f"ALTER USER '{DB_USER}'@'{host}' IDENTIFIED BY '{password}';",
            f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'{host}';",
            "FLUSH PRIVILEGES;",
            "",
        ]
    )


def bootstrap(socket_path: Path, password: str, timeout_s: float = 30) -> None:
    """Run :func:`bootstrap_sql` as the database root over the socket (SQL on stdin, not argv)."""
    argv = [program("mariadb", "mysql"), "--no-defaults", f"--socket={socket_path}", "-u", "root", "--batch"]
    try:
        proc = subprocess.run(
            argv,
            input=bootstrap_sql(password),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SlurmUnavailableError("MariaDB setup for slurmdbd", f"timed out after {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise SlurmUnavailableError("MariaDB setup for slurmdbd", proc.stderr.strip() or f"exit {proc.returncode}")
