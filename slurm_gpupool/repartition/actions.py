"""What the repartitioner can do next: one value per action, each naming what it runs.

:func:`~slurm_gpupool.repartition.next_action.next_action` answers with a *step*: a tuple
of these that may run at once (applies on several nodes, looks at several nodes being
verified).  The executor (``repartition/executor.py``) performs each and journals its
result; the next step is decided from the journal and Slurm as they are then.  Pure
values: no I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

# -- waiting ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """Nothing to do until Slurm changes (jobs end, a node answers): look again in ``seconds``."""

    seconds: float
    why: str


# -- what a killed run left half-way: before anything that needs slurmctld ----------------------


@dataclass(frozen=True)
class FinishRestart:
    """The restart a killed run began (slurmctld or slurmds may be down): the site's commands
    again, which need no slurmctld (``clush -w NODES systemctl stop slurmd`` per batch,
    ``systemctl restart slurmctld``, ``... start slurmd`` per batch), then ``scontrol ping``.
    Journaled ``restarted``; if Slurm does not come back the run stops (exit 69)."""

    nodes: tuple[str, ...]


@dataclass(frozen=True)
class RestoreFiles:
    """slurmctld (or a slurmd) did not come back with the wave's new files: put back the files
    of before the wave (``<controller_dir>/runs/<id>/wave<N>/``), restart the daemons with the
    site's commands, ``scontrol ping``; the wave's ``nodes`` are then marked to :class:`Revert`."""

    why: str
    nodes: tuple[str, ...]
    restart: tuple[str, ...]


# -- the reservation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CancelStale:
    """``scancel JOB`` for each of ``jobs``: our own srun jobs that outlived their srun
    (:func:`~slurm_gpupool.repartition.rules.stale_own_jobs`)."""

    jobs: tuple[int, ...]


@dataclass(frozen=True)
class Reserve:
    """The run's MAINT reservation holds exactly ``nodes`` and has begun:
    ``scontrol create reservation ReservationName=NAME StartTime=now Nodes=... Flags=MAINT,IGNORE_JOBS
    Users=root`` (``create``), ``scontrol update ReservationName=NAME Nodes=... [StartTime=now+2]``
    (``update``), ``scontrol delete ReservationName=NAME`` (``delete``: no node left), or nothing
    (``keep``).  A reservation made ahead of a scheduled switch (``NAME_ahead``) is in ``delete_first``:
    the run's takes its place.  Journaled ``reserved``; then each of ``waiting`` is journaled
    ``waiting`` (in the reservation, its jobs still to end)."""

    name: str
    nodes: frozenset[str]
    how: Literal["create", "update", "delete", "keep"]
    start_now: bool  # it was made to begin later: begin now
    duration_s: int
    delete_first: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()


# -- one node: its jobs, its GPUs -----------------------------------------------------------------


@dataclass(frozen=True)
class NoteWaiting:
    """Its jobs still run (``squeue``): journal why it waits.  Nothing changes in Slurm."""

    node: str
    reason: str


@dataclass(frozen=True)
class Signal:
    """At the deadline, with ``requeue``: each requeueable job gets its tier's checkpoint signal
    (``scancel --batch --signal=SIG JOB``); they are requeued after the longest grace."""

    node: str
    jobs: tuple[tuple[int, str], ...]  # (job, signal)
    grace_s: int


@dataclass(frozen=True)
class Requeue:
    """The grace is over: ``scontrol requeue JOB`` for each still running (the node then waits
    a minute more for them to leave, and for the others)."""

    node: str
    jobs: tuple[int, ...]


@dataclass(frozen=True)
class Skip:
    """Busy past the deadline: left for the next run.  It stays in the reservation (no new job
    lands there) and its jobs run to their end: never killed."""

    node: str
    reason: str


@dataclass(frozen=True)
class Apply:
    """``srun --reservation=R -w NODE gpupool node apply LAYOUT --json`` (its printed node state
    is kept on the controller), then ``scontrol update nodename=NODE state=drain
    reason="gpupool: switching to layout LAYOUT"`` for the restart.  srun refuses a drained node
    (22.05, measured): a node drained by us is resumed first (``resume_first``).  Exit 75 (GPUs
    busy) is tried again; any other failure is rolled back (:class:`RollBack`)."""

    node: str
    layout: str
    resume_first: bool = False


@dataclass(frozen=True)
class Drain:
    """Applied, not drained (a run killed between the two): ``scontrol update nodename=NODE
    state=drain reason="gpupool: switching to layout LAYOUT"``."""

    node: str
    layout: str


@dataclass(frozen=True)
class RollBack:
    """``node apply`` failed: ``srun ... gpupool node apply PREVIOUS --json`` puts the whole node
    back, then it is drained with the reason (``scontrol update state=drain reason=...``) and
    leaves the reservation: failed, for an admin to look at."""

    node: str
    target: str
    previous: str | None
    why: str


@dataclass(frozen=True)
class Revert:
    """Slurm refused the wave's files (restored since): ``scontrol update state=resume`` (srun
    needs it; the reservation still holds the node), ``srun ... gpupool node apply PREVIOUS
    --json``, drain again; then verified against the restored files (outcome rolled_back)."""

    node: str
    previous: str | None
    note: str


# -- once per wave ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstallGres:
    """``gpupool gres install`` from the states the nodes' GPUs reported (gres.conf, node lines
    with ``layout_<name>``, the submit catalog, ``job_submit.lua``), after the files of before are
    kept for a restore.  Journaled ``gres_installing``, ``gres_installed``."""

    nodes: tuple[str, ...]  # the wave: applied and drained


@dataclass(frozen=True)
class Restart:
    """The site's commands, ``restart_batch`` nodes at a time: ``clush -w NODES systemctl stop
    slurmd``, ``systemctl restart slurmctld`` once, ``clush -w NODES systemctl start slurmd``; then
    ``scontrol ping`` until it answers.  Journaled ``restarting``, ``restarted`` (or why Slurm
    refused the files: :class:`RestoreFiles` next)."""

    nodes: tuple[str, ...]


@dataclass(frozen=True)
class BeginVerify:
    """The node's daemons run with the new files: journaled ``verifying`` (its verification's
    timeout runs from now)."""

    node: str


@dataclass(frozen=True)
class SeenSwitched:
    """``sinfo --json`` showed the node switched (its GRES, its layout feature, answering) at
    ``at``; ``at`` None: it no longer does.  Verified once two looks ``confirm_s`` apart agree."""

    node: str
    at: float | None


@dataclass(frozen=True)
class Release:
    """Verified: ``scontrol update nodename=NODE state=resume`` (when we drained it) and out of
    the reservation (``scontrol update ReservationName=R Nodes=<the others>``, or delete it): no
    node waits for the slowest."""

    node: str
    resume: bool


@dataclass(frozen=True)
class Done:
    """Slurm would start a job there now (answering, not drained, in no reservation of ours):
    the node's outcome, ``done`` (or ``rolled_back``)."""

    node: str
    outcome: str
    layout: str
    reason: str = ""


