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
from typing import TypedDict

EXACT = "exact"  # the exact earliest start (no batching; what the simulator did before)
BATCH = "batch"  # the end of the last job removed: Slurm 22.05 to 25.05.0
BATCH_NODES = "batch-nodes"  # the end of the last removed job on the chosen nodes: 25.05.1 on
RULES = (EXACT, BATCH, BATCH_NODES)
TIME_WINDOW_S = 30  # the first batch's reach (``time_window`` in _will_run_test)


def batch(
    exact_s: float,
    running: Sequence[tuple[float, int, Collection[int]]],
    blocked: Container[int],
    origin_s: float = 0.0,
    linear_s: float = 0.0,
) -> tuple[float, list[tuple[float, int, Collection[int]]]]:
    """The batch after which a job whose exact earliest start is ``exact_s`` first fits in
    ``_will_run_test``: (end of the last job removed, the jobs removed by then).

    ``running`` is (end, job, nodes) of every running job sorted by end (the time limits
    backfill plans with), ``blocked`` the nodes the job may not use in this test.  A job on
    no other node is skipped; otherwise a batch ends when the job after the one just removed,
    skipped or not, ends beyond its reach (so a skipped job within reach lets the next one in
    whatever its end).  Times are replay seconds; ``origin_s`` is the clock's epoch seconds
    at 0 (batches align to the clock's 30 s).  The job fits at the first test with no usable
    job ending by ``exact_s`` left.  (``exact_s``, []) when no running job is on a usable node."""
    removed: list[tuple[float, int, Collection[int]]] = []
    window = float(TIME_WINDOW_S)
    base = reach = 0.0
    n, i = len(running), 0

    def on_usable(entry: tuple[float, int, Collection[int]]) -> bool:
        nodes = entry[2]
        return any(x not in blocked for x in nodes) if len(nodes) > 1 else next(iter(nodes)) not in blocked

    while i < n:
        last = None
        while i < n:  # one batch
            entry = running[i]
            i += 1
            if not on_usable(entry):
                continue
            if not removed:  # the first job evaluated sets the barrier the windows count from
                base = entry[0] + window - ((entry[0] + origin_s) % window)
                reach = base + window
            removed.append(entry)
            last = entry
            if i >= n or running[i][0] > reach:
                break
        if last is None:
            break  # only skipped jobs were left
        j = i
        while j < n and not on_usable(running[j]):
            j += 1
        if j == n or running[j][0] > exact_s:
            return last[0], removed  # the job fits: planned at the last removed job's end
        while running[i][0] > reach:  # the window grows until it reaches the next job
            window = window + linear_s if linear_s > 0 else window * 2
            reach = base + window
    return exact_s, removed


def planned_start(
    exact_s: float,
    last_s: float,
    removed: Sequence[tuple[float, int, Collection[int]]],
    chosen: Collection[int],
    rule: str = BATCH,
) -> float:
    """The start Slurm plans, never before ``exact_s``: the end of the last job removed
    (``last_s``, ``BATCH``), or of the last removed job on the ``chosen`` nodes
    (``BATCH_NODES``: ``_get_last_relevant_job``); ``exact_s`` with ``EXACT``."""
    if rule == EXACT:
        return exact_s
    if rule == BATCH_NODES:
        last_s = max((e for e, _, nodes in removed if any(x in chosen for x in nodes)), default=exact_s)
    return max(exact_s, last_s)


def _version(release: str) -> tuple[int, int, int]:
    """ "24.11.7" -> (24, 11, 7); a missing part is 0."""
    parts = [int(x) for x in release.split(".")[:3] if x.isdigit()]
    major, minor, patch = [*parts, 0, 0, 0][:3]
    return major, minor, patch


def rule_for(release: str) -> str:
    """The will-run rule of a Slurm release ("22.05", "24.11.7", "26.05"): ``BATCH_NODES`` from
    25.05.1 (``_get_last_relevant_job``), ``BATCH`` before (22.05 has the same batches)."""
    return BATCH_NODES if _version(release) >= (25, 5, 1) else BATCH


class ReleaseRules(TypedDict):
    """The ``Params`` fields that follow a Slurm release (``release_params``)."""

    will_run: str
    bf_end_up: bool
    bf_overdue_now: bool


def release_params(release: str) -> ReleaseRules:
    """The ``Params`` fields that follow a Slurm release ("22.05", "24.11.7", "26.05"): its
    will-run rule (``rule_for``); from 24.11.0, a planned job's window end rounded up to
    ``bf_resolution`` (``backfill.c`` ``_set_slot_time``: ``bf_end_up``; 22.05 to 24.05
    round it down) and a running job past its limit planned to end now (the will-run test's
    start, ``will_run_data.start``: ``bf_overdue_now``)."""
    since_24_11 = _version(release) >= (24, 11, 0)
    return ReleaseRules(will_run=rule_for(release), bf_end_up=since_24_11, bf_overdue_now=since_24_11)
