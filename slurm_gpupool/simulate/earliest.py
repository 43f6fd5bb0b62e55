"""The earliest start of a job on one node, as ``sched/backfill`` plans it (pure).

Backfill (``backfill.c``: ``_attempt_backfill``) plans with time limits, not run times: a
running job's records come free when it reaches its limit.  Each job it tests and cannot start
now gets a reservation of its **whole nodes** for its planned window (``_add_reservation``
into ``node_space``), with both ends of the window rounded down to ``bf_resolution``; a lower
job may use such a node only in a window that overlaps none of them.  The functions here find
that start on one node: ``lower_bound`` when enough records are idle at all (the index the
backfill pass sorts nodes by), ``first_clear`` the short search for plain records, and
``earliest`` the walk along the node's timeline that also handles time-sliced GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurm_gpupool.simulate.records import Part, SimNode, apply, take
from slurm_gpupool.simulate.state import GPU, INF, Need

NOW = -math.inf  # a lower bound that is the present, whenever that is (kept across passes)


def rounded(
    start: float, end: float, resolution: float, origin_s: float = 0.0, end_up: bool = False
) -> tuple[float, float]:
    """A backfill window as Slurm keeps it, on ``bf_resolution``'s grid of the clock
    (``backfill.c`` rounds epoch seconds: ``origin_s`` is the clock's at time 0): the start
    rounded down; the end down too up to 24.05, up from 24.11.0 (``end_up``: ``_set_slot_time``
    adds ``bf_resolution - 1`` first, so a planned job holds its nodes to the end of its last slot)."""
    if resolution <= 0:
        return start, end
    o = origin_s % resolution
    if end_up:
        end += resolution - 1
    return ((start + o) // resolution) * resolution - o, ((end + o) // resolution) * resolution - o


def lower_bound(n: SimNode, typ: str, count: int, line: Sequence[tuple[float, list[Part]]]) -> float:
    """When ``count`` records of plain ``typ`` are first idle on ``n`` as its jobs end (NOW:
    already; also for time-sliced GPUs, whose state is per GPU: no pruning there); INF if never."""
    if typ not in n.free:
        return NOW
    free = n.free[typ]
    if free >= count:
        return NOW
    for end, parts in line:
        free += sum(c for _, _, c, _ in parts)
        if free >= count:
            return end
    return INF


def first_clear(
    lb: float,
    limit: float,
    now: float,
    horizon: float,
    ahead_at: float,
    windows: Sequence[tuple[float, float]],
    resolution: float,
    next_end: float = INF,
    origin_s: float = 0.0,
    end_up: bool = False,
) -> float:
    """The earliest start from ``lb`` on (when the records are idle, and stay so) whose
    window overlaps none of ``windows`` (sorted, on the bf_resolution grid), before
    ``horizon`` and the node's reservation ahead; INF if none.  What ``earliest`` finds for
    plain records, without walking the node's timeline: a start later than now is checked
    with its window rounded down, and from there one that overlaps a window keeps
    overlapping it until that window ends, so only window ends can follow; but a start now
    is checked exactly, and the first later time (``next_end``, the node's next job end,
    or a window end) may clear what now did not, its rounded window ending sooner."""
    later = {b for _, b in windows if b > lb}
    if lb <= now and next_end < INF:
        later.add(next_end)
    for t in (lb, *sorted(later)):
        if t > horizon or t + limit > ahead_at:
            return INF
        lo, hi = (t, t + limit) if t <= now else rounded(t, t + limit, resolution, origin_s, end_up)
        if not overlaps(windows, lo, hi):
            return t
    return INF


def overlaps(windows: Sequence[tuple[float, float]], lo: float, hi: float) -> bool:
    """Whether ``[lo, hi)`` meets one of ``windows`` (sorted by start: those starting at or
    after ``hi`` end the search)."""
    for a, b in windows:
        if a >= hi:
            return False
        if b > lo:
            return True
    return False


def earliest(
    n: SimNode,
    need: Need,
    typ: str,
    limit: float,
    now: float,
    horizon: float,
    windows: Sequence[tuple[float, float]],
    line: Sequence[tuple[float, list[Part]]],
    resolution: float = 0.0,
    origin_s: float = 0.0,
    end_up: bool = False,
) -> tuple[float, list[Part]]:
    """The earliest time ``need`` fits on ``n`` as ``typ`` for ``limit`` seconds: its records
    are free by then as running jobs reach their limits (``line``: the scheduler does not know
    run times; records only come free, so free at the start is free throughout), and the
    window overlaps no whole-node reservation of a higher job (``windows``, sorted); with the
    records it would take.  (INF, []) if not before ``horizon`` or the node's reservation ahead."""
    free = n.free.get(typ, 0)
    shared = {typ: list(n.shared[typ])} if typ in n.shared else {}
    times = sorted({now, *(e for e, _ in line if e > now), *(b for _, b in windows if b > now)})
    k = 0
    for t in times:
        if t > horizon or t + limit > n.ahead_at:
            break
        while k < len(line) and line[k][0] <= t:
            if shared:
                apply(n.free, shared, line[k][1], -1)
            else:
                free += sum(c for _, _, c, _ in line[k][1])
            k += 1
        if windows:
            # reservations are kept on bf_resolution's grid (``rounded``); a job tested to start
            # now is checked with its exact window, one planned later with its rounded one (backfill.c)
            lo, hi = (t, t + limit) if t <= now else rounded(t, t + limit, resolution, origin_s, end_up)
            if overlaps(windows, lo, hi):
                continue
        if shared:
            parts = take(n.free, shared, n.shares, need, typ)
            if parts is not None:
                return t, parts
        elif free >= need.count and need.kind == GPU:
            return t, [(GPU, typ, need.count, -1)]
    return INF, []