@dataclass(frozen=True)
class Fail:
    """``scontrol update nodename=NODE state=drain reason=REASON`` and out of the reservation:
    failed, with why (the next run switches it again once an admin resumed it)."""

    node: str
    reason: str


@dataclass(frozen=True)
class NextWave:
    """The wave is through (each node done, failed or rolled back): nodes freed since form
    the next one, which installs and restarts again."""


# -- the end of a run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestartOthers:
    """slurmd (not slurmctld) on the answering nodes the run did not restart, so every slurmd
    reads the new slurm.conf: per batch ``clush -w NODES systemctl stop slurmd`` then ``start``
    (their jobs run on).  Journaled ``others_restarting`` (unless ``resumed``: a killed run's,
    finished here), ``others_restarted``.  ``problem``: why no node could be chosen."""

    nodes: tuple[str, ...]
    resumed: bool = False
    problem: str = ""


@dataclass(frozen=True)
class Finish:
    """Shrink the run's reservation to the skipped nodes (``scontrol update ReservationName=R
    Nodes=... Duration=...``, long enough for their jobs) or delete it, delete a superseded run's
    (``stale``), give jobs Slurm held while their GRES were gone their priority back
    (``scontrol release``), journal ``finished``."""

    reservation: str
    held: frozenset[str]
    held_for_s: int
    stale: tuple[str, ...] = ()
    outcomes: Mapping[str, str] = field(default_factory=dict)


Action = (
    Wait
    | FinishRestart
    | RestoreFiles
    | CancelStale
    | Reserve
    | NoteWaiting
    | Signal
    | Requeue
    | Skip
    | Apply
    | Drain
    | RollBack
    | Revert
    | InstallGres
    | Restart
    | BeginVerify
    | SeenSwitched
    | Release
    | Done
    | Fail
    | NextWave
    | RestartOthers
    | Finish
)
ON_NODES = (Apply, RollBack, Revert)  # srun on a node, seconds each: run in parallel (``parallel`` at a time)
