"""A discrete-event replay of jobs on a pool, scheduled as Slurm schedules our GRES (pure).

What it models, each from Slurm's documented behaviour or the repartitioner's own rules:

* **Priority order** (``priority/basic``: submission order; a requeued job keeps its place).
* **The main scheduler** runs at every submission and job end: it walks the queue in
  priority order and starts what fits now; the first job that does not fit blocks every
  job after it (Slurm's partition rule, ``sched_config.html``).  A job no node can hold in
  its *current* configuration (its GRES type is gone while another layout is in) does not
  block: Slurm marks it ``BadConstraints``/``ReqNodeNotAvail`` and moves on.
* **Backfill** every ``bf_interval_s`` when something changed: each pending job, in
  priority order, up to ``bf_max_job_test``, gets the earliest start its time limit allows
  given running jobs' limits and the reservations of the jobs before it; it starts now
  only if that delays none of them (EASY with reservations for every job tested, as
  ``sched/backfill`` does), within ``bf_window_s``.
* **Typed GRES**: a job asks for ``gpu:<type>:N`` or ``shard:<type>:K`` per node on
  ``nodes`` nodes; nodes are tried in config order (first fit).  A time-sliced GPU is
  given whole (``gpu:<model>_shared``) or as shards, never both; a shard request fits on
  one GPU (no ``MULTIPLE_SHARING_GRES_PJ``), GPUs filled first-fit (Slurm's default).
* **Switches** as the repartitioner makes them: from ``lead_time_s`` before a switch the
  changing nodes take only jobs that end before it (the reservation ahead); at the switch
  they take no new job (MAINT reservation); each switches once idle (``switch_s`` out of
  service), or at its deadline is skipped and switched by the first cron run after its
  jobs end; with ``requeue`` its requeueable jobs are requeued after the grace.
* **Requests follow the layout** as ``gpupool-sbatch`` decides them: a job maps to GRES in
  the layout installed when it is submitted; one that only a later layout can hold is
  refused by the wrapper (exit 75, with when) and is taken to be resubmitted then, its
  wait counted from its first submission.

Pure: no I/O; time is seconds from the start of the replay.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import PREFER_MIG, Demand, RequestMapper, TraceRequest
from slurm_gpupool.simulate.pool import PoolSpec, Shape

GPU, SHARD = "gpu", "shard"
INF = math.inf
NOW = -math.inf  # a lower bound that is the present, whenever that is (kept across passes)
# event kinds, in the order they are handled at one instant
# (samples last: what they measure, and whether they run at all, changes nothing before them)
_END, _BACK, _SWITCH, _AHEAD, _CRON, _REQUEUE, _SUBMIT, _BACKFILL, _TICK, _SAMPLE = range(10)


@dataclass(frozen=True)
class Params:
    """The scheduler's and the repartitioner's settings a replay uses (defaults: Slurm's and ours)."""

    bf_interval_s: float = 30.0  # SchedulerParameters bf_interval
    bf_max_job_test: int = 500  # bf_max_job_test
    bf_window_s: float = 86400.0  # bf_window (1440 minutes)
    bf_resolution_s: float = 60.0  # bf_resolution: reservation windows are rounded down to it
    # True: every tested job places its reservation, as Slurm does (slow on deep queues); False:
    # a job that needs at least what one that failed needed is passed over without placing it.
    # Both agree with the real sandbox Slurm (tests/integration/test_simulate_slurm.py).
    bf_exact: bool = False
    # the shortcut passes a job over only once jobs of its request hold every node offering
    # it, or this many: on Philly's first 40 days 8 keeps the waits within 1 % of bf_exact's
    bf_hold_nodes: int = 8
    release_s: float = 0.5  # a job's records come free this long after it ends (epilog, completion)
    switch_s: float = 60.0  # a node out of service while it switches (apply, GRES, restarts, verify)
    lead_time_s: float = 6 * 3600.0  # repartition.lead_time (auto: half the shortest switch gap here)
    deadline_s: float = 1800.0  # repartition.deadline
    requeue: bool = False  # repartition.requeue
    grace_s: float = 120.0  # repartition.checkpoint_grace
    cron_s: float = 300.0  # how often `repartition --scheduled` runs
    shard_slowdown: float = 1.0  # a time-shared job runs this many times longer
    prefer: str = PREFER_MIG  # a fraction goes to MIG first, or to shards first
    sample_s: float = 3600.0  # how often fragmentation is measured
    typical_share: float = 0.95  # FGD's typical jobs: the most frequent requests covering this share
    any_model: bool = True  # a request that names no model takes any type that holds it (untyped gpu:N)
    window_s: float | None = None  # measure utilisation and switches up to here (None: the last submission)


@dataclass(frozen=True)
class Need:
    """A mapped request: per node ``count`` of ``kind`` of one of ``types`` on ``nodes`` nodes."""

    kind: str  # gpu | shard
    types: tuple[str, ...]  # the GRES type asked for, then equivalent ones (untyped-like requests)
    count: int
    nodes: int
    eq: float  # GPU-equivalents held, all nodes
    demand: Demand

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.types[0]}:{self.count}" + (f" x{self.nodes}" if self.nodes > 1 else "")


def need_of(d: Demand) -> Need:
    kind, typ, count = d.gres.split(":")
    return Need(kind, (typ, *d.alternatives), int(count), d.nodes, d.allocated_eq, d)


@dataclass(frozen=True)
class NodeState:
    """What a demand-driven policy sees of a node (``Switcher.decide``)."""

    name: str
    layout: str
    target: str | None  # switching to it (reserved, or out of service)
    idle: bool  # no job running
    usable: bool
    expected_free_s: float  # when its last running job reaches its time limit (now if idle)
    since_s: float  # when it last came back from a switch (-inf: never switched)
    free: tuple[tuple[str, int], ...] = ()  # idle records by type (time-sliced types: idle shards)


@dataclass(frozen=True)
class Pending:
    """A queued job as a demand-driven policy sees it: its request, its GRES in the layout it
    was mapped in, and how long it has waited."""

    request: TraceRequest
    need: Need | None  # None: refused now, waiting for a layout that holds it
    waited_s: float
    limit_s: float


