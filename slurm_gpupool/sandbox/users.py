"""The sandbox's unprivileged users and their Slurm accounts, as a site has them.

Jobs of several users in several accounts are what fairshare, account limits and the
TaskProlog run as the job's user are about, so the sandbox does not run everything as
root: ``up`` makes three system users (``useradd --system``; in a container, the
container's own ``/etc/passwd``) and registers them in two accounts under ``root``
(``sacctmgr -i add account|user``, with the cluster's other records, once).  A test or a
recording submits as one of them with ``runuser -u NAME -- sbatch ...``
(:func:`as_user`): munge vouches for that uid, as on a login node.
"""

from __future__ import annotations

import pwd
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_gpupool.errors import OperationFailedError


@dataclass(frozen=True)
class SandboxUser:
    """An unprivileged user of the sandbox and the one account its jobs are charged to."""

    name: str
    account: str


ACCOUNTS = ("research", "teaching")
USERS = (
    SandboxUser("gpupool-alice", "research"),
    SandboxUser("gpupool-bob", "research"),
    SandboxUser("gpupool-carol", "teaching"),
)


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def ensure_system_users(users: Sequence[SandboxUser] = USERS) -> list[str]:
    """``useradd --system --no-create-home --shell /bin/sh NAME`` for each user not in the
    password database yet (a lookup only, when they are: ``up`` stays cheap); the names added."""
    added = []
    for user in users:
        if _exists(user.name):
            continue
        argv = ["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", user.name]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if proc.returncode != 0 and not _exists(user.name):  # (another sandbox's up added it meanwhile)
            raise OperationFailedError(" ".join(argv), (proc.stderr or proc.stdout).strip())
        added.append(user.name)
    return added


def as_user(name: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run as ``name`` (``runuser -u NAME -- ARGV``; the caller's environment,
    ``SLURM_CONF`` included, is kept)."""
    return ["runuser", "-u", name, "--", *argv]
