"""When the backfill passes fall (pure).

Slurm's backfill agent (``backfill.c``: ``backfill_agent``) sleeps ``bf_interval`` after a
pass *ends*, then runs the next one if anything changed since (``_more_work``), else looks
again every second.  On a busy queue the passes therefore come every ``bf_interval`` plus
the pass's own time and the agent's wake-up, a cadence that drifts (5.02-5.07 s measured for
``bf_interval=5`` on the sandbox, up to 5.5 s on a loaded controller), from a phase set by
the controller's history, not by the trace.  A replay that knows nothing of them puts its
passes on a grid of ``bf_interval`` from its time 0.  One that replays a recorded run is
given the instants at which Slurm's passes began (``DebugFlags=Backfill`` logs each,
``_attempt_backfill: beginning``; without it, the backfill starts, ``_start_job``, date the
passes that started something): a pass falls on each of them, and between and around them
on the grid anchored at the latest one, so that neither the phase nor the drift is guessed.
How much it matters: on the sandbox's 210-job validation run the replay's median wait moved
by 4 s (27.0-31.0 s) with the phase alone, and a CI run whose passes fell 3 s after the
grid missed Slurm's by 9 s.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

_EPS = 1e-9  # instants closer than this are one (float arithmetic on the grid)


def next_pass(now: float, last: float, step: float, known: Sequence[float] = (), origin: float = 0.0) -> float:
    """The first pass instant at or after ``now`` and later than ``last`` (the last pass).

    ``step``: ``bf_interval`` (0 or less: a pass at once).  ``known``: sorted instants at
    which passes are known to have begun; the grid runs ``step`` apart from the latest of
    them at or before the instant sought (before the first: back from the first; none:
    from ``origin``) and stops half a step short of the next, which always has its pass: passes
    known one after another (gaps up to 1.5 ``step``) have none between them, and a pass
    Slurm did not log in a longer gap (one that started nothing, when only starts are
    known) is put back on the grid.  An instant within float noise (``_EPS`` steps) of a
    grid instant is that instant: its pass runs then, never before ``now``."""
    if step <= 0:
        return now
    at = _on_grid(now, step, known, origin, after=False)
    if at <= last + _EPS:
        at = _on_grid(last, step, known, origin, after=True)
    return max(at, now)


def _on_grid(t: float, step: float, known: Sequence[float], origin: float, after: bool) -> float:
    """The first instant of the pass grid at ``t`` or later (``after``: later than ``t``)."""
    i = bisect_right(known, t + _EPS)  # known[:i] are at or before t
    anchor = known[i - 1] if i else (known[0] if known else origin)
    steps = (t - anchor) / step
    at = anchor + (math.floor(steps + _EPS) + 1 if after else math.ceil(steps - _EPS)) * step
    if i < len(known):
        following = known[i]
        if i and at > anchor + _EPS and at > following - step / 2 - _EPS:
            # between two known passes the grid stops half a step short of the next (the
            # known pass itself, at ``t``, has its pass)
            return following
        at = min(at, following)
    return at


def passes_from_starts(
    jobs: Sequence[tuple[float, float]], ends: Sequence[float], step: float, slack_s: float = 1.0
) -> tuple[float, ...]:
    """When backfill passes began, as far as a site's accounting tells (pure): sacct keeps
    each job's submission and start in whole seconds, and no pass.  A job that started
    neither in its submission's second nor in the second after (the main scheduler's round
    for a submission) nor within ``slack_s`` after a job's end (the main scheduler's round
    for a completion) started in a backfill pass: that pass began in the start's second.
    Starts less than half of ``step`` (``bf_interval``) after a dated pass are that pass's
    (a long pass starts jobs over several seconds) and date none.  ``jobs``: (submit,
    start) per job; ``ends``: every job's end.  The instants, sorted, for
    ``Params.bf_passes_s``."""
    ordered = sorted(ends)
    found: list[float] = []
    for submit, start in jobs:
        if start - submit <= slack_s + _EPS:
            continue
        i = bisect_right(ordered, start + _EPS)
        if i and start - ordered[i - 1] <= slack_s + _EPS:
            continue
        found.append(math.floor(start + _EPS))
    out: list[float] = []
    for t in sorted(found):
        if not out or t - out[-1] >= step / 2 - _EPS:
            out.append(t)
    return tuple(out)