class Switcher:
    """When nodes change layout: the clock's schedule, a static layout, or demand.

    ``boundaries`` are (time, layout) pairs: from that time on, that layout is due; the
    first one is at time 0 or before.  A demand-driven switcher also sets ``tick_s`` and
    answers ``decide`` every tick with (node, layout) switches, which the engine makes as
    the repartitioner would (an idle node at once, a busy one once its jobs end)."""

    tick_s: float = 0.0
    # how long a demand-driven switcher may stay quiet while jobs wait for a switch (its
    # batching window, cool-downs, max_wait): with nothing else left, the replay ticks on
    # that long before it leaves the waiting jobs unstarted
    settle_s: float = 0.0

    def __init__(self, name: str, boundaries: Sequence[tuple[float, str]]):
        if not boundaries:
            raise ValueError("a switcher needs at least its initial layout")
        self.name = name
        self.times = [t for t, _ in boundaries]
        self.layouts = [lay for _, lay in boundaries]

    def decide(self, now: float, nodes: Sequence[NodeState], pending: Sequence[Pending]) -> list[tuple[str, str]]:
        """Switches to make now (demand-driven policies); the clock's make none here."""
        return []

    def idle_now(self, t: float) -> bool:
        """Do submissions at ``t`` take what is idle now (``gpupool-sbatch --gpu-mem`` in an
        elastic period: a whole GPU when no slice of the chosen profile is idle)?"""
        return False

    def drains(self, node: str) -> bool:
        """Was ``node``'s last switch a drain (reserved busy, switched by the first cron run
        after its jobs end, never requeued: ``--deadline 0``)?"""
        return False

    def due(self, t: float) -> str:
        return self.layouts[max(0, bisect_right(self.times, t) - 1)]

    def upcoming(self, t: float) -> list[tuple[float, str]]:
        i = bisect_right(self.times, t)
        return list(zip(self.times[i:], self.layouts[i:]))


Part = tuple[str, str, int, int]  # (kind, type, count, GPU index of a shared GPU or -1)


@dataclass
class _Node:
    name: str
    index: int
    layout: str
    free: dict[str, int]  # plain type -> free records
    cap: dict[str, int]
    shared: dict[str, list[int]]  # shared type -> per GPU shards in use (-1: given whole)
    shares: dict[str, int]
    eq: dict[str, float]
    running: dict[int, tuple[float, list[Part]]] = field(default_factory=dict)  # job -> (start + limit, parts)
    usable: bool = True  # False: reserved for a switch, or out of service
    ahead_at: float = INF  # a reservation ahead starts then: it takes only jobs that end before
    target: str | None = None  # switching to this layout
    switch_at: float = INF  # when the run that switches it began (its deadline counts from here)
    idle_since: float = INF  # reserved and idle since
    skipped: bool = False  # busy at the deadline: switched by the first cron run after its jobs
    requeued: bool = False  # its jobs were requeued at the deadline: switch as soon as they are gone
    drain: bool = False  # a drain for demand: no deadline wait, no requeue (``Switcher.drains``)
    out_until: float = -INF  # out of service (switching) until
    since: float = -INF  # back from its last switch at
    lines: dict[str, list[tuple[float, list[Part]]]] = field(default_factory=dict)  # type -> _timeline
    # its entries in Engine.bound_lists: (types, count, its type) -> lower bound
    bounds: dict[tuple[tuple[str, ...], int, str], float] = field(default_factory=dict)
    bounds_epoch: int = 0  # the bound lists its entries are in (Engine.bounds_epoch)

    def free_eq(self) -> float:
        f = sum(self.eq[t] * n for t, n in self.free.items())
        for t, gpus in self.shared.items():
            s = self.shares[t]
            f += sum(self.eq[t] * (s - u) / s for u in gpus if u >= 0)
        return f


@dataclass
class JobRecord:
    job_id: int
    submit_s: float
    eligible_s: float  # when it could be submitted (a later layout: then)
    start_s: float = -1.0
    end_s: float = -1.0
    need: str = ""  # the GRES it asked for
    kind: str = ""  # mig | shard | whole
    gres_type: str = ""
    layout: str = ""  # the layout it was mapped in
    eq: float = 0.0  # GPU-equivalents held
    requested_eq: float = 0.0  # GPU-equivalents asked for
    account: str = ""
    requeues: int = 0
    timeout: bool = False  # ran into its time limit
    rejected: str = ""  # why no layout can hold it

    @property
    def wait_s(self) -> float:
        return self.start_s - self.submit_s


@dataclass
class Result:
    """What a replay measured (``metrics.summarise`` turns it into the report)."""

    policy: str
    horizon_s: float  # when the last job ended
    window_s: float  # utilisation, switches and samples are measured over [0, window_s]
    jobs: list[JobRecord]
    capacity: dict[tuple[str, str], float]  # (period, type) -> GPU-eq seconds offered
    allocated: dict[tuple[str, str], float]  # (period, type) -> GPU-eq seconds allocated
    kinds: dict[str, str]  # type -> mig | whole | shared
    switches: int
    out_of_service_s: float  # node-seconds out of service while switching
    reserved_idle_s: float  # node-seconds reserved for a switch while idle (waiting for the others)
    skipped: int  # node switches skipped at the deadline
    requeued: int  # jobs requeued at a deadline
    samples: list[tuple[float, float, float, float]]  # (t, capacity eq, idle eq, fragmented eq)
    layout_seconds: dict[str, float]  # node-seconds in each layout
    nodes: int


_LIVE = frozenset({_END, _BACK, _SWITCH, _AHEAD, _CRON, _REQUEUE, _SUBMIT})


