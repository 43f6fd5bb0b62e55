"""When Slurm's select plugin plans a waiting job's start: its will-run test (pure).

Backfill asks ``select/cons_tres`` when a job that cannot start now could start
(``job_test.c``: ``_will_run_test``, from 24.11 its ``_future_run_test``).  The plugin does
not find the exact earliest start.  It sorts the running jobs by end time
(``_cr_job_list_sort``), skips those on none of the nodes the job may use, and removes the
others in **batches**: the first batch ends at the first job's end rounded up to the next
30 s of the clock (a whole multiple goes a full 30 s on), later batches reach further as the
window doubles (``bf_window_linear``: grows by that many seconds instead).  After each batch
it tests the job against what is left, and when it fits, plans its start at the end of the
**last job it removed** (22.05 to 25.05.0), or of the last removed job on the nodes it chose
(``_get_last_relevant_job``, from 25.05.1).  So the planned start is often later than the
exact earliest one, sometimes set by an unrelated job on another node, and smaller jobs
backfill in front of it.  ``docs/simulate.md`` has the rule and the releases.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Sequence

EXACT = "exact"  # the exact earliest start (no batching; what the simulator did before)
BATCH = "batch"  # the end of the last job removed: Slurm 22.05 to 25.05.0
BATCH_NODES = "batch-nodes"  # the end of the last removed job on the chosen nodes: 25.05.1 on
RULES = (EXACT, BATCH, BATCH_NODES)
TIME_WINDOW_S = 30  # the first batch's reach (``time_window`` in _will_run_test)


def batch(
    exact_s: float,
    running: Sequence[tuple[float, Collection[int]]],
    usable: Container[int],
    origin_s: float = 0.0,
    linear_s: float = 0.0,
) -> tuple[float, list[tuple[float, Collection[int]]]]:
    """The batch after which a job whose exact earliest start is ``exact_s`` first fits in
    ``_will_run_test``: (end of the last job removed, the jobs removed by then).  ``running``
    is (end, nodes) of every running job sorted by end (the time limits backfill plans with),
    ``usable`` the nodes the job may use in this test (jobs on none of them are skipped).
    Times are replay seconds; ``origin_s`` is the clock's epoch seconds at 0 (batches are
    aligned to the clock's 30 s).  The job fits once every job ending by ``exact_s`` is gone,
    and in no batch before.  (``exact_s``, []) when no running job is on a usable node."""
    ends = [(e, nodes) for e, nodes in running if any(x in usable for x in nodes)]
    if not ends:
        return exact_s, []
    window = float(TIME_WINDOW_S)
    first = ends[0][0]
    base = first + window - ((first + origin_s) % window)
    k = 0
    while k < len(ends):
        j = k + 1  # a batch: its first job, then every one ending within base + window
        while j < len(ends) and ends[j][0] <= base + window:
            j += 1
        if ends[j - 1][0] >= exact_s or j == len(ends) or ends[j][0] > exact_s:
            return ends[j - 1][0], ends[:j]
        while True:  # the window grows until it reaches the next job
            window = window + linear_s if linear_s > 0 else window * 2
            if ends[j][0] <= base + window:
                break
        k = j
    return exact_s, ends  # (not reached: the last batch ends the loop)


def planned_start(
    exact_s: float,
    last_s: float,
    removed: Sequence[tuple[float, Collection[int]]],
    chosen: Collection[int],
    rule: str = BATCH,
) -> float:
    """The start Slurm plans, never before ``exact_s``: the end of the last job removed
    (``last_s``, ``BATCH``), or of the last removed job on the ``chosen`` nodes
    (``BATCH_NODES``: ``_get_last_relevant_job``); ``exact_s`` with ``EXACT``."""
    if rule == EXACT:
        return exact_s
    if rule == BATCH_NODES:
        last_s = max((e for e, nodes in removed if any(x in chosen for x in nodes)), default=exact_s)
    return max(exact_s, last_s)


def rule_for(release: str) -> str:
    """The will-run rule of a Slurm release ("22.05", "24.11.7", "26.05"): ``BATCH_NODES`` from
    25.05.1 (``_get_last_relevant_job``), ``BATCH`` before (22.05 has the same batches)."""
    parts = [int(x) for x in release.split(".")[:3] if x.isdigit()]
    major, minor, patch = [*parts, 0, 0, 0][:3]
    return BATCH_NODES if (major, minor, patch) >= (25, 5, 1) else BATCH
