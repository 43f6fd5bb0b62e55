"""What each Slurm release does differently, as pure
predicates of its version (measured on the sandbox's 22.05, 24.11 and 26.05 where said).

No I/O: the config, the controller and the parsers ask these; ``slurm/runner.slurm_version``
asks Slurm which release it is."""

from __future__ import annotations

from slurm_gpupool.errors import SlurmUnavailableError


def parse_version(text: str) -> tuple[int, int, int]:
    """``slurm-wlm 22.05.8`` / ``slurm 23.11.1`` → (22, 5, 8)."""
    for tok in text.split():
        parts = tok.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]):
            nums = [int(p) if p.isdigit() else 0 for p in parts[:3]] + [0, 0]
            return nums[0], nums[1], nums[2]
    raise SlurmUnavailableError("slurm version", f"cannot parse {text.strip()!r}")


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
