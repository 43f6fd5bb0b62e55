"""A discrete-event replay of jobs on a pool, scheduled as Slurm schedules our GRES (pure).

What it models, each from Slurm's documented behaviour or the repartitioner's own rules, in
the module that does it:

* ``scheduler``: requests mapped as ``gpupool-sbatch`` maps them in the layout installed at
  submission (a later layout's: refused, resubmitted then); priority order (``priority``:
  QOS priority, submission, job id; ``aging``: the age factor, where it weighs); the main
  scheduler, run at every submission and job end, where the first job that does not fit
  blocks the rest unless no node offers its GRES now.
* ``records``: typed GRES records per node, taken first fit; time-sliced GPUs whole or as
  shards, never both.
* ``backfill`` (with ``index`` and ``earliest``): a pass every ``bf_interval_s`` when something
  changed, up to ``bf_max_job_test`` jobs, each given the earliest start its time limit allows
  around running jobs and the whole-node reservations of the jobs before it, within
  ``bf_window_s``, windows rounded to ``bf_resolution_s``; a start later than now is planned
  as Slurm's select plugin plans it (``willrun``: its batches of running jobs).
* ``preemption`` (with ``preempt``): a job of a QOS that preempts others, when it does not
  fit now, requeues or cancels the running jobs of lower QOS ``preempt/qos`` and cons_tres's
  ``_run_now`` would pick (after their GraceTime), and starts once their records are free.
* ``switching``: switches as the repartitioner makes them (reservation ahead, MAINT
  reservation, switch once idle, deadline, cron, requeue), or as a demand-driven switcher asks.
* ``meter``: capacity, allocation and fragmentation, measured while jobs arrive.

This module is the event loop that drives them, and the replay's one entry point: ``Engine``
(with the types its callers pass and get back, re-exported here).

Pure: no I/O; time is seconds from the start of the replay.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from slurm_gpupool.simulate.backfill import Backfill
from slurm_gpupool.simulate.earliest import NOW
from slurm_gpupool.simulate.earliest import earliest as _earliest
from slurm_gpupool.simulate.earliest import first_clear as _first_clear
from slurm_gpupool.simulate.earliest import lower_bound as _lower_bound
from slurm_gpupool.simulate.earliest import rounded as _rounded
from slurm_gpupool.simulate.jobs import CIRCULAR, SimJob, circular, dependencies
from slurm_gpupool.simulate.meter import Meter
from slurm_gpupool.simulate.pool import PoolSpec
from slurm_gpupool.simulate.preempt import rules_of
from slurm_gpupool.simulate.priority import priorities, queue_ranks, static_parts, tiers
from slurm_gpupool.simulate.records import SimNode as _Node
from slurm_gpupool.simulate.records import take as _take
from slurm_gpupool.simulate.records import timeline as _timeline
from slurm_gpupool.simulate.replay import (
    AHEAD,
    BACK,
    BACKFILL,
    COMPLETING,
    CRON,
    DONE,
    ELIGIBLE,
    END,
    KILL,
    LIVE,
    PRIO,
    REQUEUE,
    SAMPLE,
    SCHED,
    SUBMIT,
    SWITCH,
    TICK,
    WITHDRAW,
)
from slurm_gpupool.simulate.state import GPU, INF, SHARD, JobRecord, Need, NodeState, Params, Pending, Result
from slurm_gpupool.simulate.switcher import Switcher
from slurm_gpupool.simulate.switching import Switching

# what callers import from here; the underscored names are the pieces the tests check by hand
__all__ = [
    "GPU",
    "INF",
    "NOW",
    "SHARD",
    "Engine",
    "JobRecord",
    "Need",
    "NodeState",
    "Params",
    "Pending",
    "Result",
    "Switcher",
    "_Node",
    "_earliest",
    "_first_clear",
    "_lower_bound",
    "_rounded",
    "_take",
    "_timeline",
]


class Engine(Switching, Backfill):
    """One replay of ``jobs`` under one switcher; ``run`` may be called once."""

    def __init__(self, spec: PoolSpec, switcher: Switcher, params: Params | None = None) -> None:
        self.spec, self.sw, self.p = spec, switcher, params or Params()
        self.mappers = {}
        self.alternatives = {}
        self.needs = {}

    def run(self, jobs: Sequence[SimJob], progress: Callable[[float], None] | None = None) -> Result:
        self._begin(jobs)
        every = max(1, (2 * len(jobs)) // 100)
        handled = 0
        while self.open_jobs > 0:
            if self.live == 0:
                # nothing but scheduler passes left: run them until one starts nothing
                started = self.started
                self._schedule_main()
                if self.live == 0:
                    while self.events and self.bf_pending and self.live == 0:
                        t, kind, _, payload = heapq.heappop(self.events)
                        self.now = max(self.now, t)
                        self._handle(kind, payload)
                    if self.started == started and self.live == 0 and not self._quiet_ticks():
                        break
                    continue
            t, kind, payload = self._next_event()
            if kind in LIVE:
                self.live -= 1
                self.quiet_since = INF
            self._handle(kind, payload)
            handled += 1
            if progress is not None and handled % every == 0:
                progress(t)
        self._schedule_main()
        horizon = self.now
        self.meter.close(horizon, [n.layout for n in self.nodes])
        return Result(
            policy=self.sw.name,
            horizon_s=horizon,
            window_s=self.window,
            window_from_s=self.window_from,
            jobs=self.recs,
            capacity=self.meter.cap_int,
            allocated=self.meter.alloc_int,
            kinds=self.kinds,
            switches=self.switches,
            out_of_service_s=self.oos_s,
            reserved_idle_s=self.reserved_s,
            skipped=self.skipped,
            requeued=self.requeued,
            preempted=self.preempted,
            samples=self.meter.samples,
            layout_seconds=self.meter.layout_s,
            nodes=len(self.nodes),
        )

    def _begin(self, jobs: Sequence[SimJob]) -> None:
        """The state at time 0 (declared in ``ReplayState``), and the events known then."""
        p, sw = self.p, self.sw
        self.jobs = jobs
        self.recs = [
            JobRecord(
                j.job_id,
                j.submit_s,
                j.submit_s,
                account=j.account,
                partition=j.partition,
                user=j.user,
                requested_eq=j.request.gpu_eq,
            )
            for j in jobs
        ]
        aged = self._aging_begin(jobs)
        self.rank = aged if aged is not None else [float(r) for r in queue_ranks(jobs, p)]
        self.rules = rules_of(p.qos_preempt, p.qos_preempt_mode, p.qos_grace_s, p.qos_priority, p.preempt_mode)
        self.preempting = self.rules.enabled
        self.priority_of = priorities(static_parts(jobs, p)) if self.preempting else []
        self.tier_of = tiers(jobs, p) if self.preempting else []
        self.preempt_busy, self.graced, self.dying = {}, {}, set()
        self.order_keys, self.order_ranks = [], []
        self.ends = []
        self.end_time = {}
        self.overdue = False
        self.kinds = {}
        self.nodes = [self._make_node(i, n, sw.due(0.0)) for i, n in enumerate(self.spec.nodes)]
        self.bounds_epoch = 0
        self._index_types()
        self.events = []
        self.seq = self.live = 0
        self.queue = []
        self.queued = set()
        self.deferred = set()
        self.waits_on, self.dependents = dependencies(jobs)
        self.held, self.never = set(), dict.fromkeys(circular(self.waits_on), CIRCULAR)
        self.need_of_job = {}
        self.job_nodes = {}
        self.gen = {}
        self.now = 0.0
        self.dirty = self.bf_pending = self.changed = self.sched_due = False
        self.last_pass_s = -INF
        self.switches = self.skipped = self.requeued = self.preempted = self.started = 0
        self.oos_s = self.reserved_s = 0.0
        self.window = p.window_s if p.window_s is not None else max((j.submit_s for j in jobs), default=0.0)
        first = min((j.submit_s for j in jobs), default=0.0)
        self.grid_from = p.bf_grid_from_s if p.bf_grid_from_s is not None else first
        self.window_from = min(self.window, p.window_from_s if p.window_from_s is not None else first)
        self.meter = Meter(self.window, sw.due(0.0), p.typical_share, self.window_from)
        for n in self.nodes:
            self.meter.capacity(n, +1, self.now)
            self.meter.begin(n.layout)
        for i, j in enumerate(jobs):
            self._push(j.submit_s, SUBMIT, i)
            if j.cancel_s is not None:
                self._push(max(j.cancel_s, j.submit_s), WITHDRAW, i)
        for t, lay in sw.upcoming(0.0):
            if p.lead_time_s > 0:
                self._push(max(0.0, t - p.lead_time_s), AHEAD, (t, lay))
            self._push(t, SWITCH, lay)
        if p.sample_s > 0:
            self._push(0.0, SAMPLE, None)
        if sw.tick_s > 0:
            self._push(sw.tick_s, TICK, None)
        self.open_jobs = len(jobs)
        self.quiet_since = INF

    def _next_event(self) -> tuple[float, int, object]:
        """Take the next event.  Everything at one instant is handled first, then the main
        scheduler runs, still at that instant; it may make a backfill pass due before the next
        event, so it runs before that event is taken (not after: the pass would then run with
        the clock gone back, on records a later event had already changed)."""
        if self.events[0][0] != self.now:
            self._schedule_main()
        t, kind, _, payload = heapq.heappop(self.events)
        self.now = t
        return t, kind, payload

    def _handle(self, kind: int, payload: object) -> None:
        if kind == END:
            self._end(*payload)  # type: ignore[misc]
        elif kind == COMPLETING:
            self._completing(*payload)  # type: ignore[misc]
        elif kind == DONE:
            self._done(*payload)  # type: ignore[misc]
        elif kind == KILL:
            self._kill(*payload)  # type: ignore[misc]
        elif kind == ELIGIBLE:
            self._eligible(payload)  # type: ignore[arg-type]
        elif kind == SUBMIT:
            self._submit(payload)  # type: ignore[arg-type]
        elif kind == SCHED:
            self._sched_round()
        elif kind == PRIO:
            self._reprioritize()
        elif kind == WITHDRAW:
            self._withdraw(payload)  # type: ignore[arg-type]
        elif kind == BACKFILL:
            self.bf_pending = False
            self.last_pass_s = self.now
            self._backfill()
        elif kind == BACK:
            self._back(payload)  # type: ignore[arg-type]
        elif kind == SWITCH:
            self._switch(payload)  # type: ignore[arg-type]
        elif kind == AHEAD:
            self._ahead(*payload)  # type: ignore[misc]
        elif kind == CRON:
            self._cron(payload)  # type: ignore[arg-type]
        elif kind == REQUEUE:
            self._requeue(*payload)  # type: ignore[misc]
        elif kind == TICK:
            self._tick()
        elif kind == SAMPLE:
            # measured once everything at this instant is done: its events (some pushed while
            # it was handled), the main scheduler, and the pass that may make due now
            if not (self.events and self.events[0][0] == self.now):
                self._schedule_main()
            if self.events and self.events[0][0] == self.now:
                self._push(self.now, SAMPLE, None)
                return
            self.meter.sample(self.now, self.nodes)
            self._push(self.now + self.p.sample_s, SAMPLE, None)

    def _quiet_ticks(self) -> bool:
        """Jobs wait and only a demand-driven switcher's ticks are left: run them until one
        starts a switch (True), or ``settle_s`` passes without one (False: nothing will change;
        the waiting jobs stay unstarted)."""
        if self.sw.tick_s <= 0 or self.sw.settle_s <= 0 or not (self.queued or self.deferred):
            return False
        self.quiet_since = min(self.quiet_since, self.now)
        while self.events and self.live == 0:
            if self.events[0][0] > self.quiet_since + self.sw.settle_s:
                return False
            _, kind, payload = self._next_event()
            self._handle(kind, payload)
        return self.live > 0
