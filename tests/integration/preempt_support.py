"""#27's QOS preemption family, replayed: what its kept runs' unit tests
(``tests/unit/test_simulate_preempt_replay.py``) and its live validation, when asked for
(``test_simulate_slurm.py``), both need.

The family's QOS (``tests/fixtures/record_simulate_preempt.py``): ``high`` preempts ``low``
(requeued: its jobs are submitted with ``--requeue``) and ``scav`` (cancelled).  A job's
wait is from its first submission to the start of its last run; a requeued job's runs are
held where Slurm ran them, and a cancelled one's whole sleep is its work (its record has
only the cut run)."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from slurm_gpupool.simulate.engine import Params

from .simulate_support import RUN_EVENTS, SANDBOX, Kept, _within, log_events, logged_times, stamped_lines

PREEMPTED = re.compile(r"preempted JobId=(\d+) has been (requeued|killed) to reclaim resources for JobId=(\d+)")


def params(rec: dict) -> Params:
    """The sandbox's settings with the run's QOS (``rec["qos"]``: name -> [Priority,
    PreemptMode, Preempt])."""
    qos = rec["qos"]
    return replace(
        SANDBOX,
        qos_priority=tuple((q, v[0]) for q, v in qos.items()),
        qos_preempt=tuple((q, tuple(v[2].split(","))) for q, v in qos.items() if v[2]),
        qos_preempt_mode=tuple((q, v[1]) for q, v in qos.items() if v[1] != "cluster"),
    )


def preemption_lines(log: Path, jobs: Collection[str], since: float) -> list[tuple[str, str, str]]:
    """Every preemption of ``jobs`` the controller logged from ``since`` on, in order: (job,
    how: ``requeued`` or ``killed``, for which job).  A live run's log spans the sandbox's
    life: earlier tests' lines, and job IDs that start again with a fresh state."""
    found = (PREEMPTED.search(text) for _, text in stamped_lines(log, since))
    return [(m[1], m[2], m[3]) for m in found if m is not None and m[1] in jobs]


def preemptions(log: Path, jobs: Collection[str], since: float) -> dict[str, tuple[str, str]]:
    """Preempted job -> (how, for which job) of its last preemption (``preemption_lines``)."""
    return last_preemptions(preemption_lines(log, jobs, since))


def last_preemptions(lines: list[tuple[str, str, str]]) -> dict[str, tuple[str, str]]:
    """Preempted job -> (how, for which job) of its last one among ``preemption_lines``'s."""
    return {job: (how, by) for job, how, by in lines}


def real_times(rec: dict, kept: Kept | None = None, ids: dict | None = None) -> dict[str, tuple]:
    """job -> (first submission, start and end of its last run, its nodes), as sacct has
    them; given the run (``kept``) and its jobs, as the controller's log times them where it
    can (``logged_times``: a job run once; a requeued job's first submission), which a
    replay at the logged passes needs: sacct's whole seconds put a job submitted just after
    a pass into it (a 26.05 live run: a high job submitted 0.1 s after a pass took the
    slice a ``scav`` job got there, and the replay ordered 94 % of pairs as Slurm did)."""
    if kept is None:
        return {j: (r[0][0], r[-1][1], r[-1][2], r[-1][4]) for j, r in rec["runs"].items()}
    assert ids is not None
    timed = logged_times(kept.log, rec, ids)
    submitted = log_events(kept.log, ids, rec["since"], RUN_EVENTS)["submit"]
    out: dict[str, tuple] = {}
    for j, runs in rec["runs"].items():
        if len(runs) == 1:
            out[j] = (*timed[j], runs[0][4])
        else:
            first = _within(submitted.get(j, runs[0][0]), runs[0][0])
            out[j] = (first, runs[-1][1], runs[-1][2], runs[-1][4])
    return out


def replay_inputs(
    rec: dict, ids: dict, preempted: dict[str, tuple[str, str]]
) -> tuple[dict[str, float], set[str], dict[str, list[tuple[float, float]]]]:
    """What ``replay_and_compare`` is given beyond the run's times: each cancelled job's work
    (its whole sleep), the jobs submitted with ``--requeue`` (the ``low`` ones) and each run
    of every job that ran more than once."""
    work = {j: float(ids[j][1]) for j, (how, _) in preempted.items() if how == "killed"}
    requeue = {j for j in ids if ids[j][2] == "low"}
    held = {j: [(r[1], r[2]) for r in runs] for j, runs in rec["runs"].items() if len(runs) > 1}
    return work, requeue, held
