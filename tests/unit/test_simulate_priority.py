"""#27: the queue is ordered as the sandbox's Slurm orders it: priority/multifactor with only
PriorityWeightQOS, so a job's QOS priority first, then submission, then job id
(``priority_multifactor.c``: ``_get_priority_internal``; ``job_scheduler.c``:
``sort_job_queue2``)."""

from __future__ import annotations

from dataclasses import replace

from slurm_gpupool.simulate.engine import Params
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest
from slurm_gpupool.simulate.priority import (
    job_priority,
    multifactor,
    partition_part,
    priorities,
    qos_part,
    queue_ranks,
    static_parts,
    tiers,
)
from tests.unit.test_simulate_engine import run, spec  # noqa: F401 (spec: the fixture)

TIERS = (("high", 100), ("low", 10))


def _job(i: int, submit: float, duration: float, gpus: int, qos: str = "normal") -> SimJob:
    return SimJob(i, submit, duration, duration, TraceRequest(gpus, 1000), qos=qos)


def test_the_qos_factor_is_its_priority_over_the_highest_times_the_weight():
    table = dict(TIERS)
    assert job_priority("high", table, 10000) == 10000
    assert job_priority("low", table, 10000) == 1000
    # normal (no priority) and a QOS the table does not know: the floor of 1
    assert job_priority("normal", table, 10000) == job_priority("other", table, 10000) == 1
    assert job_priority("high", {}, 10000) == 1  # no QOS priorities: priority/basic's order


def test_the_queue_is_priority_then_submission_then_job_id():
    jobs = [
        _job(5, 0, 10, 1),
        _job(6, 1, 10, 1, "low"),
        _job(7, 2, 10, 1, "high"),
        _job(3, 2, 10, 1, "high"),
        _job(8, 3, 10, 1),
    ]
    ranks = queue_ranks(jobs, Params(qos_priority=TIERS))
    by_rank = [jobs[i].job_id for i in sorted(range(len(jobs)), key=ranks.__getitem__)]
    assert by_rank == [3, 7, 6, 5, 8]
    # without QOS priorities: submission order, ties by job id
    ranks = queue_ranks(jobs, Params())
    assert [jobs[i].job_id for i in sorted(range(len(jobs)), key=ranks.__getitem__)] == [5, 6, 3, 7, 8]


def test_a_high_priority_job_submitted_later_starts_first(spec):  # noqa: F811
    """n1 frees at 100, n2 at 300.  Jobs 3 (normal, at 1) and 4 (high, at 2) both want a whole
    node: by QOS, job 4 takes n1 at 100 and job 3 follows it there at 200; without QOS
    priorities submission order gives n1 to job 3 first."""
    jobs = [
        _job(1, 0, 100, 4),
        _job(2, 0, 300, 4),
        _job(3, 1, 100, 4),
        _job(4, 2, 100, 4, "high"),
    ]
    _, r = run(spec, jobs, qos_priority=TIERS)
    assert (r[4].start_s, r[3].start_s) == (100, 200)
    _, r = run(spec, jobs)
    assert (r[3].start_s, r[4].start_s) == (100, 200)


def test_the_age_factor_is_the_age_over_max_age_at_most_one_summed_with_qos_and_truncated():
    """``set_priority_factors`` and ``_get_priority_internal``: age / PriorityMaxAge (1.0 from
    it on) times PriorityWeightAge, plus the QOS part, truncated; at least 1."""
    low = qos_part("low", dict(TIERS), 10000)
    assert low == 1000.0 and qos_part("normal", dict(TIERS), 10000) == 0.0 and qos_part("high", {}, 10000) == 0.0
    assert multifactor(low, 0, 10000, 1200) == 1000
    assert multifactor(low, 1, 10000, 1200) == 1008  # 1000 + 8.33, truncated
    assert multifactor(low, 600, 10000, 1200) == 6000
    assert multifactor(low, 1200, 10000, 1200) == multifactor(low, 9999, 10000, 1200) == 11000
    assert multifactor(0.0, 0, 10000, 1200) == 1  # 0 is a held job's: the floor of 1
    assert multifactor(0.0, -5, 10000, 1200) == 1  # an accrue time after the round: no age
    # without an age weight it is the QOS priority alone
    assert all(
        multifactor(qos_part(q, dict(TIERS), 10000), 500, 0, 1200) == job_priority(q, dict(TIERS), 10000)
        for q in ("high", "low", "normal")
    )


AGED = {"priority_weight_age": 10000, "priority_max_age_s": 1200.0, "priority_calc_period_s": 300.0}


def _aging_jobs(normal_at: float, low_at: float, frees_at: float) -> list[SimJob]:
    """n1 busy until ``frees_at``, n2 far longer; then a normal and a low job that each want a
    whole node: whichever is first in the queue when n1 frees takes it, the other follows."""
    return [
        _job(1, 0, frees_at, 4),
        _job(2, 0, 5000, 4),
        _job(3, normal_at, 100, 4),
        _job(4, low_at, 100, 4, "low"),
    ]


