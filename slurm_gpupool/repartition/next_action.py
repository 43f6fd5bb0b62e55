"""What the repartitioner does next, from the journal, what Slurm shows and the time: pure.

:func:`next_action` reads top to bottom as the order of a switch:

1. finish what a killed run left half-way (a restart begun, files Slurm refused), before
   anything that needs slurmctld (:func:`recovery`); cancel our own srun jobs that
   outlived their srun (a slurmctld killed before it saved their end);
2. the run's reservation holds the nodes still to switch (:func:`reservation`);
3. repair nodes midway: applied but not drained, an apply that failed (roll back), a
   wave Slurm refused (revert);
4. a wave under way installs GRES, then restarts the daemons;
5. per node: wait for its jobs (signal and requeue at the deadline, or skip), apply;
   verify, release, done or failed;
6. commit a wave once no node is free to apply now, or once it has ``wave_size`` nodes;
   the next wave after it;
7. at the end: restart the slurmds that did not switch, then finish.

The answer is a step: a tuple of :mod:`~slurm_gpupool.repartition.actions` that may run
at once (applies on several nodes), or ``()`` once the run is finished.  The executor
observes, asks, performs, journals and asks again, so a run resumed after a kill is
just the next question: nothing here knows whether the process is new.  The journal's
notes of waits (a checkpoint signal sent, a first look that showed a node switched)
count only from when this process took the run (``taken``); older ones start over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Literal

from slurm_gpupool.repartition.actions import (
    Action,
    Apply,
    BeginVerify,
    CancelStale,
    Done,
    Drain,
    Fail,
    Finish,
    FinishRestart,
    InstallGres,
    NextWave,
    NoteWaiting,
    Release,
    Requeue,
    Reserve,
    Restart,
    RestartOthers,
    RestoreFiles,
    Revert,
    RollBack,
    SeenSwitched,
    Signal,
    Skip,
    Wait,
)
from slurm_gpupool.repartition.rules import (
    APPLIED,
    APPLYING,
    DONE,
    DRAINED,
    FINISHED,
    GRES_INSTALLED,
    GRES_INSTALLING,
    OTHERS_RESTARTED,
    OUTCOMES,
    RESERVED,
    RESTARTED,
    RESTARTING,
    ROLLED_BACK,
    SKIPPED,
    VERIFYING,
    WAITING,
    after_jobs,
    ahead_name,
    busy_jobs,
    describe_jobs,
    held_for_s,
    held_problem,
    index_jobs,
    ours,
    ready_problem,
    redo_first,
    stale_own_jobs,
    still_held,
    switch_gres_drain,
    unswitched_to_restart,
    verify_problem,
)
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation

CONFIRM_S = 2.0  # a node shown switched is looked at again after this (slurmctld flags unpinged nodes late)
READY_TIMEOUT_S = 30.0  # after its release: until Slurm would start a job there
AFTER_REQUEUE_S = 60.0  # after a requeue: for the requeued jobs to leave (the others are waited for)
WAVE_STEPS = (GRES_INSTALLING, GRES_INSTALLED, RESTARTING, RESTARTED)

Step = tuple[Action, ...]

# -- the inputs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeRecord:
    """One node of the run, as the journal has it (``journal.json``'s ``nodes``)."""

    step: str
    target: str
    previous: str | None = None  # its layout before the first run that touched it
    layout: str | None = None
    reason: str = ""
    since: float = 0.0  # when it reached its step
    drained_by_us: bool = False
    # notes of this process's waits (see the module's docstring)
    signalled_at: float | None = None  # its jobs got the checkpoint signal
    requeue_at: float | None = None  # ... and are requeued then
    requeued_at: float | None = None
    gpus_busy: str = ""  # node apply answered 75 (GPUs in use): why
    gpus_busy_at: float | None = None
    not_started: str = ""  # srun started nothing (slurmctld away): why
    not_started_at: float | None = None
    apply_failed: str = ""  # node apply failed: why (rolled back next)
    apply_failed_at: float | None = None
    seen_switched_at: float | None = None  # the first of two looks that showed it switched
    resumed_at: float | None = None  # released: resumed and out of the reservation
    # after Slurm refused a wave's files: revert to `previous` (why), verified against `expected`
    revert: str = ""
    expected: Mapping[str, int] | None = None


@dataclass(frozen=True)
class RunRecord:
    """The run (``journal.json``'s ``run``)."""

    id: str
    target: str
    nodes: tuple[str, ...]
    reservation: str
    deadline: float
    steps: tuple[str, ...] = ()
    taken: float = 0.0  # when this process took the run (started or resumed it)
    restart_nodes: tuple[str, ...] = ()  # this wave's restart
    restarted_nodes: tuple[str, ...] = ()  # every wave's
    expected: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # node -> GRES rendered
    others: tuple[str, ...] = ()  # the unswitched nodes whose slurmd restarts at the end
    stale_reservations: tuple[str, ...] = ()
    refused: str = ""  # why Slurm did not come back with the wave's files


@dataclass(frozen=True)
class JournalState:
    run: RunRecord | None
    nodes: Mapping[str, NodeRecord] = field(default_factory=dict)

    def at(self, *steps: str) -> list[str]:
        """The run's nodes at these steps, in order."""
        if self.run is None:
            return []
        return [n for n in self.run.nodes if self.nodes[n].step in steps]


@dataclass(frozen=True)
class ClusterView:
    """What Slurm shows now (``sinfo --json``, ``squeue --json``, ``scontrol show reservation``);
    ``unreachable``: why slurmctld did not answer ("" when it did)."""

    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    jobs: tuple[JobInfo, ...] = ()
    reservations: Mapping[str, Reservation] = field(default_factory=dict)
    unreachable: str = ""
    earlier_sruns: int = 0  # sruns of ours still running on this host (a killed run's)

    @cached_property
    def _index(self) -> tuple[dict[str, list[JobInfo]], tuple[JobInfo, ...]]:
        return index_jobs(self.jobs)

    @property
    def _busy(self) -> dict[str, list[JobInfo]]:
        return self._index[0]

    @property
    def own_jobs(self) -> tuple[JobInfo, ...]:
        """Our own srun jobs Slurm shows (for :func:`~.rules.stale_own_jobs`)."""
        return self._index[1]

    def busy(self, node: str) -> list[JobInfo]:
        """The jobs ``node`` waits for (:func:`~.rules.busy_jobs`), from one pass over the jobs."""
        if self.unreachable:
            return busy_jobs((), node, self.unreachable)
        return list(self._busy.get(node, ()))


@dataclass(frozen=True)
class Policy:
    """The run's settings (``repartition:`` in the pool config, and the command's options)."""

    requeue: bool = False
    restart_unswitched: bool = True
    reservation_prefix: str = "gpupool"
    poll_s: float = 1.0
    verify_timeout_s: float = 120.0
    confirm_s: float = CONFIRM_S
    ready_timeout_s: float = READY_TIMEOUT_S
    after_requeue_s: float = AFTER_REQUEUE_S
    checkpoint: Callable[[str], tuple[str, int]] = lambda qos: ("USR1", 120)  # a job's QOS -> signal, grace
    wave_size: int = 0  # at most this many nodes in a wave (``repartition.wave_size``); 0: no bound

    @property
    def reservation_margin_s(self) -> int:
        """How much longer than the deadline a run's reservation lasts: verification and an hour."""
        return int(self.verify_timeout_s) + 3600


def journal_state(data: Mapping[str, Any]) -> JournalState:
    """The journal's JSON (any version this schema wrote: missing keys take their defaults)."""
    run = data.get("run")
    if not run:
        return JournalState(None, {})
    nodes: dict[str, NodeRecord] = {}
    for name in run.get("nodes", []):
        r = data.get("nodes", {}).get(name, {})
        nodes[name] = NodeRecord(
            step=r.get("step", WAITING),
            target=r.get("target", run["target"]),
            previous=r.get("previous"),
            layout=r.get("layout"),
            reason=r.get("reason", ""),
            since=float(r.get("since_epoch", 0.0)),
            drained_by_us=bool(r.get("drained_by_us")),
            signalled_at=r.get("signalled_at"),
            requeue_at=r.get("requeue_at"),
            requeued_at=r.get("requeued_at"),
            gpus_busy=r.get("gpus_busy", ""),
            gpus_busy_at=r.get("gpus_busy_at"),
            not_started=r.get("not_started", ""),
            not_started_at=r.get("not_started_at"),
            apply_failed=r.get("apply_failed", ""),
            apply_failed_at=r.get("apply_failed_at"),
            seen_switched_at=r.get("seen_switched_at"),
            resumed_at=r.get("resumed_at"),
            revert=r.get("revert", ""),
            expected=r.get("expected"),
        )
    record = RunRecord(
        id=str(run.get("id", "")),
        target=run["target"],
        nodes=tuple(run.get("nodes", [])),
        reservation=run["reservation"],
        deadline=float(run.get("deadline_epoch", 0.0)),
        steps=tuple(run.get("steps", [])),
        taken=float(run.get("taken_epoch", 0.0)),
        restart_nodes=tuple(run.get("restart_nodes", [])),
        restarted_nodes=tuple(run.get("restarted_nodes", [])),
        expected=run.get("expected", {}),
        others=tuple(run.get("others", [])),
        stale_reservations=tuple(run.get("stale_reservations", [])),
        refused=run.get("refused", ""),
    )
    return JournalState(record, nodes)


# -- before the run: what a killed one left, and whether to start or resume ---------------------------


def recovery(journal: JournalState) -> Action | None:
    """What a killed run left half-way that needs no slurmctld, and must be done before
    anything that does: put back files Slurm refused; finish a restart begun (the daemons
    may be down); start the unswitched nodes' slurmds a killed run stopped."""
    run = journal.run
    if run is None or FINISHED in run.steps:
        return None
    if run.refused:
        return RestoreFiles(run.refused, tuple(_wave(journal)), run.restart_nodes)
    redo = redo_first(run.steps)
    if redo == "restart":
        return FinishRestart(run.restart_nodes)
    if redo == "others":
        return RestartOthers(run.others, resumed=True)
    return None


Begin = Literal["resume", "start", "close", "nothing"]


def how_to_begin(unfinished_target: str | None, target: str, changing: Iterable[str]) -> Begin:
    """An unfinished run to the same layout is resumed (with any node the plan adds); else a
    run starts if nodes change, superseding an unfinished one to another layout (its nodes
    left midway are in the plan); an unfinished run with nothing to change is closed."""
    if unfinished_target == target:
        return "resume"
    if any(True for _ in changing):
        return "start"
    return "close" if unfinished_target is not None else "nothing"


# -- the run ------------------------------------------------------------------------------------------


def next_action(journal: JournalState, view: ClusterView, now: float, policy: Policy) -> Step:
    """The next step of the run (see the module's docstring); ``()``: the run is finished."""
    run = journal.run
    if run is None or FINISHED in run.steps:
        return ()
    first = recovery(journal)
    if first is not None:
        return (first,)
    stale = stale_own_jobs(view.own_jobs, policy.reservation_prefix)
    if stale and view.earlier_sruns:  # a killed run's srun may still apply: never cut it off
        return (Wait(policy.poll_s, f"{view.earlier_sruns} srun of an earlier run still running here"),)
    if stale:
        return (CancelStale(stale),)
    reserve = reservation(journal, view, now, policy)
    if reserve is not None:
        return (reserve,)
    repairs = repairs_midway(journal, view, now)
    if repairs:
        return repairs
    begun = any(s in run.steps for s in WAVE_STEPS)
    if begun and GRES_INSTALLED not in run.steps:
        return (InstallGres(tuple(_wave(journal))),)
    if begun and RESTARTED not in run.steps:
        return (Restart(run.restart_nodes),)
    # per node: verification of the wave (and of reverted nodes), waiting nodes
    reverting = any(r.revert and r.step not in OUTCOMES for r in journal.nodes.values())
    per_node = [*verification(journal, view, now, policy), *waiting(journal, view, now, policy)]
    if begun or reverting:  # one wave at a time: nodes freed meanwhile apply after it
        per_node = [_held_back(a, policy) if isinstance(a, Apply) else a for a in per_node]
    elif policy.wave_size:
        per_node = _within_wave(per_node, journal, policy)
    acts = tuple(a for a in per_node if not isinstance(a, Wait))
    if acts:
        return acts
    wave = _wave(journal)
    if not begun and not reverting and wave:  # no node is free to apply now: commit the wave
        return (InstallGres(tuple(wave)),)
    if begun and not wave:
        return (NextWave(),)
    if not begun and not reverting and all(journal.nodes[n].step in OUTCOMES for n in run.nodes):
        return (the_end(journal, view, now, policy),)
    waits = [a for a in per_node if isinstance(a, Wait)] or [Wait(policy.poll_s, "waiting")]
    return (min(waits, key=lambda w: w.seconds),)


def reservation(journal: JournalState, view: ClusterView, now: float, policy: Policy) -> Reserve | None:
    """The run's reservation holds exactly the nodes not yet through (and the skipped: their
    jobs run on, no new job may land there) and has begun; one made ahead of this switch is
    folded into it.  None when it is so (or Slurm cannot be asked)."""
    run = journal.run
    if run is None or view.unreachable:
        return None
    name = run.reservation
    holds = frozenset(n for n in run.nodes if _held_by_run(journal.nodes[n], run.taken))
    ahead = tuple(r for r in (ahead_name(name),) if r in view.reservations)
    existing = view.reservations.get(name)
    start_now = existing is not None and existing.start > _dt(now) + timedelta(seconds=5)
    how: Literal["create", "update", "delete", "keep"]
    if not holds:  # a resumed run whose nodes are all through (killed in its last steps)
        how = "delete" if existing is not None else "keep"
    elif existing is None:
        how = "create"
    elif start_now or existing.nodes != holds:
        how = "update"
    else:
        how = "keep"
    if how == "keep" and not ahead and RESERVED in run.steps:
        return None
    fresh = tuple(n for n in run.nodes if journal.nodes[n].step == WAITING and not journal.nodes[n].reason)
    duration = max(60, int(run.deadline - now)) + policy.reservation_margin_s
    return Reserve(name, holds, how, start_now, duration, ahead, fresh)


def repairs_midway(journal: JournalState, view: ClusterView, now: float) -> Step:
    """Nodes midway that need mending before the rest goes on: applied but not drained (a
    run killed between the two), an apply that failed (roll back), a wave Slurm refused
    (revert the GPUs to the layout the restored files describe)."""
    run = journal.run
    assert run is not None
    out: list[Action] = []
    for n in run.nodes:
        r = journal.nodes[n]
        if r.step == APPLIED:
            out.append(Drain(n, r.target))
        elif r.step == APPLYING and _fresh(r.apply_failed_at, run.taken) is not None:
            out.append(RollBack(n, r.target, r.previous, r.apply_failed))
        elif r.revert and r.expected is None and r.step not in OUTCOMES:
            out.append(Revert(n, r.previous, r.revert))
    return tuple(out)


def waiting(journal: JournalState, view: ClusterView, now: float, policy: Policy) -> list[Action]:
    """Each node still to apply: apply once its jobs are gone; until the deadline wait (and
    say why); at the deadline, with ``requeue``, checkpoint-signal the requeueable jobs, requeue
    them after the longest grace, wait a minute more; else skip it: a job is never killed."""
    run = journal.run
    assert run is not None
    out: list[Action] = []
    for n in run.nodes:
        r = journal.nodes[n]
        if r.step not in (WAITING, APPLYING) or _fresh(r.apply_failed_at, run.taken) is not None:
            continue  # (an interrupted apply is applied again)
        out.append(_waiting_node(n, r, view, now, policy, run))
    return out


def _waiting_node(n: str, r: NodeRecord, view: ClusterView, now: float, policy: Policy, run: RunRecord) -> Action:
    busy = view.busy(n)
    if not busy:
        busy_at = _fresh(r.gpus_busy_at, run.taken)
        if busy_at is not None and now >= run.deadline:
            return Skip(n, f"GPUs still busy at the deadline: {r.gpus_busy}")
        if busy_at is not None and now < busy_at + 2 * policy.poll_s:
            return Wait(busy_at + 2 * policy.poll_s - now, f"{n}: GPUs busy")
        tried_at = _fresh(r.not_started_at, run.taken)
        if tried_at is not None and now >= run.deadline:
            return Skip(n, f"srun could not start node apply by the deadline: {r.not_started}")
        if tried_at is not None and now < tried_at + policy.poll_s:
            return Wait(tried_at + policy.poll_s - now, f"{n}: srun started nothing, again")
        info = view.nodes.get(n)
        return Apply(n, r.target, resume_first=_ours_to_resume(r, info))
    signalled = _fresh(r.signalled_at, run.taken)
    requeued = _fresh(r.requeued_at, run.taken)
    if signalled is not None and requeued is None:
        due = r.requeue_at if r.requeue_at is not None else signalled
        if now < due:
            return Wait(due - now, f"{n}: checkpoint grace")
        return Requeue(n, tuple(j.job_id for j in busy if j.requeue and j.state == "RUNNING"))
    deadline = requeued + policy.after_requeue_s if requeued is not None else run.deadline
    if view.unreachable and now >= deadline:
        return Skip(n, f"slurmctld not answering at the deadline ({view.unreachable}): its jobs unknown, none killed")
    d = after_jobs(busy, now, deadline, policy.requeue, signalled is not None, describe_jobs(busy, now))
    if d.action == "skip":
        return Skip(n, d.reason)
    if d.action == "requeue":
        jobs = [j for j in busy if j.requeue and j.state == "RUNNING"]
        marks = [policy.checkpoint(j.qos) for j in jobs]  # each job its tier's signal; the longest grace
        return Signal(
            n, tuple((j.job_id, sig) for j, (sig, _) in zip(jobs, marks, strict=True)), max(g for _, g in marks)
        )
    if d.reason != r.reason:
        return NoteWaiting(n, d.reason)
    return Wait(min(policy.poll_s, max(0.0, deadline - now)) or policy.poll_s, d.reason)


def verification(journal: JournalState, view: ClusterView, now: float, policy: Policy) -> list[Action]:
    """Each node of the restarted wave (and each reverted one): verified when Slurm shows the
    GRES rendered from its GPUs' state, its layout feature and that it answers, on two looks
    ``confirm_s`` apart; then released (resumed, out of the reservation), and done once Slurm
    would start a job there.  Failed (drained with why) past ``verify_timeout_s``, or past
    ``ready_timeout_s`` after its release."""
    run = journal.run
    assert run is not None
    out: list[Action] = []
    for n in run.nodes:
        r = journal.nodes[n]
        if r.step not in (DRAINED, VERIFYING):
            continue
        if r.revert:
            if r.expected is None:
                continue  # reverted first (repairs_midway)
            expected, layout, outcome, note = r.expected, r.layout or "", ROLLED_BACK, r.revert
        elif RESTARTED in run.steps:
            expected, layout, outcome, note = run.expected.get(n, {}), run.target, DONE, ""
        else:
            continue  # its wave has not restarted yet
        if r.step == DRAINED:
            out.append(BeginVerify(n))
        else:
            out.append(_verify_node(n, r, expected, layout, outcome, note, view, now, policy, run))
    return out


def _verify_node(
    n: str,
    r: NodeRecord,
    expected: Mapping[str, int],
    layout: str,
    outcome: str,
    note: str,
    view: ClusterView,
    now: float,
    policy: Policy,
    run: RunRecord,
) -> Action:
    info = view.nodes.get(n)
    resumed = _fresh(r.resumed_at, run.taken)
    if resumed is not None:  # done means Slurm would start a job on it now
        prefix = policy.reservation_prefix + "_"
        problem = view.unreachable or (
            ready_problem(info) or held_problem(n, view.reservations.values(), prefix, _dt(now))
        )
        if not problem:
            return Done(n, outcome, layout, note)
        if now >= resumed + policy.ready_timeout_s:
            return Fail(n, f"gpupool: switched to {layout}, but Slurm would not start a job there: {problem}")
        return Wait(min(1.0, policy.poll_s), f"{n}: {problem}")
    problem = view.unreachable or verify_problem(info, expected, layout)
    seen = _fresh(r.seen_switched_at, run.taken)
    if problem:
        if now >= max(r.since, run.taken) + policy.verify_timeout_s:
            return Fail(n, f"gpupool: verify after switch to {layout} failed: {problem}")
        return SeenSwitched(n, None) if seen is not None else Wait(policy.poll_s, f"{n}: {problem}")
    if seen is None:
        return SeenSwitched(n, now)
    if now < seen + policy.confirm_s:
        return Wait(seen + policy.confirm_s - now, f"{n}: looking again")
    return Release(n, resume=_ours_to_resume(r, info))


def the_end(journal: JournalState, view: ClusterView, now: float, policy: Policy) -> Action:
    """Every node is through: restart slurmd on the answering nodes the run did not restart
    (so every slurmd reads the slurm.conf slurmctld has), then finish: the reservation keeps
    only the skipped nodes, until their jobs end."""
    run = journal.run
    assert run is not None
    if run.restarted_nodes and OTHERS_RESTARTED not in run.steps and policy.restart_unswitched:
        if view.unreachable:
            why = f"slurmd not restarted on the nodes that did not switch: {view.unreachable}"
            return RestartOthers((), problem=why)
        return RestartOthers(tuple(unswitched_to_restart(view.nodes, run.restarted_nodes)))
    steps = {n: journal.nodes[n].step for n in run.nodes}
    held = frozenset(still_held(steps))
    return Finish(run.reservation, held, held_for_s(view.jobs, held, now), run.stale_reservations, steps)


# -- helpers --------------------------------------------------------------------------------------------


def _wave(journal: JournalState) -> list[str]:
    """The nodes of the wave under way: applied and drained (and verifying), reverts aside."""
    return [n for n in journal.at(DRAINED, VERIFYING) if not journal.nodes[n].revert]


def _ours_to_resume(r: NodeRecord, info: NodeInfo | None) -> bool:
    """Drained by this run, or by an earlier one (Slurm shows our reason): a drain Slurm
    restored after slurmctld was killed, or a node an earlier run failed.  Ours to resume
    (the run's reservation holds the node meanwhile); an admin's drain never is."""
    return info is not None and info.drained and (r.drained_by_us or ours(info) or switch_gres_drain(info))


def _held_by_run(r: NodeRecord, taken: float) -> bool:
    """In the run's reservation: not yet through (a node released by this process is out), or skipped."""
    if r.step == SKIPPED:
        return True
    return r.step not in OUTCOMES and _fresh(r.resumed_at, taken) is None


def _within_wave(per_node: list[Action], journal: JournalState, policy: Policy) -> list[Action]:
    """The applies that fit in the wave forming (``wave_size`` nodes: those applied or
    drained already count), an interrupted apply first; the others wait for the next wave."""
    formed = [n for n in journal.at(APPLIED, DRAINED, VERIFYING) if not journal.nodes[n].revert]
    applies = [a for a in per_node if isinstance(a, Apply)]
    applies.sort(key=lambda a: journal.nodes[a.node].step != APPLYING)  # (stable: the run's order)
    room = {a.node for a in applies[: max(0, policy.wave_size - len(formed))]}
    return [_held_back(a, policy) if isinstance(a, Apply) and a.node not in room else a for a in per_node]


def _held_back(a: Apply, policy: Policy) -> Wait:
    return Wait(policy.poll_s, f"{a.node}: free, applies after the wave under way")


def _fresh(at: float | None, taken: float) -> float | None:
    """A note of a wait counts only if this process wrote it (see the module's docstring)."""
    return at if at is not None and at >= taken else None


def _dt(now: float) -> datetime:
    """Slurm's reservation times are local, without a zone."""
    return datetime.fromtimestamp(now)
