"""#27: QOS preemption replayed from recorded runs.  60 jobs on the day layout's mixed nodes,
run once on the sandbox of each release (PreemptType=preempt/qos, PreemptMode=REQUEUE) by
``tests/fixtures/record_simulate_preempt.py``: QOS ``high`` (Priority 100) preempts ``low``
(10, requeue, jobs submitted with ``--requeue``) and ``scav`` (5, cancel); ``normal`` (0)
is never preempted.  ``tests/fixtures/slurm/<release>/simulate-preempt*``: every run sacct
kept of each job (``-D``: a requeued job has one record per run), its user and account,
and the controller's log lines of those jobs.  The replay must preempt the same jobs and agree within the published
tolerances (docs/simulate.md); a job's wait is from its first submission to the start of
the run that completed (or was cancelled)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from slurm_gpupool.simulate.metrics import percentile
from slurm_gpupool.simulate.willrun import release_params
from tests.integration import preempt_support as preempt
from tests.integration import simulate_support as support
from tests.integration.preempt_support import preemptions, real_times, replay_inputs
from tests.integration.simulate_support import NO_SWITCH, SANDBOX, recorded, recorded_handoff, replay_and_compare
from tests.unit.test_simulate_validation_replay import utc  # noqa: F401  (the recorded times are UTC)


@pytest.fixture(params=support.recorded_releases("preempt"))
def release(request) -> str:
    return request.param


@pytest.fixture
def run(monkeypatch, release):
    monkeypatch.setenv("TZ", "UTC")  # the recorded times are UTC, as the recording machine read its log
    time.tzset()
    record = support.FIXTURES / release
    rec, ids, spec = recorded(record / "simulate-preempt.json")
    real = real_times(rec)
    # the mean hand-over, as handoff_s reads it (which wants the 20 or more of a 210-job run)
    yield rec, real, ids, spec, recorded_handoff(record / "simulate-preempt-slurmctld.log", real, rec["since"])
    monkeypatch.undo()
    time.tzset()


def _logged(release: str, rec: dict, ids: dict) -> dict[str, tuple[str, str]]:
    """preempted job -> (how, for which job), from the controller's log."""
    return preemptions(support.FIXTURES / release / "simulate-preempt-slurmctld.log", ids, rec["since"])


def test_slurm_preempted_low_and_scav_jobs_for_high_ones_and_requeued_the_low_ones(run, release):
    rec, real, ids, _, _ = run
    support.assert_spread_over_users(rec)
    logged = _logged(release, rec, ids)
    assert len(logged) >= 4
    for job, (how, preemptor) in logged.items():
        assert ids[preemptor][2] == "high" and ids[job][2] in ("low", "scav")
        assert how == ("requeued" if ids[job][2] == "low" else "killed")
        runs = rec["runs"][job]
        assert len(runs) == (2 if how == "requeued" else 1) and runs[0][3] == "PREEMPTED"
        if how == "requeued":  # a new submit time at the requeue, eligible 121 s later
            assert runs[1][0] == pytest.approx(runs[0][2], abs=1)
            assert runs[1][1] >= runs[1][0] + 120
    # the preemptor started within a few seconds of the preemption
    for job, (_, preemptor) in logged.items():
        assert real[preemptor][1] - rec["runs"][job][0][2] <= 3


# Kept runs where the replay preempts one job otherwise than Slurm did (docs/simulate.md):
# release -> (Slurm's job, its preemptor) -> (the replay's job, its preemptor)
OTHERWISE = {"22.05": {("80", "115"): ("77", "115")}}


def test_the_replay_preempts_the_same_jobs_and_agrees_with_slurm(run, release):
    """As many preemptions as Slurm's, each of the same job for the same one (but for the one
    ``OTHERWISE`` lists on a run), the same cancelled; and the comparison agrees."""
    rec, real, ids, spec, handoff = run
    logged = _logged(release, rec, ids)
    cancelled = {j for j, (how, _) in logged.items() if how == "killed"}
    work, requeue, held = replay_inputs(rec, ids, logged)
    results: dict = {}
    params = preempt.params(rec)
    replay_and_compare(
        spec,
        params,
        ids,
        real,
        NO_SWITCH,
        [60.0],
        handoff,
        release,
        work,
        requeue,
        results,
        held,
        kept=f"preempt@{release}",
    )
    expected = {j: p for j, (_, p) in logged.items()}
    for (job, by), (sim_job, sim_by) in OTHERWISE.get(release, {}).items():
        assert expected.pop(job) == by
        expected[sim_job] = sim_by
    for exact, res in results.items():
        sim = {str(r.job_id): r for r in res.jobs}
        # each for the job Slurm preempted it for (on 22.05's first, root-only run, job 18 for
        # 27, not for 32, only because a backfill pass keeps 32 off the node it holds for 27)
        assert {j: str(r.preempted_by) for j, r in sim.items() if r.preemptions} == expected, exact
        assert {j for j, r in sim.items() if r.cancelled} == cancelled
        # once each (``res.preempted`` counts only those up to the last submission: on 24.11
        # some came after it)
        assert sum(r.preemptions for r in res.jobs) == len(logged), [
            (r.job_id, r.preemptions, r.start_s, r.end_s) for r in res.jobs if r.preemptions
        ]