class Engine:
    """One replay of ``jobs`` under one switcher; ``run`` may be called once."""

    def __init__(self, spec: PoolSpec, switcher: Switcher, params: Params | None = None) -> None:
        self.spec, self.sw, self.p = spec, switcher, params or Params()
        self.mappers: dict[str, RequestMapper] = {}
        self.alternatives: dict[tuple[str, TraceRequest], list[Need]] = {}
        self.needs: dict[tuple[str, TraceRequest], Need | None] = {}

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

    # -- the replay ---------------------------------------------------------------------
    def run(self, jobs: Sequence[SimJob], progress: Callable[[float], None] | None = None) -> Result:
        p, sw = self.p, self.sw
        self.jobs = jobs
        self.recs = [
            JobRecord(j.job_id, j.submit_s, j.submit_s, account=j.account, requested_eq=j.request.gpu_eq) for j in jobs
        ]
        self.kinds: dict[str, str] = {}
        self.nodes = [self._make_node(i, n, sw.due(0.0)) for i, n in enumerate(self.spec.nodes)]
        self.bounds_epoch = 0
        self._index_types()
        self.events: list[tuple[float, int, int, object]] = []
        self.seq = self.live = 0
        # queued jobs in priority order: (priority, job id, index: the key), then what a backfill
        # pass reads of each (the identity of its need, its limit)
        self.queue: list[tuple[float, int, int, int, float]] = []
        self.queued: set[int] = set()
        self.deferred: set[int] = set()  # refused for now, resubmitted when a later layout comes
        self.need_of_job: dict[int, Need] = {}
        self.job_nodes: dict[int, list[_Node]] = {}
        self.gen: dict[int, int] = {}  # a requeued job's earlier end events are stale
        self.now = 0.0
        self.dirty = self.bf_pending = self.changed = False
        self.last_pass_s = -INF
        self.typical: Counter[Need] = Counter()
        self.switches = self.skipped = self.requeued = self.started = 0
        self.oos_s = self.reserved_s = 0.0
        self.samples: list[tuple[float, float, float, float]] = []
        self.cap_int: dict[tuple[str, str], float] = {}
        self.alloc_int: dict[tuple[str, str], float] = {}
        self.cap_now: dict[str, float] = {}
        self.alloc_now: dict[str, float] = {}
        self.last_t: dict[str, float] = {}
        self.layout_s: dict[str, float] = {}
        self.period = sw.due(0.0)
        # capacity, switches and samples are measured while jobs arrive: after the last
        # submission only the drain of the longest jobs is left, which no policy changes
        self.window = self.p.window_s if self.p.window_s is not None else max((j.submit_s for j in jobs), default=0.0)
        for n in self.nodes:
            self._capacity(n, +1)
        for i, j in enumerate(jobs):
            self._push(j.submit_s, _SUBMIT, i)
        for t, lay in sw.upcoming(0.0):
            if p.lead_time_s > 0:
                self._push(max(0.0, t - p.lead_time_s), _AHEAD, (t, lay))
            self._push(t, _SWITCH, lay)
        if p.sample_s > 0:
            self._push(0.0, _SAMPLE, None)
        if sw.tick_s > 0:
            self._push(sw.tick_s, _TICK, None)
        self.open_jobs = len(jobs)  # not yet ended or rejected
        self.quiet_since = INF  # since when only a demand-driven switcher's ticks are left
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
            if kind in _LIVE:
                self.live -= 1
                self.quiet_since = INF
            self._handle(kind, payload)
            handled += 1
            if progress is not None and handled % every == 0:
                progress(t)
        self._schedule_main()
        horizon = self.now
        self._flush_all(horizon)
        for n in self.nodes:
            self.layout_s[n.layout] = self.layout_s.get(n.layout, 0.0) + min(horizon, self.window)
        return Result(
            policy=sw.name,
            horizon_s=horizon,
            window_s=self.window,
            jobs=self.recs,
            capacity=self.cap_int,
            allocated=self.alloc_int,
            kinds=self.kinds,
            switches=self.switches,
            out_of_service_s=self.oos_s,
            reserved_idle_s=self.reserved_s,
            skipped=self.skipped,
            requeued=self.requeued,
            samples=self.samples,
            layout_seconds=self.layout_s,
            nodes=len(self.nodes),
        )

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
        if kind == _END:
            self._end(*payload)  # type: ignore[misc]
        elif kind == _SUBMIT:
            self._submit(payload)  # type: ignore[arg-type]
        elif kind == _BACKFILL:
            self.bf_pending = False
            self.last_pass_s = self.now
            self._backfill()
        elif kind == _BACK:
            self._back(payload)  # type: ignore[arg-type]
        elif kind == _SWITCH:
            self._switch(payload)  # type: ignore[arg-type]
        elif kind == _AHEAD:
            self._ahead(*payload)  # type: ignore[misc]
        elif kind == _CRON:
            self._cron(payload)  # type: ignore[arg-type]
        elif kind == _REQUEUE:
            self._requeue(*payload)  # type: ignore[misc]
        elif kind == _TICK:
            self._tick()
        elif kind == _SAMPLE:
            # measured once everything at this instant is done: its events (some pushed while
            # it was handled), the main scheduler, and the pass that may make due now
            if not (self.events and self.events[0][0] == self.now):
                self._schedule_main()
            if self.events and self.events[0][0] == self.now:
                self._push(self.now, _SAMPLE, None)
                return
            self._sample()
            self._push(self.now + self.p.sample_s, _SAMPLE, None)

    def _push(self, t: float, kind: int, payload: object) -> None:
        self.seq += 1
        if kind in _LIVE:
            self.live += 1
        heapq.heappush(self.events, (t, kind, self.seq, payload))

    # -- jobs -----------------------------------------------------------------------------
    def _submit(self, i: int) -> None:
        job, rec = self.jobs[i], self.recs[i]
        due = self.sw.due(self.now)
        need = self.need(due, job.request)
        if need is None:
            later = next(((t, lay) for t, lay in self.sw.upcoming(self.now) if self.need(lay, job.request)), None)
            if later is None:
                rec.rejected = f"no layout holds {_describe(job.request)}"
                self.open_jobs -= 1
                return
            rec.eligible_s = later[0]
            self.deferred.add(i)
            self._push(later[0], _SUBMIT, i)  # refused now (exit 75, with when): resubmitted then
            return
        self.deferred.discard(i)
        if need.demand.kind in ("mig", "shard") and self.sw.idle_now(self.now) and not self._fit_now(need, job.limit_s):
            # as gpupool-sbatch in an elastic period (core.submit._idle_first): nothing idle now
            # holds the slice or shares it would ask for: the first alternative idle now
            need = next((a for a in self.idle_alternatives(due, job.request) if self._fit_now(a, job.limit_s)), need)
        rec.need, rec.kind, rec.layout, rec.eq = need.label, need.demand.kind, due, need.eq
        self.need_of_job[i] = need
        self.typical[need] += 1
        self._enqueue(i)

    def _key(self, i: int) -> tuple[float, int, int]:
        return (self.recs[i].submit_s, self.jobs[i].job_id, i)

    def _enqueue(self, i: int) -> None:
        insort(self.queue, (*self._key(i), id(self.need_of_job[i]), self.jobs[i].limit_s))
        self.queued.add(i)
        self.dirty = self.changed = True

    def _start(self, i: int, chosen: Sequence[tuple[_Node, list[Part]]]) -> None:
        job, rec, need = self.jobs[i], self.recs[i], self.need_of_job[i]
        self.queued.discard(i)
        q = self.queue
        del q[bisect_left(q, self._key(i))]
        self.started += 1
        run = job.duration_s * (self.p.shard_slowdown if need.kind == SHARD else 1.0)
        rec.timeout = run > job.limit_s
        rec.start_s = self.now
        rec.end_s = self.now + min(run, job.limit_s)
        # what backfill plans with: the time limit (it does not know run times); a job killed at
        # its limit holds its records until its completion ends, release_s later
        expected = max(self.now + job.limit_s, rec.end_s + self.p.release_s)
        for n, parts in chosen:
            _apply(n.free, n.shared, parts, +1)
            n.running[i] = (expected, parts)
            self._alloc(parts[0][1], need.eq / need.nodes)
            self._records_changed(n, parts)
        rec.gres_type = chosen[0][1][0][1]
        self.job_nodes[i] = [n for n, _ in chosen]
        self.gen[i] = self.gen.get(i, 0) + 1
        self._push(rec.end_s + self.p.release_s, _END, (i, self.gen[i]))  # records free after the epilog

    def _end(self, i: int, gen: int) -> None:
        if self.gen.get(i) != gen:
            return  # requeued since: this end belongs to its earlier run
        self._release(i)
        self.open_jobs -= 1

    def _release(self, i: int) -> None:
        need = self.need_of_job[i]
        for n in self.job_nodes.pop(i):
            _, parts = n.running.pop(i)
            _apply(n.free, n.shared, parts, -1)
            self._alloc(parts[0][1], -need.eq / need.nodes)
            self._records_changed(n, parts)
            if n.target is not None and not n.running:
                self._node_idle(n)
        self.dirty = self.changed = True

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
            chosen = self._fit_now(need, self.jobs[i].limit_s)
            if chosen is None:
                break
            self._start(i, chosen)  # it leaves the queue: the next job is at k now
        if self.queued and self.changed and not self.bf_pending:
            self.bf_pending = True
            self._push(self._next_pass_at(), _BACKFILL, None)

    def _next_pass_at(self) -> float:
        """Backfill runs every ``bf_interval_s`` on a fixed grid: the next grid instant that has
        not had its pass (this one's, if the change came at a grid instant before its pass:
        events at one instant come before the pass)."""
        step = self.p.bf_interval_s
        if step <= 0:
            return self.now
        at = math.ceil(self.now / step) * step
        return at if at > self.last_pass_s else self.last_pass_s + step

    def _configured(self, need: Need) -> bool:
        return len(self._offering(need.types)) >= need.nodes

    def _offering(self, types: tuple[str, ...]) -> list[_Node]:
        """The nodes whose current layout has one of ``types``, in node order."""
        nodes = self.offering.get(types)
        if nodes is None:
            if len(types) == 1:
                nodes = self.by_type.get(types[0], [])
            else:
                nodes = sorted({n.index: n for t in types for n in self.by_type.get(t, ())}.values(), key=_index)
            self.offering[types] = nodes
        return nodes

    def _fit_now(self, need: Need, limit: float) -> list[tuple[_Node, list[Part]]] | None:
        out = []
        end = self.now + limit
        for n in self._offering(need.types):
            if not n.usable or end > n.ahead_at:
                continue
            for typ in need.types:
                parts = _take(n.free, n.shared, n.shares, need, typ)
                if parts is not None:
                    out.append((n, parts))
                    if len(out) == need.nodes:
                        return out
                    break
        return None

    # -- backfill ---------------------------------------------------------------------------
    def _backfill(self) -> None:
        """One ``sched/backfill`` pass: in priority order, each job tested gets the earliest
        start its limit allows around running jobs and the reservations of the jobs before
        it; it starts now only if that delays none of them.

        As in Slurm (``backfill.c``: ``node_space`` holds node bitmaps), a reservation takes
        the job's **whole nodes** for its planned window: a lower job may use such a node
        only if it ends before the window.  Reservations live for one pass, so a pass that
        has no idle record anywhere is skipped.  A job that cannot start now rules out every
        later job of the same request that needs at least as many records, nodes and time:
        such a job is passed over without placing its reservation (the one shortcut here),
        once jobs of its request hold every node that offers it, or ``bf_hold_nodes`` of
        them (until then its reservation is placed as Slurm does: a queue of one request
        holds node after node, and lower jobs see them held).  A job with no start within
        the window places nothing: neither could one needing more."""
        self._schedule_main()
        if not self.queued or not self.changed:
            return  # nothing was freed, submitted or switched since the last pass: it would start nothing
        self.changed = False
        p, q = self.p, self.queue
        untested = len(q) > p.bf_max_job_test
        started = self.started
        if not any(self._idle_now(t) for t in self.by_type):
            return
        horizon = self.now + p.bf_window_s
        tested = q[: p.bf_max_job_test]
        need_of_job = self.need_of_job
        # per request shape, (count, nodes) -> the shortest limit that could not start now
        failed: dict[tuple[tuple[str, ...], str], dict[tuple[int, int], float]] = {}
        # per need (by identity: needs are memoised per request and layout), the shortest limit
        # from which its jobs are passed over (``_bar``), until the next mark
        bar_of: dict[int, float] = {}
        plans: dict[int, list[tuple[float, float]]] = {}  # node -> windows reserved for higher jobs
        held: dict[tuple[tuple[str, ...], str], set[int]] = {}  # per request shape, the nodes it reserved
        to_hold: dict[tuple[tuple[str, ...], str], int] = {}  # per request shape, how many it holds
        for _, _, i, nid, limit in tested:
            bar = bar_of.get(nid)
            if bar is None:
                bar = bar_of[nid] = self._bar(need_of_job[i], failed)
            if limit >= bar:
                continue
            need = need_of_job[i]
            chosen = self._earliest_nodes(need, limit, horizon, plans)
            if chosen is not None and chosen[-1][0] <= self.now:
                self._start(i, [(n, parts) for _, _, n, parts in chosen])
                continue
            shape = (need.types, need.kind)
            if chosen is not None:  # a start later: its nodes are held for it from then
                at = chosen[-1][0]
                window = _rounded(at, at + limit, p.bf_resolution_s)
                for _, _, n, _ in chosen:
                    insort(plans.setdefault(n.index, []), window)
            if p.bf_exact:
                continue
            if chosen is not None:  # passed over only once its request holds enough nodes
                held.setdefault(shape, set()).update(n.index for _, _, n, _ in chosen)
                if shape not in to_hold:
                    to_hold[shape] = self._to_hold(need)
                if len(held[shape]) < to_hold[shape]:
                    continue
            # it cannot start now (nor anywhere within the window, when chosen is None): neither
            # can a later job of this request that needs as many records, nodes and time
            marks = failed.setdefault(shape, {})
            marks[(need.count, need.nodes)] = min(limit, marks.get((need.count, need.nodes), INF))
            bar_of.clear()
        if untested and self.started > started:
            self.changed = True  # the next pass reaches jobs this one did not test
        self.dirty = True
        self._schedule_main()

    def _to_hold(self, need: Need) -> int:
        """How many nodes a request's jobs hold before later ones are passed over: every
        usable node offering it, at most ``bf_hold_nodes``."""
        return min(self.p.bf_hold_nodes, sum(n.usable for n in self._offering(need.types)))

    def _bar(self, need: Need, failed: dict[tuple[tuple[str, ...], str], dict[tuple[int, int], float]]) -> float:
        """The shortest limit from which a job of ``need`` is passed over in this pass: that of
        a failed job of its shape with no more records and nodes (INF: none; -INF: no node
        offers its GRES now, ``BadConstraints``)."""
        if not self._configured(need):
            return -INF
        marks = failed.get((need.types, need.kind), {})
        return min((lim for (c, k), lim in marks.items() if c <= need.count and k <= need.nodes), default=INF)

    def _earliest_nodes(
        self,
        need: Need,
        limit: float,
        horizon: float,
        plans: dict[int, list[tuple[float, float]]],
    ) -> list[tuple[float, int, _Node, list[Part]]] | None:
        """The ``need.nodes`` nodes where the job starts soonest (start, node, records; ties to
        the first node), or None."""
        found: dict[int, tuple[float, list[Part]]] = {}  # node -> its earliest start and records
        kth = INF  # the need.nodes-th best start found so far
        now, res, nodes, single = self.now, self.p.bf_resolution_s, self.nodes, need.nodes == 1
        best: tuple[float, int, _Node, list[Part]] | None = None  # single: the best so far
        for lb, idx, typ in self._by_bound(need):
            if lb == NOW:
                lb = now
            elif lb > kth or lb > horizon:
                break
            n = nodes[idx]
            if lb + limit > n.ahead_at:
                continue  # its reservation ahead comes before this job could end there
            windows = plans.get(idx, ())
            if typ in n.free:  # plain records: idle from lb on, only the reservations decide
                if need.kind != GPU:
                    continue
                if windows:
                    line = self._line(n, typ) if lb == now else ()
                    t = _first_clear(lb, limit, now, horizon, n.ahead_at, windows, res, line[0][0] if line else INF)
                else:
                    t = lb
                parts = [(GPU, typ, need.count, -1)]
            else:
                t, parts = _earliest(n, need, typ, limit, now, horizon, windows, self._line(n, typ), res)
            if t == INF:
                continue
            if single:
                if t < kth or (best is not None and t == kth and idx < best[1]):
                    kth, best = t, (t, idx, n, parts)
                continue
            if idx not in found or t < found[idx][0]:
                found[idx] = (t, parts)
                if len(found) >= need.nodes:
                    kth = sorted(v[0] for v in found.values())[need.nodes - 1]
        if single:
            return [best] if best is not None else None
        if len(found) < need.nodes:
            return None
        return sorted((t, idx, nodes[idx], parts) for idx, (t, parts) in found.items())[: need.nodes]

    def _by_bound(self, need: Need) -> list[tuple[float, int, str]]:
        """(lower bound of the start, node, type) for every usable node offering one of
        ``need.types``, soonest first (NOW: it could start now): when ``need.count`` records
        are first idle as running jobs reach their limits (``_lower_bound``).  The bound
        ignores reservations, which can only make it later.  Kept across passes: a job's start
        or end moves only its node's entries (``_records_changed``); a switch rebuilds them."""
        key = (need.types, need.count)
        lst = self.bound_lists.get(key)
        if lst is None:
            lst = []
            for typ in need.types:
                for n in self.by_type.get(typ, ()):
                    if n.usable:
                        lb = self._bounds_of(n)[(*key, typ)] = _lower_bound(n, typ, need.count, self._line(n, typ))
                        lst.append((lb, n.index, typ))
            lst.sort()
            self.bound_lists[key] = lst
        return lst

    def _line(self, n: _Node, typ: str) -> list[tuple[float, list[Part]]]:
        line = n.lines.get(typ)
        if line is None:
            line = n.lines[typ] = _timeline(n, typ)
        return line

    def _records_changed(self, n: _Node, parts: Sequence[Part]) -> None:
        """A job started or ended on ``n``: its timeline and its entries in the bound lists
        of those types are out of date."""
        bounds = self._bounds_of(n)
        for typ in {part[1] for part in parts}:
            n.lines.pop(typ, None)
            for (types, count, t), old in list(bounds.items()):
                if t != typ:
                    continue
                lst = self.bound_lists[(types, count)]
                del lst[bisect_left(lst, (old, n.index, t))]
                lb = bounds[(types, count, t)] = _lower_bound(n, t, count, self._line(n, t))
                insort(lst, (lb, n.index, t))

    def _bounds_of(self, n: _Node) -> dict[tuple[tuple[str, ...], int, str], float]:
        """``n``'s entries in the current bound lists (those of forgotten lists dropped)."""
        if n.bounds_epoch != self.bounds_epoch:
            n.bounds.clear()
            n.bounds_epoch = self.bounds_epoch
        return n.bounds

    def _set_usable(self, n: _Node, usable: bool) -> None:
        """A node takes jobs again, or stops (a switch): the bound lists hold usable nodes only."""
        n.usable = usable
        self._forget_bounds()

    def _forget_bounds(self) -> None:
        """Nodes came or went (a switch): the bound lists are rebuilt when next asked for."""
        self.bound_lists: dict[tuple[tuple[str, ...], int], list[tuple[float, int, str]]] = {}
        self.bounds_epoch += 1  # each node's entries: cleared when next used

    def _idle_now(self, typ: str) -> bool:
        """Does any usable node have an idle record (or shard) of ``typ``?"""
        for n in self.by_type.get(typ, ()):
            if not n.usable:
                continue
            if n.free.get(typ, 0) > 0:
                return True
            gpus = n.shared.get(typ)
            if gpus is not None and any(0 <= u < n.shares[typ] for u in gpus):
                return True
        return False

    # -- switches ---------------------------------------------------------------------------
    def _covers(self, layout: str, n: _Node) -> bool:
        return self.spec.covers(layout, n.name)

    def _ahead(self, at: float, layout: str) -> None:
        """``repartition --scheduled`` reserves the changing nodes from the switch time on."""
        for n in self.nodes:
            if n.target is None and n.layout != layout and self._covers(layout, n):
                n.ahead_at = min(n.ahead_at, at)
        self.dirty = self.changed = True

    def _switch(self, layout: str) -> None:
        """A switch run to ``layout``: its reservation takes the nodes that change."""
        self._flush_all(self.now)
        self.period = layout
        for n in self.nodes:
            n.ahead_at = INF
            if not self._covers(layout, n):
                continue
            if n.target is None:
                if n.layout != layout:
                    self._start_switch(n, layout)
            elif n.out_until > self.now:
                continue  # applying now: once back, it goes on to what is due (_back)
            elif n.layout == layout:  # waiting to leave a layout that is due again
                n.target, n.switch_at, n.idle_since, n.skipped = None, INF, INF, False
                self._set_usable(n, True)
            else:
                n.target, n.switch_at, n.skipped = layout, self.now, False
        self.dirty = self.changed = True

    def _tick(self) -> None:
        """Ask a demand-driven switcher what to change, and make it so."""
        self._schedule_main()
        nodes = [
            NodeState(
                n.name,
                n.layout,
                n.target,
                not n.running,
                n.usable,
                max((e for e, _ in n.running.values()), default=self.now),
                n.since,
                _free_records(n),
            )
            for n in self.nodes
        ]
        queued = [e[2] for e in self.queue]
        pending = [self._pending(i, self.need_of_job.get(i)) for i in queued]
        pending += [self._pending(i, None) for i in sorted(self.deferred)]
        by_name = {n.name: n for n in self.nodes}
        for name, layout in self.sw.decide(self.now, nodes, pending):
            n = by_name[name]
            if n.target is None and n.layout != layout and self._covers(layout, n):
                self._start_switch(n, layout, drain=self.sw.drains(name))
        self.dirty = self.changed = True
        self._push(self.now + self.sw.tick_s, _TICK, None)

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

    def _pending(self, i: int, need: Need | None) -> Pending:
        return Pending(self.jobs[i].request, need, self.now - self.recs[i].submit_s, self.jobs[i].limit_s)

    def _start_switch(self, n: _Node, layout: str, drain: bool = False) -> None:
        """The node enters the run's reservation: no new job; it switches once idle."""
        n.target, n.switch_at, n.skipped, n.requeued, n.drain = layout, self.now, False, False, drain
        self._set_usable(n, False)
        if self.p.requeue and not drain:
            self._push(self.now + self.p.deadline_s, _REQUEUE, (n.index, 0))
        if not n.running:
            self._node_idle(n)

    def _node_idle(self, n: _Node) -> None:
        """A reserved node's last job ended: switch now, or (skipped at the deadline) at the
        next cron run; requeued jobs gone: now."""
        n.idle_since = self.now
        if n.requeued or self.now <= n.switch_at + (0.0 if n.drain else self.p.deadline_s):
            self._go(n)
        else:
            if not n.skipped:
                n.skipped = True
                self.skipped += self.now <= self.window and not n.drain  # a drain skips by design
            step = self.p.cron_s
            self._push(math.ceil(self.now / step) * step if step > 0 else self.now, _CRON, n.index)

    def _cron(self, index: int) -> None:
        n = self.nodes[index]
        if n.target is not None and not n.running and n.out_until <= self.now:
            self._go(n)

    def _requeue(self, index: int, stage: int) -> None:
        """At the deadline: SIG<checkpoint_signal> to the requeueable jobs; after the grace,
        requeue those still running (the repartitioner's --requeue)."""
        n = self.nodes[index]
        if n.target is None or not n.running or n.out_until > self.now or n.drain:
            return  # (a drain is never requeued: an earlier switch's event finds it)
        if stage == 0:
            if any(self.jobs[i].requeue for i in n.running):
                self._push(self.now + self.p.grace_s, _REQUEUE, (index, 1))
            return
        n.requeued = True
        for i in [i for i in n.running if self.jobs[i].requeue]:
            rec = self.recs[i]
            self._release(i)
            rec.requeues += 1
            rec.start_s = rec.end_s = -1.0
            self.gen[i] += 1
            self.requeued += self.now <= self.window
            self._enqueue(i)

    def _go(self, n: _Node) -> None:
        """Apply the node's new layout: out of service for ``switch_s``."""
        if self.now <= self.window:  # counted while jobs arrive, not while the last ones drain
            self.reserved_s += max(0.0, self.now - n.idle_since)
            self.switches += 1
            self.oos_s += min(self.p.switch_s, self.window - self.now)
        n.out_until = self.now + self.p.switch_s
        self._capacity(n, -1)
        self._push(n.out_until, _BACK, n.index)

    def _back(self, index: int) -> None:
        n = self.nodes[index]
        target = n.target
        assert target is not None
        self.layout_s[n.layout] = self.layout_s.get(n.layout, 0.0) + min(self.now, self.window)
        fresh = self._make_node(n.index, n.name, target)
        n.layout, n.free, n.cap, n.shared, n.shares, n.eq = (
            fresh.layout,
            fresh.free,
            fresh.cap,
            fresh.shared,
            fresh.shares,
            fresh.eq,
        )
        self.layout_s[n.layout] = self.layout_s.get(n.layout, 0.0) - min(self.now, self.window)
        n.lines.clear()
        self._index_types()
        self._capacity(n, +1)
        n.target, n.switch_at, n.idle_since, n.skipped, n.requeued = None, INF, INF, False, False
        n.since = self.now
        due = self.sw.due(self.now)
        # the clock moved on while it switched (a demand-driven switcher decides for itself)
        if not self.sw.tick_s and n.layout != due and self._covers(due, n):
            n.target, n.switch_at = due, self.now
            self._node_idle(n)
            return
        self._set_usable(n, True)
        self.dirty = self.changed = True

    # -- nodes -------------------------------------------------------------------------------
    def _make_node(self, index: int, name: str, layout: str) -> _Node:
        layout = self.spec.resolve(layout, name)
        shape: Shape = self.spec.shape(layout, name)
        for t, k in shape.kind:
            self.kinds.setdefault(t, k)
        return _Node(
            name=name,
            index=index,
            layout=layout,
            free=dict(shape.plain),
            cap=dict(shape.plain),
            shared={t: [0] * g for t, g, _ in shape.shared},
            shares={t: s for t, _, s in shape.shared},
            eq=dict(shape.eq),
        )

    def _index_types(self) -> None:
        """Which nodes offer each type now, in node order (a job walks only those)."""
        by: dict[str, list[_Node]] = {}
        for n in self.nodes:
            for t in (*n.cap, *n.shared):
                by.setdefault(t, []).append(n)
        self.by_type = by
        self.offering: dict[tuple[str, ...], list[_Node]] = {}
        self._forget_bounds()  # the nodes offering each type changed

    # -- measurements ----------------------------------------------------------------------
    def _flush(self, typ: str, t: float) -> None:
        """Integrate one type's capacity and allocation up to ``t`` (lazily, per type)."""
        last = self.last_t.get(typ, 0.0)
        t = min(t, self.window)
        if t > last:
            key = (self.period, typ)
            self.cap_int[key] = self.cap_int.get(key, 0.0) + self.cap_now.get(typ, 0.0) * (t - last)
            self.alloc_int[key] = self.alloc_int.get(key, 0.0) + self.alloc_now.get(typ, 0.0) * (t - last)
        self.last_t[typ] = t

    def _flush_all(self, t: float) -> None:
        for typ in list(self.cap_now):
            self._flush(typ, t)

    def _capacity(self, n: _Node, sign: int) -> None:
        for t, c in n.cap.items():
            self._flush(t, self.now)
            self.cap_now[t] = self.cap_now.get(t, 0.0) + sign * c * n.eq[t]
        for t, gpus in n.shared.items():
            self._flush(t, self.now)
            self.cap_now[t] = self.cap_now.get(t, 0.0) + sign * len(gpus) * n.eq[t]

    def _alloc(self, typ: str, eq: float) -> None:
        self._flush(typ, self.now)
        self.alloc_now[typ] = self.alloc_now.get(typ, 0.0) + eq

    def _sample(self) -> None:
        """Capacity, idle and fragmented GPU-equivalents now.  Fragmentation is FGD's measure on
        our GRES: for each typical request (weighted by frequency), the idle capacity of a
        node that request cannot use there."""
        total = sum(self.cap_now.values())
        typical = _typical(self.typical, self.p.typical_share)
        idle = frag = 0.0
        for n in self.nodes:
            if n.out_until > self.now:
                continue
            f = n.free_eq()
            if f <= 1e-12:
                continue
            idle += f
            frag += sum(w * (f - max(_usable_eq(n, need, t) for t in need.types)) for need, w in typical)
        if self.now <= self.window:
            self.samples.append((self.now, total, idle, frag))


