"""An injectable runner for Slurm commands: argument lists, timeouts, no shell.

Tests substitute recorded output (``ReplayRunner``) for parsers; integration
tests use the real commands against the sandbox Slurm.
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.slurm.versions import parse_version


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def check(self, what: str) -> Result:
        if self.returncode != 0:
            why = (self.stderr or self.stdout).strip().splitlines()
            raise SlurmUnavailableError(what, why[-1] if why else f"{self.argv[0]} exited {self.returncode}")
        return self


class SlurmRunner:
    """Runs ``scontrol``, ``sinfo``, ``sacct``... with ``SLURM_CONF`` from the environment."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> None:
        self.env = dict(os.environ if env is None else env)
        self.timeout_s = timeout_s

    def run(self, argv: Sequence[str], timeout_s: float | None = None, input_text: str | None = None) -> Result:
        try:
            p = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                errors="replace",
                env=self.env,
                timeout=timeout_s or self.timeout_s,
                input=input_text,
                check=False,
            )
        except FileNotFoundError:
            raise SlurmUnavailableError(argv[0], "command not found", hint="is Slurm installed here?") from None
        except subprocess.TimeoutExpired:
            raise SlurmUnavailableError(
                " ".join(argv[:3]), f"timed out after {timeout_s or self.timeout_s:.0f} s"
            ) from None
        return Result(tuple(argv), p.returncode, p.stdout, p.stderr)


_VERSIONS: dict[tuple[str, str], tuple[int, int, int]] = {}


def slurm_version(runner: SlurmRunner) -> tuple[int, int, int]:
    """``sinfo -V`` (once per process and configuration).

    From 24.11 every client reads slurm.conf first, even for ``-V``, and waits 60 s
    for a missing one; then ``slurmd -V`` or ``slurmctld -V`` (which do not) answer.
    """
    env = getattr(runner, "env", {})
    conf = env.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    key = (env.get("PATH", ""), conf)
    if type(runner) is not SlurmRunner or key not in _VERSIONS:  # replayed output is never cached
        argvs = [["sinfo", "-V"]] if os.path.exists(conf) else [["slurmd", "-V"], ["slurmctld", "-V"]]
        for argv in argvs:
            try:
                found = runner.run(argv, timeout_s=30)
            except SlurmUnavailableError:
                continue
            if found.returncode == 0:
                _VERSIONS[key] = parse_version(found.stdout)
                break
        else:
            raise SlurmUnavailableError("slurm version", f"neither sinfo -V nor slurmd -V answered ({conf} missing?)")
    return _VERSIONS[key]


def standard_times(runner: SlurmRunner) -> SlurmRunner:
    """``runner`` with ``SLURM_TIME_FORMAT=standard`` (ISO 8601 times, whatever the caller set:
    ``relative`` prints "Tomorrow 08:00")."""
    if runner.env.get("SLURM_TIME_FORMAT", "standard") == "standard":
        return runner
    standard = copy.copy(runner)
    standard.env = {**runner.env, "SLURM_TIME_FORMAT": "standard"}
    return standard


def show_config(runner: SlurmRunner) -> str:
    """``scontrol show config``: the controller's effective settings, its defaults and
    ``Include`` files resolved (what ``simulate`` reads the site's priority setup from, and
    BOOT_TIME, which its times are read from: ``standard_times``)."""
    return standard_times(runner).run(["scontrol", "show", "config"]).check("scontrol show config").stdout


def show_partitions(runner: SlurmRunner) -> str:
    """``scontrol -o show partition``: one line per partition, ``PriorityJobFactor`` and
    ``PriorityTier`` among its keys (what ``simulate`` orders a live replay's queue by)."""
    return runner.run(["scontrol", "-o", "show", "partition"]).check("scontrol show partition").stdout
