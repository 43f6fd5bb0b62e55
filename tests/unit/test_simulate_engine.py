"""#16: the replay engine schedules as Slurm does with our GRES, and switches as the
repartitioner does.  Every expected time here is worked out by hand in the comment beside it."""

from __future__ import annotations

import pytest

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.simulate.engine import (
    GPU,
    INF,
    NOW,
    SHARD,
    Engine,
    Need,
    Params,
    Switcher,
    _earliest,
    _first_clear,
    _lower_bound,
    _Node,
    _rounded,
    _take,
    _timeline,
)
from slurm_gpupool.simulate.jobs import SimJob, time_limit_s
from slurm_gpupool.simulate.mapping import TraceRequest
from slurm_gpupool.simulate.metrics import summarise
from slurm_gpupool.simulate.pool import pool_spec

RAW = {
    "version": 1,
    "nodesets": {"a30": {"nodes": "n[1-2]", "machine": "pcie-a30"}},
    "layouts": {
        "whole": {"a30": {"all": "whole"}},
        # per node: 8 x 1g.6gb (GPUs 0-1), two GPUs time-sliced into 4 shards each (2-3)
        "day": {"a30": {"0-1": {"mig": {"1g.6gb": 4}}, "2-3": {"shared": 4}}},
    },
    "paths": {"state_dir": "/tmp/x", "run_dir": "/tmp/x", "spool_dir": "/tmp/x"},
}


@pytest.fixture(scope="module")
def spec():
    cfg = parse_config(RAW, "test.yaml")
    return pool_spec(cfg, ["whole", "day"])


def job(i, submit, duration, gpus=1, milli=1000, limit=None, requeue=True):
    return SimJob(
        i, submit, duration, limit if limit is not None else duration, TraceRequest(gpus, milli), requeue=requeue
    )


def run(spec, jobs, boundaries=(("whole", 0.0),), **params):
    sw = Switcher("test", [(t, lay) for lay, t in boundaries])
    base = {"sample_s": 0, "bf_interval_s": 30, "switch_s": 60, "lead_time_s": 0, "window_s": 1e12, "release_s": 0}
    res = Engine(spec, sw, Params(**{**base, **params})).run(jobs)
    return res, {r.job_id: r for r in res.jobs}


def test_node_shapes_come_from_the_planned_gres(spec):
    whole = spec.shape("whole", "n1")
    assert whole.plain == (("a30", 4),) and not whole.shared
    day = spec.shape("day", "n1")
    assert dict(day.plain) == {"1g.6gb": 8} and day.shared == (("a30_shared", 2, 4),)
    assert day.gpu_eq == pytest.approx(4.0)  # 8 x 1/4 + 2 whole shared GPUs
    assert spec.gpu_eq("whole") == spec.gpu_eq("day") == 8.0


def test_fifo_blocks_and_backfill_fills_without_delaying_the_head(spec):
    jobs = [
        job(1, 0, 100, gpus=4, limit=100),  # n1 full until 100
        job(2, 1, 100, gpus=4, limit=100),  # n2 full until 101
        job(3, 2, 100, gpus=4, limit=100),  # blocks the queue: starts at 100 on n1
        job(4, 3, 10, gpus=1, limit=60),  # FIFO: behind 3; no GPU free until 100 either
    ]
    _, r = run(spec, jobs)
    assert (r[1].start_s, r[2].start_s) == (0, 1)
    assert r[3].start_s == 100  # main scheduler, at the end of job 1
    # job 4 needs 1 GPU: n2 frees at 101 (job 2 ends); the main scheduler starts it then
    assert r[4].start_s == 101


def test_backfill_starts_a_short_job_only_if_it_ends_before_the_head_s_reservation(spec):
    jobs = [
        job(1, 0, 100, gpus=2, limit=100),  # n1: 2 of 4 until 100
        job(2, 0, 1000, gpus=4, limit=1000),  # n2: full until 1000
        job(3, 1, 100, gpus=4, limit=100),  # head: waits for n1 (100)
        job(4, 2, 30, gpus=1, limit=60),  # would end by 90 < 100 on n1: backfilled at the next pass (30)
        job(5, 3, 30, gpus=1, limit=120),  # its limit crosses 100: it would delay job 3; waits
    ]
    _, r = run(spec, jobs, bf_resolution_s=0)
    assert r[3].start_s == 100
    assert r[4].start_s == 30  # the first backfill pass (bf_interval 30)
    # job 5 starts after job 3 ends (200): n1 full 100-200, n2 full to 1000
    assert r[5].start_s == 200
    assert all(x.wait_s >= 0 for x in r.values())


def test_backfill_reservations_take_whole_nodes_rounded_down_to_bf_resolution(spec):
    """Slurm's backfill keeps reservations as node bitmaps (``backfill.c`` node_space), with
    both ends rounded down to ``bf_resolution``: a reservation planned for 100-200 holds the
    whole node from 60 to 180, whatever the job needs of it."""
    jobs = [
        job(1, 0, 100, gpus=2, limit=100),  # n1: 2 of 4 GPUs until 100
        job(2, 0, 1000, gpus=4, limit=1000),  # n2 full
        job(3, 1, 100, gpus=3, limit=100),  # head: 3 GPUs of n1 at 100 -> n1 held [60, 180)
        job(4, 2, 30, gpus=1, limit=60),  # 1 GPU: n1 has 2 idle, but [30, 90) meets [60, 180)
        job(5, 3, 10, gpus=1, limit=25),  # [30, 55) ends before 60: backfilled at 30
    ]
    _, r = run(spec, jobs, bf_resolution_s=60)
    assert r[5].start_s == 30 and r[3].start_s == 100
    assert r[4].start_s == 100  # with job 3 at 100: 3 + 1 GPUs of n1
    _, r = run(spec, jobs, bf_resolution_s=0)
    assert r[4].start_s == 30  # exact windows: [30, 90) ends before 100


