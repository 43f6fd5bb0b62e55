"""Jobs through the queue and Slurm's main scheduler (pure).

* **Requests follow the layout** as ``gpupool-sbatch`` decides them: a job maps to GRES in
  the layout installed when it is submitted; one that only a later layout can hold is
  refused by the wrapper (exit 75, with when) and is taken to be resubmitted then, its
  wait counted from its first submission.
* **Priority order** (``priority``: QOS priority, submission, job id; a job the repartitioner
  requeued keeps its place, one preemption requeued queues by its requeue time).
* **The main scheduler** (``job_scheduler.c``: ``_schedule``) runs at every submission and job
  end: it walks the queue in priority order and starts what fits now; the first job that does
  not fit blocks every job after it (Slurm's partition rule, ``sched_config.html``).  A job no
  node can hold in its *current* configuration (its GRES type is gone while another layout is
  in) does not block: Slurm marks it ``BadConstraints``/``ReqNodeNotAvail`` and moves on.
* **Typed GRES**: a job asks for ``gpu:<type>:N`` or ``shard:<type>:K`` per node on
  ``nodes`` nodes; nodes are tried in config order (first fit), records as ``records.take``.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Container, Sequence

from slurm_gpupool.simulate.aging import Aging
from slurm_gpupool.simulate.cadence import next_pass
from slurm_gpupool.simulate.cores import bind, eval_nodes, fit_cpus, unbind
from slurm_gpupool.simulate.mapping import RequestMapper, TraceRequest
from slurm_gpupool.simulate.records import Part, SimNode, apply, idle, take
from slurm_gpupool.simulate.replay import BACKFILL, COMPLETING, DONE, END, SCHED, SUBMIT
from slurm_gpupool.simulate.state import SHARD, Need, need_of

# why a job with dependencies never runs (``JobRecord.rejected``)
BROKEN = "its afterok dependency did not complete"
NEVER_ENDS = "it depends on a job that never runs"


class Scheduler(Aging):
    """Submission, start, end and release of jobs, and the main scheduler's pass."""

    # -- mapping --------------------------------------------------------------------------
    def need(self, layout: str, req: TraceRequest) -> Need | None:
        """The GRES ``req`` becomes in ``layout`` (memoised: traces repeat their requests)."""
        key = (layout, req)
        if key not in self.needs:
            m = self.mappers.get(layout)
            if m is None:
                offers = self.spec.offers.get(layout, [])
                m = self.mappers[layout] = RequestMapper(
                    offers,
                    layout,
                    self.spec.naming,
                    self.p.prefer,
                    self.spec.autodetect,
                    multi_node=True,
                    any_model=self.p.any_model,
                )
            d = m(req)
            self.needs[key] = need_of(d) if d is not None else None
        return self.needs[key]

    def idle_alternatives(self, layout: str, req: TraceRequest) -> list[Need]:
        """What ``req`` may ask for instead of its slice or shares when they are not idle
        (``RequestMapper.idle_alternatives``, memoised)."""
        key = (layout, req)
        if key not in self.alternatives:
            self.need(layout, req)  # builds the layout's mapper
            self.alternatives[key] = [need_of(d) for d in self.mappers[layout].idle_alternatives(req)]
        return self.alternatives[key]

    # -- jobs -----------------------------------------------------------------------------
    def _submit(self, i: int) -> None:
        job, rec = self.jobs[i], self.recs[i]
        if rec.withdrawn:
            return  # cancelled while refused (a later layout's job): never resubmitted
        due = self.sw.due(self.now)
        need = self.need(due, job.request)
        if need is None:
            later = next(((t, lay) for t, lay in self.sw.upcoming(self.now) if self.need(lay, job.request)), None)
            if later is None:
                rec.rejected = f"no layout holds {_describe(job.request)}"
                self.open_jobs -= 1
                self._finished(i, False, ends=False)  # (sbatch refuses a dependency on it)
                return
            rec.eligible_s = later[0]
            self.deferred.add(i)
            self._push(later[0], SUBMIT, i)  # refused now (exit 75, with when): resubmitted then
            return
        self.deferred.discard(i)
        if need.demand.kind in ("mig", "shard") and self.sw.idle_now(self.now) and not self._fit_now(need, job.limit_s):
            # as gpupool-sbatch in an elastic period (core.submit._idle_first): nothing idle now
            # holds the slice or shares it would ask for: the first alternative idle now
            need = next((a for a in self.idle_alternatives(due, job.request) if self._fit_now(a, job.limit_s)), need)
        rec.need, rec.kind, rec.layout, rec.eq = need.label, need.demand.kind, due, need.eq
        self.need_of_job[i] = need
        self.meter.typical[need] += 1
        if i in self.never:
            self._never(i)
        elif self.waits_on.get(i):
            self.held.add(i)  # pending (Dependency): it queues when the last of them ends
        else:
            self._enqueue(i, at_tick=self.p.sched_tick_s > 0)

    def _finished(self, i: int, completed: bool, ends: bool = True) -> None:
        """Job ``i`` has ended for good (``completed``: COMPLETED, its work done; else it
        failed, timed out or was cancelled), or will never run (not ``ends``): the jobs
        depending on it queue once none of theirs is left (``test_job_dependency``:
        ``afterany`` any end, ``afterok`` a completed one); a job whose ``afterok`` it
        broke, or that waits on a job that never ends, never runs."""
        for d in self.dependents.get(i, ()):
            waits = self.waits_on[d]
            waits.discard(i)
            if not ends or (not completed and not self.jobs[d].after_any):
                self.never.setdefault(d, NEVER_ENDS if not ends else BROKEN)
                if d in self.held:
                    self.held.discard(d)
                    self._never(d)
            elif not waits and d in self.held:
                self.held.discard(d)
                self._enqueue(d)

    def _never(self, i: int) -> None:
        """An ``afterok`` dependency of job ``i`` did not complete (or one of its
        dependencies never runs): Slurm leaves it pending for good (DependencyNeverSatisfied,
        or Dependency; ``kill_invalid_depend`` would cancel it, which is not modelled), so the
        replay counts it among the jobs it could not run, saying why, and the jobs waiting
        on it never run either."""
        self.recs[i].rejected = self.never[i]
        self.open_jobs -= 1
        self._finished(i, False, ends=False)

    def _key(self, i: int) -> tuple[float, int, int]:
        """Its place in the queue: Slurm's order (``priority.queue_ranks``: QOS priority, then
        submission, then job id), fixed at the start (a requeued job keeps its place) unless
        ages weigh (``aging``)."""
        return (self.rank[i], self.jobs[i].job_id, i)

    def _enqueue(self, i: int, at_tick: bool = False) -> None:
        """Job ``i`` queues; the main scheduler runs now, or (``at_tick``: a submission,
        ``Params.sched_tick_s``) at the background loop's next round.  A backfill pass is due
        either way (``_more_work``: the queue changed)."""
        self._submitted(i)
        insort(self.queue, (*self._key(i), id(self.need_of_job[i]), self.jobs[i].limit_s))
        self.queued.add(i)
        self._accrues(i)
        self.changed = True
        if not at_tick:
            self.dirty = True
            return
        if not self.sched_due:
            self.sched_due = True
            self._push(self._next_round(), SCHED, None)
        self._pass_due()

    def _next_round(self) -> float:
        """The background loop's next round at or after now (``Params.sched_tick_s``)."""
        p = self.p
        at = self.now + p.clock_origin_s - p.sched_tick_phase_s
        return math.ceil(at / p.sched_tick_s - 1e-9) * p.sched_tick_s + p.sched_tick_phase_s - p.clock_origin_s

    def _sched_round(self) -> None:
        """The background loop's round (SCHED): the main scheduler runs."""
        self.sched_due = False
        self.dirty = True

    def _withdraw(self, i: int) -> None:
        """Its user cancels job ``i`` (``scancel``, ``job_mgr.c``: ``job_signal``).  Pending,
        it leaves the queue and ends without running (Slurm: state CANCELLED, no start); its
        place stops blocking the jobs after it, and the main scheduler runs now (the
        sandbox's ``sched_interval`` would within 5 s).  Running, it ends now and its records
        free after the epilog, as at any end.  Ended already: nothing."""
        rec = self.recs[i]
        if i in self.queued:
            self.queued.discard(i)
            q = self.queue
            del q[bisect_left(q, self._key(i))]
        elif i in self.deferred:
            self.deferred.discard(i)
        elif i in self.held:
            self.held.discard(i)
        elif i in self.job_nodes and rec.end_s > self.now:
            rec.end_s, rec.timeout = self.now, False
            self.gen[i] += 1  # its planned end is stale
            self._ends_at(i, rec.end_s, completed=False)
            return
        else:
            return
        rec.withdrawn = True
        self.open_jobs -= 1
        self.dirty = self.changed = True
        self._finished(i, False)

    def _start(self, i: int, chosen: Sequence[tuple[SimNode, list[Part]]]) -> None:
        job, rec, need = self.jobs[i], self.recs[i], self.need_of_job[i]
        self.queued.discard(i)
        q = self.queue
        del q[bisect_left(q, self._key(i))]
        self.started += 1
        run = job.duration_s * (self.p.shard_slowdown if need.kind == SHARD else 1.0)
        killed = self._limit_checked(self.now, job.limit_s) - self.now
        # past its limit: TIMEOUT, whether the check ended it or its work ended first
        # (``_job_complete``: ``end_time + OverTimeLimit < now``)
        rec.timeout = run > job.limit_s
        rec.start_s = self.now
        rec.end_s = self.now + min(run, killed)
        self._runs(i)
        # what backfill plans with: Slurm's end_time, the time limit (it knows neither run
        # times nor when the periodic check will end a job past it: ``_plan_overdue``)
        expected = self.end_time[i] = self.now + job.limit_s
        for n, parts in chosen:
            bind(n, i, parts)
            apply(n.free, n.shared, parts, +1)
            n.running[i] = (expected, parts)
            self.meter.alloc(parts[0][1], need.eq / need.nodes, self.now)
            self._records_changed(n, parts)
        rec.gres_type = chosen[0][1][0][1]
        self.job_nodes[i] = [n for n, _ in chosen]
        insort(self.ends, (expected, i, tuple(n.index for n, _ in chosen)))
        self.gen[i] = self.gen.get(i, 0) + 1
        self._ends_at(i, rec.end_s, completed=not rec.timeout)

    def _ends_at(self, i: int, end_s: float, completed: bool) -> None:
        """Job ``i``'s run ends at ``end_s`` (its current run: ``gen``; ``completed``: its
        work done, not timed out or cancelled): its records free after the epilog (END); a
        job depending on it may queue (DONE).

        Slurm clears a dependency once the job has completed *and* its Epilogs have ended
        (``IS_JOB_COMPLETED``: finished, not COMPLETING, on 22.05, 24.11 and 26.05), in the
        main scheduler's run that the last Epilog's end makes (``_slurm_rpc_epilog_complete``
        runs ``schedule()``, or queues it for the background loop under
        ``SchedulerParameters=defer``, which the sandbox does not set).  Where the Epilogs'
        ends are known to the millisecond (``Params.completing_blocks_node``; a job whose end
        the log lacks takes the mean), DONE is at the job's: on a loaded 24.11 sandbox every
        dependent that started at once did so 1 ms after its dependency's Epilog ended, and
        a job whose dependency ended 18 ms before another's, and its Epilog 17 ms before,
        took the GPUs though the other was first in the queue (ended, but still completing).
        Queued at the end instead, a CI run's replay started a 4-GPU job on a node 75 s
        before Slurm did (its dependency's Epilog took 0.69 s, and another job got the node
        meanwhile).  Where the Epilogs' ends are not known (a run logged at
        ``info``), DONE is at the end: a dependent job was allocated 56-110 ms after its
        dependency's ``_job_complete`` (its Epilog), while ``release_s`` (the hand-over to the
        next job on the same GPUs) is 0.1-0.5 s, and queued at the end the replay agrees
        better (at ``release_s``, 97.1 % against 99.4 % of pairs in Slurm's order on 22.05's
        seed 5757, and its p90 wait 33.2 against 27.8 s)."""
        released = end_s + self._release_s(i)
        self._push(released, END, (i, self.gen[i]))
        if self.p.completing_blocks_node:
            self._push(end_s, COMPLETING, (i, self.gen[i]))
        if self.dependents.get(i):
            self._push(released if self.p.completing_blocks_node else end_s, DONE, (i, self.gen[i], completed))

    def _completing(self, i: int, gen: int) -> None:
        """Job ``i``'s run has ended (COMPLETING): its records come free, as the select
        plugin frees them at ``_job_complete`` (``deallocate_nodes``: ``select_g_job_fini``),
        but its nodes complete it, and take no job, until its Epilogs end (``_release``;
        ``Params.completing_blocks_node``).

        The end is a change a backfill pass works on (``_job_complete`` sets
        ``last_job_update``, which ``backfill.c``'s ``_more_work`` reads): the pass plans a
        job that fits on the completing node a second from now and holds the node for it,
        and a lower job may then start now on the node that hold had kept it off.  A 26.05
        run: a 2-GPU job was planned onto the node completing a 2-GPU job, and the 1-GPU job
        behind it started at once on the other A100 node, 5 s before the replay's, which
        skipped that pass and kept the ended job's records taken until its Epilog's end."""
        if self.gen.get(i) == gen and i in self.end_time:
            self._free(i)
            for n in self.job_nodes[i]:
                n.completing.add(i)
            self.changed = True
            self._pass_due()

    def _release_s(self, i: int) -> float:
        """How long job ``i``'s records stay taken after its run ends: its own measured
        release (``SimJob.release_s``) or every job's (``Params.release_s``)."""
        own = self.jobs[i].release_s
        return self.p.release_s if own is None else own

    def _done(self, i: int, gen: int, completed: bool) -> None:
        """Job ``i``'s run has ended (DONE): the jobs waiting on it may queue now
        (``_finished``), unless a preemption ended it first (a new ``gen``: ``_kill`` says
        so itself) or requeued it."""
        if self.gen.get(i) == gen:
            self._finished(i, completed)

    def _limit_checked(self, start: float, limit_s: float) -> float:
        """When a job started at ``start`` with a limit of ``limit_s`` is ended if still
        running: Slurm's next periodic time-limit check at or after its ``end_time``
        (``job_time_limit``; ``Params.limit_check_s``).  Slurm's times are whole seconds
        (``time_t``): ``end_time`` is the second the job started plus its limit, and a check
        ends it once ``end_time <= now``, so a job started at x.9 s is ended by a check at
        its limit's x.0 s, which a fractional comparison missed by up to a whole period
        (a 26.05 live run: a 2-GPU job ran 11 s longer than in Slurm, and 30 jobs behind it
        waited longer).  The checks are counted in whole periods from the nearest logged
        one (``Params.limit_checks_s``), else from ``limit_check_phase_s``."""
        step = self.p.limit_check_s
        if step <= 0:
            return start + limit_s
        origin = self.p.clock_origin_s
        end_time = math.floor(start + origin + 1e-9) + limit_s  # epoch s, whole
        logged = self.p.limit_checks_s
        if logged:  # the nearest logged check: its second and its fraction
            k = bisect_left(logged, end_time - origin)
            anchor = min(logged[max(0, k - 1) : k + 1], key=lambda c: abs(c + origin - end_time)) + origin
        else:
            anchor = self.p.limit_check_phase_s
        second = math.floor(anchor + 1e-9)
        # the first check whose second is at or past end_time (``end_time <= now``)
        return second + math.ceil((end_time - second) / step - 1e-9) * step + (anchor - second) - origin

    def _end(self, i: int, gen: int) -> None:
        if self.gen.get(i) != gen:
            return  # requeued since: this end belongs to its earlier run
        self._release(i)
        self.open_jobs -= 1

    def _release(self, i: int) -> None:
        """Job ``i``'s nodes are done with it: its records free (at its end already, where its
        nodes complete it: ``_completing``), and a node reserved for a switch that ran its
        last job switches."""
        if i in self.end_time:
            self._free(i)
        for n in self.job_nodes.pop(i):
            n.completing.discard(i)
            if n.target is not None and idle(n):
                self._node_idle(n)
        self.dirty = self.changed = True

    def _free(self, i: int) -> None:
        """Job ``i``'s records come free on its nodes (``scontrol show node``: AllocTRES)."""
        need = self.need_of_job[i]
        nodes = self.job_nodes[i]
        k = bisect_left(self.ends, (nodes[0].running[i][0], i))
        del self.ends[k]  # (end, i) is unique: the entry is at k
        del self.end_time[i]
        for n in nodes:
            _, parts = n.running.pop(i)
            unbind(n, i)
            apply(n.free, n.shared, parts, -1)
            self.meter.alloc(parts[0][1], -need.eq / need.nodes, self.now)
            self._records_changed(n, parts)

    def _preempt_for(
        self, i: int, all_gone: bool = False, blocked: Container[int] = ()
    ) -> list[tuple[SimNode, list[Part]]] | None:
        """Job ``i`` does not fit now: preempt for it (``Preemption``'s)."""
        raise NotImplementedError

    def _node_idle(self, n: SimNode) -> None:
        """A node reserved for a switch ran its last job: what follows is ``Switching``'s."""
        raise NotImplementedError

    # -- the main scheduler ----------------------------------------------------------------
    def _schedule_main(self) -> None:
        """Priority order; the first job that does not fit blocks the rest (the partition)."""
        if not self.dirty:
            return
        self.dirty = False
        q, k = self.queue, 0
        while k < len(q):
            i = q[k][2]
            need = self.need_of_job[i]
            if not self._configured(need):
                k += 1
                continue  # no node has that GRES now (BadConstraints): it does not block
            chosen = self._fit_now(need, self.jobs[i].limit_s, self._elsewhere(i))
            if chosen is None:
                if self.preempting:
                    self._preempt_for(i)  # it waits for what it preempts (ESLURM_NODES_BUSY): it blocks too
                break
            self._start(i, chosen)  # it leaves the queue: the next job is at k now
        self._pass_due()

    def _pass_due(self) -> None:
        """A backfill pass in the queue if jobs wait and something changed since the last."""
        if self.queued and self.changed and not self.bf_pending:
            self.bf_pending = True
            self._push(self._next_pass_at(), BACKFILL, None)

    def _elsewhere(self, i: int) -> Container[int]:
        """The nodes job ``i`` may not use: all but those it is pinned to (``SimJob.nodes``)."""
        pins = self.jobs[i].nodes
        return {n.index for n in self.nodes if n.name not in pins} if pins else ()

    def _next_pass_at(self) -> float:
        """The next backfill pass that has not run (this one's, if the change came at a pass
        instant before its pass: events at one instant come before the pass): on the grid of
        ``bf_interval_s``, or at Slurm's own instants where a replay knows them (``cadence``)."""
        return next_pass(self.now, self.last_pass_s, self.p.bf_interval_s, self.p.bf_passes_s, self.grid_from)

    def _fit_now(
        self, need: Need, limit: float, blocked: Container[int] = ()
    ) -> list[tuple[SimNode, list[Part]]] | None:
        """The nodes that hold ``need`` now for ``limit`` (none of ``blocked``), or None: those
        cons_tres picks among them (``cores.eval_nodes``)."""
        out = []
        end = self.now + limit
        for n in self._offering(need.types):
            if not n.usable or end > n.ahead_at or n.index in blocked or n.completing:
                continue
            for typ in need.types:
                parts = take(n.free, n.shared, n.shares, need, typ)
                if parts is not None:
                    out.append((n, parts))
                    break
        if len(out) < need.nodes:
            return None
        if len(out) > 1:  # (in node order: ``_offering``'s)
            out = [out[p] for p in eval_nodes([(n.index, fit_cpus(n, parts)) for n, parts in out], need.nodes)]
        return out


def _describe(req: TraceRequest) -> str:
    return f"{req.milli / 1000:g} GPU" if req.milli < 1000 else f"{req.gpus} GPU" + ("s" if req.gpus > 1 else "")
