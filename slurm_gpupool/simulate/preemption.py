"""QOS preemption in the replay, as ``preempt/qos`` with ``PreemptMode=REQUEUE`` or ``CANCEL``
does it (pure; the rules and Slurm's sources are in ``preempt``).

A job of a QOS that preempts others and does not fit now, when the main scheduler reaches
it or a backfill pass tests it, looks for running jobs of the QOS it preempts whose removal
lets it fit (``preempt.run_now``).  If there are, they are preempted: each ends after its
QOS's GraceTime (at once without one) unless it ends by itself before, its records come
free after the epilog (its ``release_s``, as at any end), and it is then requeued (eligible
``requeue_delay_s`` later, queued by its new submit time) or, in ``cancel`` mode or when it
may not be requeued (``--no-requeue``: Slurm kills it), ended.  The preempting job does not
start now: it blocks the jobs after it in the main scheduler (and holds its nodes in a
backfill pass) and starts when the records are free, like any waiting job.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Collection, Container

from slurm_gpupool.simulate.cores import rebind, unbind
from slurm_gpupool.simulate.preempt import CANCEL, PreemptRules, run_now
from slurm_gpupool.simulate.records import Part, SimNode, apply
from slurm_gpupool.simulate.replay import ELIGIBLE, KILL
from slurm_gpupool.simulate.scheduler import Scheduler
from slurm_gpupool.simulate.state import INF

Chosen = list[tuple[SimNode, list[Part]]]


class Preemption(Scheduler):
    """Preemption of running jobs for a waiting job of a preempting QOS."""

    rules: PreemptRules
    preempt_busy: dict[int, float]  # a preemptor -> until when it preempts nothing more
    graced: dict[int, float]  # a preempted job in its grace time -> when it is ended
    dying: set[int]  # preempted jobs ended, their records not yet free
    order_keys: list[tuple[int, int, float, int]]  # (-tier, -priority, submit, job id) of the queue, sorted
    order_ranks: list[float]  # the rank of each, in the same order

    def _preempt_for(self, i: int, all_gone: bool = False, blocked: Container[int] = ()) -> Chosen | None:
        """Job ``i`` does not fit now: preempt what ``_run_now`` would for it (the nodes it
        will take), or None.  With ``all_gone`` (backfill's will-run test), only if it fits
        with every candidate gone (the plan then preempts through the main path); ``blocked``:
        the nodes backfill keeps it off (``avail_bitmap``: higher jobs' reservations)."""
        job, rules = self.jobs[i], self.rules
        if job.qos not in rules.preempts or self.now < self.preempt_busy.get(i, -INF):
            return None  # not a preemptor, or its preemption is still in progress (KillWait)
        cands = sorted(
            (j for j in self.job_nodes if self._running(j) and rules.removable(job.qos, self.jobs[j].qos)),
            key=lambda j: (rules.order_key(self.jobs[j].qos, len(self.job_nodes[j])), self.jobs[j].job_id),
        )
        if not cands:
            return None
        need, limit = self.need_of_job[i], job.limit_s
        found: dict[tuple[int, ...], Chosen] = {}

        def fits(removed: Collection[int]) -> tuple[int, ...] | None:
            # the victims' records and cores free meanwhile (their sockets count for the choice of node)
            held = [(j, n, n.running[j][1], unbind(n, j)) for j in removed for n in self.job_nodes[j]]
            for _, n, parts, _ in held:
                apply(n.free, n.shared, parts, -1)
            try:
                chosen = self._fit_now(need, limit, blocked)
            finally:
                for j, n, parts, got in held:
                    apply(n.free, n.shared, parts, +1)
                    rebind(n, j, got)
            if chosen is None:
                return None
            key = tuple(n.index for n, _ in chosen)
            found[key] = chosen
            return key

        if all_gone and fits(cands) is None:
            return None
        got = run_now(cands, fits, lambda j: [n.index for n in self.job_nodes[j]])
        if got is None:
            return None
        nodes, victims = got
        for j in victims:
            self._preempt(j, i)
        self.preempt_busy[i] = self.now + self.p.preempt_wait_s
        return found[tuple(nodes)]

    def _running(self, j: int) -> bool:
        """Still running as Slurm sees it: not ended by a preemption (in its grace time it is),
        nor ended and completing (``_completing``: its records are free already)."""
        return j in self.end_time and j not in self.dying and self.graced.get(j, INF) > self.now

    def _preempt(self, j: int, by: int) -> None:
        """End job ``j`` for job ``by`` now, or when its QOS's GraceTime is up (unless it
        ends before)."""
        if j in self.graced or j in self.dying:
            return  # already preempted: in its grace time, or ending
        rec = self.recs[j]
        kill_at = self.now + self.rules.grace_s.get(self.jobs[j].qos, 0.0)
        if kill_at >= rec.end_s:
            return  # its work ends first: it completes
        rec.preemptions += 1
        rec.preempted_by = self.jobs[by].job_id
        self.preempted += self._in_window()
        self.gen[j] += 1  # the end it was going to have is stale
        self.graced[j] = kill_at  # (without a grace time it ends at this instant: no longer a candidate)
        if kill_at > self.now:
            self._replan_end(j, kill_at)
        self._push(kill_at, KILL, (j, self.gen[j], 0))

    def _replan_end(self, j: int, end: float) -> None:
        """Backfill plans with the preempted job's new end (``end_time``, ``_job_check_grace``)."""
        self.end_time[j] = end
        self._move_end(j, end)

    def _move_end(self, j: int, end: float) -> None:
        """Job ``j``'s planned end is now ``end``: in the sorted ends and its nodes' timelines."""
        nodes = self.job_nodes[j]
        old = nodes[0].running[j][0]
        del self.ends[bisect_left(self.ends, (old, j))]
        insort(self.ends, (end, j, tuple(n.index for n in nodes)))
        for n in nodes:
            parts = n.running[j][1]
            n.running[j] = (end, parts)
            self._records_changed(n, parts)

    def _kill(self, j: int, gen: int, stage: int) -> None:
        """Stage 0: the preempted job is ended (its records free after the epilog, or at once
        where its nodes complete it: ``_completing``); stage 1: its epilog is done: requeued
        (``batch_requeue_fini``) or done."""
        if self.gen.get(j) != gen:  # the repartitioner requeued it meanwhile
            self.graced.pop(j, None)
            self.dying.discard(j)
            return
        rec = self.recs[j]
        if stage == 0:
            self.graced.pop(j, None)
            self.dying.add(j)
            rec.end_s = self.now
            if self.p.completing_blocks_node:
                self._completing(j, gen)
            self._push(self.now + self._release_s(j), KILL, (j, gen, 1))
            return
        self.dying.discard(j)
        self._release(j)
        job = self.jobs[j]
        if self.rules.mode(job.qos) == CANCEL or not job.requeue:
            rec.cancelled = True
            self.open_jobs -= 1
            self._finished(j, False)
            return
        rec.requeues += 1
        rec.start_s = rec.end_s = -1.0
        self.gen[j] += 1
        self.rank[j] = self._requeued_aged(j) if self.aging else self._requeued_rank(j)
        self._push(self.now + self.p.requeue_delay_s, ELIGIBLE, j)

    def _requeued_rank(self, j: int) -> float:
        """The queue place of a job requeued now: its priority, submitted now (between the
        ranks of its neighbours in Slurm's order; ``priority.queue_ranks``)."""
        if not self.order_keys:
            keys = sorted((self._order_key(i, self.jobs[i].submit_s), self.rank[i]) for i in range(len(self.jobs)))
            self.order_keys = [k for k, _ in keys]
            self.order_ranks = [r for _, r in keys]
        key = self._order_key(j, self.now)
        k = bisect_right(self.order_keys, key)
        lo = self.order_ranks[k - 1] if k else -1.0
        hi = self.order_ranks[k] if k < len(self.order_ranks) else lo + 2.0
        rank = (lo + hi) / 2
        self.order_keys.insert(k, key)
        self.order_ranks.insert(k, rank)
        return rank

    def _order_key(self, i: int, submit_s: float) -> tuple[int, int, float, int]:
        return (-self.tier_of[i], -self.priority_of[i], submit_s, self.jobs[i].job_id)

    def _eligible(self, j: int) -> None:
        """A requeued job's begin time has come: it queues again."""
        self._enqueue(j)