def test_backfill_rounds_reservations_on_the_clock_not_on_the_runs_start(spec):
    """``backfill.c`` rounds a reservation's epoch seconds: with the clock at 30 s past a minute when the run
    starts, job 3's 100-200 is 130-230 on the clock, held 120-180, so [90, 150) in the run,
    and job 4's [30, 90) ends before it (on the run's own start it met [60, 180))."""
    jobs = [
        job(1, 0, 100, gpus=2, limit=100),
        job(2, 0, 1000, gpus=4, limit=1000),
        job(3, 1, 100, gpus=3, limit=100),
        job(4, 2, 30, gpus=1, limit=60),
    ]
    _, r = run(spec, jobs, bf_resolution_s=60, will_run="exact", clock_origin_s=1_795_000_050.0)
    assert r[4].start_s == 30 and r[3].start_s == 100
    _, r = run(spec, jobs, bf_resolution_s=60, will_run="exact", clock_origin_s=1_795_000_000.0)
    assert r[4].start_s == 100  # 40 s past a minute: held [80, 200), which [30, 90) meets
    assert _rounded(50, 110, 60, 20.0) == (40, 100) and _rounded(50, 110, 60) == (0, 60)


def test_from_24_11_a_planned_window_ends_rounded_up_to_bf_resolution():
    """24.11.0 on (``_set_slot_time``): the start is rounded down, the end up (+59 s then
    down), so a job planned for 100-200 holds [60, 240); an end already on the grid stays."""
    assert _rounded(100, 200, 60, end_up=True) == (60, 240)
    assert _rounded(100, 180, 60, end_up=True) == (60, 180)
    # the clock 20 s past a minute at 0: 120-220 on it, held 120-240, so [100, 220) in the run
    assert _rounded(100, 200, 60, 20.0, end_up=True) == (100, 220)
    assert _rounded(100, 200, 0, end_up=True) == (100, 200)  # no resolution: exact


def test_backfill_plans_a_job_past_its_limit_to_end_at_its_limit_not_at_the_check_that_ends_it(spec):
    """Slurm plans with a running job's ``end_time`` (start + limit); it does not foresee the
    periodic check that will end a job running past it (once the limit has passed: the test
    below and ``Backfill._plan_overdue``).
    Job 1 (3 GPUs of n1) would run 100 s on a 60 s limit from 5: the check at 90 ends it.  Job 3
    waits for n1 whole: planned at 65, so job 4's [35, 85) on n1's free GPU (the passes run at
    5, 35, ...) would delay it and waits, as on the sandbox (trace A seed 5151 on 24.11;
    planned at the check, the replay backfilled such slices in front: a median wait of 61 s
    against Slurm's 114 s)."""
    jobs = [
        job(1, 5, 100, gpus=3, limit=60),  # n1: 3 of 4 from 5; limit at 65, ended by the check at 90
        job(2, 5, 1000, gpus=4, limit=1000),  # n2 full
        job(3, 6, 100, gpus=4, limit=100),  # waits for n1 whole: planned at 65
        job(4, 7, 40, gpus=1, limit=50),  # n1's free GPU, [35, 85): meets job 3's plan at 65
    ]
    _, r = run(spec, jobs, bf_resolution_s=0, limit_check_s=30, release_s=0.5)
    assert r[1].timeout and r[1].end_s == 90
    assert r[3].start_s == 90.5  # n1 whole once job 1's records are free
    assert r[4].start_s == 191.0  # after job 3 (its records free at 190.5 + 0.5): not in front of its plan
    # a 25 s job ends before 65: backfilled at the first pass after its submission
    _, r = run(spec, [*jobs[:3], job(4, 7, 20, gpus=1, limit=25)], bf_resolution_s=0, limit_check_s=30)
    assert r[4].start_s == 35


def test_from_24_11_a_job_behind_one_past_its_limit_is_planned_now_not_with_the_next_batch(spec):
    """Job 1's limit passes at 63 (the check ends it at 90); job 2 fills n2 to 85; job 3
    wants a whole node.  At the pass at 65, 24.11's will-run test first removes job 1 (past
    its end_time, ``_build_cr_job_list``): n1 fits, so job 3 is planned now and job 4's
    [65, 80) on n1's free GPU would delay it.  Up to 24.05 job 1 is in the first batch with
    job 2 (ending at 85) and the plan is the batch's last end, 85: job 4 fits in front."""
    jobs = [
        job(1, 5, 100, gpus=3, limit=58),  # n1: 3 of 4 from 5; end_time 63; ended by the check at 90
        job(2, 5, 80, gpus=4, limit=80),  # n2 full to 85
        job(3, 6, 100, gpus=4, limit=100),  # a whole node
        job(4, 64, 15, gpus=1, limit=15),  # n1's free GPU, first tested at the pass at 65
    ]
    common = {"bf_resolution_s": 0, "limit_check_s": 30, "release_s": 0.5, "will_run": "batch"}
    _, r = run(spec, jobs, **common, bf_overdue_now=True)
    assert r[3].start_s == 85.5 and r[4].start_s == 85.5  # held until job 3 started (on n2, free first)
    _, r = run(spec, jobs, **common, bf_overdue_now=False)
    assert r[4].start_s == 65


def test_completion_latency_delays_the_next_job(spec):
    _, r = run(spec, [job(1, 0, 100, gpus=4), job(2, 0, 100, gpus=4), job(3, 1, 10, gpus=4)], release_s=0.5)
    assert r[1].end_s == 100 and r[3].start_s == 100.5  # its records came free half a second later


