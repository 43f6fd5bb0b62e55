"""The repartitioner's rules, as pure functions of what it knows and what Slurm shows (no I/O).

:func:`~slurm_gpupool.repartition.next_action.next_action` composes them into the next
step; the executor (``repartition/executor.py``) does it and the journal records it, so
a run killed anywhere is finished by the next.  Kept apart so that every rule an admin
relies on (when a node is skipped, when it counts as switched, when it leaves the
reservation, which exit code a run has) is unit-tested on made-up cluster views in
milliseconds; the real-Slurm tests prove the executor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slurm_gpupool.core.policy.durations import format_duration
from slurm_gpupool.core.policy.switch_plan import NodeView
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation, gres_counts

# The journal's steps (repartition/journal.py records them).
# Node steps, in order; the last four are outcomes.
WAITING = "waiting"  # in the reservation, its jobs still running
APPLYING = "applying"  # node apply running through srun
APPLIED = "applied"  # GPUs in the target layout, state copied to the controller
DRAINED = "drained"  # drained for the restart
VERIFYING = "verifying"
DONE = "done"
FAILED = "failed"  # left drained, with the reason
SKIPPED = "skipped"  # busy past the deadline (or down): tried again next run
ROLLED_BACK = "rolled_back"  # back in its previous layout, resumed
NODE_STEPS = (WAITING, APPLYING, APPLIED, DRAINED, VERIFYING, DONE, FAILED, SKIPPED, ROLLED_BACK)
OUTCOMES = (DONE, FAILED, SKIPPED, ROLLED_BACK)

# Cluster steps of a run, in order.
RESERVED = "reserved"
GRES_INSTALLING = "gres_installing"
GRES_INSTALLED = "gres_installed"
RESTARTING = "restarting"
RESTARTED = "restarted"
FINISHED = "finished"
OTHERS_RESTARTING = "others_restarting"  # slurmd on the nodes that did not switch (new slurm.conf)
OTHERS_RESTARTED = "others_restarted"
CLUSTER_STEPS = (
    RESERVED,
    GRES_INSTALLING,
    GRES_INSTALLED,
    RESTARTING,
    RESTARTED,
    OTHERS_RESTARTING,
    OTHERS_RESTARTED,
    FINISHED,
)

BUSY_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
SCHEDULABLE = frozenset({"idle", "mixed", "allocated", "completing"})
OUR_REASON = "gpupool:"  # every drain reason the repartitioner sets starts with it
OUR_DRAIN = "gpupool: switching to layout"  # the drain before a restart (not a failure)
JOB_NAME = "gpupool-repartition"  # our srun jobs: never waited for


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


# Slurm's drain of a node whose slurmd registered fewer of a GRES than its node line:
# slurmctld (re)started with a switch's new files while the node's slurmd still had the old
# ones (killed at that moment, or an admin's restart).  It stays after the slurmd registers
# right.  Two wordings, on every release (src/common/gres.c in 22.05, src/interfaces/gres.c
# since): a type's count ("gres/gpu:v100_shared count too low (0 < 4)", seen on 22.05) and
# the GRES's total ("gres/gpu count reported lower than configured (4 < 10)", seen on 24.11).
_GRES_COUNT_DRAIN = re.compile(r"^gres/\S+ count (?:too low|reported lower than configured) \(\d+ < \d+\)$")


def ours(info: NodeInfo | None) -> bool:
    """Drained by the repartitioner (its reason), as opposed to by an admin or Slurm."""
    return info is not None and info.drained and info.reason.startswith(OUR_REASON)


def switch_gres_drain(info: NodeInfo | None) -> bool:
    """Drained by Slurm for a GRES count below the node line.  On a node of the run (or of
    the last run) it is the switch's own: its files met a slurmd not yet restarted, and it
    is lifted once the node shows its layout.  Elsewhere it may be a GPU gone (the same
    words with AutoDetect): never touched."""
    return info is not None and info.drained and bool(_GRES_COUNT_DRAIN.match(info.reason))


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


def ahead_name(reservation: str) -> str:
    """The reservation made ahead of a scheduled switch (folded into the run's when it runs):
    never the run's own, which may hold skipped nodes *now*."""
    return f"{reservation}_ahead"


def reason_text(text: str) -> str:
    """Slurm reasons are one line; keep them short and free of '='-splitting surprises."""
    return " ".join(text.split())[:200]


# srun's own words when it started nothing on the node because slurmctld was away or had lost
# what the run made (measured on 22.05 with slurmctld killed while srun allocated or launched)
_SRUN_CTLD_TROUBLE = re.compile(
    r"^srun: error: .*("
    r"Something is wrong with the boot of the nodes"
    r"|Unable to contact slurm controller"
    r"|Unable to confirm allocation"
    r"|Job allocation \d+ has been revoked"
    r"|Force Terminated"
    r"|Requested reservation is invalid"
    r")",
    re.M,
)


def srun_not_started(stdout: str, stderr: str) -> bool:
    """The node's command never ran: srun failed on slurmctld's side (killed, restarting, or
    back without the run's reservation) and printed nothing of the command: every line is
    srun's own, none about a task.  The apply is tried again after a poll (the reservation
    made again first), not rolled back and failed: nothing changed on the node.  A node srun
    cannot use (down, drained) is not this, nor a command that said anything."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if stdout.strip() or not lines or not all(ln.startswith("srun: ") for ln in lines):
        return False
    if any(re.search(r"\btask \d+|StepId=\S+\.\d+", ln) for ln in lines):
        return False  # a step, and so the command, had begun
    return bool(_SRUN_CTLD_TROUBLE.search(stderr))


def _waited_for(job: JobInfo) -> bool:
    """A job a node waits for: running (our own srun jobs aside)."""
    return job.state in BUSY_STATES and job.name != JOB_NAME


OWN_LIVE_STATES = ("RUNNING", "CONFIGURING")  # an srun's job allocated
OWN_STALE_STATES = (*OWN_LIVE_STATES, "PENDING")  # ... or not yet: either outlives a lost srun


def stale_own_jobs(own: Iterable[JobInfo], prefix: str) -> tuple[int, ...]:
    """Our own srun jobs (``own``: named ``JOB_NAME``) still shown running or pending in one of
    our reservations (``<prefix>_...``, ``Users=root``: no one else's job runs there) between
    two steps, when no srun of this run runs (a step's sruns have all returned before the next
    is decided; one run at a time; the executor first waits for sruns an earlier, killed run
    left on this host): each outlived its srun.  A slurmctld killed after an srun ended,
    before it saved that end, comes back with the job as it last saved it, and nothing behind
    it: RUNNING (``Reason=Prolog``, measured on 22.05) or, saved before its allocation,
    PENDING (seen on 24.11, ``Reason=Reservation`` once its node had left the reservation).
    Either holds the run's reservation ("Requested reservation is in use") until its time
    limit.  Completing ones are left alone: they are ending."""
    return tuple(
        j.job_id
        for j in own
        if j.name == JOB_NAME and j.state in OWN_STALE_STATES and j.reservation.startswith(prefix + "_")
    )


def stuck_launches(jobs: Sequence[JobInfo], now: float, timeout_s: float, prefix: str) -> tuple[int, ...]:
    """Our own srun jobs still waiting for their allocation's prolog after ``timeout_s``
    (``squeue`` reason ``Prolog``; ``PrologFlags=Alloc``).  Seen on 22.05: a node's slurmd
    killed while our srun's prolog started there, and started again, never reports that
    prolog; slurmctld waits for it, and srun with it, without end.  Cancelled, the srun
    ends ("revoked") having run nothing, and the apply is tried again."""
    live = set(stale_own_jobs(jobs, prefix))
    return tuple(
        j.job_id
        for j in jobs
        if j.job_id in live
        and j.state in OWN_LIVE_STATES  # allocated: a pending job's start time is a forecast
        and j.state_reason == "Prolog"
        and now - j.start_time >= timeout_s
    )


def busy_jobs(jobs: Iterable[JobInfo], node: str, unreachable: str = "") -> list[JobInfo]:
    """The jobs a node waits for: running there (our own srun jobs aside).  Unknown while
    slurmctld does not answer (``unreachable``): then one stand-in job, so the node waits."""
    if unreachable:
        return [JobInfo(0, "RUNNING", frozenset({node}), "?", "(slurmctld not answering)", None, 0, False, "")]
    return [j for j in jobs if node in j.nodes and _waited_for(j)]


def busy_by_node(jobs: Iterable[JobInfo]) -> dict[str, list[JobInfo]]:
    """:func:`busy_jobs` of every node at once, in one pass over the jobs: asked node by
    node, a run over N nodes with J jobs read N x J jobs (10,000 nodes: seconds per step)."""
    return index_jobs(jobs)[0]


def index_jobs(jobs: Iterable[JobInfo]) -> tuple[dict[str, list[JobInfo]], tuple[JobInfo, ...]]:
    """:func:`busy_by_node`, and our own srun jobs (for :func:`stale_own_jobs`), from one pass
    over the jobs."""
    busy: dict[str, list[JobInfo]] = {}
    own: list[JobInfo] = []
    for j in jobs:
        if _waited_for(j):
            for n in j.nodes:
                busy.setdefault(n, []).append(j)
        elif j.name == JOB_NAME and not j.finished:
            own.append(j)
    return busy, tuple(own)


def ends_in(job: JobInfo, now: float) -> int | None:
    """Seconds until the job's time limit (None: it has none, or has not started)."""
    if job.time_limit_s is None or not job.start_time:
        return None
    return max(0, int(job.start_time + job.time_limit_s - now))


def describe_jobs(busy: Iterable[JobInfo], now: float) -> str:
    """``41 (alice, 5m left), 42 (bob, no time limit)``: what a skipped node's report says."""

    def left(j: JobInfo) -> str:
        s = ends_in(j, now)
        return "no time limit" if s is None else f"{format_duration(s)} left"

    return ", ".join(f"{b.job_id} ({b.user}, {left(b)})" for b in busy)


def held_for_s(jobs: Iterable[JobInfo], held: Iterable[str], now: float) -> int:
    """How long the reservation keeps the skipped nodes: until their jobs' time limits (and
    10 minutes), at least an hour; a week when a job has no limit."""
    nodes = set(held)
    left = [ends_in(j, now) for j in jobs if j.nodes & nodes and j.state in BUSY_STATES]
    known = [s for s in left if s is not None]
    return max([3600, *(s + 600 for s in known)]) if len(known) == len(left) else 7 * 86400


def node_views(
    infos: Mapping[str, NodeInfo], midway: Iterable[str], last_run: Iterable[str] = ()
) -> dict[str, NodeView]:
    """Slurm's nodes as the switch plan sees them: a node drained by someone else is not
    usable; one drained by an earlier switch (it failed there, or slurmctld, killed, came back
    with a drain the switch had lifted) is switched again (``retry``): never left drained.
    Slurm's GRES-count drain counts as the switch's on a node of the last run only
    (:func:`switch_gres_drain`)."""
    unfinished, switched = set(midway), set(last_run)
    out = {}
    for name, i in infos.items():
        mine = ours(i) or (name in switched and switch_gres_drain(i))
        foreign_drain = i.drained and name not in unfinished and not mine
        usable = i.usable and not foreign_drain
        state = f"drained: {i.reason}" if foreign_drain else i.state
        retry = mine and name not in unfinished  # failed, or a drain slurmctld restored after a crash
        out[name] = NodeView(name, i.layout, usable, state, retry=retry, reason=i.reason if retry else "")
    return out


def node_report(run: Mapping[str, Any], rec: Mapping[str, Any]) -> dict[str, Any]:
    """One node's line of a run's report, from the journal: its outcome and why, and how long
    it was drained (drain to resume), out of service (apply start to release: no job could
    start) and in the reservation (the run's reservation to release)."""
    drained = applying = in_resv = None
    if rec["step"] in (DONE, ROLLED_BACK):
        end = rec.get("released_at", rec["since_epoch"])
        if rec.get("drained_at"):
            drained = round(end - rec["drained_at"], 2)
        if rec.get("applying_at"):
            applying = round(end - rec["applying_at"], 2)
        in_resv = round(end - (run.get("reserved_at") or run["started_epoch"]), 2)
    return {
        "outcome": rec["step"],
        "reason": rec["reason"],
        "drained_s": drained,
        "out_of_service_s": applying,
        "reserved_s": in_resv,
    }
