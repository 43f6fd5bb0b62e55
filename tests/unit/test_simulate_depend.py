"""#27's dependency family: a job submitted with ``--dependency=afterok:J`` or ``afterany:J``
queues only once J has ended (Slurm's ``test_job_dependency``), and with ``afterok`` never
runs if J did not complete (DependencyNeverSatisfied).  Every expected time is worked out by
hand beside it, on the engine tests' pool: two nodes of four whole A30s."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_gpupool.simulate.jobs import CIRCULAR, SimJob, circular, dependencies
from slurm_gpupool.simulate.metrics import summarise
from tests.unit.test_simulate_engine import job, run, spec  # noqa: F401  (spec: the pool fixture)


def after(j: SimJob, *on: int, any_end: bool = False) -> SimJob:
    return replace(j, after=on, after_any=any_end)


def test_the_graph_names_each_job_s_dependencies_by_index_and_ignores_jobs_not_replayed():
    jobs = [job(10, 0, 5), after(job(11, 1, 5), 10, 99), after(job(12, 2, 5), 10, 11, 12), job(13, 3, 5)]
    waits_on, dependents = dependencies(jobs)
    # 99 is not in the replay (ended long ago), 12 on itself is no dependency
    assert waits_on == {1: {0}, 2: {0, 1}}
    assert dependents == {0: [1, 2], 1: [2]}


def test_a_dependent_job_starts_when_its_dependency_ends_not_when_submitted(spec):  # noqa: F811
    """Job 2 (afterok:1) is submitted at 5 with GPUs free: it waits for job 1's end at 100
    and starts then, on another GPU, without waiting for job 1's records (release_s 0.5)."""
    jobs = [job(1, 0, 100, limit=200), after(job(2, 5, 10, limit=60), 1)]
    _, r = run(spec, jobs, release_s=0.5)
    assert r[2].start_s == 100 and r[2].wait_s == 95
    _, free = run(spec, [jobs[0], job(2, 5, 10, limit=60)], release_s=0.5)
    assert free[2].start_s == 5  # without the dependency: at once


def test_a_dependent_job_that_needs_its_dependency_s_gpus_waits_for_its_records(spec):  # noqa: F811
    """Both nodes are full until 100 (jobs 1 and 3); job 2 (afterok:1) needs 4 GPUs: it may
    queue at 100, and starts at 100.5 once job 1's records are free, as after any end."""
    jobs = [job(1, 0, 100, gpus=4, limit=200), job(3, 0, 300, gpus=4, limit=300), after(job(2, 1, 10, gpus=4), 1)]
    _, r = run(spec, jobs, release_s=0.5)
    assert r[2].start_s == 100.5


def test_where_epilogs_are_dated_a_dependent_queues_once_its_dependency_s_epilog_ended(spec):  # noqa: F811
    """Slurm clears a dependency once the job is finished and no longer COMPLETING
    (``IS_JOB_COMPLETED``), in the main scheduler's run its last Epilog's end makes.  Job 1
    fills a node until 10, its Epilog ends at 10.7; job 3 ends at 10.2 on the other node, its
    Epilog at 10.3, and that run of the main scheduler finds job 1 still completing: job 2
    (afterok:1, one GPU, free on the second node from 10.3) starts at 10.7.  Where the
    Epilogs are not dated (``completing_blocks_node`` off), at job 1's end, 10."""
    jobs = [
        replace(job(1, 0, 10, gpus=4, limit=60), release_s=0.7),
        job(9, 0, 1000, gpus=2, limit=1000),
        replace(job(3, 0, 10.2, limit=60), release_s=0.1),
        after(job(2, 1, 10, limit=60), 1),
    ]
    _, r = run(spec, jobs, completing_blocks_node=True)
    assert r[3].end_s == 10.2 and r[2].start_s == pytest.approx(10.7)
    _, r = run(spec, jobs)
    assert r[2].start_s == 10


