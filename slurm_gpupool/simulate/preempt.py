"""Which running jobs a waiting job preempts, as ``preempt/qos`` and ``select/cons_tres`` choose
them (pure; Slurm 22.05's source, ``slurm-22-05-8-1``).

* **Who may preempt whom** (``preempt_qos.c``: ``preempt_p_preemptable``): a job preempts a
  running job when the other's QOS is in its QOS's ``Preempt=`` list.  (``PreemptMode=WITHIN``,
  preemption inside one QOS by priority, is not modelled.)
* **How** (``_job_preempt_mode``): the preemptee's QOS's ``PreemptMode``, else the cluster's
  (``PreemptMode=REQUEUE`` in the sandbox).  Only ``requeue`` and ``cancel`` free resources
  (``_run_now`` skips the others); ``suspend``/gang is not modelled.
* **The candidates** (``preempt.c``: ``slurm_find_preemptable_jobs``): every running job the
  waiting one may preempt, in ``job_list`` order (submission), sorted by ``_gen_job_prio``
  (the QOS's ``Priority`` (at most 0xffff) << 16, plus the job's node count), lowest first;
  the sort is stable on Debian's glibc, whose ``qsort`` is a merge sort.
  ``SchedulerParameters=preempt_youngest_first`` (sort by start, youngest first) is not
  modelled.
* **The preemptees** (``cons_common/job_test.c``: ``_run_now``): the candidates are removed
  one at a time, in that order, and the job tested after each removal (first fit, as the
  simulator places jobs).  When it fits, the candidates are reordered to preempt fewer jobs
  (``preempt_reorder_count``, default 1, without ``preempt_strict_order``): the one whose
  removal made it fit first, then those on the nodes chosen, then the rest, and the test is
  run again, at most ``1 + reorder`` times.  The preemptees are the candidates removed in
  the last test that are on the nodes it chose (:func:`run_now`).
* **Then** (``node_scheduler.c``: ``select_nodes``, ``_preempt_jobs``): the preemptees are
  requeued or cancelled at once, or after their QOS's ``GraceTime`` (the job's end becomes
  ``min(end, now + GraceTime)``, ``preempt.c``: ``_job_check_grace_internal``); the waiting
  job does not start now (``ESLURM_NODES_BUSY``, which blocks the jobs after it in the main
  scheduler) and starts once their records are free.  For ``KillWait + MessageTimeout``
  after it preempted (``preempt_start_time``) it preempts nothing more.
* **A requeued job** (``job_mgr.c``: ``batch_requeue_fini``, when its run has completed) is
  pending again with a **new submit time** (now) and is eligible only after the credential's
  lifetime (``begin_time = now + 120 + 1``); its priority is unchanged (with only the QOS
  weight, it is its QOS's).  So it queues behind the jobs of its priority submitted before
  its requeue, not in its first place.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

OFF, REQUEUE, CANCEL = "off", "requeue", "cancel"
MODES = (OFF, REQUEUE, CANCEL)
REORDER = 1  # SchedulerParameters preempt_reorder_count (its default)


@dataclass(frozen=True)
class PreemptRules:
    """The QOS table ``preempt/qos`` reads: who preempts whom, how, after what grace."""

    preempts: dict[str, frozenset[str]]  # QOS -> the QOS its jobs preempt (Preempt=)
    modes: dict[str, str]  # QOS -> requeue | cancel | off (PreemptMode; a QOS not listed: cluster)
    grace_s: dict[str, float]  # QOS -> GraceTime
    priority: dict[str, int]  # QOS -> Priority
    cluster_mode: str = REQUEUE  # slurm.conf PreemptMode

    @property
    def enabled(self) -> bool:
        """``slurm_preemption_enabled``: PreemptMode is not OFF, and some QOS preempts."""
        return self.cluster_mode != OFF and any(self.preempts.values())

    def may_preempt(self, preemptor: str, preemptee: str) -> bool:
        """``preempt_p_preemptable``: the preemptee's QOS is in the preemptor's Preempt list."""
        return preemptor != preemptee and preemptee in self.preempts.get(preemptor, ())

    def mode(self, qos: str) -> str:
        """``_job_preempt_mode``: the QOS's PreemptMode, else the cluster's."""
        return self.modes.get(qos, self.cluster_mode)

    def removable(self, preemptor: str, preemptee: str) -> bool:
        """A candidate ``_run_now`` may remove: preemptable, in requeue or cancel mode."""
        return self.may_preempt(preemptor, preemptee) and self.mode(preemptee) in (REQUEUE, CANCEL)

    def order_key(self, qos: str, nodes: int) -> int:
        """``_gen_job_prio``: candidates of a lower-priority QOS, then with fewer nodes, first."""
        return (min(max(self.priority.get(qos, 0), 0), 0xFFFF) << 16) + min(nodes, 0xFFFF)


def rules_of(
    preempts: Sequence[tuple[str, Sequence[str]]],
    modes: Sequence[tuple[str, str]],
    grace_s: Sequence[tuple[str, float]],
    priority: Sequence[tuple[str, int]],
    cluster_mode: str = REQUEUE,
) -> PreemptRules:
    """The rules from ``Params``' tuples (QOS names as sacctmgr shows them)."""
    for _, m in (*modes, ("", cluster_mode)):
        if m not in MODES:
            raise ValueError(f"preempt mode {m!r}: not one of {', '.join(MODES)}")
    return PreemptRules(
        {q: frozenset(p) for q, p in preempts},
        dict(modes),
        {q: float(g) for q, g in grace_s},
        dict(priority),
        cluster_mode,
    )


def run_now(
    candidates: Sequence[int],
    fits: Callable[[Collection[int]], Collection[int] | None],
    nodes_of: Callable[[int], Collection[int]],
    reorder: int = REORDER,
) -> tuple[Collection[int], list[int]] | None:
    """``_run_now``'s search, once the job does not fit as things are: (the nodes chosen, the
    jobs to preempt), or None if it does not fit even with every candidate gone.

    ``candidates`` are the removable jobs in ``slurm_find_preemptable_jobs`` order; ``fits``
    places the job with the given jobs removed (the nodes it takes, or None); ``nodes_of``
    a candidate's nodes.  After a fit, the candidates are re-sorted by how many of their
    nodes the job took (``usable_nodes``; the one that made it fit first, the rest after, a
    stable sort) and searched again, up to ``1 + reorder`` times in all."""
    cands = list(candidates)
    passes = 0
    while True:
        removed: list[int] = []
        for k, job in enumerate(cands):
            removed.append(job)
            chosen = fits(removed)
            if chosen is None:
                continue
            before, passes = passes, passes + 1
            if before > reorder or len(cands) <= passes:
                picked = set(chosen)
                return chosen, [j for j in removed if not picked.isdisjoint(nodes_of(j))]
            picked = set(chosen)
            usable = {j: len(picked.intersection(nodes_of(j))) for j in cands[:k]}
            usable[job] = 99999
            cands.sort(key=lambda j: -usable.get(j, 0))  # stable: the rest keep their order
            break
        else:
            return None
