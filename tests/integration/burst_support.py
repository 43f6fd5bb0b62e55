"""#27's trace A (the burst family), replayed: what its kept runs' unit tests
(``tests/unit/test_simulate_burst_replay.py``) and the live validation, when asked for
(``SLURM_GPUPOOL_VALIDATION_FAMILY=burst``, ``test_simulate_slurm.py``), both need.

The family's jobs run in the day layout with a one-minute limit; some run past it and the
controller ends them at its periodic time-limit check, some are cancelled by their user
while pending (``scancel``).  The replay withdraws those at the time they were cancelled and
runs the checks at the phase the controller's log shows."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace
from datetime import datetime

from slurm_gpupool.simulate.engine import Params

from . import simulate_support as support
from .simulate_support import NO_SWITCH, SANDBOX, replay_and_compare

CHECK_S = 30.0  # PERIODIC_TIMEOUT (slurmctld.h): the time-limit check's period
TIMED_OUT = re.compile(r"^\[(\S+)\] Time limit exhausted for JobId=(\d+)$", re.M)


def states(rec: dict) -> dict[str, str]:
    """job -> the state accounting gave its first run."""
    return {j: r[0][3] for j, r in rec["runs"].items()}


def withdrawn(rec: dict) -> dict[str, float]:
    """job -> when it was cancelled while pending (sacct: CANCELLED, never started; its end)."""
    return {j: r[0][2] for j, r in rec["runs"].items() if r[0][3] == "CANCELLED" and r[0][1] is None}


def checks(kept: support.Kept, since: float = 0.0) -> list[float]:
    """When the controller ended jobs at their limit from ``since`` on (epoch s, its log's
    milliseconds; the jobs one check ends are logged a millisecond or so apart: the first
    of them).  A live run's log has the earlier tests' lines too, perhaps of a controller
    since restarted, whose checks had another phase."""
    text = kept.log.read_text()
    out: list[float] = []
    for at in sorted(datetime.fromisoformat(m[1]).timestamp() for m in TIMED_OUT.finditer(text)):
        if at >= since and (not out or at > out[-1] + 1):
            out.append(at)
    return out


def limit_phase(kept: support.Kept, since: float = 0.0) -> float | None:
    """The checks' phase on the clock (epoch s modulo 30), as the first logged one (from
    ``since``) had it; None if none ended a job."""
    found = checks(kept, since)
    return found[0] % CHECK_S if found else None


def with_checks(phase: float | None) -> Params:
    """The sandbox's settings, with the time-limit checks at ``phase`` (None: without them)."""
    if phase is None:
        return SANDBOX
    return replace(SANDBOX, limit_check_s=CHECK_S, limit_check_phase_s=phase)


def replay(run, release, params, results=None, kept=None, passes: Collection[float] = (), checks=()):
    """The run (:func:`simulate_support.first_runs`) replayed and compared with Slurm's, the
    jobs cancelled while pending withdrawn then, those past their limit given their whole
    work (``passes``: Slurm's logged backfill passes, none: the replay's own grid;
    ``checks``: its logged time-limit checks, :func:`checks`)."""
    rec, real, ids, spec, handoff = run
    cancel = withdrawn(rec)
    work = support.sleeps(rec, ids, cancel, real)
    rest = {"results": results, "cancel": cancel, "kept": kept, "passes": passes, "checks": checks}
    return replay_and_compare(spec, params, ids, real, NO_SWITCH, [60.0], handoff, release, work, **rest)
