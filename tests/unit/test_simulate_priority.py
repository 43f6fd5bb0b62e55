"""#27: the queue is ordered as the sandbox's Slurm orders it: priority/multifactor with only
PriorityWeightQOS, so a job's QOS priority first, then submission, then job id
(``priority_multifactor.c``: ``_get_priority_internal``; ``job_scheduler.c``:
``sort_job_queue2``)."""

from __future__ import annotations

from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest
from slurm_gpupool.simulate.priority import job_priority, queue_ranks
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
    ranks = queue_ranks(jobs, dict(TIERS), 10000)
    by_rank = [jobs[i].job_id for i in sorted(range(len(jobs)), key=ranks.__getitem__)]
    assert by_rank == [3, 7, 6, 5, 8]
    # without QOS priorities: submission order, ties by job id
    ranks = queue_ranks(jobs, {}, 10000)
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
