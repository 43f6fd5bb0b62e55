"""The sandbox's cluster, accounts and users in slurmdbd (``sacctmgr -i add ...``), once.

Jobs of a user with no association are refused under ``AccountingStorageEnforce``, and
``sacct`` shows nothing for a cluster slurmdbd does not know.  root is in the account
``sandbox``; the unprivileged users of :mod:`.users` are in theirs (``research`` and
``teaching``, under ``root``).  A marker file under ``<root>/run`` remembers that it was
done (what it holds says which records: a sandbox registered before the users were gets
them at its next ``up``), so a later ``up`` asks slurmdbd nothing.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.sandbox import procs
from slurm_gpupool.sandbox.client import SlurmCommand
from slurm_gpupool.sandbox.users import ACCOUNTS, USERS

ACCOUNT = "sandbox"
MARKER_TEXT = "ok: cluster, sandbox/root, " + ", ".join(f"{u.account}/{u.name}" for u in USERS) + "\n"


class Accounting:
    """``sacctmgr`` against the sandbox's slurmdbd; its log is quoted when a command fails."""

    def __init__(self, slurm: SlurmCommand, slurmdbd_log: Path, progress: Callable[[str], None]):
        self._slurm = slurm
        self._log = slurmdbd_log
        self._progress = progress

    def register(self, cluster: str, marker: Path) -> None:
        """``sacctmgr -i add cluster|account|user``, once (``marker`` remembers)."""
        if marker.exists() and marker.read_text() == MARKER_TEXT:
            return
        self._progress("registering the cluster in accounting")

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
        self._add_users(cluster, listed)
        marker.write_text(MARKER_TEXT)

    def _add_users(self, cluster: str, listed: Callable[..., set[str]]) -> None:
        """The unprivileged users' accounts and associations: one ``sacctmgr`` for the
        missing accounts, one per account for its missing users."""
        accounts = [a for a in ACCOUNTS if a not in listed("show", "account", "format=Account")]
        if accounts:
            self._sacctmgr(
                "-i", "add", "account", ",".join(accounts), f"Cluster={cluster}",
                "Description=sandbox users", "Organization=gpupool", check=True,
            )  # fmt: skip
        have = listed("show", "assoc", f"cluster={cluster}", "format=Account,User")
        for account in ACCOUNTS:
            names = [u.name for u in USERS if u.account == account and f"{account}|{u.name}" not in have]
            if names:
                self._sacctmgr(
                    "-i", "add", "user", ",".join(names), f"Account={account}", f"DefaultAccount={account}",
                    f"Cluster={cluster}", check=True,
                )  # fmt: skip

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
                    (proc.stderr or proc.stdout).strip() + procs.log_excerpt([self._log]),
                )
            time.sleep(1)

    def _sacctmgr(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
        deadline = time.monotonic() + 30
        while True:  # slurmdbd accepts connections a moment before it answers them
            proc = self._slurm("sacctmgr", *argv, timeout_s=30)
            text = proc.stdout + proc.stderr
            transient = proc.returncode != 0 and ("connection" in text.lower() or "unable to" in text.lower())
            if not transient or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if check and proc.returncode != 0:
            raise SlurmUnavailableError(
                f"sacctmgr {' '.join(argv)}",
                (proc.stderr or proc.stdout).strip() + procs.log_excerpt([self._log]),
            )
        return proc