def test_a_dependent_whose_dependency_s_epilog_ends_later_loses_the_gpus_to_a_job_behind_it(spec):  # noqa: F811
    """A CI run on 24.11, in small: jobs 1 and 3 run on the first node beside a long job;
    job 2 (afterok:1) and job 4 (afterok:3) each want three GPUs, which only the idle second
    node has, and job 2 is first in the queue.  Job 1 ends at 10 and its Epilog takes 0.7 s
    on a loaded machine; job 3 ends at 10.3, its Epilog at 10.4.  Slurm gives the second
    node to job 4 at 10.4, job 1 still completing then, and job 2 waits for job 4's end; a
    replay that queued job 2 at job 1's end gave the node to job 2.  Had job 1's Epilog
    ended at 10.1, job 2 would have had it, and job 4 waited.  (The long job is first in
    the queue: it takes the first node's first socket, and jobs 1 and 3 the other socket
    beside it, cons_tres's best fit; queued after them, it would go to the second node,
    where its two GPUs share a socket.)"""

    def jobs(release1: float) -> list[SimJob]:
        return [
            job(0, 0, 1000, gpus=2, limit=1000),
            replace(job(1, 0, 10, limit=60), release_s=release1),
            replace(job(3, 0, 10.3, limit=60), release_s=0.1),
            after(job(2, 1, 10, gpus=3, limit=60), 1),
            after(job(4, 2, 10, gpus=3, limit=60), 3),
        ]

    _, r = run(spec, jobs(0.7), completing_blocks_node=True)
    assert r[4].start_s == pytest.approx(10.4)
    assert r[2].start_s >= r[4].end_s  # it waited for the node job 4 took
    _, r = run(spec, jobs(0.1), completing_blocks_node=True)
    assert r[2].start_s == pytest.approx(10.1)
    assert r[4].start_s >= r[2].end_s


def test_afterok_on_a_job_that_timed_out_never_runs_and_afterany_runs_at_its_end(spec):  # noqa: F811
    """Job 1 runs into its 60 s limit (TIMEOUT at 60): job 2 (afterok) never runs, the
    replay says why; job 3 (afterany) starts at 60.  Job 2 stays pending for good in Slurm
    (DependencyNeverSatisfied), so job 4 (afterany on job 2, submitted before job 1 ended)
    and job 5 (afterok on it, submitted after) never run either."""
    jobs = [
        job(1, 0, 100, limit=60),
        after(job(2, 1, 10, limit=60), 1),
        after(job(3, 2, 10, limit=60), 1, any_end=True),
        after(job(4, 3, 10, limit=60), 2, any_end=True),
        after(job(5, 80, 10, limit=60), 2),
    ]
    res, r = run(spec, jobs)
    assert r[1].timeout and r[1].end_s == 60
    assert r[2].start_s == -1 and r[2].rejected == "its afterok dependency did not complete"
    assert r[4].start_s == r[5].start_s == -1
    assert r[4].rejected == r[5].rejected == "it depends on a job that never runs"
    assert r[3].start_s == 60
    summary = summarise(res)
    assert summary["rejected"] == 3 and summary["never_started"] == 0
    assert summary["rejected_why"] == {
        "its afterok dependency did not complete": 1,
        "it depends on a job that never runs": 2,
    }


def test_a_dependency_cancelled_while_pending_ends_afterok_jobs_and_frees_afterany_ones(spec):  # noqa: F811
    """Job 1 (8 GPUs: both nodes, behind job 0 until 100) is cancelled at 30 while pending:
    job 2 (afterok) never runs; job 3 (afterany) queues at 30 and starts then (the GPUs job 0
    leaves free)."""
    jobs = [
        job(0, 0, 100, gpus=2, limit=100),
        replace(job(1, 1, 10, gpus=8, limit=60), cancel_s=30.0),
        after(job(2, 2, 10, limit=60), 1),
        after(job(3, 3, 10, limit=60), 1, any_end=True),
    ]
    _, r = run(spec, jobs)
    assert r[1].withdrawn
    assert r[2].start_s == -1 and "afterok" in r[2].rejected
    assert r[3].start_s == 30


