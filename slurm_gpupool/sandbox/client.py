"""Slurm's client commands (``sinfo``, ``scontrol``, ``sacctmgr``, ``squeue``, ``scancel``)
against the sandbox: the probes, the accounting setup and ``down`` all ask through one door."""

from __future__ import annotations

import subprocess
from typing import Protocol

from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.sandbox.tools import program


class SlurmCommand(Protocol):
    """``Sandbox.slurm``: runs one client command with the sandbox's ``SLURM_CONF``."""

    def __call__(
        self, *argv: str, timeout_s: float = 20, input_text: str | None = None
    ) -> subprocess.CompletedProcess: ...


def run_client(
    env: dict[str, str], argv: tuple[str, ...], timeout_s: float = 20, input_text: str | None = None
) -> subprocess.CompletedProcess:
    """Run ``argv`` (its program found on PATH or in the sbin dirs) in ``env``; a timeout is
    Slurm not answering (exit 69), any exit status is the caller's to read."""
    try:
        return subprocess.run(
            [program(argv[0]), *argv[1:]],
            env=env,
            input=input_text,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SlurmUnavailableError(f"{' '.join(argv)}", f"timed out after {timeout_s:.0f} s") from None
