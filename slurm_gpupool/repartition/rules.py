"""The repartitioner's rules, as pure functions of what it knows and what Slurm shows (no I/O).

The executor (``repartition/executor.py``) asks these what to do next and does it; the
journal records each step, so a run killed anywhere is finished by the next.  Kept
apart so that every rule an admin relies on (when a node is skipped, when it counts
as switched, when it leaves the reservation, which exit code a run has) is unit-tested
on made-up cluster views in milliseconds; the real-Slurm tests prove the executor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation, gres_counts

# Node steps of the journal (repartition/journal.py keeps the same names).
WAITING, APPLYING, APPLIED, DRAINED, VERIFYING = "waiting", "applying", "applied", "drained", "verifying"
DONE, FAILED, SKIPPED, ROLLED_BACK = "done", "failed", "skipped", "rolled_back"
OUTCOMES = (DONE, FAILED, SKIPPED, ROLLED_BACK)
# Cluster steps of one wave.
GRES_INSTALLED, RESTARTING, RESTARTED = "gres_installed", "restarting", "restarted"
OTHERS_RESTARTING, OTHERS_RESTARTED = "others_restarting", "others_restarted"

BUSY_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
SCHEDULABLE = frozenset({"idle", "mixed", "allocated", "completing"})
OUR_REASON = "gpupool:"  # every drain reason the repartitioner sets starts with it


@dataclass(frozen=True)
class WaitDecision:
    action: str  # apply | wait | requeue | skip
    reason: str


def after_jobs(
    busy: Sequence[JobInfo], now: float, deadline: float, requeue: bool, requeued: bool, left: str = ""
) -> WaitDecision:
    """A node in the reservation: apply once its jobs are gone; at the deadline requeue the
    requeueable ones (once, if asked to), else skip it: a job is never killed."""
    if not busy:
        return WaitDecision("apply", "")
    ids = ", ".join(str(j.job_id) for j in sorted(busy, key=lambda j: j.job_id))
    if now < deadline:
        return WaitDecision("wait", f"waiting for jobs {ids} to end")
    if requeue and not requeued and any(j.requeue and j.state == "RUNNING" for j in busy):
        return WaitDecision("requeue", f"jobs {ids} still running at the deadline: checkpoint signal, then requeue")
    return WaitDecision("skip", f"jobs still running at the deadline: {left or ids}; not killed")


def verify_problem(info: NodeInfo | None, expected: Mapping[str, int], layout: str) -> str:
    """Why Slurm does not (yet) show the node as switched: "" when it does.

    Its GRES must equal those rendered from its GPUs' state, its ``layout_<name>``
    feature must be the target, and it must be registered and answering."""
    if info is None:
        return "Slurm does not know the node"
    if not info.responding:
        flags = ",".join(sorted(info.flags))
        return f"Slurm shows the node {info.state} {flags}".strip()
    if info.gres_counts() != dict(expected):
        return f"Slurm shows GRES {info.gres or '(none)'}, expected {fmt_counts(expected)}"
    if info.layout != layout:
        return f"Slurm shows layout {info.layout}, expected {layout}"
    return ""


def ready_problem(info: NodeInfo | None) -> str:
    """Why Slurm would not start a job on the node now ("" when it would, as far as the
    node's state says): after resume it must answer, be schedulable and not drained.
    (Whether a reservation still holds it: ``held_problem``.)"""
    if info is None:
        return "Slurm does not know the node"
    if not info.responding:
        return f"not answering ({info.state}{'*' if 'NOT_RESPONDING' in info.flags else ''})"
    if info.state not in SCHEDULABLE:
        return f"state {info.state}"
    blocked = info.flags & {"DRAIN", "POWERED_DOWN", "POWERING_DOWN", "REBOOT_REQUESTED"}
    if blocked:
        return "flags " + ",".join(sorted(blocked))
    return ""


def held_problem(node: str, reservations: Iterable[Reservation], prefix: str, now: datetime) -> str:
    """Which of our reservations still holds the node now ("" when none does).

    The scheduler reads reservations, not node flags: ``MAINTENANCE``/``RESERVED`` on
    the node lag a reservation's update by up to a minute, so the reservation table
    (``scontrol show reservation``) is what says whether a job can start.  An admin's
    own reservations are not ours to wait for; a future one (``_ahead``) holds nothing yet.
    """
    active = (r for r in reservations if r.start <= now < r.end)
    held = sorted(r.name for r in active if r.name.startswith(prefix) and node in r.nodes)
    return f"still in reservation {', '.join(held)}" if held else ""


def still_held(steps: Mapping[str, str]) -> set[str]:
    """Nodes the run's reservation keeps: those not yet through, and skipped ones (their
    jobs run on; no new job may land there before the next run switches them).  A node
    is released the moment it is verified (done or rolled back), or failed (drained)."""
    return {n for n, s in steps.items() if s not in (DONE, ROLLED_BACK, FAILED)}


def wave_ready(steps: Mapping[str, str], idle_waiting: Iterable[str]) -> bool:
    """Commit (install, restart, verify) once applies are through: nodes applied or drained,
    none applying, and no waiting node free to apply now (busy ones do not hold a wave)."""
    if any(s == APPLYING for s in steps.values()):
        return False
    if set(idle_waiting) & {n for n, s in steps.items() if s == WAITING}:
        return False
    return any(s in (APPLIED, DRAINED, VERIFYING) for s in steps.values())


def redo_first(cluster_steps: Sequence[str]) -> str | None:
    """What a killed run's successor must finish before it needs slurmctld: a restart begun
    (the daemons may be down), or the unswitched nodes' slurmd restart begun (stopped, maybe
    not started again)."""
    if RESTARTING in cluster_steps and RESTARTED not in cluster_steps:
        return "restart"
    if OTHERS_RESTARTING in cluster_steps and OTHERS_RESTARTED not in cluster_steps:
        return "others"
    return None


def unswitched_to_restart(view: Mapping[str, NodeInfo], restarted: Iterable[str]) -> list[str]:
    """The nodes whose slurmd still has the old slurm.conf after a switch: every node Slurm
    knows that answers and was not restarted (a down or powered-off node reads the new file
    when it starts; its jobs, if any, are not touched by a slurmd restart)."""
    done = set(restarted)
    off = {"POWERED_DOWN", "POWERING_DOWN", "POWERING_UP"}
    return sorted(n for n, i in view.items() if n not in done and i.responding and not i.flags & off)


def run_exit_code(outcomes: Mapping[str, str]) -> int:
    """0 only when every node the layout covers is in it (switched or already there); 1 when
    a node failed or was rolled back; 75 when nodes are still to switch (busy, unreachable)."""
    values = set(outcomes.values())
    if values & {FAILED, ROLLED_BACK}:
        return 1
    if values - {DONE, "kept"}:
        return 75
    return 0


def fmt_counts(counts: Mapping[str, int]) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(counts.items())) or "(none)"


def ours(info: NodeInfo | None) -> bool:
    """Drained by the repartitioner (its reason), as opposed to by an admin or Slurm."""
    return info is not None and info.drained and info.reason.startswith(OUR_REASON)


def lead_time_default(max_time_s: int | None, gaps_s: Sequence[int], cap_s: int) -> int:
    """How long before a scheduled switch its nodes are reserved (``lead_time: auto``).

    Within it a node takes only jobs that end before the switch; a job started earlier
    may run past it (the node then waits, up to the deadline).  The partition's MaxTime
    guarantees no job delays a switch, but with switches every 12 hours and a MaxTime
    of a day it never leaves a window for a job without ``--time``.  So: at most half
    the shortest time between two switches, and at most MaxTime and ``cap_s``."""
    bound = [cap_s]
    if max_time_s is not None:
        bound.append(max_time_s)
    if gaps_s:
        bound.append(max(60, min(gaps_s) // 2))
    return min(bound)


def priorities_to_restore(recorded: Mapping[int, int], jobs: Iterable[JobInfo]) -> list[tuple[int, int | None]]:
    """Pending jobs Slurm zeroed while their GRES were gone (reason BadConstraints, priority
    0: held for good, measured on 22.05): (job, priority to give back, or None if none
    was recorded).  Released after a switch; the priority they had before it returns."""
    out = []
    for j in jobs:
        if j.state == "PENDING" and j.priority == 0 and j.state_reason == "BadConstraints":
            out.append((j.job_id, recorded.get(j.job_id)))
    return sorted(out, key=lambda x: x[0])


def expected_counts(node_gres: str) -> dict[str, int]:
    return gres_counts(node_gres)


def clock_switch_ahead(
    nxt: tuple[datetime, str] | None, now: datetime, lead_time_s: float, elastic_during: Callable[[str], bool] | None
) -> tuple[datetime, str] | None:
    """The clock's next switch to reserve nodes for now (``--scheduled``): within the lead
    time, and not the start of an elastic period (``elastic_during(layout)``): there demand
    decides, the clock switches nothing, so a reservation ahead would only keep jobs off
    nodes that never switch (the simulator's elastic policy makes no switch there either)."""
    if nxt is None or (nxt[0] - now).total_seconds() > lead_time_s:
        return None
    if elastic_during is not None and elastic_during(nxt[1]):
        return None
    return nxt