def _free_records(n: _Node) -> tuple[tuple[str, int], ...]:
    """Idle records by type (time-sliced types: idle shards of GPUs not given whole)."""
    out = [(t, c) for t, c in n.free.items() if c > 0]
    out += [(t, sum(n.shares[t] - u for u in gpus if u >= 0)) for t, gpus in n.shared.items()]
    return tuple(out)


def _describe(req: TraceRequest) -> str:
    return f"{req.milli / 1000:g} GPU" if req.milli < 1000 else f"{req.gpus} GPU" + ("s" if req.gpus > 1 else "")


def _typical(counts: Counter[Need], share: float) -> list[tuple[Need, float]]:
    """FGD's typical tasks: the most frequent requests up to ``share`` of all, as weights."""
    total = sum(counts.values())
    if not total:
        return []
    out, seen = [], 0
    for need, c in counts.most_common():
        out.append((need, c))
        seen += c
        if seen >= share * total:
            break
    return [(n, c / seen) for n, c in out]


def _index(n: _Node) -> int:
    return n.index


def _usable_eq(n: _Node, need: Need, typ: str) -> float:
    """Idle GPU-equivalents of ``typ`` on ``n`` that ``need`` could take (0 if it does not fit)."""
    if need.kind == GPU and typ in n.free:
        free = n.free[typ]
        return free * n.eq[typ] if free >= need.count else 0.0
    gpus = n.shared.get(typ)
    if gpus is None:
        return 0.0
    s = n.shares[typ]
    if need.kind == GPU:
        whole = sum(1 for u in gpus if u == 0)
        return whole * n.eq[typ] if whole >= need.count else 0.0
    return sum(n.eq[typ] * (s - u) / s for u in gpus if u >= 0 and s - u >= need.count)