def test_a_job_s_own_measured_release_delays_the_next_job_by_it_and_others_take_the_default(spec):
    """A replay of a recorded run gives each job the hand-over measured after it: a loaded
    node's epilogs vary by seconds, and every job given the mean made a queue pay the long
    ones over and over."""
    jobs = [job(1, 0, 100, gpus=4), job(2, 0, 100, gpus=4), job(3, 1, 10, gpus=4), job(4, 1, 10, gpus=4)]
    jobs[0] = SimJob(1, 0, 100, 100, TraceRequest(4, 1000), release_s=3.0)
    _, r = run(spec, jobs, release_s=0.5)
    assert r[1].end_s == r[2].end_s == 100
    # job 3 takes the first node that comes free: job 2's, at the default 0.5 s; job 4 job 1's, 3 s after
    assert sorted((r[3].start_s, r[4].start_s)) == [100.5, 103.0]


def test_a_preempted_job_s_gpus_come_free_after_its_own_release(spec):
    """The preemption path ends a job, then frees its records after its release too."""
    jobs = [
        SimJob(1, 0, 1000, 1000, TraceRequest(8, 1000), qos="low", release_s=2.0),
        SimJob(2, 10, 10, 100, TraceRequest(8, 1000), qos="high"),
    ]
    prio = {"qos_priority": (("high", 100),), "qos_preempt": (("high", ("low",)),), "preempt_mode": "cancel"}
    _, r = run(spec, jobs, release_s=0.5, **prio)
    assert r[1].cancelled and r[1].end_s == 10
    assert r[2].start_s == 12.0


def test_a_time_sliced_gpu_is_given_whole_or_as_shards_never_both(spec):
    day = (("day", 0.0),)
    jobs = [
        job(1, 0, 100, milli=400),  # 0.4 GPU: 1g.6gb is 1/4 < 0.4 -> shards: 2 of 4 on n1 GPU 2
        job(2, 0, 100, milli=400),  # 2 more shards of the same GPU (first fit): it is full
        job(3, 0, 100, milli=400),  # n1's second shared GPU
        job(4, 0, 100, milli=400),
        job(5, 0, 100, milli=400),  # n2 now
    ]
    res, r = run(spec, jobs, boundaries=day)
    assert {x.kind for x in r.values()} == {"shard"}
    assert all(x.start_s == 0 for x in r.values())
    # 0.9 GPU -> all 4 shards of one GPU: only n2's GPU 3 is untouched
    _, r2 = run(spec, [*jobs, job(6, 1, 50, milli=900)], boundaries=day)
    assert r2[6].start_s == 1 and r2[6].kind == "shard" and r2[6].need == "shard:a30_shared:4"
    # a seventh: no GPU has 4 free shards until job 6 ends (51)
    _, r3 = run(spec, [*jobs, job(6, 1, 50, milli=900), job(7, 2, 50, milli=900)], boundaries=day)
    assert r3[7].start_s == 51
    assert res.kinds["a30_shared"] == "shared"


def test_shards_fit_on_one_gpu_and_a_gpu_with_shards_is_not_given_whole():
    need_whole = Need(GPU, ("t_shared",), 1, 1, 1.0, None)  # type: ignore[arg-type]
    need_2 = Need(SHARD, ("t_shared",), 2, 1, 0.5, None)  # type: ignore[arg-type]
    need_4 = Need(SHARD, ("t_shared",), 4, 1, 1.0, None)  # type: ignore[arg-type]
    free: dict[str, int] = {}
    shares = {"t_shared": 4}
    shared = {"t_shared": [3, 0]}  # GPU 0: 3 of 4 shards in use; GPU 1 idle
    assert _take(free, shared, shares, need_whole, "t_shared") == [(GPU, "t_shared", 1, 1)]
    assert _take(free, shared, shares, need_2, "t_shared") == [(SHARD, "t_shared", 2, 1)]  # not split 1+1
    shared = {"t_shared": [3, -1]}  # GPU 1 given whole
    assert _take(free, shared, shares, need_2, "t_shared") is None
    assert _take(free, shared, shares, need_whole, "t_shared") is None
    shared = {"t_shared": [1, 1]}
    assert _take(free, shared, shares, need_whole, "t_shared") is None  # shards on both: no whole GPU
    assert _take(free, shared, shares, need_4, "t_shared") is None


def test_utilisation_counts_gpu_equivalents_of_what_is_held(spec):
    # one 1g.6gb job (1/4 GPU) for 100 s on 8 GPU-eq of capacity: 25 GPU-eq-s over 800
    res, r = run(spec, [job(1, 0, 100, milli=200)], boundaries=(("day", 0.0),))
    assert r[1].kind == "mig" and r[1].eq == pytest.approx(0.25)
    assert res.horizon_s == 100
    assert sum(res.allocated.values()) == pytest.approx(25.0)
    assert sum(res.capacity.values()) == pytest.approx(800.0)


def test_utilisation_and_switches_are_measured_while_jobs_arrive(spec):
    # jobs arrive until 500; a long one runs to 10,000: the drain is not counted
    jobs = [job(1, 0, 10_000, milli=200, limit=20_000), job(2, 500, 100, milli=200)]
    res, _ = run(spec, jobs, boundaries=(("day", 0.0), ("whole", 1000.0)), window_s=None)
    assert res.window_s == 500 and res.horizon_s == 10_000
    assert sum(res.capacity.values()) == pytest.approx(8 * 500)
    assert sum(res.allocated.values()) == pytest.approx(0.25 * 500 + 0.25 * 0)  # job 2 starts at 500
    assert res.switches == 0  # the 1000 switch and the one after job 1 come after the window


