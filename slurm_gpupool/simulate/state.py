"""The replay's value types: its settings, a mapped request, what a policy sees of nodes and
queue, and what a replay measured (pure).

Apart from the engine so that policies, metrics and reports read them without the scheduler's
machinery, and so that the engine's parts share one definition of each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_gpupool.simulate.mapping import PREFER_MIG, Demand, TraceRequest

GPU, SHARD = "gpu", "shard"
INF = math.inf


@dataclass(frozen=True)
class Params:
    """The scheduler's and the repartitioner's settings a replay uses (defaults: Slurm's and ours)."""

    bf_interval_s: float = 30.0  # SchedulerParameters bf_interval
    # when Slurm's passes began, s from time 0 (a recorded run's controller log), sorted;
    # none: on the bf_interval grid from ``bf_grid_from_s`` (``cadence``)
    bf_passes_s: tuple[float, ...] = ()
    # where that grid starts (None: the first submission).  Slurm's phase is set by the
    # controller's history, which no trace or accounting keeps; the validation's replays,
    # whose error `gpupool simulate` prints, start it at the first submission
    bf_grid_from_s: float | None = None
    bf_max_job_test: int = 500  # bf_max_job_test
    bf_window_s: float = 86400.0  # bf_window (1440 minutes)
    bf_resolution_s: float = 60.0  # bf_resolution: reservation windows are rounded down to it
    # ... but from 24.11.0 a planned job's window ends rounded up (backfill.c _set_slot_time)
    bf_end_up: bool = False
    # from 24.11.0 the will-run test plans a running job past its limit to end now
    # (``Backfill._plan_overdue``); before, KillWait after its limit
    bf_overdue_now: bool = False
    # True: every tested job places its reservation, as Slurm does (slow on deep queues); False:
    # a job that needs at least what one that failed needed is passed over without placing it.
    # Both agree with the real sandbox Slurm (tests/integration/test_simulate_slurm.py).
    bf_exact: bool = False
    # the shortcut passes a job over only once jobs of its request hold every node offering
    # it, or this many: on Philly's first 40 days 8 keeps the waits within 1 % of bf_exact's
    bf_hold_nodes: int = 8
    # how the select plugin plans a waiting job's start (``willrun``: cons_tres's
    # _will_run_test): "batch" (22.05 to 25.05.0), "batch-nodes" (25.05.1 on) or "exact"
    will_run: str = "batch"
    bf_window_linear_s: float = 0.0  # bf_window_linear: will-run batches grow by this (0: double)
    clock_origin_s: float = 0.0  # the clock's epoch seconds at time 0 (will-run aligns to its 30 s)
    # priority/multifactor as the sandbox sets it: only the QOS factor weighs (PriorityWeightQOS);
    # QOS name -> its Priority (sacctmgr); a QOS not listed has priority 0 ("normal")
    qos_priority: tuple[tuple[str, int], ...] = ()
    priority_weight_qos: int = 10000
    # the age factor (PriorityWeightAge; 0, the sandbox's: not weighed): a queued job's age since
    # it became eligible (its accrue time, whole seconds) over PriorityMaxAge, at most 1, times
    # the weight.  The decay thread recomputes every pending job's priority each
    # PriorityCalcPeriod, on the clock's epoch seconds = priority_calc_phase_s modulo it (when
    # that controller started); between its rounds the queue keeps the last ones (``aging``)
    priority_weight_age: int = 0
    priority_max_age_s: float = 7 * 86400.0  # PriorityMaxAge (7-0)
    priority_calc_period_s: float = 300.0  # PriorityCalcPeriod (5 minutes)
    priority_calc_phase_s: float = 0.0
    # the partition factor and tiers (``priority``): each partition's (name, PriorityJobFactor,
    # PriorityTier); PriorityWeightPartition (0, the sandbox's: not weighed).  The tiers order
    # the queue whatever the weight; a job's partition not named here weighs 0, tier 1
    partition_priority: tuple[tuple[str, int, int], ...] = ()
    priority_weight_partition: int = 0
    # the fair-share factor (PriorityWeightFairshare; 0, the sandbox's: not weighed), as Fair
    # Tree ranks the associations (``fairshare``) each round of the decay thread: the accounts
    # (account, parent account, RawShares; the root's parent ""), the users' associations
    # (account, user, RawShares), their usage at time 0 (account, user, billing-seconds:
    # ``sshare``'s RawUsage) and PriorityDecayHalfLife; a job's association is its account
    # and user, its billing ``SimJob.billing``
    priority_weight_fairshare: int = 0
    fairshare_accounts: tuple[tuple[str, str, int], ...] = ()
    fairshare_users: tuple[tuple[str, str, int], ...] = ()
    fairshare_usage: tuple[tuple[str, str, float], ...] = ()
    priority_decay_half_life_s: float = 7 * 86400.0
    # preempt/qos (``preempt``): QOS -> the QOS it preempts (Preempt=); QOS -> its PreemptMode
    # (requeue | cancel | off; a QOS not listed: ``preempt_mode``, slurm.conf's); QOS -> GraceTime
    qos_preempt: tuple[tuple[str, tuple[str, ...]], ...] = ()
    qos_preempt_mode: tuple[tuple[str, str], ...] = ()
    qos_grace_s: tuple[tuple[str, float], ...] = ()
    preempt_mode: str = "requeue"
    # a preemptor preempts nothing more this long after it did (KillWait + MessageTimeout: the
    # sandbox's 5 + 10 s; Slurm's defaults 30 + 10)
    preempt_wait_s: float = 15.0
    # a requeued job is eligible again this long after its run completed (the credential's
    # lifetime + 1: ``batch_requeue_fini``)
    requeue_delay_s: float = 121.0
    release_s: float = 0.5  # a job's records come free this long after it ends (epilog, completion)
    # while a job that ended on a node completes (until its records come free), the node takes
    # no new job on any of its GPUs: the main scheduler leaves it out (``_pick_best_nodes``
    # drops ``cg_node_bitmap``) and backfill plans a job it would start there a second later
    # (``backfill.c``: "Need to wait for in-progress completion/epilog").  Only where each
    # job's release is known to the millisecond (a recorded run's Epilog ends): with ends on
    # whole seconds, as accounting has them, every end meets a pass on the grid and blocks its
    # node through it
    completing_blocks_node: bool = False
    # a submitted batch job waits for the controller's background loop, which asks the main
    # scheduler to run once a second (``controller.c``: ``_slurmctld_background`` wakes each
    # second, ``queue_job_scheduler`` counts the submission, ``schedule()`` runs at the next
    # round; sbatch's own RPC only tests the job): on the sandbox of every release a job
    # that fits at once starts 0.0-1.0 s after its submission.  The rounds fall on the
    # clock's epoch seconds = ``sched_tick_phase_s`` modulo ``sched_tick_s`` (one controller's
    # phase; 24.11 and later wake on the second of the condition variable's clock).  0: the
    # main scheduler runs at each submission.  A job's end runs it at once (the epilog's RPC)
    sched_tick_s: float = 0.0
    sched_tick_phase_s: float = 0.0
    # KillWait (the sandbox's 5 s; Slurm's default 30): backfill expects a job past its time
    # limit to end this long after it (``_guess_job_end``)
    kill_wait_s: float = 5.0
    # a job past its time limit is ended at the controller's next periodic check, which runs
    # every PERIODIC_TIMEOUT (30 s: controller.c, job_mgr.c job_time_limit, OverTimeLimit=0), on
    # the clock's epoch seconds = limit_check_phase_s modulo it; a job whose work ends before
    # that check completes (Slurm records it TIMEOUT all the same).  0: ended at its limit exactly
    limit_check_s: float = 0.0
    limit_check_phase_s: float = 0.0
    # when checks ran, as the controller logged them (``Time limit exhausted``; s from time
    # 0), sorted: a job's check is counted from the nearest one in whole periods.  A check
    # runs in the second its period is up (``time_t``), at whatever fraction the main loop
    # reaches it (0.03-0.94 s on one 22.05 run): the phase alone put a kill, and so the next
    # job's start, in the wrong second.  Empty: from ``limit_check_phase_s``
    limit_checks_s: tuple[float, ...] = ()
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
    window_from_s: float | None = None  # ... and from here (None: the first submission, not the epoch's midnight)

    def __post_init__(self) -> None:
        # the pass instants are searched by bisection (``cadence``): in order, whoever gave them
        object.__setattr__(self, "bf_passes_s", tuple(sorted(self.bf_passes_s)))
        object.__setattr__(self, "limit_checks_s", tuple(sorted(self.limit_checks_s)))


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
    partition: str = ""  # the partition it was submitted to ("": none named)
    user: str = ""  # who submitted it ("": none named)
    requeues: int = 0
    preemptions: int = 0  # times preempted (QOS preemption; requeued or ended)
    preempted_by: int = -1  # the job it was last preempted for
    cancelled: bool = False  # ended by a preemption, never to run again (cancel mode, or not requeueable)
    withdrawn: bool = False  # cancelled by its user (``scancel``) before it started
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
    window_s: float  # utilisation, switches and samples are measured over [window_from_s, window_s]
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
    window_from_s: float = 0.0
    preempted: int = 0  # jobs preempted (QOS preemption), while jobs arrive
