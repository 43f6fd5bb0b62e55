"""``gpupool repartition``: switch nodes to a layout without killing a job.

Slurm is the distributed engine (DESIGN.md).  Per run, on the controller:

1. **Reserve.** A MAINT reservation (``gpupool_<layout>``, ignoring running jobs)
   holds the changing nodes: running jobs finish, new ones start elsewhere.  Ahead
   of a scheduled switch the same reservation is made to start at the switch time,
   so backfill keeps starting short jobs that end before it (``prepare``).
2. **Per node, in parallel:** wait until its jobs end (until the deadline; then
   skip it, or with ``requeue`` signal and requeue requeueable jobs), run
   ``gpupool node apply LAYOUT --json`` on it through ``srun --reservation``,
   keep the node state it prints, and drain it for the restart.  (Slurm 22.05
   refuses srun on a drained node, even inside a maintenance reservation: we
   measured it.  So the node is drained right after its apply, before GRES change.)
3. **Once per run:** render GRES from the nodes' states and install them, restart
   slurmctld once and the changed nodes' slurmd in batches (site commands).
4. **Per node:** verify that Slurm shows the rendered GRES and the layout feature,
   then resume it.  Finally remove the reservation.

Failures: an apply that fails is rolled back to the previous layout on that node,
which stays drained with the reason.  If slurmctld refuses the new files, the
previous ones are restored, the daemons restarted, and the nodes' GPUs rolled
back.  A node is resumed only when Slurm's GRES equal those rendered from the
state its GPUs reported.  Every step is journaled (``repartition/journal.py``) and
idempotent, so a killed run is finished by the next.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.controller.gres_install import check_type_ids, install, installed_paths, render
from slurm_gpupool.controller.job_submit import FILE_NAME as LUA
from slurm_gpupool.controller.support_files import install_support_files
from slurm_gpupool.core.policy.durations import format_duration
from slurm_gpupool.core.policy.switch_plan import NodeView, SwitchPlan, changing_after, plan_switch
from slurm_gpupool.errors import OperationFailedError, SlurmUnavailableError, UsageError
from slurm_gpupool.node.state import FILE_NAME, controller_copy_dir
from slurm_gpupool.pool.submit_catalog import FILE_NAME as CATALOG
from slurm_gpupool.pool.tiers import tier_of_qos
from slurm_gpupool.repartition import journal as jr
from slurm_gpupool.repartition.journal import Journal, run_lock
from slurm_gpupool.repartition.restarts import Restarter
from slurm_gpupool.repartition.rules import (
    BUSY_STATES,
    after_jobs,
    held_problem,
    lead_time_default,
    ours,
    priorities_to_restore,
    ready_problem,
    redo_first,
    run_exit_code,
    still_held,
    unswitched_to_restart,
    verify_problem,
)
from slurm_gpupool.slurm.cluster import SlurmCluster
from slurm_gpupool.slurm.protocol import Slurm
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, gres_counts, hostlist
from slurm_gpupool.util.atomic import write_json_atomic, write_text_atomic
from slurm_gpupool.util.oplog import tee

JOB_NAME = "gpupool-repartition"  # our srun jobs: never waited for
WAVE_WINDOW_S = 30.0  # at most this long a wave waits for applies under way
READY_TIMEOUT_S = 30.0  # after resume and release: until Slurm would start a job there
CONFIRM_S = 2.0  # a node verified is looked at again after this (slurmctld flags unpinged nodes late)
OUR_DRAIN = "gpupool: switching to layout"
PRIORITIES = "pending-priorities.json"  # pending jobs' priorities before a switch (BadConstraints zeroes them)


def checkpoint_of(cfg: PoolConfig, qos: str) -> tuple[str, int]:
    """The signal and grace before a requeue of a job of this QOS: its tier's (docs/tiers.md),
    else ``repartition.checkpoint_signal`` / ``checkpoint_grace``."""

    s = cfg.repartition
    tier = tier_of_qos(cfg, qos)
    if tier is None:
        return s.checkpoint_signal, s.checkpoint_grace_s
    return tier.checkpoint_signal or s.checkpoint_signal, tier.grace_s or s.checkpoint_grace_s


class Clock:
    """Wall time and waiting; the tests give a clock that does not wait."""

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def reason_text(text: str) -> str:
    """Slurm reasons are one line; keep them short and free of '='-splitting surprises."""
    return " ".join(text.split())[:200]


@dataclass
class RunReport:
    target: str
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # node → {outcome, reason, unavailable_s}
    kept: list[str] = field(default_factory=list)
    skipped_plan: dict[str, str] = field(default_factory=dict)
    reservation: str | None = None
    seconds: float = 0.0
    messages: list[str] = field(default_factory=list)

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
            "messages": self.messages,
            "exit_code": self.exit_code,
        }


class Repartitioner:
    """One controller's switches; Slurm, the restart commands and the clock are injectable."""

    def __init__(
        self,
        cfg: PoolConfig,
        cluster: Slurm | None = None,
        restarter: Restarter | None = None,
        progress: Callable[[str], None] | None = None,
        poll_s: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock or Clock()
        self.s = cfg.repartition
        self.cluster = cluster or SlurmCluster()
        self.restarter = restarter or Restarter(cfg.repartition)
        self.progress = tee("repartition", progress)  # every step to syslog too, as the hooks log
        self.poll_s = poll_s
        self.dir = Path(cfg.paths.controller_dir)
        self.journal = Journal(self.dir)
        self._jobs: tuple[float, list[JobInfo]] = (0.0, [])
        self.requeue = cfg.repartition.requeue
        self._restart_extra: list[str] = []
        # no srun or drain while a wave restarts the daemons, no restart while an apply runs
        self._gate = threading.Condition()
        self._restarting = False
        self._applying = 0
        self._jobs_lock = threading.Lock()
        self._resv_lock = threading.Lock()

    # -- planning ------------------------------------------------------------------------

    def reservation_name(self, target: str) -> str:
        return f"{self.s.reservation_prefix}_{target}"

    def _check_target(self, target: str) -> None:
        if target not in self.cfg.layout_names():
            raise UsageError(f"layout {target!r}", "not in the pool config", hint=", ".join(self.cfg.layout_names()))

    def views(self, infos: dict[str, NodeInfo], midway: set[str]) -> dict[str, NodeView]:
        """Slurm's nodes as the planner sees them; a node drained by someone else is not usable."""
        out = {}
        for name, i in infos.items():
            foreign_drain = i.drained and name not in midway and not ours(i)
            usable = i.usable and not foreign_drain
            state = f"drained: {i.reason}" if foreign_drain else i.state
            # drained by an earlier switch (a failure): switch it again rather than call it done
            retry = ours(i) and name not in midway and not i.reason.startswith(OUR_DRAIN)
            out[name] = NodeView(name, i.layout, usable, state, retry=retry, reason=i.reason if retry else "")
        return out

    def plan(self, target: str, nodes: list[str] | None = None, force: bool = False) -> SwitchPlan:
        self._check_target(target)
        # type names Slurm would confuse fail the GRES install: refuse before any node is touched

        check_type_ids(self.cfg)
        j = Journal(self.dir).load()
        unfinished = j.unfinished()
        midway = {n for n in (unfinished or {}).get("nodes", []) if j.node(n)["step"] not in jr.OUTCOMES}
        covered = [n for n in self.cfg.all_nodes() if self.cfg.covers(target, n)]
        return plan_switch(target, covered, self.views(self.cluster.nodes(), midway), nodes, midway, force)

    def describe(self, plan: SwitchPlan, deadline_s: int, requeue: bool) -> dict[str, Any]:
        """The whole plan of a run, for --dry-run: nothing is changed."""
        jobs = self.cluster.jobs()
        resv = self.reservation_name(plan.target)
        node_cmd = [*self.s.node_command, "node", "apply", plan.target, "--json"]
        nodes = []
        for d in plan.decisions:
            busy = [j for j in jobs if d.name in j.nodes and j.state in BUSY_STATES and j.name != JOB_NAME]
            nodes.append(
                {
                    "node": d.name,
                    "action": d.action,
                    "current": d.current,
                    "target": d.target,
                    "why": d.why,
                    "jobs": [
                        {"job_id": j.job_id, "user": j.user, "ends_in_s": _ends_in(j), "requeue": j.requeue}
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
            steps.append("gpupool gres install (live node states)")
            steps += [" ".join(c) for c in self.restarter.commands(changing)]
            steps.append("verify each node: sinfo GRES == rendered, feature layout_" + plan.target + "; then resume")
            steps.append(f"scontrol delete ReservationName={resv}")
            others = unswitched_to_restart(self.cluster.nodes(), changing) if self.s.restart_unswitched else []
            steps += [
                " ".join(c) + "  # not switched, for the new slurm.conf" for c in self.restarter.slurmd_commands(others)
            ]
        return {"target": plan.target, "reservation": resv, "nodes": nodes, "steps": steps}

    # -- ahead of a scheduled switch -----------------------------------------------------

    def lead_time_s(self) -> int:
        """``lead_time``, or auto: see :func:`~slurm_gpupool.repartition.rules.lead_time_default`."""
        if self.s.lead_time_s is not None:
            return self.s.lead_time_s
        max_time = self.cluster.partition_max_time_s(self.s.partition)
        return lead_time_default(max_time, self._schedule_gaps_s(), self.s.max_lead_time_s)

    def _schedule_gaps_s(self) -> list[int]:
        """Seconds between the schedule's switches over the coming week."""
        sched = self.cfg.schedule
        if sched is None:
            return []
        t = datetime.now(sched.tz) if sched.tz else datetime.now().astimezone()
        times: list[datetime] = []
        while len(times) < 64 and (not times or (times[-1] - times[0]).days < 8):
            nxt = sched.next_change(t)
            if nxt is None:
                break
            times.append(nxt[0])
            t = nxt[0] + timedelta(minutes=1)
        return [int((b - a).total_seconds()) for a, b in itertools.pairwise(times)]

    def prepare(
        self, target: str, start: datetime, nodes: list[str] | None = None, after: SwitchPlan | None = None
    ) -> tuple[str, list[str]] | None:
        """Reserve the nodes that will change, from ``start``: backfill keeps filling them until then.

        Its own reservation (``<name>_ahead``), never the run's: that one may already hold
        skipped nodes now, and folding the others into it reserved them all from now on.
        With ``after`` (a dry run of the due switch) nothing is made: the name and the nodes
        it would hold once that switch is done are returned."""
        plan = self.plan(target, nodes)
        name = ahead_name(self.reservation_name(target))
        reservations = self.cluster.reservations()
        prefix = self.s.reservation_prefix + "_"
        now = datetime.now()
        held = {n for r in reservations.values() if r.name.startswith(prefix) and r.start <= now for n in r.nodes}
        # those held already are held
        changing = set(plan.changing if after is None else changing_after(plan, after)) - held
        if after is not None:
            return (name, sorted(changing)) if changing else None
        if not changing:
            return None
        duration = self.s.deadline_s + self.s.verify_timeout_s + 3600
        existing = reservations.get(name)
        if existing is None:
            self.cluster.create_reservation(name, changing, start, duration)
        elif changing != existing.nodes:
            self.cluster.update_reservation(name, nodes=changing)
        self.progress(f"reserved {hostlist(changing)} from {start:%Y-%m-%d %H:%M} for layout {target} ({name})")
        return name, sorted(changing)

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
        """``trigger``: who asked (journal.TRIGGER_*), recorded with the run for `gpupool status`."""
        t0 = time.monotonic()
        self._check_target(target)
        deadline_s = self.s.deadline_s if deadline_s is None else deadline_s
        self.requeue = self.s.requeue if requeue is None else requeue
        report = RunReport(target)
        with run_lock(self.dir):
            j = self.journal.load()
            self._finish_killed_restart()  # before anything that needs slurmctld
            plan = self.plan(target, nodes, force)
            self._record_priorities()
            report.kept = plan.nodes("keep")
            report.skipped_plan = {d.name: d.why for d in plan.decisions if d.action == "skip"}
            previous = {d.name: d.current for d in plan.decisions}
            unfinished = j.unfinished()
            if unfinished and unfinished["target"] == target:
                self.progress(f"resuming the unfinished run {unfinished['id']} to layout {target}")
                j.resume_run(plan.changing, previous)
                unfinished["deadline_epoch"] = self.clock.time() + deadline_s
            elif plan.changing:
                stale = [unfinished["reservation"]] if unfinished else []
                deadline = self.clock.time() + deadline_s
                j.start(target, plan.changing, self.reservation_name(target), deadline, previous, stale, trigger)
            elif unfinished:  # an earlier run to another layout left nothing midway: close it
                self._delete_reservations([unfinished["reservation"]])
                j.cluster_step(jr.FINISHED, finished_at=jr.now_iso())
            run = j.unfinished()
            if run is None:
                report.messages.append(f"every node the layout covers is in layout {target}")
                report.seconds = time.monotonic() - t0
                return report
            report.reservation = run["reservation"]
            self._reserve(j)
            if j.nodes_at(jr.APPLIED, jr.DRAINED, jr.VERIFYING):  # a wave a killed run left midway
                self._commit()
            todo = j.nodes_at(jr.WAITING, jr.APPLYING)
            if todo:
                self._waves(todo)
            self._finish(report)
        report.seconds = time.monotonic() - t0
        return report

    def _finish_killed_restart(self) -> None:
        """A run killed while the daemons restarted may have left slurmctld (and slurmds)
        down: redo the restart first, with the site's commands, which need no slurmctld."""
        run = self.journal.unfinished()
        redo = redo_first(run.get("steps", [])) if run else None
        if redo == "others":
            self._restart_unswitched(None, recovering=True)
            return
        if run is None or redo != "restart":
            return
        self.progress(
            f"finishing the restart run {run['id']} began (slurmctld and slurmd on {hostlist(run['restart_nodes'])})"
        )
        failed = self.restarter.restart(run["restart_nodes"])
        if failed or not self._wait_controller():
            raise SlurmUnavailableError(
                "repartition",
                f"slurmctld does not come back after the restart a killed run began"
                f" ({failed.why() if failed else 'no answer to scontrol ping'})",
                hint=f"start it by hand; the journal in {self.dir} keeps the run",
            )
        self.journal.cluster_step(jr.RESTARTED)

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

    def _reserve(self, j: Journal) -> None:
        """The run's reservation exists, has started, and holds every node still to change
        (a reservation made ahead of the switch is folded into it)."""
        run = j.run
        assert run is not None
        name = run["reservation"]
        nodes = set(j.nodes_at(jr.WAITING, jr.APPLYING, jr.APPLIED, jr.DRAINED, jr.VERIFYING, jr.SKIPPED))
        duration = max(60, int(run["deadline_epoch"] - self.clock.time())) + self.s.verify_timeout_s + 3600
        reservations = self.cluster.reservations()
        ahead = reservations.get(ahead_name(name))
        if ahead is not None:
            self._delete_reservations([ahead.name])
        existing = reservations.get(name)
        if not nodes:  # a resumed run whose nodes are all through (killed in its last steps)
            if existing is not None:
                self._delete_reservations([name])
        elif existing is None:
            self.cluster.create_reservation(name, nodes, None, duration)
        else:
            start = None
            if existing.start > datetime.now() + timedelta(seconds=5):
                start = datetime.now() + timedelta(seconds=2)  # it was made ahead of the switch: begin now
            if start or nodes != existing.nodes:
                self.cluster.update_reservation(name, nodes=nodes, start=start, duration_s=duration)
        j.cluster_step(jr.RESERVED, reserved_at=run.get("reserved_at") or self.clock.time())
        if nodes:
            self.progress(f"reservation {name} holds {hostlist(nodes)}")

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

    def _waves(self, todo: list[str]) -> None:
        """Apply nodes as they become free; commit (GRES, restarts, verify) in waves.

        Idle nodes switch at once: the first wave does not wait for nodes whose jobs
        still run, only (up to ``WAVE_WINDOW_S``) for applies already under way, so
        slurmctld restarts once per wave, not once per node."""
        with ThreadPoolExecutor(max_workers=min(self.s.parallel, len(todo))) as ex:
            futures = {ex.submit(self._node_phase, n): n for n in todo}
            remaining = set(futures)
            while remaining:
                done, remaining = wait(remaining, return_when=FIRST_COMPLETED)
                until = time.monotonic() + WAVE_WINDOW_S
                while remaining and time.monotonic() < until:
                    if not any(self.journal.node(futures[f])["step"] == jr.APPLYING for f in remaining):
                        break  # the others wait for their jobs: do not hold this wave for them
                    more, remaining = wait(remaining, timeout=0.5)
                    done |= more
                for f in done:
                    f.result()
                if self.journal.nodes_at(jr.APPLIED, jr.DRAINED):
                    self._commit()

    # per node: wait, apply, drain ------------------------------------------------------

    def _busy_jobs(self, node: str) -> list[JobInfo]:
        with self._jobs_lock:
            at, jobs = self._jobs
            if time.monotonic() - at > self.poll_s:
                try:
                    jobs = self.cluster.jobs()
                except SlurmUnavailableError:  # slurmctld restarting for another wave: ask again soon
                    return self._unknown_jobs(node)
                self._jobs = (time.monotonic(), jobs)
        return [j for j in jobs if node in j.nodes and j.state in BUSY_STATES and j.name != JOB_NAME]

    @staticmethod
    def _unknown_jobs(node: str) -> list[JobInfo]:
        return [JobInfo(0, "RUNNING", frozenset({node}), "?", "(slurmctld not answering)", None, 0, False, "")]

    def _wait_idle(self, node: str) -> bool:
        """Until the node has no jobs; at the deadline requeue (if asked) or skip it."""
        j = self.journal
        deadline = j.run["deadline_epoch"] if j.run else self.clock.time()
        requeued = False
        last = ""
        while True:
            busy = self._busy_jobs(node)
            desc = ", ".join(f"{b.job_id} ({b.user}, {_left(b)})" for b in busy)
            d = after_jobs(busy, self.clock.time(), deadline, self.requeue, requeued, desc)
            if d.action == "apply":
                return True
            if d.action == "skip":
                j.step(node, jr.SKIPPED, reason=d.reason)
                self.progress(f"{node}: skipped, {d.reason}")
                return False
            if d.action == "requeue":
                requeueable = [b for b in busy if b.requeue and b.state == "RUNNING"]
                grace = 0
                for b in requeueable:  # each job its tier's signal; the longest of their graces
                    signal, grace_s = checkpoint_of(self.cfg, b.qos)
                    self.cluster.signal_job(b.job_id, signal)
                    grace = max(grace, grace_s)
                self.progress(
                    f"{node}: checkpoint signal to jobs {', '.join(str(b.job_id) for b in requeueable)}"
                    f", requeue in {format_duration(grace)}"
                )
                self.clock.sleep(grace)
                for b in requeueable:
                    self.cluster.requeue(b.job_id)
                requeued, deadline = True, self.clock.time() + 60
                continue
            if d.reason != last:
                j.step(node, jr.WAITING, reason=d.reason)
                last = d.reason
            self.clock.sleep(self.poll_s)

    @contextlib.contextmanager
    def _no_restart(self) -> Iterator[None]:
        """A node's apply and drain never overlap a wave's install and restarts."""
        with self._gate:
            while self._restarting:
                self._gate.wait()
            self._applying += 1
        try:
            yield
        finally:
            with self._gate:
                self._applying -= 1
                self._gate.notify_all()

    @contextlib.contextmanager
    def _restart_window(self) -> Iterator[None]:
        with self._gate:
            self._restarting = True
            while self._applying:
                self._gate.wait()
        try:
            yield
        finally:
            with self._gate:
                self._restarting = False
                self._gate.notify_all()

    def _apply(self, node: str, layout: str) -> tuple[int, str, dict[str, Any] | None]:
        """``srun ... gpupool node apply LAYOUT --json`` on the node: (exit code, why, node state)."""
        run = self.journal.run
        assert run is not None
        argv = [*self.s.node_command, "node", "apply", layout, "--json"]
        r = self.cluster.srun(node, run["reservation"], argv, timeout_s=self.s.command_timeout_s)
        state = None
        why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        if r.returncode == 0:
            try:
                state = json.loads(r.stdout)["state"]
            except (ValueError, KeyError, TypeError):
                return 1, f"node apply printed no node state: {r.stdout[-200:]!r}", None
            if not isinstance(state, dict) or state.get("node") != node:
                return 1, f"node apply answered for {state.get('node') if isinstance(state, dict) else '?'}", None
            copy = controller_copy_dir(self.cfg.paths.for_node("controller_dir", node), node)
            copy.mkdir(parents=True, exist_ok=True)
            write_json_atomic(copy / FILE_NAME, state)
        return r.returncode, why, state

    def _node_phase(self, node: str) -> None:
        j = self.journal
        target = j.node(node)["target"]
        try:
            j.step(node, jr.WAITING, reason="waiting for its jobs to end")
            if not self._wait_idle(node):
                return
            info = self.cluster.nodes().get(node)
            if info is not None and info.drained and j.node(node).get("drained_by_us"):
                self.cluster.resume([node])  # srun cannot run on a drained node; the reservation holds it
            deadline = j.run["deadline_epoch"] if j.run else self.clock.time()
            while True:
                with self._no_restart():
                    j.step(node, jr.APPLYING, applying_at=self.clock.time())
                    self.progress(f"{node}: node apply {target}")
                    rc, why, _ = self._apply(node, target)
                    if rc == 0:
                        j.step(node, jr.APPLIED, layout=target)
                        self.cluster.drain([node], reason_text(f"{OUR_DRAIN} {target}"))
                        j.step(node, jr.DRAINED, drained_by_us=True, drained_at=self.clock.time())
                        return
                    if rc != 75:
                        self._apply_failed(node, target, why)
                        return
                if self.clock.time() >= deadline:
                    j.step(node, jr.SKIPPED, reason=f"GPUs still busy at the deadline: {why}")
                    return
                self.clock.sleep(self.poll_s * 2)  # GPUs busy or another apply holds the node: retry
        except (SlurmUnavailableError, OSError) as e:
            self._fail(node, f"gpupool: switch to {target} failed: {e}")

    def _apply_failed(self, node: str, target: str, why: str) -> None:
        """Roll the node back to its previous layout; it stays drained with the reason."""
        j = self.journal
        prev = j.node(node).get("previous")
        if prev:
            rc, why2, _ = self._apply(node, prev)
            back = f"rolled back to layout {prev}" if rc == 0 else f"rollback to {prev} failed too ({why2})"
        else:
            rc, back = 1, "no previous layout to roll back to"
        self._fail(node, f"gpupool: node apply {target} failed ({why}); {back}", layout=prev if rc == 0 else None)

    def _try_drain(self, node: str, reason: str) -> None:
        try:
            self.cluster.drain([node], reason)
        except SlurmUnavailableError as e:
            self.progress(f"{node}: could not drain: {e}")

    # once per run: install, restart, verify ----------------------------------------------

    def _snapshot_dir(self) -> Path:
        run = self.journal.run
        assert run is not None
        return self.dir / "runs" / run["id"] / f"wave{run.get('wave', 1)}"

    def _installed_files(self) -> list[Path]:

        conf = Path(self.cfg.slurm.config_dir)
        return [*installed_paths(self.cfg).values(), conf / CATALOG, conf / LUA]

    def _snapshot(self) -> None:
        """Keep the files as they were before this run's install (once, even across a kill)."""
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

    def _install(self) -> dict[str, dict[str, int]]:
        """gres install from the nodes' states; returns each node's expected GRES counts."""

        rendered = render(self.cfg, self.cfg.all_nodes(), None)
        plan = install(self.cfg, rendered, backup=False)
        install_support_files(self.cfg, rendered.installed_layout())
        self._restart_extra = plan.gres_changed
        return {n.node: gres_counts(n.gres_value()) for n in rendered.nodes}

    def _wait_controller(self) -> bool:
        deadline = self.clock.time() + self.s.verify_timeout_s
        while self.clock.time() < deadline:
            if self.cluster.ping():
                return True
            self.clock.sleep(self.poll_s)
        return False

    def _commit(self) -> None:
        """One wave: the nodes applied so far get their GRES, the restarts, verify, resume."""
        j = self.journal
        run = j.run
        assert run is not None
        with self._restart_window():  # no apply runs now: the render and the restarts see them all
            pending = j.nodes_at(jr.APPLIED, jr.DRAINED, jr.VERIFYING)
            if not pending:
                return
            for node in j.nodes_at(jr.APPLIED):  # a run killed between apply and drain
                self.cluster.drain([node], reason_text(f"{OUR_DRAIN} {run['target']}"))
                j.step(node, jr.DRAINED, drained_by_us=True, drained_at=self.clock.time())
            if not j.has(jr.GRES_INSTALLED):
                # while Slurm's clients still read the files they know (a new one may not parse)
                with contextlib.suppress(SlurmUnavailableError):
                    self.cluster.await_forgotten_shard_jobs(pending, self.progress, self.poll_s)
                self._snapshot()
                j.cluster_step(jr.GRES_INSTALLING)
                self._restart_extra = []
                expected = self._install()
                restart = sorted(set(pending) | set(self._restart_extra))
                restarted = sorted(set(run.get("restarted_nodes", [])) | set(restart))  # over the run's waves
                j.cluster_step(jr.GRES_INSTALLED, restart_nodes=restart, restarted_nodes=restarted, expected=expected)
                j.clear_steps(jr.OTHERS_RESTARTING, jr.OTHERS_RESTARTED)  # a new wave: the others again
                self.progress(f"installed GRES; restarting slurmctld and slurmd on {hostlist(restart)}")
            if not j.has(jr.RESTARTED):
                j.cluster_step(jr.RESTARTING)
                failed = self.restarter.restart(run["restart_nodes"])
                why = failed.why() if failed else ("" if self._wait_controller() else "slurmctld does not answer")
                if why:
                    self._refused(pending, why)
                    j.next_wave()
                    return
                j.cluster_step(jr.RESTARTED)
        expected = run["expected"]
        with ThreadPoolExecutor(max_workers=min(self.s.parallel, len(pending))) as ex:
            list(ex.map(lambda n: self._verify(n, expected.get(n, {}), run["target"]), pending))
        j.next_wave()

    def _verify(self, node: str, expected: dict[str, int], layout: str, outcome: str = jr.DONE, note: str = "") -> None:
        """Resume the node only when Slurm shows the GRES rendered from its GPUs' state."""
        j = self.journal
        j.step(node, jr.VERIFYING)
        deadline = self.clock.time() + self.s.verify_timeout_s
        problem = ""
        info: NodeInfo | None = None
        confirmed = False  # slurmctld flags nodes it has not pinged since its restart: look twice
        while True:
            try:
                info = self.cluster.nodes().get(node)
                problem = verify_problem(info, expected, layout)
            except SlurmUnavailableError as e:  # e.g. client commands cannot parse the files either
                info, problem = None, str(e)
            if problem:
                confirmed = False
            elif not confirmed:
                confirmed = True
                self.clock.sleep(max(CONFIRM_S, self.poll_s))
                continue
            if not problem or self.clock.time() >= deadline:
                break
            self.clock.sleep(self.poll_s)
        if problem:
            self._fail(node, f"gpupool: verify after switch to {layout} failed: {problem}")
            return
        if j.node(node).get("drained_by_us") and info is not None and info.drained:
            self.cluster.resume([node])  # (a run killed after a resume finds it resumed already)
        self._release(node)
        problem = self._until_ready(node)
        if problem:  # done means Slurm would start a job on it now
            self._fail(node, f"gpupool: switched to {layout}, but Slurm would not start a job there: {problem}")
            return
        j.step(node, outcome, reason=note, drained_by_us=False, layout=layout, released_at=self.clock.time())
        self.progress(f"{node}: {'done' if outcome == jr.DONE else outcome} in layout {layout}")

    def _until_ready(self, node: str) -> str:
        """Wait (briefly) until Slurm would start a job on the node: "" then, else why not."""
        deadline = self.clock.time() + READY_TIMEOUT_S
        while True:
            try:
                problem = ready_problem(self.cluster.nodes().get(node)) or held_problem(
                    node,
                    self.cluster.reservations().values(),
                    self.s.reservation_prefix + "_",
                    datetime.fromtimestamp(self.clock.time()),
                )
            except SlurmUnavailableError as e:
                problem = str(e)
            if not problem or self.clock.time() >= deadline:
                return problem
            self.clock.sleep(min(1.0, self.poll_s))

    def _fail(self, node: str, why: str, **extra: Any) -> None:
        """The node failed: drained with the reason, and out of the reservation (the drain holds it)."""
        reason = reason_text(why)
        self._try_drain(node, reason)
        self.journal.step(node, jr.FAILED, reason=reason, drained_by_us=False, **extra)
        self._release(node)
        self.progress(f"{node}: {reason}")

    def _refused(self, pending: list[str], why: str) -> None:
        """slurmctld (or a slurmd) did not come back with the new files: restore the old ones,
        restart, put the nodes' GPUs back in their previous layout, then verify and resume."""
        j = self.journal
        run = j.run
        assert run is not None
        self.progress(f"restart failed ({why}): restoring the previous Slurm files")
        self._restore()
        failed = self.restarter.restart(run["restart_nodes"])
        if failed or not self._wait_controller():
            raise OperationFailedError(
                "repartition",
                f"Slurm did not come back after restoring the previous files ({failed.why() if failed else why})",
                hint=f"the previous files are in {self._snapshot_dir()}; the journal keeps the run",
            )
        j.clear_steps(jr.GRES_INSTALLING, jr.GRES_INSTALLED, jr.RESTARTING)
        note = reason_text(f"Slurm refused the configuration for layout {run['target']} ({why}); restored")
        back: list[str] = []
        for node in pending:
            prev = j.node(node).get("previous")
            try:
                self.cluster.resume([node])  # for srun; the reservation still holds it
                rc, why2, _ = self._apply(node, prev) if prev else (1, "no previous layout", None)
            except SlurmUnavailableError as e:
                rc, why2 = 1, str(e)
            if rc == 0:
                self.cluster.drain([node], reason_text(f"{OUR_DRAIN} {prev} (rollback)"))
                j.step(node, jr.DRAINED, drained_by_us=True, layout=prev)
                back.append(node)
            else:
                self._fail(node, f"gpupool: {note}; GPU rollback to {prev} failed ({why2})")
        # Not a new render: the config that produced the refused files would produce them again.
        # The restored files describe the previous layout, and the GPUs are back in it.
        if not back:
            return
        expected = restored_gres(self.cfg.slurm.path("nodes_include"))
        for node in back:
            self._verify(node, expected.get(node, {}), j.node(node)["layout"], jr.ROLLED_BACK, note)

    # end of run ------------------------------------------------------------------------

    def _delete_reservations(self, names: list[str]) -> None:
        for name in names:
            try:
                self.cluster.delete_reservation(name)
            except SlurmUnavailableError as e:
                self.progress(f"could not delete reservation {name}: {e}")

    def _finish(self, report: RunReport) -> None:
        j = self.journal
        run = j.run
        assert run is not None
        held = still_held({n: j.node(n)["step"] for n in run["nodes"]})  # the skipped: their jobs run on
        name = run["reservation"]
        if held:  # no new job lands there before the next run switches them; it ends with their jobs
            try:
                self.cluster.update_reservation(name, nodes=held, duration_s=self._held_for_s(held))
            except SlurmUnavailableError as e:
                self.progress(f"could not shrink reservation {name}: {e}")
        else:
            self._delete_reservations([name])
        self._delete_reservations(run.get("stale_reservations", []))
        for n in run["nodes"]:
            rec = j.node(n)
            drained = applying = in_resv = None
            if rec["step"] in (jr.DONE, jr.ROLLED_BACK):
                end = rec.get("released_at", rec["since_epoch"])
                if rec.get("drained_at"):
                    drained = round(end - rec["drained_at"], 2)
                if rec.get("applying_at"):
                    applying = round(end - rec["applying_at"], 2)
                in_resv = round(end - run.get("reserved_at", run["started_epoch"]), 2)
            report.nodes[n] = {
                "outcome": rec["step"],
                "reason": rec["reason"],
                "drained_s": drained,  # drain to resume
                "out_of_service_s": applying,  # its jobs gone (apply start) to released: no job could start
                "reserved_s": in_resv,  # in the reservation: no new job from the run's start to release
            }
        self._restore_priorities()
        self._restart_unswitched(report)
        j.cluster_step(
            jr.FINISHED, finished_at=jr.now_iso(), outcomes={n: v["outcome"] for n, v in report.nodes.items()}
        )

    def _restart_unswitched(self, report: RunReport | None, recovering: bool = False) -> None:
        """Restart slurmd (not slurmctld) on the answering nodes this run did not restart, so
        every slurmd reads the slurm.conf slurmctld has (else slurmctld logs "appears to have a
        different slurm.conf" at each of their registrations).  Running jobs are untouched; a
        failure is reported, never a reason to undo the switch.  Journaled: a run killed
        between the stop and the start has its successor start them (`_finish_killed_restart`)."""
        j = self.journal
        run = j.run
        assert run is not None
        if not run.get("restarted_nodes") or j.has(jr.OTHERS_RESTARTED):
            return
        if not self.s.restart_unswitched and not recovering:  # (a killed run's stopped slurmds: start them)
            return
        if not j.has(jr.OTHERS_RESTARTING):
            try:
                others = unswitched_to_restart(self.cluster.nodes(), run["restarted_nodes"])
            except SlurmUnavailableError as e:
                others, why = [], f"slurmd not restarted on the nodes that did not switch: {e}"
                self.progress(why)
                if report is not None:
                    report.messages.append(why)
            j.cluster_step(jr.OTHERS_RESTARTING, others=others)
        others = run.get("others", [])
        if others:
            self.progress(f"restarting slurmd on {hostlist(others)} (not switched; their jobs run on): new slurm.conf")
            failed = self.restarter.restart_slurmds(others)
            if failed is not None:
                why = (
                    f"slurmd restart on {hostlist(others)} failed ({failed.why()}); slurmctld warns of a"
                    " different slurm.conf until they restart"
                )
                self.progress(why)
                if report is not None:
                    report.messages.append(why)
        j.cluster_step(jr.OTHERS_RESTARTED)

    def _held_for_s(self, nodes: set[str]) -> int:
        """Long enough for the held nodes' jobs to end (by their time limits), at least an hour."""
        try:
            left = [_ends_in(job) for job in self.cluster.jobs() if job.nodes & nodes and job.state in BUSY_STATES]
        except SlurmUnavailableError:
            left = []
        known = [s for s in left if s is not None]
        return max([3600, *(s + 600 for s in known)]) if len(known) == len(left) else 7 * 86400


def restored_gres(nodes_conf: Path) -> dict[str, dict[str, int]]:
    """Node → GRES counts from the ``Gres=`` of its ``NodeName=`` line."""
    from ClusterShell.NodeSet import NodeSet

    out: dict[str, dict[str, int]] = {}
    for line in nodes_conf.read_text().splitlines():
        if not line.startswith("NodeName="):
            continue
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        for node in NodeSet(fields["NodeName"]):
            out[node] = gres_counts(fields.get("Gres", ""))
    return out


def _ends_in(j: JobInfo) -> int | None:
    if j.time_limit_s is None or not j.start_time:
        return None
    return max(0, int(j.start_time + j.time_limit_s - time.time()))


def _left(j: JobInfo) -> str:
    left = _ends_in(j)
    return "no time limit" if left is None else f"{format_duration(left)} left"


def ahead_name(reservation: str) -> str:
    """The reservation made ahead of a scheduled switch (folded into the run's when it runs):
    never the run's own, which may hold skipped nodes *now*."""
    return f"{reservation}_ahead"
