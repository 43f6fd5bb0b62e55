"""#27's QOS preemption family, replayed: what its kept runs' unit tests
(``tests/unit/test_simulate_preempt_replay.py``) and the live validation, when the rotation
picks this family (``test_simulate_slurm.py``), both need.

The family's QOS (``tests/fixtures/record_simulate_preempt.py``): ``high`` preempts ``low``
(requeued: its jobs are submitted with ``--requeue``) and ``scav`` (cancelled).  A job's
wait is from its first submission to the start of its last run; a requeued job's runs are
held where Slurm ran them, and a cancelled one's whole sleep is its work (its record has
only the cut run)."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace

from slurm_gpupool.simulate.engine import Params

from .simulate_support import SANDBOX

NO_SWITCH = 1e9  # the run stayed in the day layout
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


def preemptions(log_text: str, jobs: Collection[str]) -> dict[str, tuple[str, str]]:
    """Preempted job -> (how: ``requeued`` or ``killed``, for which job), from the
    controller's log, of ``jobs`` only (a live run's log has the earlier tests' lines too)."""
    return {m[1]: (m[2], m[3]) for m in PREEMPTED.finditer(log_text) if m[1] in jobs}


def real_times(rec: dict) -> dict[str, tuple]:
    """job -> (first submission, start and end of its last run, its nodes), as sacct has them."""
    return {j: (r[0][0], r[-1][1], r[-1][2], r[-1][4]) for j, r in rec["runs"].items()}


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
