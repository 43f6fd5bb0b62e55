"""The queue's order under ``priority/multifactor`` as the sandbox configures it (pure).

The sandbox's slurm.conf (``templates/sandbox/slurm.conf.j2``) sets
``PriorityType=priority/multifactor`` with ``PriorityWeightQOS=10000`` and no other weight
(Slurm's defaults are 0: no age, fair-share, size or partition factor), and the tiers'
QOS carry their ``Priority`` (``gpupool qos apply``).  A job's priority is then the QOS
weight times its QOS's priority over the highest QOS priority, at least 1
(``priority_multifactor.c``: ``_get_priority_internal``; the QOS factor is
``norm_priority``).  Jobs are ordered by priority, then submission, then job id
(``job_scheduler.c``: ``sort_job_queue2``), by the main scheduler and backfill alike.
Without QOS priorities every job has priority 1: submission order (``priority/basic``).
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_gpupool.simulate.jobs import SimJob


def job_priority(qos: str, table: dict[str, int], weight: int) -> int:
    """A job's multifactor priority from its QOS alone (``_get_priority_internal``)."""
    top = max(table.values(), default=0)
    if top <= 0:
        return 1
    return max(1, int(weight * max(0, table.get(qos, 0)) / top))


def priorities(jobs: Sequence[SimJob], table: dict[str, int], weight: int) -> list[int]:
    """Each job's priority (``job_priority``; memoised per QOS)."""
    of = {q: job_priority(q, table, weight) for q in {j.qos for j in jobs}}
    return [of[j.qos] for j in jobs]


def queue_ranks(jobs: Sequence[SimJob], table: dict[str, int], weight: int) -> list[int]:
    """Each job's place in Slurm's queue order (``sort_job_queue2``): priority descending,
    then submission, then job id; the replay keys its queue by it."""
    prio = priorities(jobs, table, weight)
    order = sorted(range(len(jobs)), key=lambda i: (-prio[i], jobs[i].submit_s, jobs[i].job_id, i))
    rank = [0] * len(jobs)
    for r, i in enumerate(order):
        rank[i] = r
    return rank