def test_a_day_to_night_switch_waits_for_running_jobs_and_night_jobs_wait_for_it(spec):
    jobs = [
        job(1, 0, 1200, milli=200),  # a 1g.6gb slice on n1 until 1200
        job(2, 500, 100, gpus=4),  # 4 whole GPUs: day has none -> refused, resubmitted at 1000
    ]
    boundaries = (("day", 0.0), ("whole", 1000.0))
    res, r = run(spec, jobs, boundaries=boundaries, switch_s=60)
    assert r[2].eligible_s == 1000
    # n2 is idle at 1000: out of service 1000-1060, then whole; job 2 starts there at 1060
    assert r[2].start_s == 1060 and r[2].layout == "whole" and r[2].wait_s == 560
    assert res.switches == 2  # n1 switches when job 1 ends: 1200-1260
    assert res.out_of_service_s == 120 and res.skipped == 0


def test_a_node_busy_past_the_deadline_is_skipped_and_switched_by_the_next_cron_run(spec):
    jobs = [job(1, 0, 2950, gpus=4, limit=4000), job(2, 0, 2950, gpus=4, limit=4000), job(3, 3100, 10, milli=200)]
    boundaries = (("whole", 0.0), ("day", 100.0))
    res, r = run(spec, jobs, boundaries=boundaries, deadline_s=1800, cron_s=300, switch_s=60)
    # both nodes busy until 2950 > 100 + 1800: skipped; the cron run at 3000 switches them (3000-3060)
    assert res.skipped == 2 and res.switches == 2
    assert r[3].start_s == 3100 and r[3].kind == "mig"
    assert res.layout_seconds["day"] == pytest.approx(2 * (3110 - 3060))
    assert res.reserved_idle_s == pytest.approx(2 * 50)  # idle 2950-3000 waiting for the cron run


def test_requeue_at_the_deadline_after_the_grace(spec):
    jobs = [job(1, 0, 3000, gpus=4, limit=4000), job(2, 0, 3000, gpus=4, limit=4000, requeue=False)]
    boundaries = (("whole", 0.0), ("day", 100.0))
    res, r = run(spec, jobs, boundaries=boundaries, deadline_s=1000, requeue=True, grace_s=120)
    # job 1 (n1) is requeued at 100 + 1000 + 120 = 1220; n1 switches to day then (1220-1280)
    assert res.requeued == 1 and r[1].requeues == 1
    # job 2 is not requeueable: n2 waits for it (skipped, switched at the 3000 cron run)
    assert r[2].end_s == 3000 and res.skipped == 1
    # job 1 asked for 4 whole GPUs: day has none; it waits for... no later layout here
    assert r[1].start_s == -1


def test_a_job_that_ended_before_the_requeue_is_not_requeued_in_its_epilog(spec):
    """Its run ends at 1150, between the deadline's signal (1100) and the requeue (1220);
    its records stay held through its epilog until 1250.  It completed: the requeue passes
    it over (it was requeued, its run lost, before the fix) and n1 switches once it is free."""
    jobs = [job(1, 0, 1150, gpus=4, limit=4000)]
    res, r = run(spec, jobs, boundaries=(("whole", 0.0), ("day", 100.0)), deadline_s=1000, requeue=True,
                 grace_s=120, release_s=100)  # fmt: skip
    assert res.requeued == 0 and r[1].requeues == 0
    assert (r[1].start_s, r[1].end_s) == (0, 1150)
    assert res.layout_seconds["day"] > 0 and res.switches >= 1


def test_the_reservation_ahead_keeps_long_jobs_off_nodes_that_switch(spec):
    jobs = [job(1, 100, 50, gpus=4, limit=120), job(2, 110, 50, gpus=4, limit=1000), job(3, 1100, 5, milli=200)]
    boundaries = (("whole", 0.0), ("day", 1000.0))
    res, r = run(spec, jobs, boundaries=boundaries, lead_time_s=900)
    assert r[1].start_s == 100  # ends by 220 < 1000: allowed on the reserved nodes
    # job 2's limit crosses the switch on both nodes: it cannot start before it; by day
    # there are no whole GPUs: it never starts in this replay
    assert r[2].start_s == -1
    res, r = run(spec, jobs, boundaries=boundaries, lead_time_s=0)
    assert r[2].start_s == 110  # no reservation ahead: it starts (and would delay a switch)
    assert res.switches == 2 and r[3].start_s == 1100


def test_jobs_no_layout_can_hold_are_rejected_with_the_reason(spec):
    res, r = run(spec, [job(1, 0, 10, gpus=16)])  # 16 GPUs: 2 nodes x 4 = 8 at most
    assert r[1].rejected and "16 GPUs" in r[1].rejected and r[1].start_s == -1


def test_multi_node_jobs_take_whole_nodes(spec):
    _, r = run(spec, [job(1, 0, 10, gpus=8), job(2, 0, 10, gpus=1)])
    assert r[1].need == "gpu:a30:4 x2" and r[1].start_s == 0
    assert r[2].start_s == 10


def test_time_limits_for_traces_without_them():
    assert time_limit_s(100, 2) == 240  # 200 s -> 4 whole minutes
    assert time_limit_s(10, 2) == 60
    assert time_limit_s(10_000, 2, maximum_s=3600) == 3600


def test_shard_jobs_run_slower_by_the_slowdown_parameter(spec):
    _, r = run(spec, [job(1, 0, 100, milli=400, limit=1000)], boundaries=(("day", 0.0),), shard_slowdown=1.5)
    assert r[1].end_s == 150
    _, r = run(spec, [job(1, 0, 100, milli=400, limit=120)], boundaries=(("day", 0.0),), shard_slowdown=1.5)
    assert r[1].end_s == 120 and r[1].timeout  # killed at its limit, as Slurm does