def test_a_job_cancelled_while_running_breaks_afterok(spec):  # noqa: F811
    """``scancel`` of running job 1 at 40: it did not complete, so job 2 (afterok) never
    runs, and job 3 (afterany) starts at 40."""
    jobs = [
        replace(job(1, 0, 100, limit=100), cancel_s=40.0),
        after(job(2, 1, 10, limit=60), 1),
        after(job(3, 1, 10, limit=60), 1, any_end=True),
    ]
    _, r = run(spec, jobs)
    assert r[1].end_s == 40
    assert r[2].start_s == -1 and r[3].start_s == 40


def test_a_waiting_dependent_holds_no_place_in_the_queue(spec):  # noqa: F811
    """Job 2 (8 GPUs, afterok:1) is first in the queue but waits for job 1 (ends at 100): it
    reserves nothing meanwhile, so job 3 (4 GPUs, 300 s) starts at once at 3; job 2 then
    waits for job 3 (to 303).  Without the dependency job 2 would head the queue from 2, and
    job 3 could not backfill in front of it."""
    jobs = [job(1, 0, 100, gpus=1, limit=100), after(job(2, 2, 10, gpus=8, limit=60), 1), job(3, 3, 300, gpus=4)]
    _, r = run(spec, jobs)
    assert r[3].start_s == 3 and r[2].start_s == 303
    _, plain = run(spec, [jobs[0], job(2, 2, 10, gpus=8, limit=60), jobs[2]])
    assert plain[2].start_s == 100 and plain[3].start_s == 110


def test_a_job_depending_on_one_no_layout_holds_never_runs(spec):  # noqa: F811
    """Job 1 asks for 16 whole GPUs, more than the pool has: refused (``gpupool-sbatch``
    would not submit it, so sbatch would refuse a dependency on it): job 2 never runs,
    whatever the dependency's kind."""
    jobs = [job(1, 0, 10, gpus=16, limit=60), after(job(2, 1, 10, limit=60), 1, any_end=True)]
    _, r = run(spec, jobs)
    assert r[1].rejected.startswith("no layout holds")
    assert r[2].start_s == -1 and r[2].rejected == "it depends on a job that never runs"


def test_jobs_on_a_circular_dependency_never_run_and_say_why(spec):  # noqa: F811
    """1 -> 2 -> 3 -> 2 (afterok): 2 and 3 wait on each other, which sbatch refuses; before,
    they stayed pending with no reason.  4 waits on 3 (never runs), 1 runs as any job."""
    jobs = [job(1, 0, 10), after(job(2, 1, 10), 1, 3), after(job(3, 2, 10), 2), after(job(4, 3, 10), 3)]
    waits_on, _ = dependencies(jobs)
    assert circular(waits_on) == {1, 2}  # by index: jobs 2 and 3
    res, r = run(spec, jobs)
    assert r[1].start_s == 0
    assert r[2].rejected == r[3].rejected == CIRCULAR and r[2].start_s == r[3].start_s == -1
    assert r[4].rejected and r[4].rejected != CIRCULAR and r[4].start_s == -1
    assert summarise(res)["rejected"] == 3


def test_a_chain_is_not_circular_however_it_is_ordered():
    assert circular({0: {1}, 1: {2}, 3: {0, 1, 2}}) == set()
    assert circular({0: {1}, 1: {0}, 2: {2}}) == {0, 1, 2}  # (a job on itself: dependencies() drops it)
    # a cycle with tails in and out: only its members; linear, not quadratic, in the chain
    tail = {i: {i - 1} for i in range(1, 20000)} | {0: {3}, 20000: {19999}}
    assert circular(tail) == {0, 1, 2, 3}
