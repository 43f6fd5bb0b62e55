"""The age factor: queued jobs' priorities as the decay thread recomputes them (pure).

Where ``Params.priority_weight_age`` is set (``PriorityWeightAge``), a queued job's priority
grows with its age, and an old job of a low QOS may pass a new one of a higher QOS.  Slurm
does not reorder its queue continuously: ``priority/multifactor``'s decay thread
(``_decay_thread``, every ``PriorityCalcPeriod`` from the controller's start) recomputes
every pending job's priority (``decay_apply_weighted_factors``, which logs ``priority for job
N is now P`` at debug2), and the schedulers order the queue by the last values.  A job's
priority at submission counts no age (its accrue time is that second: ``job_allocate`` ->
``job_independent`` -> ``acct_policy_handle_accrue_time``).  Ages are whole seconds
(``time_t``) from the accrue time to the round's start.

The replay does the same: each job's rank is ``-priority * (jobs + 1)`` plus its place in
submission order (then job id), less its partition tier's offset, so ranks order the queue as
``sort_job_queue2`` does (tier, then priority, then submission, then job id) exactly, in
floats (below 2**53 while the weights' sum times the jobs times the tiers is: weights of
10,000s and a million jobs leave room for thousands of tiers); a ``PRIO`` event at each round
recomputes the queued jobs' ranks and re-sorts the queue.  The fair-share factor moves in the
same rounds (``fairshare``: the usage counted and the associations ranked first).  Without an
age or a fair-share weight nothing here runs.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

from slurm_gpupool.simulate.fairshare import FairTree
from slurm_gpupool.simulate.index import NodeIndex
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.priority import multifactor, static_parts, tiers
from slurm_gpupool.simulate.replay import PRIO


class Aging(NodeIndex):
    """Accrue times, the decay thread's rounds and the ranks they give."""

    def _aging_begin(self, jobs: Sequence[SimJob]) -> list[float] | None:
        """Set the age model up (``run``'s start): with an age or a fair-share weight, the
        ranks ``priority.queue_ranks`` would give, in this module's scale; None without one."""
        p = self.p
        self.aging = p.priority_weight_age > 0 or p.priority_weight_fairshare > 0
        self.accrue, self.prio_due = {}, False
        self.fair, self.fs_runs, self.last_round = None, set(), None
        if not self.aging:
            return None
        if p.priority_weight_fairshare > 0:
            self.fair = FairTree(
                p.fairshare_accounts, p.fairshare_users, p.fairshare_usage, p.priority_decay_half_life_s
            )
            self.fair.rank()  # (the factors the round before time 0 gave: from the usage then)
        self.static_parts = static_parts(jobs, p)
        # a higher tier before any priority: its distinct tiers' places, each above the
        # highest priority the weights give (every factor at 1), in this module's scale
        tier = tiers(jobs, p)
        places = {t: k for k, t in enumerate(sorted(set(tier)))}
        weights = (
            p.priority_weight_age + p.priority_weight_qos + p.priority_weight_partition + p.priority_weight_fairshare
        )
        top = (weights + 2) * (len(jobs) + 1)
        self.tier_offset = [-float(places[t] * top) for t in tier]
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, jobs[i].job_id, i))
        self.sub_order = [0.0] * len(jobs)
        for place, i in enumerate(order):
            self.sub_order[i] = float(place)
        self.sub_keys = [(jobs[i].submit_s, jobs[i].job_id) for i in order]
        return [self._aged_rank(i, self._ageless(i)) for i in range(len(jobs))]

    def _ageless(self, i: int) -> int:
        """Job ``i``'s priority with no age: at its submission, or requeued."""
        return multifactor(self._parts(i), 0, 0, 1.0)

    def _parts(self, i: int) -> float:
        """Job ``i``'s weighted factors but its age: the static ones, and its association's
        fair-share factor as the last round left it."""
        if self.fair is None:
            return self.static_parts[i]
        job = self.jobs[i]
        return self.static_parts[i] + self.p.priority_weight_fairshare * self.fair.factor.get(
            (job.account, job.user), 0.0
        )

    def _submitted(self, i: int) -> None:
        """Job ``i`` queues for the first time (or requeued): with fair-share, its priority is
        its association's factor now (``priority_p_set``), not the one at time 0."""
        if self.fair is not None and i not in self.accrue:
            self.rank[i] = self._aged_rank(i, self._ageless(i))

    def _runs(self, i: int) -> None:
        """Job ``i`` started: its run adds to its association's usage (``fairshare``)."""
        if self.fair is not None:
            self.fs_runs.add(i)

    def _fair_round(self) -> None:
        """The usage and factors of a round of the decay thread now (``_apply_decay``, then
        ``_apply_new_usage``: a run that ended since the last round was added at its end and
        is decayed with the rest; a running one's is added after; then ``_apply_priority_fs``)."""
        fair, now = self.fair, float(self._second())
        assert fair is not None
        last = self.last_round if self.last_round is not None else now - self.p.priority_calc_period_s
        origin, runs = self.p.clock_origin_s, []
        for i in list(self.fs_runs):
            rec, job = self.recs[i], self.jobs[i]
            if rec.start_s < 0:  # requeued by a preemption: its run's usage is not replayed
                self.fs_runs.discard(i)
                continue
            end = rec.end_s + origin if rec.end_s >= 0 else math.inf
            runs.append(((job.account, job.user), job.billing, rec.start_s + origin, end))
            if end <= now:
                self.fs_runs.discard(i)
        fair.round(last, now, runs)
        self.last_round = now

    def _aged_rank(self, i: int, priority: int) -> float:
        """Job ``i``'s place in the queue at this priority (the module's scale)."""
        return self.tier_offset[i] - float(priority) * (len(self.jobs) + 1) + self.sub_order[i]

    def _second(self) -> int:
        """The clock's epoch second now (``time(NULL)``)."""
        return math.floor(self.now + self.p.clock_origin_s + 1e-9)

    def _accrues(self, i: int) -> None:
        """Job ``i`` queues: its age counts from this second, if it did not already."""
        if self.aging:
            self.accrue.setdefault(i, self._second())
            self._next_prio()

    def _requeued_aged(self, j: int) -> float:
        """A job preemption requeued queues as if submitted now, with no age (its accrue time
        is reset at the requeue: ``acct_policy_remove_accrue_time``)."""
        self.accrue.pop(j, None)
        key = (self.now, self.jobs[j].job_id)
        self.sub_order[j] = bisect_right(self.sub_keys, key) - 0.5
        return self._aged_rank(j, self._ageless(j))

    def _next_prio(self) -> None:
        """The decay thread's next round after now, unless one is due already."""
        if self.prio_due:
            return
        p = self.p
        period = p.priority_calc_period_s
        at = self.now + p.clock_origin_s - p.priority_calc_phase_s
        nxt = (math.floor(at / period + 1e-9) + 1) * period + p.priority_calc_phase_s - p.clock_origin_s
        self.prio_due = True
        self._push(nxt, PRIO, None)

    def _reprioritize(self) -> None:
        """A round of the decay thread (PRIO): every queued job's priority from its age now; the
        queue re-sorted by them.  The chain of rounds stops while nothing is queued."""
        self.prio_due = False
        if self.fair is not None:
            self._fair_round()
            if not self.queued and self.fs_runs:
                self._next_prio()  # usage moves while jobs run (idle, it only decays: the ranks stay)
        if not self.queued:
            return
        p, now = self.p, self._second()
        for i in self.queued:
            age = now - self.accrue.get(i, now)
            prio = multifactor(self._parts(i), age, p.priority_weight_age, p.priority_max_age_s)
            self.rank[i] = self._aged_rank(i, prio)
        self.queue[:] = sorted((self.rank[i], jid, i, need, limit) for _, jid, i, need, limit in self.queue)
        self.changed = True  # (``last_job_update``: a backfill pass is due)
        self._next_prio()