def test_a_demand_driven_switcher_switches_the_nodes_it_names(spec):
    """The hook an elastic policy uses: every tick it sees nodes and pending jobs and names
    switches; the engine makes them as the repartitioner would (idle: at once)."""

    class SliceWhenWaiting(Switcher):
        tick_s = 60.0

        def __init__(self):
            super().__init__("toy", [(0.0, "whole")])
            self.seen = []

        def decide(self, now, nodes, pending):
            self.seen.append((now, {n.name: (n.layout, n.idle) for n in nodes}, [p.waited_s for p in pending]))
            idle = [n for n in nodes if n.idle and n.layout == "whole" and n.target is None]
            return [(idle[0].name, "day")] if pending and idle else []

    sw = SliceWhenWaiting()
    # n1 and n2 full with 4-GPU jobs until 1000 and 100; a 4-GPU job waits
    jobs = [job(1, 0, 1000, gpus=4), job(2, 0, 100, gpus=4), job(3, 10, 50, gpus=4)]
    res = Engine(spec, sw, Params(sample_s=0, switch_s=60, lead_time_s=0, window_s=1e12, release_s=0)).run(jobs)
    r = {x.job_id: x for x in res.jobs}
    now, nodes, waits = sw.seen[0]
    assert now == 60 and nodes == {"n1": ("whole", False), "n2": ("whole", False)} and waits == [50]
    # job 3 starts on n2 when job 2 ends (100), before the next tick (120): no switch then;
    # at 180 (job 3 ended at 150) n2 is idle but nothing waits: no switch either
    assert r[3].start_s == 100 and res.switches == 0
    # an 8-GPU job waits for both nodes while n2 is idle: the toy switches n2 at 60 (60 s out)
    sw = SliceWhenWaiting()
    jobs = [job(1, 0, 1000, gpus=4), job(2, 10, 50, gpus=8)]
    res = Engine(spec, sw, Params(sample_s=0, switch_s=60, lead_time_s=0, window_s=1e12, release_s=0)).run(jobs)
    assert res.switches == 1 and res.layout_seconds["day"] > 0
    assert {x.job_id: x for x in res.jobs}[2].start_s == -1  # n2 now has no whole GPUs: it never starts


def _head_and_candidate(job1_runs: float, submitted: float = 40) -> list[SimJob]:
    """n1 and n2 full; a 4-GPU head reserved at 1000; a 1-GPU job that backfill can start on
    n1 as soon as job 1's two GPUs come free (it ends long before 1000)."""
    return [
        job(1, 0, job1_runs, gpus=2, limit=70),  # n1: 2 of 4
        job(2, 0, 1000, gpus=4, limit=1000),  # n2 full
        job(3, 0, 1000, gpus=2, limit=1000),  # n1 full
        job(4, submitted, 100, gpus=4, limit=100),  # the head: reserved at 1000
        job(5, submitted, 10, gpus=1, limit=60),  # submitted with it
    ]


def test_a_backfill_pass_never_runs_with_the_clock_gone_back(spec):
    """Found comparing two versions of the engine on Philly: the main scheduler ran after the
    next event had been taken, so a pass it made due before that event (60) ran after it, with
    the clock set back, on the GPUs the event (job 1's end at 61.5) had freed: job 5 started
    at 60, 1.5 s before its GPU was free.  The pass at 60 runs first and finds n1 full.  (Job 5's
    submission at 40 is the last event before job 1's end.)"""
    _, r = run(spec, _head_and_candidate(61), release_s=0.5)
    assert r[1].end_s == 61  # records free at 61.5
    assert r[5].start_s == 90  # the first pass after 61.5
    assert r[4].start_s == 1000.5


def test_a_change_at_a_backfill_instant_is_seen_by_that_instant_s_pass(spec):
    """Passes run on the bf_interval grid, after every other event of their instant.  Jobs 4 and
    5 are queued at 10 and tested by the pass at 30; job 1's records come free at 60 exactly,
    so the pass at 60 backfills job 5 (it waited for the pass at 90: a pass made due at a grid
    instant went to the next one)."""
    _, r = run(spec, _head_and_candidate(59.5, submitted=10), release_s=0.5)
    assert r[5].start_s == 60


def test_a_job_killed_at_its_limit_holds_its_gpus_until_its_completion_ends(spec):
    """Job 1 reaches its limit at 60 and its records come free at 60.5 (release_s).  The pass
    at 60 (made due by job 4's submission at 50) must not plan on them: it started job 3 on
    GPUs job 1 still held."""
    jobs = [
        job(1, 0, 1000, gpus=4, limit=60),  # n1: killed at 60
        job(2, 0, 1000, gpus=4, limit=1000),  # n2 full
        job(3, 10, 100, gpus=8, limit=100),  # the head: both nodes, reserved at 1000
        job(4, 10, 10, gpus=1, limit=60),  # backfill: fits on n1 once job 1's GPUs are free
        job(5, 50, 10, gpus=1, limit=2000),  # would delay the head: waits; its submission makes a pass due
    ]
    _, r = run(spec, jobs, release_s=0.5)
    assert r[1].timeout and r[1].end_s == 60
    assert r[4].start_s == 90  # the pass after 60.5, not the one at 60


def test_jobs_a_pass_did_not_reach_are_tested_by_the_next_when_it_started_some(spec):
    """bf_max_job_test 2: the pass at 30 tests the head and job 4 and starts job 4; job 5, not
    tested, is within the limit now.  Nothing else changes until 1000, yet the pass at 60
    tests it (it waited for 1000: the rule looked at the queue after the pass, 2 jobs)."""
    jobs = [
        job(1, 0, 1000, gpus=4, limit=1000),  # n1 full
        job(2, 0, 1000, gpus=2, limit=1000),  # n2: 2 of 4
        job(3, 1, 100, gpus=8, limit=100),  # the head: both nodes at 1000
        job(4, 1, 10, gpus=1, limit=60),  # backfilled at 30 on n2
        job(5, 1, 10, gpus=1, limit=60),  # third in the queue
    ]
    _, r = run(spec, jobs, bf_max_job_test=2)
    assert r[4].start_s == 30 and r[5].start_s == 60


