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

With an age weight (``PriorityWeightAge``, a site's or a validation family's) a queued job's
priority grows as it waits: ``multifactor`` adds the weight times its age over
``PriorityMaxAge`` (at most 1), summed as doubles with the QOS factor and truncated
(``set_priority_factors``; the decay thread recomputes it, ``aging``).
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_gpupool.simulate.jobs import SimJob


def qos_part(qos: str, table: dict[str, int], weight: int) -> float:
    """The QOS factor times its weight, before the sum is truncated: the QOS's priority over
    the highest QOS priority (``norm_priority``), 0 where no QOS has a priority."""
    top = max(table.values(), default=0)
    return weight * max(0, table.get(qos, 0)) / top if top > 0 else 0.0


def multifactor(qos: float, age_s: int, weight_age: int, max_age_s: float) -> int:
    """A pending job's priority from its QOS part (``qos_part``) and its age in whole seconds
    since its accrue time (``_get_priority_internal``: the age factor is ``age / max_age``,
    1.0 from ``PriorityMaxAge`` on; the weighted factors are summed as doubles and
    truncated; 0 is for held jobs, so at least 1)."""
    age = 1.0 if age_s >= max_age_s else max(0, age_s) / max_age_s
    return max(1, int(age * weight_age + qos))


def job_priority(qos: str, table: dict[str, int], weight: int) -> int:
    """A job's multifactor priority from its QOS alone (``_get_priority_internal``)."""
    return max(1, int(qos_part(qos, table, weight)))


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
