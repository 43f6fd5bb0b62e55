"""#27: two kept workloads run again on 24.11 with the controller's backfill plans logged
(``DebugFlags=Backfill``, ``SlurmctldDebug=verbose``: each job's "to start at" when it
changed), as ``tests/fixtures/slurm/24.11/simulate-<family>-s<seed>-rerun*``.  They are not
counted among the kept runs (the same workloads are); they show what a run alone cannot:

* how Slurm plans a waiting job behind one running past its time limit (trace A, seed
  5151, whose kept run the replay missed until it planned such jobs as Slurm does);
* how far Slurm's own waits move between two runs of one workload (QOS priorities, seed
  7171)."""

from __future__ import annotations

import re
from datetime import datetime

from tests.integration import burst_support as burst
from tests.integration import simulate_support as support
from tests.integration.simulate_support import LIMIT_MIN, replay_and_compare
from tests.unit.test_simulate_qos_replay import qos_params
from tests.unit.test_simulate_validation_replay import utc  # noqa: F401  (the recorded times are UTC)

RELEASE = "24.11"
TRACE_A = support.Kept(RELEASE, "simulate-burst-s5151-rerun")
QOS = support.Kept(RELEASE, "simulate-qos-s7171-rerun")
STAMP = r"^\[(\S+)\] "


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _logged(kept: support.Kept, pattern: str) -> list[tuple[float, re.Match[str]]]:
    return [(_at(m[1]), m) for m in re.finditer(STAMP + pattern, kept.log.read_text(), re.M)]


def test_slurm_plans_a_job_behind_one_past_its_limit_at_that_limit_then_now_never_at_the_check(utc):  # noqa: F811
    """Job 154 (4 A100s, both DGXs) ran past its one-minute limit until the periodic check
    ended it 22 s later; job 157 (2 A100s) waited for it.  While 154 was within its limit,
    backfill planned 157 at 154's limit (its ``end_time``) or, in a later will-run batch,
    after it; once 154 was past its limit, at each pass's own time (24.11: the will-run
    test starts there), so never at the check, which Slurm does not foresee and the replay
    planned with before (``Backfill._plan_overdue``)."""
    ((allocated, _),) = _logged(TRACE_A, r"sched: Allocate JobId=154 ")
    ((ended, _),) = _logged(TRACE_A, r"_job_complete: JobId=154 done")
    limit = allocated + LIMIT_MIN * 60
    assert ended - limit > 20  # the check came 22 s after the limit
    plans = [(at, _at(m[2])) for at, m in _logged(TRACE_A, r".*JobId=157 to start at (\S+),") if allocated < at < ended]
    before = [planned for at, planned in plans if at < limit]
    after = [(at, planned) for at, planned in plans if at >= limit]
    assert len(before) >= 3 and len(after) >= 4
    assert min(before) == int(limit)  # its end_time, in the log's whole seconds
    assert all(planned >= int(limit) for planned in before)
    assert all(at - 1 < planned <= at for at, planned in after)  # now: before the check, every time


def test_the_replay_agrees_with_the_rerun_of_trace_a_seed_5151(utc):  # noqa: F811
    """With its time-limit checks, as the kept runs are replayed (the kept 24.11 run of this
    workload agrees too since; ``test_simulate_burst_replay.py``)."""
    run = support.first_runs(TRACE_A)
    got = burst.replay(run, RELEASE, burst.with_checks(burst.limit_phase(TRACE_A)), checks=burst.checks(TRACE_A))
    med_r, med_s = got[True]["median wait"]
    assert med_r > 100 and abs(med_s - med_r) <= 0.1 * med_r


def _median_wait(real: dict) -> float:
    waits = sorted(v[1] - v[0] for v in real.values())
    return support.percentile(waits, 50)


def test_slurm_s_own_median_wait_moved_beyond_the_tolerance_between_two_runs_of_one_workload(utc):  # noqa: F811
    """The same 64 jobs (requests, run times, QOS, users), submitted at the same offsets on
    the same release: Slurm's median wait was 33.0 s in the kept run and 14.5 s in the rerun,
    where the median's tolerance is 10 % or 5 s.  On a short trace whose waits are a few
    backfill intervals, when the passes fall decides the median: the replay, given the
    rerun's passes as its log dates them, agrees with it (15.0 s); on its own 5 s grid it
    does not (22.5 s), as on the kept run (docs/simulate.md: the known misses)."""
    kept = support.Kept(RELEASE, "simulate-qos-s7171")
    _, real_k, ids_k, _, _ = support.real_runs(kept)
    rec, real, ids, spec, handoff = support.real_runs(QOS)
    assert [ids_k[j] for j in sorted(ids_k, key=int)] == [ids[j] for j in sorted(ids, key=int)]
    first_k, first = min(v[0] for v in real_k.values()), min(v[0] for v in real.values())
    offsets_k = sorted(v[0] - first_k for v in real_k.values())
    offsets = sorted(v[0] - first for v in real.values())
    assert max(abs(a - b) for a, b in zip(offsets_k, offsets, strict=True)) <= 1  # sacct's whole seconds
    kept_median, rerun_median = _median_wait(real_k), _median_wait(real)
    assert (kept_median, rerun_median) == (33.0, 14.5)
    assert abs(kept_median - rerun_median) > max(0.1 * rerun_median, 5.0)
    params = qos_params(rec)
    passes = support.pass_instants(QOS.log, rec["since"])
    got = replay_and_compare(spec, params, ids, real, 1e9, [60.0], handoff, RELEASE, passes=passes)
    med_r, med_s = got[True]["median wait"]
    assert med_r == 14.5 and abs(med_s - 15.0) < 0.1
    try:
        replay_and_compare(spec, params, ids, real, 1e9, [60.0], handoff, RELEASE)
    except AssertionError as e:
        assert "median wait" in str(e)
    else:
        raise AssertionError("on its own grid the replay agreed with the rerun")