@pytest.mark.parametrize(("exact", "hold", "fifth"), [(True, 8, 200), (False, 8, 200), (False, 2, 200), (False, 1, 30)])
def test_a_queue_of_one_request_holds_node_after_node_with_or_without_the_shortcut(spec, exact, hold, fifth):
    """Jobs 3 and 4 ask for the same (4 GPUs, 100 s): job 3 is held n1 from 100, job 4 n2
    from 150.  Job 5 (1 GPU, 140 s) fits now on n2's idle GPU, but would end at 170, in job
    4's window: it waits.  The shortcut used to pass job 4 over once job 3 failed, so n2 was
    held by no one and job 5 started at 30; it now passes a job over only once its request
    holds every node that offers it (here both), or ``bf_hold_nodes`` (1: as it used to)."""
    jobs = [
        job(1, 0, 100, gpus=4, limit=100),  # n1 full until 100
        job(2, 0, 150, gpus=3, limit=150),  # n2: 3 of 4 until 150
        job(3, 1, 100, gpus=4, limit=100),  # the head: n1 at 100 (main scheduler)
        job(4, 2, 100, gpus=4, limit=100),  # n2 at 150
        job(5, 3, 100, gpus=1, limit=140),  # [30, 170) meets [150, 250) on n2
    ]
    # planned at the exact earliest start: Slurm's will-run batches (test_simulate_willrun.py)
    # would plan job 4 at 200, job 2's end and job 3's in one batch, and let job 5 in front
    _, r = run(spec, jobs, bf_resolution_s=0, bf_exact=exact, bf_hold_nodes=hold, will_run="exact")
    assert (r[3].start_s, r[4].start_s) == (100, 150)
    assert r[5].start_s == fifth  # 200: n1 once job 3 ends (n2 is job 4's until 250)


def _random_jobs(seed: int) -> list[SimJob]:
    """300 jobs, one every 30 s on average: whole GPUs (1-8), MIG-sized and shard-sized fractions."""
    import random

    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(300):
        t += rng.expovariate(1 / 30)
        gpus, milli = rng.choice([(1, 1000), (2, 1000), (4, 1000), (8, 1000), (1, 200), (1, 250)])
        duration = rng.uniform(5, 300)
        jobs.append(job(i, t, duration, gpus=gpus, milli=milli, limit=time_limit_s(duration, rng.choice([1, 2, 3]))))
    return jobs


def _day_and_night() -> Switcher:
    """Day and night every 3000 s: a job mapped in one layout waits for the next period of it."""
    return Switcher("test", [(3000.0 * k, ("whole", "day")[k % 2]) for k in range(60)])


def _random_params(release: float = 0.5) -> Params:
    return Params(sample_s=0, bf_interval_s=30, switch_s=60, lead_time_s=600, window_s=1e12, release_s=release)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_bound_lists_kept_across_passes_equal_fresh_ones(spec, seed):
    """The lower-bound lists backfill keeps across passes (moved per node on a start or end,
    rebuilt after a switch) equal, every time a pass reads one, the list built from scratch."""
    stale: list[str] = []
    reads = 0

    class Checked(Engine):
        def _by_bound(self, need):
            nonlocal reads
            kept = super()._by_bound(need)
            fresh = sorted(
                (_lower_bound(n, t, need.count, _timeline(n, t)), n.index, t)
                for t in need.types
                for n in self.by_type.get(t, ())
                if n.usable
            )
            reads += 1
            if kept != fresh:
                stale.append(f"{self.now}: {need.label}: {kept} != {fresh}")
            return kept

    res = Checked(spec, _day_and_night(), _random_params()).run(_random_jobs(seed))
    assert not stale, stale[:3]
    assert reads > 100 and all(r.start_s >= 0 for r in res.jobs)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_node_ever_holds_more_than_it_has(spec, seed):
    """A random day/night replay with completion latency: at every instant, the jobs holding
    records of a type on a node (from their start until their records come free) hold no more
    than the node has of it, and every job starts, none before it is submitted."""
    jobs = _random_jobs(seed)
    release = 0.5
    held: list[tuple[int, str, int, float]] = []  # (node, plain type, count, when its records come free)
    over: list[str] = []

    class Watched(Engine):
        def _start(self, i, chosen):
            super()._start(i, chosen)
            free_at = self.recs[i].end_s + release
            for n, parts in chosen:
                typ = parts[0][1]
                if typ not in n.cap:
                    continue  # time-sliced: per-GPU shares (test_a_time_sliced_gpu_...)
                held.append((n.index, typ, sum(p[2] for p in parts), free_at))
                using = sum(c for x, t, c, f in held if x == n.index and t == typ and f > self.now)
                if using > n.cap[typ]:
                    over.append(f"{self.now}: {n.name} holds {using} {typ} of {n.cap[typ]}")

    res = Watched(spec, _day_and_night(), _random_params(release)).run(jobs)
    assert not over, over[:5]
    assert len(held) > 200  # most jobs held plain records (whole GPUs or MIG slices)
    early = [
        (r.job_id, r.submit_s, r.start_s, r.need, r.layout, r.eligible_s)
        for r in res.jobs
        if not r.start_s >= r.submit_s
    ]
    assert not early, early[:5]


