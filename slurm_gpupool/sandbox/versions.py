"""The Slurm releases the sandbox can run, and which Debian suite ships each.

Pure: the mapping and its parsing.  A release the host's own Debian ships runs
natively (``apt-get install slurm-wlm``); any other runs in a container built
from the suite that ships it (:mod:`slurm_gpupool.sandbox.image`,
:mod:`slurm_gpupool.sandbox.container`).
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gpupool.errors import UsageError


@dataclass(frozen=True)
class SlurmRelease:
    """One Slurm release series as a Debian suite ships it."""

    series: str  # "24.11": what `--slurm` takes and `sinfo -V` starts with
    suite: str  # the Debian suite whose slurm-wlm is this series
    debian: str  # for people: "Debian 13 (trixie)"

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.series.split(".")
        return int(major), int(minor)


RELEASES: tuple[SlurmRelease, ...] = (
    SlurmRelease("22.05", "bookworm", "Debian 12 (bookworm)"),
    SlurmRelease("24.11", "trixie", "Debian 13 (trixie)"),
    SlurmRelease("26.05", "sid", "Debian unstable (sid)"),
)


def release(series: str) -> SlurmRelease:
    """``"24.11"`` (or ``"24.11.5"``, ``"slurm-24.11"``) → its release; a clear error otherwise."""
    text = series.strip().removeprefix("slurm-").removeprefix("slurm")
    wanted = ".".join(text.split(".")[:2])
    for r in RELEASES:
        if r.series == wanted:
            return r
    raise UsageError(
        f"--slurm {series}",
        "not a Slurm release the sandbox can run",
        hint="one of " + ", ".join(f"{r.series} ({r.debian})" for r in RELEASES),
    )


def release_of_suite(codename: str) -> SlurmRelease | None:
    """The release a Debian suite ships (``VERSION_CODENAME`` of /etc/os-release), None if unknown."""
    for r in RELEASES:
        if r.suite == codename:
            return r
    return None


def os_release_codename(text: str) -> str:
    """``VERSION_CODENAME=trixie`` from the text of /etc/os-release ("" if absent)."""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "VERSION_CODENAME":
            return value.strip().strip('"')
    return ""
