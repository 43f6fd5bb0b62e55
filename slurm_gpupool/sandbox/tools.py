"""Finding the programs of the Debian packages, and installing the packages.

``/usr/sbin`` is not on every user's PATH, so daemons are looked up there too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from slurm_gpupool.errors import SlurmUnavailableError, UsageError
from slurm_gpupool.sandbox.versions import SlurmRelease, os_release_codename, release, release_of_suite

PACKAGES = ("slurm-wlm", "slurmdbd", "munge", "mariadb-server")
_SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# (program, search path) → where it was found: the daemons' command lines are built per node
# (one slurmd each), and a PATH walk per program per node grew quadratically at 128 nodes (#29);
# only what was found is kept, so a program installed later is still found
_FOUND: dict[tuple[str, str], str] = {}


def program(name: str, *alternatives: str) -> str:
    """Absolute path of the first of ``name, *alternatives`` found on PATH or in the sbin dirs."""
    path = os.environ.get("PATH", "") + ":" + _SBIN
    for candidate in (name, *alternatives):
        found = _FOUND.get((candidate, path)) or shutil.which(candidate, path=path)
        if found:
            _FOUND[(candidate, path)] = found
            return found
    raise SlurmUnavailableError(
        f"program {name}",
        "not found",
        hint=f"install the Debian packages: apt-get install -y {' '.join(PACKAGES)}",
    )


def missing_packages(packages: Sequence[str] = PACKAGES, timeout_s: float = 30) -> list[str]:
    """Packages that ``dpkg-query`` does not report as installed."""
    try:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\\n", *packages],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except FileNotFoundError:
        raise SlurmUnavailableError("Debian packages", "dpkg-query not found: the sandbox needs Debian") from None
    installed = {
        parts[0]
        for parts in (line.split() for line in proc.stdout.splitlines())
        if len(parts) == 2 and parts[1] == "installed"
    }
    return [p for p in packages if p not in installed]


def install_packages(packages: Sequence[str], timeout_s: float = 1800) -> None:
    """``apt-get install -y PACKAGES`` (after ``apt-get update`` if the first try fails)."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", *packages]
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout_s, check=False
        )
        if proc.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=timeout_s, check=False)
            proc = subprocess.run(
                cmd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout_s, check=False
            )
    except subprocess.TimeoutExpired:
        raise SlurmUnavailableError(
            f"apt-get install {' '.join(packages)}", f"timed out after {timeout_s:.0f} s"
        ) from None
    if proc.returncode != 0:
        last = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise SlurmUnavailableError(f"apt-get install {' '.join(packages)}", f"exit {proc.returncode}\n{last}")


def host_release() -> SlurmRelease | None:
    """The Slurm release this host runs natively: its installed ``sinfo -V``, else what
    its Debian suite ships (``VERSION_CODENAME`` in /etc/os-release); None if neither is known."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired, SlurmUnavailableError, UsageError):
        proc = subprocess.run(
            [program("sinfo"), "-V"], capture_output=True, text=True, errors="replace", timeout=10, check=False
        )
        if proc.returncode == 0:
            return release(proc.stdout.split()[-1])
    with contextlib.suppress(OSError):
        return release_of_suite(os_release_codename(Path("/etc/os-release").read_text()))
    return None


def foreign_release(series: str | None) -> SlurmRelease | None:
    """The release ``--slurm SERIES`` names if the host does not run it natively (a container's), else None."""
    if series is None:
        return None
    wanted = release(series)
    return None if wanted == host_release() else wanted