@pytest.mark.parametrize("seed", range(4))
def test_the_short_search_for_whole_gpus_finds_what_the_timeline_walk_finds(seed):
    """``_first_clear`` (lower bound, then the next job end if that bound is now, then the
    reservations' ends) against ``_earliest`` (every job end and reservation end in turn) on
    random nodes of 8 plain records: running jobs ending after now, reservations on the
    bf_resolution grid, a horizon and a reservation ahead.  A review found the short search
    missing a later start whose rounded window clears what the exact one at now did not."""
    import random

    rng = random.Random(seed)
    res, typ, compared = 60.0, "a100", 0
    for case in range(3000):
        now = rng.choice([0.0, 60.0, 90.0, rng.uniform(0, 600)])
        running = {}
        for j in range(rng.randint(0, 6)):
            running[j] = (
                now + rng.choice([1.0, 30.0, 60.0, rng.uniform(0.5, 900)]),
                [(GPU, typ, rng.randint(1, 3), -1)],
            )
        held = sum(p[0][2] for _, p in running.values())
        if held > 8:
            continue
        node = _Node("n", 0, "x", {typ: 8 - held}, {typ: 8}, {}, {}, {typ: 1.0}, running=running)
        node.ahead_at = rng.choice([INF, now + rng.uniform(100, 2000)])
        windows = sorted(
            _rounded(a, a + rng.uniform(10, 600), res)
            for a in (now + rng.uniform(-100, 1200) for _ in range(rng.randint(0, 4)))
        )
        count, limit = rng.randint(1, 8), rng.choice([20.0, 60.0, 100.0, rng.uniform(5, 800)])
        horizon = now + rng.choice([3600.0, 400.0])
        line = _timeline(node, typ)
        lb = _lower_bound(node, typ, count, line)
        lb = now if lb == NOW else lb
        if lb > horizon or lb + limit > node.ahead_at:
            continue  # _earliest_nodes passes such a node over before searching it
        need = Need(GPU, (typ,), count, 1, float(count), None)  # type: ignore[arg-type]
        walk, _ = _earliest(node, need, typ, limit, now, horizon, windows, line, res)
        short = _first_clear(lb, limit, now, horizon, node.ahead_at, windows, res, line[0][0] if line else INF)
        assert short == walk, (case, now, lb, limit, windows, [e for e, _ in line])
        compared += 1
    assert compared > 1500


def test_a_job_cancelled_while_pending_leaves_the_queue_and_stops_blocking(spec):
    """Issue #27's trace A cancels pending jobs (``scancel``).  Job 3 (4 GPUs) heads the
    queue behind two running jobs; job 4 (1 GPU, a 200 s limit) may not backfill on n1's free
    GPU: job 3's reservation holds n1 from 60 (its start at 100, rounded down).  Job 3 is
    cancelled at 20: job 4 starts then, and job 3 never runs."""
    jobs = [
        job(1, 0, 100, gpus=3, limit=100),  # n1: 3 of 4 until 100
        job(2, 0, 100, gpus=4, limit=100),  # n2 full until 100
        job(3, 2, 50, gpus=4, limit=100),
        job(4, 3, 10, gpus=1, limit=200),
    ]
    _, kept = run(spec, jobs)
    assert kept[3].start_s == kept[4].start_s == 100  # without the cancel: behind job 3
    jobs[2].cancel_s = 20.0
    res, r = run(spec, jobs)
    assert r[3].withdrawn and r[3].start_s == -1 and not r[3].cancelled
    assert r[4].start_s == 20
    assert summarise(res)["withdrawn"] == 1 and summarise(res)["never_started"] == 0


def test_a_job_cancelled_while_running_ends_then(spec):
    """``scancel`` of a running job ends it: its GPUs go to the next job then."""
    jobs = [job(1, 0, 100, gpus=4, limit=100), job(2, 0, 100, gpus=4, limit=100), job(3, 1, 10, gpus=2, limit=60)]
    jobs[0].cancel_s = 40.0
    _, r = run(spec, jobs, release_s=0.5)
    assert r[1].end_s == 40 and not r[1].withdrawn and not r[1].timeout
    assert r[3].start_s == 40.5  # the main scheduler, once job 1's records are free


def test_a_job_past_its_limit_ends_at_the_controller_s_next_time_limit_check(spec):
    """Slurm ends a job past its limit at its next periodic check (every 30 s, ``job_mgr.c``
    ``job_time_limit``), not at the limit: here the checks fall at 10, 40, 70, ... s.  Job 1
    (limit 60, work 100) is ended at 70 and job 3 gets its GPUs then; job 2 (limit 60, work
    65) ends at 65, before the check that would have ended it (TIMEOUT all the same: it
    ran past its limit, ``_job_complete``)."""
    jobs = [
        job(1, 0, 100, gpus=4, limit=60),
        job(2, 0, 65, gpus=4, limit=60),
        job(3, 1, 10, gpus=4, limit=60),
        job(4, 2, 10, gpus=4, limit=60),
    ]
    _, at_limit = run(spec, jobs)
    assert at_limit[1].end_s == 60 and at_limit[1].timeout and at_limit[2].timeout
    _, r = run(spec, jobs, limit_check_s=30, limit_check_phase_s=10, clock_origin_s=3000)
    assert r[1].timeout and r[1].end_s == 70
    assert r[2].timeout and r[2].end_s == 65
    assert (r[3].start_s, r[4].start_s) == (65, 70)


def test_the_time_limit_check_compares_whole_seconds_as_slurm_s_time_t_does(spec):
    """Slurm keeps a job's start and end time in whole seconds (``time_t``): a job started at
    3007.9 s (the epoch's) has ``end_time`` 3067 with a one-minute limit, and the check at
    3067.5 ends it (``end_time <= now``).  Compared in fractions (limit at 3067.9) it ran to
    the next check, 30 s on: a 26.05 live run's 2-GPU job ran 11 s longer than in Slurm, and
    the jobs queued behind it waited that much longer.  (The phase is the epoch's: 7.5.)"""
    _, r = run(
        spec, [job(1, 0.9, 100, gpus=4, limit=60)], limit_check_s=30, limit_check_phase_s=7.5, clock_origin_s=3007
    )
    assert r[1].start_s == 0.9 and r[1].timeout
    assert r[1].end_s == 60.5  # the check at the limit's whole second, not the one at 90.5


