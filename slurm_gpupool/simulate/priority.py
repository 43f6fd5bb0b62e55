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

With a partition weight (``PriorityWeightPartition``) a job's partition adds the weight times
its ``PriorityJobFactor`` over the highest of any partition (``norm_priority``,
``partition_mgr.c``); and a partition's ``PriorityTier`` orders the queue before any priority:
``sort_job_queue2`` compares the tiers first, whatever ``PriorityType``.  Both are static
while the job waits, summed as doubles with the QOS part (``static_parts``).
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.state import Params

# a partition's settings as the replay takes them: (name, PriorityJobFactor, PriorityTier)
PartitionPriority = tuple[str, int, int]


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


def partition_part(name: str, table: Sequence[PartitionPriority], weight: int) -> float:
    """The partition factor times its weight: the partition's ``PriorityJobFactor`` over the
    highest of any partition's (at least 1, ``DEF_PART_MAX_PRIORITY``); 0 for a partition the
    table does not name (a trace that records none)."""
    factors = {n: f for n, f, _ in table}
    if name not in factors:
        return 0.0
    return weight * factors[name] / max(1, *factors.values())


def static_parts(jobs: Sequence[SimJob], p: Params) -> list[float]:
    """Each job's weighted factors that do not move while it waits, before the sum is
    truncated: its QOS's (``qos_part``) and its partition's (``partition_part``)."""
    table = dict(p.qos_priority)
    qos = {q: qos_part(q, table, p.priority_weight_qos) for q in {j.qos for j in jobs}}
    part = {
        n: partition_part(n, p.partition_priority, p.priority_weight_partition) for n in {j.partition for j in jobs}
    }
    return [qos[j.qos] + part[j.partition] for j in jobs]


def tiers(jobs: Sequence[SimJob], p: Params) -> list[int]:
    """Each job's partition's ``PriorityTier`` (1, Slurm's default, where not named)."""
    table = {n: t for n, _, t in p.partition_priority}
    return [table.get(j.partition, 1) for j in jobs]


def job_priority(qos: str, table: dict[str, int], weight: int) -> int:
    """A job's multifactor priority from its QOS alone (``_get_priority_internal``)."""
    return max(1, int(qos_part(qos, table, weight)))


def priorities(parts: Sequence[float]) -> list[int]:
    """Each job's priority from its static parts (``static_parts``), truncated, at least 1."""
    return [max(1, int(x)) for x in parts]


def queue_ranks(jobs: Sequence[SimJob], p: Params) -> list[int]:
    """Each job's place in Slurm's queue order (``sort_job_queue2``): partition tier
    descending, then priority descending, then submission, then job id; the replay keys its
    queue by it."""
    prio, tier = priorities(static_parts(jobs, p)), tiers(jobs, p)
    order = sorted(range(len(jobs)), key=lambda i: (-tier[i], -prio[i], jobs[i].submit_s, jobs[i].job_id, i))
    rank = [0] * len(jobs)
    for r, i in enumerate(order):
        rank[i] = r
    return rank
