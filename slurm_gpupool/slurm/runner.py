"""An injectable runner for Slurm commands: argument lists, timeouts, no shell.

Tests substitute recorded output (``ReplayRunner``) for parsers; integration
tests use the real commands against the sandbox Slurm.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_gpupool.errors import SlurmUnavailableError


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


def parse_version(text: str) -> tuple[int, int, int]:
    """``slurm-wlm 22.05.8`` / ``slurm 23.11.1`` → (22, 5, 8)."""
    for tok in text.split():
        parts = tok.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]):
            nums = [int(p) if p.isdigit() else 0 for p in parts[:3]] + [0, 0]
            return nums[0], nums[1], nums[2]
    raise SlurmUnavailableError("slurm version", f"cannot parse {text.strip()!r}")


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


def reconfigure_applies_gres(version: tuple[int, int, int]) -> bool:
    """From 24.11 slurm.conf says node changes need "restarting or reconfiguring"."""
    return version >= (24, 11, 0)


def tres_gres_prefix(version: tuple[int, int, int]) -> str:
    """How a job's ``tres_per_node`` names GRES: ``gres:gpu:a100:2`` up to 23.02,
    ``gres/gpu:a100:2`` from 23.11 (which refuses the old form: "Invalid Trackable
    RESource (TRES) specification")."""
    return "gres/" if version >= (23, 11, 0) else "gres:"


def preempt_user_signal_setting(version: tuple[int, int, int]) -> str:
    """The slurm.conf line that sends a preempted job its ``--signal`` at preemption (not
    SIGTERM): ``SlurmctldParameters=preempt_send_user_signal`` in 22.05's slurm.conf(5),
    ``PreemptParameters=send_user_signal`` in 24.11's and 26.05's (PreemptParameters came
    in 23.02 and took the preempt options from SlurmctldParameters/SchedulerParameters)."""
    if version >= (23, 2, 0):
        return "PreemptParameters=send_user_signal"
    return "SlurmctldParameters=preempt_send_user_signal"


def requeues_again_after_grace_preemption(version: tuple[int, int, int]) -> bool:
    """Slurm 24.11 (measured on Debian 13's 24.11.5): a job preempted with a GraceTime and
    requeued is requeued once more when its next run ends ("_job_complete: requeue JobId=N
    per user/system request"), so it runs a third time; without a GraceTime, and on 22.05
    and 26.05.5, it is requeued once.  25.05 and 25.11 are not measured: counted as affected."""
    return (24, 11, 0) <= version < (26, 5, 0)


def restart_crashes_on_finished_shard_jobs(version: tuple[int, int, int]) -> bool:
    """Slurm 24.11 (measured on Debian 13's 24.11.5): restarted with new GRES while it still
    remembers a finished shard job on a changed node, slurmctld saves a job state that makes
    every later start segfault (in ``gres_stepmgr_job_build_details``).  26.05.5 does not;
    25.05 and 25.11 are not measured, so they count as affected."""
    return (24, 11, 0) <= version < (26, 5, 0)
