"""``gpupool repartition``: switch nodes to a layout without killing a job.

Slurm is the distributed engine (DESIGN.md).  A run, on the controller, reads top to
bottom (:meth:`Repartitioner.run`): take the lock; finish what a killed run left
half-way; plan; begin (or resume) the journal's run; then loop

    observe (the journal, and Slurm through :class:`~slurm_gpupool.slurm.protocol.Slurm`)
    -> :func:`~slurm_gpupool.repartition.next_action.next_action` (pure: every decision)
    -> perform (each action's Slurm command; applies on several nodes at once)
    -> journal the result

until the run is finished; then report.  What a switch does (reserve, wait for jobs,
``srun ... gpupool node apply``, drain, install GRES, restart the daemons in batches,
verify, resume and release each node, restart the slurmds that did not switch) is
told in ``repartition/next_action.py`` and ``repartition/actions.py``; here is only
how each action is done.  (Slurm 22.05 refuses srun on a drained node, even inside
a maintenance reservation, measured: so a node is drained right after its apply.)

Failures: an apply that fails is rolled back to the previous layout on that node,
which stays drained with the reason.  If slurmctld refuses the new files, the
previous ones are restored, the daemons restarted, and the nodes' GPUs reverted.  A
node is resumed only when Slurm's GRES equal those rendered from the state its GPUs
reported.  Every step is journaled (``repartition/journal.py``) and idempotent, so a
killed run is finished by the next.  Time is read only from the injected clock.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.controller.gres_install import check_type_ids, install, installed_paths, render
from slurm_gpupool.core.gres.hostlist import expand
from slurm_gpupool.core.policy.durations import format_duration
from slurm_gpupool.core.policy.switch_plan import CHANGE, KEEP, SKIP, SwitchPlan, batches, changing_after, plan_switch
from slurm_gpupool.errors import OperationFailedError, SlurmUnavailableError, StateError, UsageError
from slurm_gpupool.node.state import FILE_NAME, controller_copy_dir
from slurm_gpupool.repartition import journal as jr
from slurm_gpupool.repartition.actions import (
    ON_NODES,
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
from slurm_gpupool.repartition.journal import Journal, run_lock
from slurm_gpupool.repartition.next_action import (
    ClusterView,
    Policy,
    how_to_begin,
    journal_state,
    next_action,
    recovery,
)
from slurm_gpupool.repartition.restarts import Restarter
from slurm_gpupool.repartition.rules import (
    JOB_NAME,
    OUR_DRAIN,
    ahead_name,
    busy_by_node,
    ends_in,
    node_report,
    node_views,
    priorities_to_restore,
    reason_text,
    run_exit_code,
    srun_not_started,
    stale_own_jobs,
    stuck_launches,
    unswitched_to_restart,
)
from slurm_gpupool.repartition.scheduled import ahead_nodes, lead_time_s
from slurm_gpupool.slurm.cluster import SlurmCluster
from slurm_gpupool.slurm.protocol import Slurm
from slurm_gpupool.slurm.types import gres_counts, hostlist
from slurm_gpupool.util.atomic import write_json_atomic, write_text_atomic
from slurm_gpupool.util.clock import SYSTEM, Clock
from slurm_gpupool.util.oplog import tee

PRIORITIES = "pending-priorities.json"  # pending jobs' priorities before a switch (BadConstraints zeroes them)


def checkpoint_of(cfg: PoolConfig, qos: str) -> tuple[str, int]:
    """The signal and grace before a requeue of a job of this QOS: its tier's (docs/tiers.md),
    else ``repartition.checkpoint_signal`` / ``checkpoint_grace``."""

    from slurm_gpupool.pool.tiers import tier_of_qos  # only when a job is requeued

    s = cfg.repartition
    tier = tier_of_qos(cfg, qos)
    if tier is None:
        return s.checkpoint_signal, s.checkpoint_grace_s
    return tier.checkpoint_signal or s.checkpoint_signal, tier.grace_s or s.checkpoint_grace_s


@dataclass
class RunReport:
    target: str
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # node → {outcome, reason, unavailable_s}
    kept: list[str] = field(default_factory=list)
    skipped_plan: dict[str, str] = field(default_factory=dict)
    reservation: str | None = None
    seconds: float = 0.0
    messages: list[str] = field(default_factory=list)
    waves: int = 0  # waves installed and restarted (one slurmctld restart each; ``repartition.wave_size``)

    @property
    def exit_code(self) -> int:
        outcomes = {n: v["outcome"] for n, v in self.nodes.items()}
        outcomes.update({n: "kept" for n in self.kept})
        outcomes.update({n: "not_switched" for n in self.skipped_plan})
        return run_exit_code(outcomes)

    def every_node(self) -> dict[str, dict[str, Any]]:
        """Every node the layout covers, with its outcome and why: switched or tried, kept
        (already in the layout) or not switched (not usable, not known to Slurm)."""
        out = {n: {"outcome": "kept", "reason": f"already in layout {self.target}"} for n in self.kept}
        out.update({n: {"outcome": "not_switched", "reason": why} for n, why in self.skipped_plan.items()})
        out.update(self.nodes)
        return dict(sorted(out.items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "nodes": self.every_node(),
            "kept": self.kept,
            "not_switched": self.skipped_plan,
            "reservation": self.reservation,
            "seconds": round(self.seconds, 2),
            "waves": self.waves,
            "messages": self.messages,
            "exit_code": self.exit_code,
        }


def _refuse_leaving_midway(earlier: str, target: str, left: set[str]) -> None:
    """A run to another layout supersedes an unfinished one (``how_to_begin``) and takes over
    its nodes left midway only where it switches them too.  One that would not (``--nodes``
    without them, the elastic step's few nodes, a layout that does not cover them) would have
    closed the earlier run and left those nodes for good: GPUs in one layout, Slurm's GRES of
    another, drained or reserved, and every later run calling them kept.  Refused instead,
    before anything is touched."""
    if left:
        names = ", ".join(sorted(left))
        raise StateError(
            f"an unfinished run to layout {earlier} left {names} midway",
            f"this run to layout {target} would not finish them",
            hint=f"finish it first: gpupool repartition --to {earlier} (or a run to {target} that includes {names})",
        )


class Repartitioner:
    """One controller's switches; Slurm, the restart commands, the clock and the kill hook
    (fault injection: :func:`~slurm_gpupool.repartition.journal.kill_point`) are injectable."""

    def __init__(
        self,
        cfg: PoolConfig,
        cluster: Slurm | None = None,
        restarter: Restarter | None = None,
        progress: Callable[[str], None] | None = None,
        poll_s: float = 1.0,
        clock: Clock | None = None,
        kill: Callable[[str], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock or SYSTEM
        self.s = cfg.repartition
        self.cluster = cluster or SlurmCluster()
        self.restarter = restarter or Restarter(cfg.repartition)
        self.progress = tee("repartition", progress)  # every step to syslog too, as the hooks log
        self.poll_s = poll_s
        self._drain_tries: dict[str, float] = {}  # node -> when this run first tried its drain again
        self.dir = Path(cfg.paths.controller_dir)
        self.journal = Journal(self.dir, self.clock, kill)
        self.requeue = cfg.repartition.requeue
        self.messages: list[str] = []  # for the report: what went wrong without failing the run
        self._resv_lock = threading.Lock()  # parallel rollbacks leave the reservation one at a time

    # -- planning ------------------------------------------------------------------------

    def reservation_name(self, target: str) -> str:
        return f"{self.s.reservation_prefix}_{target}"

    def _check_target(self, target: str) -> None:
        if target not in self.cfg.layout_names():
            raise UsageError(f"layout {target!r}", "not in the pool config", hint=", ".join(self.cfg.layout_names()))

    def plan(
        self, target: str, nodes: list[str] | None = None, force: bool = False, after_due: bool = False
    ) -> SwitchPlan:
        """The switch to ``target``; ``after_due``: planned as if the due run (a dry run's,
        ``prepare(after=...)``) had finished first, as the real run does before it plans this."""
        self._check_target(target)
        # type names Slurm would confuse fail the GRES install: refuse before any node is touched
        check_type_ids(self.cfg)
        j = Journal(self.dir).load()
        unfinished = j.unfinished()
        midway = {n for n in (unfinished or {}).get("nodes", []) if j.node(n)["step"] not in jr.OUTCOMES}
        last_run = (j.data.get("run") or {}).get("nodes", [])  # finished or not: the last one's nodes
        covered = [n for n in self.cfg.all_nodes() if self.cfg.covers(target, n)]
        views = node_views(self.cluster.nodes(), midway, last_run)
        plan = plan_switch(target, covered, views, nodes, midway, force)
        if unfinished is not None and unfinished["target"] != target and not after_due:
            # a node still waiting for its jobs was not touched: the new run's start deletes the
            # earlier reservation, and the node is as it was
            left = {n for n in midway - set(plan.nodes(CHANGE)) if j.node(n)["step"] != jr.WAITING}
            _refuse_leaving_midway(unfinished["target"], target, left)
        return plan

    def describe(self, plan: SwitchPlan, deadline_s: int, requeue: bool) -> dict[str, Any]:
        """The whole plan of a run, for --dry-run: nothing is changed."""
        jobs = self.cluster.jobs()
        now = self.clock.time()
        resv = self.reservation_name(plan.target)
        node_cmd = [*self.s.node_command, "node", "apply", plan.target, "--json"]
        nodes = []
        by_node = busy_by_node(jobs)  # once: per node, N nodes read N x J jobs
        for d in plan.decisions:
            busy = by_node.get(d.name, [])
            nodes.append(
                {
                    "node": d.name,
                    "action": d.action,
                    "current": d.current,
                    "target": d.target,
                    "why": d.why,
                    "jobs": [
                        {"job_id": j.job_id, "user": j.user, "ends_in_s": ends_in(j, now), "requeue": j.requeue}
                        for j in busy
                    ],
                }
            )
        changing = plan.changing
        steps = []
        if changing:
            steps.append(
                f"scontrol create reservation ReservationName={resv} StartTime=now Nodes={hostlist(changing)} "
                "Flags=MAINT,IGNORE_JOBS Users=root"
            )
            steps.append(
                f"per node ({self.s.parallel} at a time): wait for its jobs (deadline {format_duration(deadline_s)}"
                + (", then signal and requeue requeueable jobs" if requeue else ", then skip it")
                + f"); srun --reservation={resv} -w NODE {' '.join(node_cmd)}; "
                f"scontrol update nodename=NODE state=drain reason='{OUR_DRAIN} {plan.target}'"
            )
            # in waves of wave_size (repartition.wave_size), as the nodes come free: here in order
            waves = batches(changing, self.s.wave_size) if self.s.wave_size else [changing]
            verify = f"verify each node: sinfo GRES == rendered, feature layout_{plan.target}; then resume"
            for k, wave in enumerate(waves, 1):
                tag = f"wave {k}/{len(waves)} ({hostlist(wave)}): " if len(waves) > 1 else ""
                steps.append(tag + "gpupool gres install (live node states)")
                steps += [tag + " ".join(c) for c in self.restarter.commands(wave)]
                steps.append(tag + verify)
            steps.append(f"scontrol delete ReservationName={resv}")
            others = unswitched_to_restart(self.cluster.nodes(), changing) if self.s.restart_unswitched else []
            steps += [
                " ".join(c) + "  # not switched, for the new slurm.conf" for c in self.restarter.slurmd_commands(others)
            ]
        return {"target": plan.target, "reservation": resv, "nodes": nodes, "steps": steps}

    # -- ahead of a scheduled switch -----------------------------------------------------

    def lead_time_s(self) -> int:
        """``lead_time``, or auto: see :func:`~slurm_gpupool.repartition.rules.lead_time_default`."""
        sched = self.cfg.schedule
        max_time = None if self.s.lead_time_s is not None else self.cluster.partition_max_time_s(self.s.partition)
        now = self.clock.now(sched.tz) if sched and sched.tz else self.clock.now().astimezone()
        return lead_time_s(self.s.lead_time_s, max_time, sched, now, self.s.max_lead_time_s)

    def prepare(
        self, target: str, start: datetime, nodes: list[str] | None = None, after: SwitchPlan | None = None
    ) -> tuple[str, list[str]] | None:
        """Reserve the nodes that will change, from ``start``: backfill keeps filling them until then.

        Its own reservation (``<name>_ahead``), never the run's: that one may already hold
        skipped nodes now, and folding the others into it reserved them all from now on.
        With ``after`` (a dry run of the due switch) nothing is made: the name and the nodes
        it would hold once that switch is done are returned."""
        plan = self.plan(target, nodes, after_due=after is not None)
        name = ahead_name(self.reservation_name(target))
        reservations = self.cluster.reservations()
        changing = plan.changing if after is None else changing_after(plan, after)
        wanted = ahead_nodes(changing, reservations, self.s.reservation_prefix + "_", self.clock.now())
        if after is not None:
            return (name, sorted(wanted)) if wanted else None
        if not wanted:
            return None
        duration = self.s.deadline_s + self.s.verify_timeout_s + 3600
        existing = reservations.get(name)
        if existing is None:
            self.cluster.create_reservation(name, wanted, start, duration)
        elif wanted != existing.nodes:
            self.cluster.update_reservation(name, nodes=wanted)
        self.progress(f"reserved {hostlist(wanted)} from {start:%Y-%m-%d %H:%M} for layout {target} ({name})")
        return name, sorted(wanted)

    # -- the switch ----------------------------------------------------------------------

    def run(
        self,
        target: str,
        nodes: list[str] | None = None,
        deadline_s: int | None = None,
        requeue: bool | None = None,
        force: bool = False,
        trigger: str = jr.TRIGGER_BY_HAND,
    ) -> RunReport:
        """One switch to ``target``, top to bottom.  ``trigger``: who asked (journal.TRIGGER_*),
        recorded with the run for ``gpupool status``."""
        t0 = self.clock.time()
        self._check_target(target)
        deadline_s = self.s.deadline_s if deadline_s is None else deadline_s
        self.requeue = self.s.requeue if requeue is None else requeue
        report = RunReport(target)
        self.messages = []
        with run_lock(self.dir):
            self.journal.load()
            self._recover()  # before anything that needs slurmctld
            plan = self.plan(target, nodes, force)
            self._record_priorities()
            report.kept = plan.nodes(KEEP)
            report.skipped_plan = {d.name: d.why for d in plan.decisions if d.action == SKIP}
            if self._begin(plan, deadline_s, trigger):
                report.reservation = self.journal.run["reservation"] if self.journal.run else None
                self._loop()
                self._report(report)
            else:
                report.messages.append(f"every node the layout covers is in layout {target}")
        report.messages += self.messages
        report.seconds = self.clock.time() - t0
        return report

    def _recover(self) -> None:
        """What a killed run left half-way that needs no slurmctld (the journal alone says)."""
        while (action := recovery(journal_state(self.journal.data))) is not None:
            self._do(action)

    def _begin(self, plan: SwitchPlan, deadline_s: int, trigger: str = jr.TRIGGER_BY_HAND) -> bool:
        """Start the journal's run, or resume an unfinished one; False: nothing to switch."""
        j = self.journal
        unfinished = j.unfinished()
        previous = {d.name: d.current for d in plan.decisions}
        deadline = self.clock.time() + deadline_s
        how = how_to_begin(unfinished["target"] if unfinished else None, plan.target, plan.changing)
        if how == "resume" and unfinished is not None:
            self.progress(f"resuming the unfinished run {unfinished['id']} to layout {plan.target}")
            j.resume_run(plan.changing, previous, deadline)
        elif how == "start":
            stale = [unfinished["reservation"]] if unfinished else []
            j.start(plan.target, plan.changing, self.reservation_name(plan.target), deadline, previous, stale, trigger)
        elif how == "close" and unfinished is not None:  # an earlier run to another layout left nothing midway
            self._delete_reservations([unfinished["reservation"]])
            j.cluster_step(jr.FINISHED, finished_at=jr.now_iso(self.clock))
        return j.unfinished() is not None

    def _loop(self) -> None:
        """Observe, decide, perform, until the run is finished."""
        policy = self._policy()
        while True:
            run = self.journal.run
            if run is not None and self.clock.time() < float(run.get("taken_epoch", 0.0)):
                self.journal.retake()  # the clock stepped back: notes count from now on
            step = next_action(journal_state(self.journal.data), self._observe(), self.clock.time(), policy)
            if not step:
                return
            self._perform(step)

    def _observe(self) -> ClusterView:
        try:
            nodes, jobs, resv = self.cluster.nodes(), tuple(self.cluster.jobs()), self.cluster.reservations()
        except SlurmUnavailableError as e:  # e.g. slurmctld restarting: the decision knows what to do
            return ClusterView(unreachable=str(e))
        # the /proc scan only when a stale job is in question (our finished jobs stay in
        # squeue for MinJobAge: a condition on the name alone scanned at every look after an apply)
        earlier = own_sruns_alive() if stale_own_jobs(jobs, self.s.reservation_prefix) else 0
        return ClusterView(nodes, jobs, resv, earlier_sruns=earlier)

    def _policy(self) -> Policy:
        return Policy(
            requeue=self.requeue,
            restart_unswitched=self.s.restart_unswitched,
            reservation_prefix=self.s.reservation_prefix,
            poll_s=self.poll_s,
            verify_timeout_s=float(self.s.verify_timeout_s),
            checkpoint=lambda qos: checkpoint_of(self.cfg, qos),
            wave_size=self.s.wave_size,
        )

    def _perform(self, step: tuple[Action, ...]) -> None:
        """Every action of a step; srun on nodes in parallel (``parallel`` at a time)."""
        on_nodes = [a for a in step if isinstance(a, ON_NODES)]
        for a in step:
            if not isinstance(a, ON_NODES):
                self._do(a)
        if on_nodes:
            done = threading.Event()
            watch = threading.Thread(target=self._watch_launches, args=(done,), daemon=True)
            watch.start()
            try:
                with ThreadPoolExecutor(max_workers=min(self.s.parallel, len(on_nodes))) as ex:
                    for f in [ex.submit(self._do, a) for a in on_nodes]:
                        f.result()
            finally:
                done.set()
                watch.join()

    def _watch_launches(self, done: threading.Event) -> None:
        """While sruns run: every quarter of ``launch_timeout`` (real time; at most 10 s, at
        least the poll), ``squeue --json``, and cancel those of ours stuck in their
        allocation's prolog (:func:`~slurm_gpupool.repartition.rules.stuck_launches`; the
        age is by the executor's clock).  Never fatal: a stuck srun then ends at the command
        timeout, as before."""
        every = max(self.poll_s, min(10.0, self.s.launch_timeout_s / 4))
        prefix = self.s.reservation_prefix
        while not done.wait(every):
            try:
                for job in stuck_launches(self.cluster.jobs(), self.clock.time(), self.s.launch_timeout_s, prefix):
                    self.progress(f"job {job}: srun waited {self.s.launch_timeout_s} s for its prolog; cancelled")
                    self.cluster.cancel_job(job)
            except Exception as e:
                self.progress(f"watching the sruns' prologs: {type(e).__name__}: {e}")

    def _do(self, action: Action) -> None:
        match action:
            case Wait():
                self.clock.sleep(action.seconds)
            case FinishRestart():
                self._finish_restart(action)
            case RestoreFiles():
                self._restore_files(action)
            case CancelStale():
                self.progress(f"cancelling our own jobs left without their srun: {', '.join(map(str, action.jobs))}")
                for job in action.jobs:
                    try:
                        self.cluster.cancel_job(job)
                    except SlurmUnavailableError as e:  # slurmctld away: seen again next look
                        self.progress(f"could not cancel job {job}: {e}")
                self.clock.sleep(min(self.poll_s, 1.0))  # one that comes back (a crash) is not cancelled in a busy loop
            case Reserve():
                self._reserve(action)
            case NoteWaiting():
                self.journal.step(action.node, jr.WAITING, reason=action.reason)
            case Signal():
                self._signal(action)
            case Requeue():
                for job in action.jobs:
                    self.cluster.requeue(job)
                self.journal.note(action.node, requeued_at=self.clock.time())
            case Skip():
                self.journal.step(action.node, jr.SKIPPED, reason=action.reason)
                self.progress(f"{action.node}: skipped, {action.reason}")
            case Apply():
                self._apply(action)
            case Drain():
                self._drain_again(action)
            case RollBack():
                self._roll_back(action)
            case Revert():
                self._revert(action)
            case InstallGres():
                self._install_gres(action)
            case Restart():
                self._restart(action)
            case BeginVerify():
                self.journal.step(action.node, jr.VERIFYING)
            case SeenSwitched():
                self.journal.note(action.node, seen_switched_at=action.at)
            case Release():
                self._release_node(action)
            case Done():
                self._done(action)
            case Fail():
                self._fail(action.node, action.reason)
            case NextWave():
                self.journal.next_wave()
            case RestartOthers():
                self._restart_others(action)
            case Finish():
                self._finish(action)

    def _report(self, report: RunReport) -> None:
        run = self.journal.run
        assert run is not None
        report.nodes = {n: node_report(run, self.journal.node(n)) for n in run["nodes"]}
        report.waves = run.get("wave", 1) - 1  # (the journal counts each wave's end: NextWave)

    # -- performing: what a killed run left ------------------------------------------------

    def _finish_restart(self, a: FinishRestart) -> None:
        run = self.journal.run
        assert run is not None
        self.progress(f"finishing the restart run {run['id']} began (slurmctld and slurmd on {hostlist(a.nodes)})")
        failed = self.restarter.restart(list(a.nodes))
        if failed or not self._wait_controller():
            raise SlurmUnavailableError(
                "repartition",
                f"slurmctld does not come back after the restart a killed run began"
                f" ({failed.why() if failed else 'no answer to scontrol ping'})",
                hint=f"start it by hand; the journal in {self.dir} keeps the run",
            )
        self.journal.cluster_step(jr.RESTARTED)

    def _restore_files(self, a: RestoreFiles) -> None:
        """slurmctld (or a slurmd) did not come back with the new files: restore the old ones and
        restart; the wave's nodes are reverted next (their GPUs to the previous layout)."""
        j = self.journal
        run = j.run
        assert run is not None
        self.progress(f"restart failed ({a.why}): restoring the previous Slurm files")
        self._restore()
        failed = self.restarter.restart(list(a.restart))
        if failed or not self._wait_controller():
            raise OperationFailedError(
                "repartition",
                f"Slurm did not come back after restoring the previous files ({failed.why() if failed else a.why})",
                hint=f"the previous files are in {self._snapshot_dir()}; the journal keeps the run",
            )
        note = reason_text(f"Slurm refused the configuration for layout {run['target']} ({a.why}); restored")
        for node in a.nodes:
            j.note(node, revert=note)
        j.note_run(refused="")
        j.next_wave()  # not a new render: the config that produced the refused files would produce them again

    # -- performing: the reservation --------------------------------------------------------

    def _reserve(self, a: Reserve) -> None:
        j = self.journal
        run = j.run
        assert run is not None
        self._delete_reservations(list(a.delete_first))
        if a.how == "create":
            self.cluster.create_reservation(a.name, a.nodes, None, a.duration_s)
        elif a.how == "update":
            start = self.clock.now() + timedelta(seconds=2) if a.start_now else None  # made ahead: begin now
            self.cluster.update_reservation(a.name, nodes=a.nodes, start=start, duration_s=a.duration_s)
        elif a.how == "delete" and self._delete_reservations([a.name]):
            # still there (in use, slurmctld away): asked again after a poll, not in a busy loop
            self.clock.sleep(self.poll_s)
            return
        j.cluster_step(jr.RESERVED, reserved_at=run.get("reserved_at") or self.clock.time())
        if a.nodes:
            self.progress(f"reservation {a.name} holds {hostlist(a.nodes)}")
        for node in a.waiting:
            j.step(node, jr.WAITING, reason="waiting for its jobs to end")

    def _release(self, node: str) -> None:
        """Take a node out of the run's reservation the moment it is through (verified,
        rolled back or failed): no node waits for the slowest."""
        run = self.journal.run
        assert run is not None
        name = run["reservation"]
        with self._resv_lock:
            try:
                existing = self.cluster.reservations().get(name)
                if existing is None or node not in existing.nodes:
                    return
                left = existing.nodes - {node}
                if left:
                    self.cluster.update_reservation(name, nodes=left)
                else:
                    self.cluster.delete_reservation(name)
            except SlurmUnavailableError as e:
                self.progress(f"{node}: could not leave reservation {name}: {e}")

    def _delete_reservations(self, names: list[str]) -> list[str]:
        """``scontrol delete reservation`` of each; the names it could not delete."""
        left = []
        for name in names:
            try:
                self.cluster.delete_reservation(name)
            except SlurmUnavailableError as e:
                self.progress(f"could not delete reservation {name}: {e}")
                left.append(name)
        return left

    # -- performing: one node ----------------------------------------------------------------

    def _signal(self, a: Signal) -> None:
        for job, signal in a.jobs:
            self.cluster.signal_job(job, signal)
        self.progress(
            f"{a.node}: checkpoint signal to jobs {', '.join(str(job) for job, _ in a.jobs)}"
            f", requeue in {format_duration(a.grace_s)}"
        )
        now = self.clock.time()
        self.journal.note(a.node, signalled_at=now, requeue_at=now + a.grace_s)

    def _apply(self, a: Apply) -> None:
        j = self.journal
        try:
            if a.resume_first:
                try:  # srun cannot run on a drained node; the reservation holds it
                    self.cluster.resume([a.node])
                except SlurmUnavailableError as e:  # nothing changed on the node: tried again
                    self._not_started(a.node, f"resume: {e}")
                    return
            j.step(a.node, jr.APPLYING, applying_at=self.clock.time())
            self.progress(f"{a.node}: node apply {a.layout}")
            rc, why, started = self._srun_apply(a.node, a.layout)
            if rc == 0:
                j.step(a.node, jr.APPLIED, layout=a.layout)
                self._drain_applied(a.node, a.layout)
            elif not started:  # slurmctld away: nothing ran on the node; tried again
                self._not_started(a.node, why)
            elif rc == 75:  # GPUs busy, or another apply holds the node: tried again
                j.step(a.node, jr.WAITING, reason=f"GPUs busy: {why}", gpus_busy=why, gpus_busy_at=self.clock.time())
            else:
                j.note(a.node, apply_failed=why, apply_failed_at=self.clock.time())
        except (SlurmUnavailableError, OSError) as e:
            self._fail(a.node, f"gpupool: switch to {a.layout} failed: {e}")

    def _not_started(self, node: str, why: str) -> None:
        """Nothing ran on the node (slurmctld away): its apply is tried again after a poll,
        until the deadline (``waiting``)."""
        self.progress(f"{node}: srun started nothing ({why}); again after a poll")
        self.journal.step(
            node, jr.WAITING, reason=f"srun started nothing: {why}", not_started=why, not_started_at=self.clock.time()
        )

    def _srun_apply(self, node: str, layout: str) -> tuple[int, str, bool]:
        """``srun ... gpupool node apply LAYOUT --json`` on the node: (exit code, why, whether
        it ran on the node: :func:`~slurm_gpupool.repartition.rules.srun_not_started`); the
        node state it prints is kept on the controller, for the GRES render."""
        run = self.journal.run
        assert run is not None
        argv = [*self.s.node_command, "node", "apply", layout, "--json"]
        r = self.cluster.srun(node, run["reservation"], argv, timeout_s=self.s.command_timeout_s, job_name=JOB_NAME)
        why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        if r.returncode == 0:
            try:
                state = json.loads(r.stdout)["state"]
            except (ValueError, KeyError, TypeError):
                return 1, f"node apply printed no node state: {r.stdout[-200:]!r}", True
            if not isinstance(state, dict) or state.get("node") != node:
                return 1, f"node apply answered for {state.get('node') if isinstance(state, dict) else '?'}", True
            copy = controller_copy_dir(self.cfg.paths.for_node("controller_dir", node), node)
            copy.mkdir(parents=True, exist_ok=True)
            write_json_atomic(copy / FILE_NAME, state)
        return r.returncode, why, not srun_not_started(r.stdout, r.stderr)

    def _drain(self, node: str, layout: str) -> None:
        self.cluster.drain([node], reason_text(f"{OUR_DRAIN} {layout}"))
        self.journal.step(node, jr.DRAINED, drained_by_us=True, drained_at=self.clock.time())

    def _drain_applied(self, node: str, layout: str) -> bool:
        """Drain a node whose GPUs are in ``layout`` now (``scontrol update NodeName=N
        State=DRAIN``); False if slurmctld did not take it.  The node then stays APPLIED, and
        the next look drains it (``repairs_midway``).  Failing it instead left its GPUs in the
        new layout behind the old files: seen on 24.11 with slurmctld killed during the drain
        ("Connection reset by peer"), after which Slurm drained the node itself, "gres/gpu
        count reported lower than configured (4 < 10)", and later runs refused it."""
        try:
            self._drain(node, layout)
        except SlurmUnavailableError as e:
            self.progress(f"{node}: in layout {layout}, but slurmctld did not take its drain ({e}); again next look")
            return False
        return True

    def _drain_again(self, a: Drain) -> None:
        """An applied node's drain, made again (its first was lost, or a run was killed
        between the apply and the drain), a poll apart while Slurm does not take it, for at
        most ``verify_timeout`` in this run.  Past it: failed (drained with why, if Slurm
        takes that) when slurmctld answers but refuses, so no node is tried for ever; the run
        stops with slurmctld unavailable when it does not answer, and the next run drains
        the node, still applied in the journal."""
        first = self._drain_tries.setdefault(a.node, self.clock.time())
        if self._drain_applied(a.node, a.layout):
            self._drain_tries.pop(a.node, None)
            return
        if self.clock.time() - first < self.s.verify_timeout_s:
            self.clock.sleep(self.poll_s)
            return
        self._drain_tries.pop(a.node, None)
        if not self.cluster.ping():
            raise SlurmUnavailableError(f"drain {a.node}", "slurmctld does not answer")
        self._fail(
            a.node, f"gpupool: in layout {a.layout}, but Slurm refused its drain for {self.s.verify_timeout_s} s"
        )

    def _roll_back(self, a: RollBack) -> None:
        """Roll the node back to its previous layout; it stays drained with the reason."""
        try:
            if a.previous:
                rc, why2, _ = self._srun_apply(a.node, a.previous)
                back = (
                    f"rolled back to layout {a.previous}"
                    if rc == 0
                    else f"rollback to {a.previous} failed too ({why2})"
                )
            else:
                rc, back = 1, "no previous layout to roll back to"
        except (SlurmUnavailableError, OSError) as e:
            rc, back = 1, f"rollback to {a.previous} failed too ({e})"
        why = f"gpupool: node apply {a.target} failed ({a.why}); {back}"
        self._fail(a.node, why, layout=a.previous if rc == 0 else None)

    def _revert(self, a: Revert) -> None:
        """Back to the layout the restored files describe; verified against them next."""
        try:
            self.cluster.resume([a.node])  # for srun; the reservation still holds it
            rc, why, _ = self._srun_apply(a.node, a.previous) if a.previous else (1, "no previous layout", True)
            if rc == 0:
                self.cluster.drain([a.node], reason_text(f"{OUR_DRAIN} {a.previous} (rollback)"))
        except SlurmUnavailableError as e:
            rc, why = 1, str(e)
        if rc != 0:
            self._fail(a.node, f"gpupool: {a.note}; GPU rollback to {a.previous} failed ({why})")
            return
        expected = restored_gres(self.cfg.slurm.path("nodes_include")).get(a.node, {})
        self.journal.step(a.node, jr.DRAINED, drained_by_us=True, layout=a.previous, expected=expected)

    def _release_node(self, a: Release) -> None:
        if a.resume:
            self.cluster.resume([a.node])  # (a run killed after a resume finds it resumed already)
        self._release(a.node)
        self.journal.note(a.node, resumed_at=self.clock.time())

    def _done(self, a: Done) -> None:
        self.journal.step(
            a.node, a.outcome, reason=a.reason, drained_by_us=False, layout=a.layout, released_at=self.clock.time()
        )
        self.progress(f"{a.node}: {'done' if a.outcome == jr.DONE else a.outcome} in layout {a.layout}")

    def _fail(self, node: str, why: str, **extra: Any) -> None:
        """The node failed: drained with the reason, and out of the reservation (the drain holds it)."""
        reason = reason_text(why)
        try:
            self.cluster.drain([node], reason)
        except SlurmUnavailableError as e:
            self.progress(f"{node}: could not drain: {e}")
        self.journal.step(node, jr.FAILED, reason=reason, drained_by_us=False, **extra)
        self._release(node)
        self.progress(f"{node}: {reason}")

    # -- performing: once per wave ---------------------------------------------------------

    def _install_gres(self, a: InstallGres) -> None:
        j = self.journal
        run = j.run
        assert run is not None
        # while Slurm's clients still read the files they know (a new one may not parse)
        with contextlib.suppress(SlurmUnavailableError):
            self.cluster.await_forgotten_shard_jobs(a.nodes, self.progress, self.poll_s)
        self._snapshot()
        j.cluster_step(jr.GRES_INSTALLING)
        rendered = render(self.cfg, self.cfg.all_nodes(), None)
        changed = install(self.cfg, rendered, backup=False).gres_changed
        from slurm_gpupool.controller.support_files import install_support_files  # a switch only: not dry runs

        install_support_files(self.cfg, rendered.installed_layout())
        expected = {n.node: gres_counts(n.gres_value()) for n in rendered.nodes}
        restart = sorted(set(a.nodes) | set(changed))
        restarted = sorted(set(run.get("restarted_nodes", [])) | set(restart))  # over the run's waves
        j.cluster_step(jr.GRES_INSTALLED, restart_nodes=restart, restarted_nodes=restarted, expected=expected)
        j.clear_steps(jr.OTHERS_RESTARTING, jr.OTHERS_RESTARTED)  # a new wave: the others again
        self.progress(f"installed GRES; restarting slurmctld and slurmd on {hostlist(restart)}")

    def _restart(self, a: Restart) -> None:
        self.journal.cluster_step(jr.RESTARTING)
        failed = self.restarter.restart(list(a.nodes))
        why = failed.why() if failed else ("" if self._wait_controller() else "slurmctld does not answer")
        if why:
            self.journal.note_run(refused=why)  # the files are restored next (RestoreFiles)
        else:
            self.journal.cluster_step(jr.RESTARTED)

    def _wait_controller(self) -> bool:
        deadline = self.clock.time() + self.s.verify_timeout_s
        while self.clock.time() < deadline:
            if self.cluster.ping():
                return True
            self.clock.sleep(self.poll_s)
        return False

    def _snapshot_dir(self) -> Path:
        run = self.journal.run
        assert run is not None
        return self.dir / "runs" / run["id"] / f"wave{run.get('wave', 1)}"

    def _installed_files(self) -> list[Path]:
        from slurm_gpupool.controller.job_submit import FILE_NAME as LUA
        from slurm_gpupool.pool.submit_catalog import FILE_NAME as CATALOG

        conf = Path(self.cfg.slurm.config_dir)
        return [*installed_paths(self.cfg).values(), conf / CATALOG, conf / LUA]

    def _snapshot(self) -> None:
        """Keep the files as they were before this wave's install (once, even across a kill)."""
        snap = self._snapshot_dir()
        if (snap / ".complete").exists():
            return
        snap.mkdir(parents=True, exist_ok=True)
        for p in self._installed_files():
            if p.exists():
                shutil.copy2(p, snap / p.name)
        (snap / ".complete").write_text("")

    def _restore(self) -> None:
        snap = self._snapshot_dir()
        for p in self._installed_files():
            saved = snap / p.name
            if saved.exists():
                write_text_atomic(p, saved.read_text(), saved.stat().st_mode & 0o777)

    # -- performing: the end of a run --------------------------------------------------------

    def _restart_others(self, a: RestartOthers) -> None:
        """slurmd (not slurmctld) on the answering nodes this run did not restart.  Running jobs
        are untouched; a failure is reported, never a reason to undo the switch."""
        j = self.journal
        if a.problem:
            self.progress(a.problem)
            self.messages.append(a.problem)
        if not a.resumed:
            j.cluster_step(jr.OTHERS_RESTARTING, others=list(a.nodes))
        if a.nodes:
            self.progress(f"restarting slurmd on {hostlist(a.nodes)} (not switched; their jobs run on): new slurm.conf")
            failed = self.restarter.restart_slurmds(list(a.nodes))
            if failed is not None:
                why = (
                    f"slurmd restart on {hostlist(a.nodes)} failed ({failed.why()}); slurmctld warns of a"
                    " different slurm.conf until they restart"
                )
                self.progress(why)
                self.messages.append(why)
        j.cluster_step(jr.OTHERS_RESTARTED)

    def _finish(self, a: Finish) -> None:
        if a.held:  # no new job lands there before the next run switches them; it ends with their jobs
            try:
                self.cluster.update_reservation(a.reservation, nodes=a.held, duration_s=a.held_for_s)
            except SlurmUnavailableError as e:
                self.progress(f"could not shrink reservation {a.reservation}: {e}")
        else:
            self._delete_reservations([a.reservation])
        self._delete_reservations(list(a.stale))
        self._restore_priorities()
        self.journal.cluster_step(jr.FINISHED, finished_at=jr.now_iso(self.clock), outcomes=dict(a.outcomes))

    def _record_priorities(self) -> None:
        """Pending jobs' priorities before a switch: Slurm zeroes them (BadConstraints) while
        their GRES are gone, and :meth:`_restore_priorities` gives them back after."""
        path = self.dir / PRIORITIES
        try:
            recorded = {int(k): int(v) for k, v in json.loads(path.read_text()).items()}
        except (OSError, ValueError, AttributeError):
            recorded = {}
        jobs = self.cluster.jobs()
        pending = {j.job_id: j.priority for j in jobs if j.state == "PENDING" and j.priority}
        alive = {j.job_id for j in jobs if j.state == "PENDING"}
        recorded = {k: v for k, v in recorded.items() if k in alive} | pending
        write_json_atomic(path, {str(k): v for k, v in sorted(recorded.items())})

    def _restore_priorities(self) -> None:
        try:
            recorded = {int(k): int(v) for k, v in json.loads((self.dir / PRIORITIES).read_text()).items()}
            jobs = self.cluster.jobs()
        except (OSError, ValueError, AttributeError, SlurmUnavailableError):
            return
        for job, priority in priorities_to_restore(recorded, jobs):
            r = self.cluster.release(job, priority)
            if r.returncode == 0:
                self.progress(f"job {job}: released (Slurm had held it while its GRES were gone)")


def own_sruns_alive(proc: Path = Path("/proc")) -> int:
    """``pgrep -c -f -- --job-name=gpupool-repartition``: sruns of ours running on this host.
    A killed run leaves its sruns (``KillMode=process``, a kill -9 from cron): their jobs
    are no stale ones, and their apply is not cut off."""
    flag = f"--job-name={JOB_NAME}".encode()
    n = 0
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        n += bool(argv) and os.path.basename(argv[0]) == b"srun" and flag in argv
    return n


def restored_gres(nodes_conf: Path) -> dict[str, dict[str, int]]:
    """Node → GRES counts from the ``Gres=`` of its ``NodeName=`` line."""
    out: dict[str, dict[str, int]] = {}
    for line in nodes_conf.read_text().splitlines():
        if not line.startswith("NodeName="):
            continue
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        for node in expand(fields["NodeName"]):
            out[node] = gres_counts(fields.get("Gres", ""))
    return out