def _take(
    free: dict[str, int], shared: dict[str, list[int]], shares: dict[str, int], need: Need, typ: str
) -> list[Part] | None:
    """The records of ``typ`` that ``need`` gets from these free records (first fit), or None."""
    if need.kind == GPU:
        if typ in free:
            return [(GPU, typ, need.count, -1)] if free[typ] >= need.count else None
        gpus = shared.get(typ)
        if gpus is None:
            return None
        idle = [g for g, u in enumerate(gpus) if u == 0][: need.count]
        return [(GPU, typ, 1, g) for g in idle] if len(idle) == need.count else None
    gpus = shared.get(typ)
    if gpus is None:
        return None
    s = shares[typ]
    for g, u in enumerate(gpus):
        if u >= 0 and s - u >= need.count:
            return [(SHARD, typ, need.count, g)]
    return None


def _apply(free: dict[str, int], shared: dict[str, list[int]], parts: Iterable[Part], sign: int) -> None:
    """Take (``sign`` +1) or give back (-1) records: a shared GPU given whole is -1."""
    for kind, typ, count, g in parts:
        if kind == GPU and g < 0:
            free[typ] -= sign * count
        elif kind == GPU:
            shared[typ][g] = -1 if sign > 0 else 0
        elif shared[typ][g] >= 0 or sign < 0:
            shared[typ][g] += sign * count


