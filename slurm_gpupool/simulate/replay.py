"""What every part of one replay shares: the clock and its event queue, the jobs' state, the
nodes, and the counters of switches (pure).

The engine is one object whose parts live in their own modules, each a class built on the
one before: ``ReplayState`` (this), ``NodeIndex`` (which nodes offer what, how soon they
free), ``Aging`` (the age factor's rounds), ``Scheduler`` (jobs, the main scheduler), then
``Backfill`` and ``Switching`` side by side, and ``Engine`` (the event loop) over both.
They share state rather than pass it because Slurm's rules do: a switch changes what
backfill may plan, a job's end may let a node switch.  The state is declared here, once, and set by ``Engine.run``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from slurm_gpupool.simulate.fairshare import FairTree
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import RequestMapper, TraceRequest
from slurm_gpupool.simulate.meter import Meter
from slurm_gpupool.simulate.pool import PoolSpec, Shape
from slurm_gpupool.simulate.records import SimNode
from slurm_gpupool.simulate.state import JobRecord, Need, Params
from slurm_gpupool.simulate.switcher import Switcher

# event kinds, in the order they are handled at one instant
# (samples last: what they measure, and whether they run at all, changes nothing before them)
# (KILL: a preempted job ends, then its records come free; ELIGIBLE: a requeued one queues again;
# WITHDRAW: its user cancels a job; DONE: a job others depend on has ended (where the
# Epilogs are dated, at its END: Slurm's IS_JOB_COMPLETED); COMPLETING: a job's run has
# ended, its nodes complete it until its END)
# SCHED: the controller's background loop asks the main scheduler to run, for the jobs
# submitted since its last round; PRIO: the decay thread recomputes queued jobs' priorities,
# ``aging``)
(
    END,
    COMPLETING,
    DONE,
    KILL,
    BACK,
    SWITCH,
    AHEAD,
    CRON,
    REQUEUE,
    ELIGIBLE,
    WITHDRAW,
    SUBMIT,
    PRIO,
    SCHED,
    BACKFILL,
    TICK,
    SAMPLE,
) = range(17)
# the events that change what the scheduler sees (the others are its passes, ticks, samples)
LIVE = frozenset({END, DONE, KILL, BACK, SWITCH, AHEAD, CRON, REQUEUE, ELIGIBLE, WITHDRAW, SUBMIT, COMPLETING, SCHED})


class ReplayState:
    """The state of one replay (declared here, set by ``Engine.__init__`` and ``Engine.run``)."""

    spec: PoolSpec
    sw: Switcher
    p: Params
    # memoised mapping: a layout's mapper; (layout, request) -> its GRES, or its idle alternatives
    mappers: dict[str, RequestMapper]
    needs: dict[tuple[str, TraceRequest], Need | None]
    alternatives: dict[tuple[str, TraceRequest], list[Need]]

    now: float
    events: list[tuple[float, int, int, object]]  # (time, kind, sequence, payload): a heap
    seq: int
    live: int  # LIVE events in the queue
    jobs: Sequence[SimJob]
    recs: list[JobRecord]
    open_jobs: int  # not yet ended or rejected
    # (planned end, job, nodes) of every running job, soonest first (will-run's _cr_job_list_sort)
    ends: list[tuple[float, int, tuple[int, ...]]]
    end_time: dict[int, float]  # each running job's Slurm end_time: its limit, or a preemption's grace
    overdue: bool  # this backfill pass found running jobs past their end_time (``_plan_overdue``)
    preempting: bool  # some QOS preempts another (``preemption``)
    priority_of: list[int]  # each job's priority (with preemption only: a requeued job's new place)
    tier_of: list[int]  # each job's partition's PriorityTier (with preemption only, likewise)
    rank: list[float]  # each job's place in Slurm's queue order (tier, priority, submission, job id)
    # the age factor (``aging``; with ``Params.priority_weight_age`` only): each queued job's
    # accrue time (epoch second), its static parts and tier's offset, its place in submission order (and those
    # places' keys, sorted), whether a round of the decay thread is in the queue
    aging: bool
    accrue: dict[int, int]
    static_parts: list[float]
    tier_offset: list[float]
    # the fair-share factor (``aging``, ``fairshare``; with ``Params.priority_weight_fairshare``
    # only): the tree, the jobs whose runs add usage at the next round, that round's last
    fair: FairTree | None
    fs_runs: set[int]
    last_round: float | None
    sub_order: list[float]
    sub_keys: list[tuple[float, int]]
    prio_due: bool
    # queued jobs in priority order: (rank, job id, index: the key), then what a backfill
    # pass reads of each (the identity of its need, its limit)
    queue: list[tuple[float, int, int, int, float]]
    queued: set[int]
    deferred: set[int]  # refused for now, resubmitted when a later layout comes
    grid_from: float  # where the backfill passes' grid starts (``Params.bf_grid_from_s``)
    # dependencies (``SimJob.after``): each job's unfinished ones, who waits on each job, the
    # jobs submitted and waiting for theirs (not queued), the jobs whose afterok failed
    waits_on: dict[int, set[int]]
    dependents: dict[int, list[int]]
    held: set[int]
    never: dict[int, str]  # -> why (``Scheduler._finished``)
    need_of_job: dict[int, Need]
    job_nodes: dict[int, list[SimNode]]
    gen: dict[int, int]  # a requeued job's earlier end events are stale
    started: int
    dirty: bool  # the main scheduler may start something
    changed: bool  # something was freed, submitted or switched since the last backfill pass
    bf_pending: bool  # a backfill pass is in the queue
    sched_due: bool  # a round of the background loop is in the queue (``Params.sched_tick_s``)
    last_pass_s: float
    quiet_since: float  # since when only a demand-driven switcher's ticks are left

    nodes: list[SimNode]
    kinds: dict[str, str]  # type -> mig | whole | shared
    by_type: dict[str, list[SimNode]]  # the nodes offering each type now, in node order
    offering: dict[tuple[str, ...], list[SimNode]]  # the same for a request's types (memoised)
    bound_lists: dict[tuple[tuple[str, ...], int], list[tuple[float, int, str]]]
    bounds_epoch: int

    # capacity, switches and samples are measured while jobs arrive, [window_from, window]:
    # before the first submission the pool only waits (an accounting trace's epoch is its
    # first day's midnight), after the last only the drain of the longest jobs is left,
    # which no policy changes
    window_from: float
    window: float
    meter: Meter
    switches: int
    skipped: int
    requeued: int
    preempted: int  # jobs preempted while jobs arrive (``preemption``)
    oos_s: float
    reserved_s: float

    def _in_window(self) -> bool:
        """Whether now counts in the switches measured (see ``window``)."""
        return self.window_from <= self.now <= self.window

    def _push(self, t: float, kind: int, payload: object) -> None:
        self.seq += 1
        if kind in LIVE:
            self.live += 1
        heapq.heappush(self.events, (t, kind, self.seq, payload))

    def _make_node(self, index: int, name: str, layout: str) -> SimNode:
        layout = self.spec.resolve(layout, name)
        shape: Shape = self.spec.shape(layout, name)
        for t, k in shape.kind:
            self.kinds.setdefault(t, k)
        return SimNode(
            name=name,
            index=index,
            layout=layout,
            free=dict(shape.plain),
            cap=dict(shape.plain),
            shared={t: [0] * g for t, g, _ in shape.shared},
            shares={t: s for t, _, s in shape.shared},
            eq=dict(shape.eq),
            sock_free={t: list(v) for t, v in shape.sockets},
            cores_free=list(shape.cores),
            tpc=shape.tpc,
            gpu_sock=dict(shape.gpu_sockets),
        )