def test_a_job_that_waited_long_enough_passes_a_higher_qos_once_the_decay_thread_recomputes(spec):  # noqa: F811
    """The normal job queued at 1 s, the low one at 200 s; n1 frees at 700 s.  The decay
    thread's round at 600 s gives the normal job 4991 (599 s of 1200 s of age) and the low
    one 4333 (1000 + 400 s of age): the normal job takes n1 first.  Without the age weight
    the low job's QOS puts it first; with a PriorityMaxAge both reach, both ages are 1 and the
    QOS decides again."""
    jobs = _aging_jobs(1, 200, 700)
    _, r = run(spec, jobs, qos_priority=TIERS, **AGED)
    assert (r[3].start_s, r[4].start_s) == (700, 800)
    _, r = run(spec, jobs, qos_priority=TIERS)
    assert (r[4].start_s, r[3].start_s) == (700, 800)
    _, r = run(spec, jobs, qos_priority=TIERS, **{**AGED, "priority_max_age_s": 300.0})
    assert (r[4].start_s, r[3].start_s) == (700, 800)


def test_between_rounds_the_queue_keeps_the_last_priorities(spec):  # noqa: F811
    """The normal job queued at 310 s, the low one at 550 s; n1 frees at 590 s, before the
    round at 600 s.  Computed then, the normal job's 280 s of age (2333) would put it before
    the low one (1000 + 333); but no round has run since either queued, so both have their
    submission's priority (1 and 1000) and the low job goes first.  With the rounds' phase
    moved so that one runs at 580 s, the normal job goes first."""
    jobs = _aging_jobs(310, 550, 590)
    _, r = run(spec, jobs, qos_priority=TIERS, **AGED)
    assert (r[4].start_s, r[3].start_s) == (590, 690)
    _, r = run(spec, jobs, qos_priority=TIERS, **{**AGED, "priority_calc_phase_s": 280.0})
    assert (r[3].start_s, r[4].start_s) == (590, 690)


PARTS = (("gpu", 1, 1), ("urgent", 4, 1), ("express", 1, 2))  # (name, PriorityJobFactor, PriorityTier)


def test_the_partition_factor_is_its_job_factor_over_the_highest_times_the_weight():
    """``norm_priority`` (``partition_mgr.c``): PriorityJobFactor over the highest of any
    partition, times PriorityWeightPartition, summed with the QOS part before truncation."""
    assert partition_part("urgent", PARTS, 10000) == 10000.0
    assert partition_part("gpu", PARTS, 10000) == partition_part("express", PARTS, 10000) == 2500.0
    assert partition_part("other", PARTS, 10000) == partition_part("gpu", (), 10000) == 0.0
    assert partition_part("gpu", (("gpu", 0, 1),), 10000) == 0.0  # the highest is at least 1
    jobs = [_job(1, 0, 10, 1, "low"), _job(2, 0, 10, 1, "high"), _job(3, 0, 10, 1)]
    jobs = [replace(j, partition=p) for j, p in zip(jobs, ("urgent", "gpu", "nowhere"), strict=True)]
    p = Params(qos_priority=TIERS, partition_priority=PARTS, priority_weight_partition=10000)
    assert static_parts(jobs, p) == [11000.0, 12500.0, 0.0]
    assert priorities(static_parts(jobs, p)) == [11000, 12500, 1]
    assert tiers(jobs, p) == [1, 1, 1]


def test_a_higher_partition_tier_goes_first_whatever_the_priority():
    """``sort_job_queue2`` compares the partitions' PriorityTier before the priorities: an
    ``express`` job of no QOS priority is ahead of a ``high`` one, with or without the
    partition weight."""
    jobs = [
        replace(_job(5, 0, 10, 1, "high"), partition="urgent"),
        replace(_job(6, 1, 10, 1, "low"), partition="express"),
        replace(_job(7, 2, 10, 1), partition="gpu"),
        replace(_job(8, 3, 10, 1), partition="express"),
    ]
    for weight in (10000, 0):
        p = Params(qos_priority=TIERS, partition_priority=PARTS, priority_weight_partition=weight)
        ranks = queue_ranks(jobs, p)
        assert [jobs[i].job_id for i in sorted(range(len(jobs)), key=ranks.__getitem__)] == [6, 8, 5, 7]


def test_a_job_of_a_weightier_partition_submitted_later_starts_first(spec):  # noqa: F811
    """As ``test_a_high_priority_job_submitted_later_starts_first``, by partition: job 4
    (``urgent``, 10000) passes job 3 (``gpu``, 2500) for n1 at 100; without the weight the
    submission order holds, and a higher tier passes it whatever the weight."""
    jobs = [_job(1, 0, 100, 4), _job(2, 0, 300, 4), _job(3, 1, 100, 4), _job(4, 2, 100, 4)]
    jobs = [replace(j, partition=p) for j, p in zip(jobs, ("gpu", "gpu", "gpu", "urgent"), strict=True)]
    _, r = run(spec, jobs, partition_priority=PARTS, priority_weight_partition=10000)
    assert (r[4].start_s, r[3].start_s) == (100, 200)
    _, r = run(spec, jobs, partition_priority=PARTS)
    assert (r[3].start_s, r[4].start_s) == (100, 200)
    tiered = (("gpu", 1, 1), ("urgent", 1, 3))
    for aged in ({}, AGED):  # the age factor's ranks keep the tier first too
        _, r = run(spec, jobs, partition_priority=tiered, qos_priority=TIERS, **aged)
        assert (r[4].start_s, r[3].start_s) == (100, 200)