def _timeline(n: _Node, typ: str) -> list[tuple[float, list[Part]]]:
    """The node's running jobs that hold ``typ``, by expected end (start + limit: the scheduler
    does not know run times), with the parts of that type they hold."""
    out = []
    for end, parts in n.running.values():
        mine = [part for part in parts if part[1] == typ]
        if mine:
            out.append((end, mine))
    out.sort(key=lambda e: e[0])
    return out


def _rounded(start: float, end: float, resolution: float) -> tuple[float, float]:
    """A backfill window as Slurm keeps it: both ends rounded down to ``bf_resolution``."""
    if resolution <= 0:
        return start, end
    return (start // resolution) * resolution, (end // resolution) * resolution


def _lower_bound(n: _Node, typ: str, count: int, line: Sequence[tuple[float, list[Part]]]) -> float:
    """When ``count`` records of plain ``typ`` are first idle on ``n`` as its jobs end (NOW:
    already; also for time-sliced GPUs, whose state is per GPU: no pruning there); INF if never."""
    if typ not in n.free:
        return NOW
    free = n.free[typ]
    if free >= count:
        return NOW
    for end, parts in line:
        free += sum(c for _, _, c, _ in parts)
        if free >= count:
            return end
    return INF


def _first_clear(
    lb: float,
    limit: float,
    now: float,
    horizon: float,
    ahead_at: float,
    windows: Sequence[tuple[float, float]],
    resolution: float,
    next_end: float = INF,
) -> float:
    """The earliest start from ``lb`` on (when the records are idle, and stay so) whose
    window overlaps none of ``windows`` (sorted, on the bf_resolution grid), before
    ``horizon`` and the node's reservation ahead; INF if none.  What ``_earliest`` finds for
    plain records, without walking the node's timeline: a start later than now is checked
    with its window rounded down, and from there one that overlaps a window keeps
    overlapping it until that window ends, so only window ends can follow; but a start now
    is checked exactly, and the first later time (``next_end``, the node's next job end,
    or a window end) may clear what now did not, its rounded window ending sooner."""
    later = {b for _, b in windows if b > lb}
    if lb <= now and next_end < INF:
        later.add(next_end)
    for t in (lb, *sorted(later)):
        if t > horizon or t + limit > ahead_at:
            return INF
        lo, hi = (t, t + limit) if t <= now else _rounded(t, t + limit, resolution)
        if not _overlaps(windows, lo, hi):
            return t
    return INF


def _overlaps(windows: Sequence[tuple[float, float]], lo: float, hi: float) -> bool:
    """Whether ``[lo, hi)`` meets one of ``windows`` (sorted by start: those starting at or
    after ``hi`` end the search)."""
    for a, b in windows:
        if a >= hi:
            return False
        if b > lo:
            return True
    return False


def _earliest(
    n: _Node,
    need: Need,
    typ: str,
    limit: float,
    now: float,
    horizon: float,
    windows: Sequence[tuple[float, float]],
    line: Sequence[tuple[float, list[Part]]],
    resolution: float = 0.0,
) -> tuple[float, list[Part]]:
    """The earliest time ``need`` fits on ``n`` as ``typ`` for ``limit`` seconds: its records
    are free by then as running jobs reach their limits (``line``: the scheduler does not know
    run times; records only come free, so free at the start is free throughout), and the
    window overlaps no whole-node reservation of a higher job (``windows``, sorted); with the
    records it would take.  (INF, []) if not before ``horizon`` or the node's reservation ahead."""
    free = n.free.get(typ, 0)
    shared = {typ: list(n.shared[typ])} if typ in n.shared else {}
    times = sorted({now, *(e for e, _ in line if e > now), *(b for _, b in windows if b > now)})
    k = 0
    for t in times:
        if t > horizon or t + limit > n.ahead_at:
            break
        while k < len(line) and line[k][0] <= t:
            if shared:
                _apply(n.free, shared, line[k][1], -1)
            else:
                free += sum(c for _, _, c, _ in line[k][1])
            k += 1
        if windows:
            # reservations are kept rounded down to bf_resolution; a job tested to start now is
            # checked with its exact window, one planned later with its rounded one (backfill.c)
            lo, hi = (t, t + limit) if t <= now else _rounded(t, t + limit, resolution)
            if _overlaps(windows, lo, hi):
                continue
        if shared:
            parts = _take(n.free, shared, n.shares, need, typ)
            if parts is not None:
                return t, parts
        elif free >= need.count and need.kind == GPU:
            return t, [(GPU, typ, need.count, -1)]
    return INF, []