def test_a_job_s_time_limit_check_counts_from_the_nearest_logged_check(spec):
    """A check runs in the second its 30 s are up, at a fraction the controller's main loop
    sets (0.03 to 0.94 s on one 22.05 run).  Counted from the first logged check's phase
    (.9 here) the check ending job 1 fell at 60.9 s; the log says it ran at 60.1 s, and the
    replay takes the nearest logged check's second and fraction (``limit_checks_s``, on the
    replay's clock, where the phase is the epoch's: 3007.9 s is 0.9 s on the clock)."""
    common = {"limit_check_s": 30, "limit_check_phase_s": 7.9, "clock_origin_s": 3007}
    jobs = [job(1, 0.05, 100, gpus=4, limit=60)]
    _, by_phase = run(spec, jobs, **common)
    assert by_phase[1].end_s == pytest.approx(60.9)
    _, r = run(spec, jobs, **common, limit_checks_s=(0.9, 60.1))
    assert r[1].end_s == pytest.approx(60.1) and r[1].timeout


def _completing_case(spec, release_s: float, rule: bool, *queued: SimJob, **params):
    """n1: a 1-GPU job ends at 10 beside a 2-GPU one running to 100 (one GPU idle); n2 full
    to 100.  Job 1's records come free ``release_s`` after its end."""
    jobs = [
        job(1, 0, 10, gpus=1, limit=60),
        job(2, 0, 100, gpus=2, limit=100),
        job(3, 0, 100, gpus=4, limit=100),
        *queued,
    ]
    return run(spec, jobs, release_s=release_s, completing_blocks_node=rule, **params)[1]


def test_a_completing_node_takes_no_job_from_the_main_scheduler(spec):
    # job 4 comes at 10.5 for n1's idle GPU, while job 1 completes there (10 to 12): without
    # the rule it starts at once; with it, at 12, when job 1's completion ends and the main
    # scheduler runs (Slurm: _slurm_rpc_epilog_complete -> schedule())
    late = job(4, 10.5, 10, gpus=1, limit=60)
    assert _completing_case(spec, 2.0, False, late)[4].start_s == 10.5
    assert _completing_case(spec, 2.0, True, late)[4].start_s == 12.0


def test_backfill_holds_a_job_a_completing_node_would_take_and_starts_it_at_a_later_pass(spec):
    # job 4 (4 GPUs) heads the queue until 100 + 25 and blocks the main scheduler; job 5 (a
    # 5 s limit) fits n1's idle GPU long before.  Job 1 completes on n1 from 10 to 35 (a
    # loaded node's epilog).  Without the rule the pass at 30 starts job 5 there; with it
    # the pass plans it a second later and holds n1 for it, job 1's release at 35 starts
    # nothing (job 4 still blocks the main scheduler), and the pass at 60 starts it
    head, small = job(4, 1, 100, gpus=4, limit=100), job(5, 10.5, 5, gpus=1, limit=5)
    assert _completing_case(spec, 25.0, False, head, small, bf_resolution_s=1)[5].start_s == 30
    with_rule = _completing_case(spec, 25.0, True, head, small, bf_resolution_s=1)
    assert with_rule[5].start_s == 60 and with_rule[4].start_s == 125


def test_nodes_are_walked_in_slurms_natural_order_of_names():
    """slurmctld sorts its node table with ``strnatcmp`` (``_sort_node_record_table_ptr``, no
    topology ranking): n2 before n10, which a plain sort of the names reverses."""
    cfg = parse_config({**RAW, "nodesets": {"a30": {"nodes": "n[1-12]", "machine": "pcie-a30"}}}, "test.yaml")
    assert pool_spec(cfg, ["whole"]).nodes == tuple(f"n{i}" for i in range(1, 13))
    assert pool_spec(cfg, ["whole"], ["n10", "n2", "n1"]).nodes == ("n1", "n2", "n10")


def test_a_pass_between_an_end_and_its_epilog_holds_the_completing_node_and_a_lower_job_starts(spec):
    """Job 3 ends on n2 at 10 and completes until 15 (its Epilog).  Job 5 (2 GPUs) heads the
    queue, planned on n1 at 30 (job 1's end) and holding it, so job 6 (1 GPU) may not take
    n1's idle GPU.  A job's end frees its records in the select plugin at once
    (``_job_complete``: ``deallocate_nodes``) and makes the next backfill pass work
    (``last_job_update``): the pass at 12 plans job 5 on the completing n2 a second from now
    and holds n2 instead, and job 6 starts at once on n1.  The Epilog's end at 15 starts
    job 5 (the main scheduler).  With job 3's records kept until its Epilog's end, and that
    pass skipped, job 6 waited for it too (a 26.05 run, ``simulate-partition-s3498140236``:
    a 1-GPU job started 5 s after Slurm's)."""
    jobs = [
        job(1, 0, 30, gpus=1, limit=30),
        job(2, 0, 100, gpus=2, limit=100),
        job(3, 0, 10, gpus=2, limit=60),
        job(4, 0, 100, gpus=2, limit=100),
        job(5, 1, 50, gpus=2, limit=60),
        job(6, 1, 20, gpus=1, limit=60),
    ]
    passes = tuple(2.0 + 10 * k for k in range(30))
    _, r = run(spec, jobs, release_s=5.0, completing_blocks_node=True, bf_passes_s=passes, bf_resolution_s=1)
    assert r[6].start_s == 12.0
    assert r[5].start_s == 15.0