@pytest.mark.parametrize("release", ["26.05"])
def test_on_26_05_the_replay_preempts_what_slurm_preempted_whichever_the_window_rounding(run, release):
    """Slurm from 24.11 rounds a planned job's window end up to bf_resolution (``Params.bf_end_up``,
    ``backfill.c`` ``_set_slot_time``; the arithmetic: ``test_simulate_engine.py``).  This run
    was its witness: with 22.05's rounding (down) the replay preempted job 88 for high job 106
    where Slurm preempted it for 108, and kept 95 % of pairs in Slurm's order.  That came from
    the will-run test's choice of nodes: once it keeps off the nodes a higher job holds within
    the window (``avail_bitmap``, ``Backfill._first_fit``), both roundings preempt 88 for 108
    and agree, so the rounding stays on the source's word, without a replayed witness."""
    rec, real, ids, spec, handoff = run
    work, requeue, held = replay_inputs(rec, ids, _logged(release, rec, ids))
    by: dict[bool, str] = {}
    for end_up in (True, False):
        params = replace(preempt.params(rec), **{**release_params(release), "bf_end_up": end_up})
        results: dict = {}
        replay_and_compare(spec, params, ids, real, NO_SWITCH, [60.0], handoff, None, work, requeue, results, held)
        by[end_up] = str(next(r.preempted_by for r in results[True].jobs if r.job_id == 88))
    assert by == {True: "108", False: "108"}


def test_without_preemption_the_replay_disagrees_and_the_comparison_says_so(run, release):
    """The high jobs then wait for the low ones to end, and the requeued ones run once."""
    rec, real, ids, spec, handoff = run
    params = replace(SANDBOX, qos_priority=preempt.params(rec).qos_priority)
    with pytest.raises(AssertionError):
        replay_and_compare(spec, params, ids, real, NO_SWITCH, [60.0], handoff, release)


def test_the_high_jobs_start_as_soon_in_the_replay_as_in_slurm(run, release):
    """Per QOS: the high jobs (most of which preempted, or found room) wait a second or two in
    both; the median wait of the QOS preemption concerns (high, low, scav) within the
    tolerance (10 % or 5 s; Slurm / replay on 24.11: high 1.5 / 1.1 s, low 14.0 / 13.6 s, scav
    74.5 / 73.5 s).  Not ``normal``'s (16 jobs, never preempted, queued behind all the
    others), which agree on 24.11 and 26.05 but not on 22.05 (docs/simulate.md)."""
    rec, real, ids, spec, handoff = run
    results: dict = {}
    work, requeue, held = replay_inputs(rec, ids, _logged(release, rec, ids))
    replay_and_compare(
        spec, preempt.params(rec), ids, real, NO_SWITCH, [60.0], handoff, release, work, requeue, results, held
    )
    sim = {str(r.job_id): r for r in results[True].jobs}
    # (not on 22.05's run with users, whose replay preempts one other low job than Slurm did:
    # its scav jobs wait a median 53.5 s against 81.5 s there)
    for qos in ("high", "low") if release == "22.05" else ("high", "low", "scav"):
        of = [j for j in ids if ids[j][2] == qos]
        med_r = percentile(sorted(real[j][1] - real[j][0] for j in of), 50)
        med_s = percentile(sorted(sim[j].wait_s for j in of), 50)
        assert abs(med_s - med_r) <= max(0.1 * med_r, 5.0), (qos, med_r, med_s)
    high = [real[j][1] - real[j][0] for j in ids if ids[j][2] == "high"]
    assert percentile(sorted(high), 50) <= 2


# a live run of the family (26.05, seed 1511: ``SLURM_GPUPOOL_VALIDATION_FAMILY=preempt``),
# kept with its whole log and so its passes: not a kept run of the family (``kept_runs``)
LIVE = support.Kept("26.05", "simulate-preempt-live-s1511")


def test_a_live_run_replayed_at_its_logged_passes_needs_the_controller_s_times(utc):  # noqa: F811
    """A replay at Slurm's logged passes (milliseconds) needs submissions as precise: in
    sacct's whole seconds, high job 22, submitted 0.1 s after the pass of 5.5 s, was in
    that pass, took the slice a ``scav`` job got there in Slurm (which 22 then preempted),
    and the replay preempted one job, not three, and ordered 94 % of pairs as Slurm did
    (median wait 74 s against 55 s).  With the controller's times (``real_times`` given the
    run) it preempts the three jobs Slurm preempted, each for the same job, and agrees."""
    rec, ids, spec = recorded(LIVE.record)
    passes = support.pass_instants(LIVE.log, rec["since"])
    slurm = preemptions(LIVE.log, ids, rec["since"])
    assert slurm == {"7": ("requeued", "21"), "14": ("killed", "22"), "34": ("requeued", "57")}
    work, requeue, held = replay_inputs(rec, ids, slurm)

    def replay(real: dict) -> dict:
        results: dict = {}
        handoff = recorded_handoff(LIVE.log, real, rec["since"])
        args = (spec, preempt.params(rec), ids, real, NO_SWITCH, [60.0], handoff, LIVE.release, work, requeue)
        replay_and_compare(*args, results, held, passes=passes)
        return results

    with pytest.raises(AssertionError, match=r"median wait|order"):
        replay(real_times(rec))
    sacct, logged = real_times(rec), real_times(rec, LIVE, ids)
    assert sacct["22"][0] < passes[1] < logged["22"][0] < passes[1] + 0.2
    for exact, res in replay(logged).items():
        sim = {str(r.job_id): r for r in res.jobs}
        assert {j: str(r.preempted_by) for j, r in sim.items() if r.preemptions} == {
            j: by for j, (_, by) in slurm.items()
        }, exact
