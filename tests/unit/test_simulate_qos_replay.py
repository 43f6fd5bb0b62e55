"""#27's validation, replayed from recorded runs: 64 jobs mixing QOS priorities (``high``
100, ``low`` 10, the rest ``normal``) with MIG slices and multi-GPU whole jobs on the
day layout's mixed nodes (DGXs with slices beside whole A100s, a V100 node with whole
GPUs beside time-sliced ones), run on the sandbox of each release by
``tests/fixtures/record_simulate_qos.py``, with the first seed and others
(``tests/fixtures/slurm/<release>/simulate-qos*``:
what sacct said of each job, its request, QOS, user and account, and the controller's log
lines of those jobs).  Every kept run's replay must agree within the published tolerances
(docs/simulate.md), with the QOS priorities and its release's will-run rule."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from slurm_gpupool.simulate.engine import Params
from slurm_gpupool.simulate.metrics import percentile
from slurm_gpupool.simulate.priority import job_priority
from tests.integration import simulate_support as support
from tests.integration.simulate_support import NO_SWITCH, SANDBOX, replay_and_compare
from tests.unit.test_simulate_validation_replay import utc  # noqa: F401  (the recorded times are UTC)


@pytest.fixture(params=support.kept_runs("qos"), ids=lambda k: k.label)
def kept(request) -> support.Kept:
    return request.param


@pytest.fixture
def release(kept) -> str:
    return kept.release


@pytest.fixture
def run(monkeypatch, kept):
    monkeypatch.setenv("TZ", "UTC")  # the recorded times are UTC, as the recording machine read its log
    time.tzset()
    # (the mean hand-over, as handoff_s reads it, which wants the 20 or more of a 210-job run)
    yield support.real_runs(kept)
    monkeypatch.undo()
    time.tzset()


def qos_params(rec: dict) -> Params:
    """The sandbox's settings with the run's QOS priorities (``sacctmgr``'s, in the record)."""
    return replace(SANDBOX, qos_priority=tuple(rec["qos"].items()))


def _waits(real, ids, qos: str) -> list[float]:
    return sorted(real[j][1] - real[j][0] for j in ids if ids[j][2] == qos)


def test_the_record_queued_and_its_high_priority_jobs_went_first(run):
    rec, real, ids, _, _ = run
    support.assert_spread_over_users(rec)
    assert len(real) == len(ids) == 64
    assert {q for _, _, q in ids.values()} == {"high", "normal", "low"}
    high, normal = _waits(real, ids, "high"), _waits(real, ids, "normal")
    # the normal jobs queued, a median of more than two backfill intervals (16-47.5 s over the
    # seeds); the high ones waited less than half as long (a median of 1-4 s on most runs;
    # 13 s on 24.11's seed 3131, whose backfill passes fell late)
    assert percentile(normal, 50) > 2 * SANDBOX.bf_interval_s and percentile(high, 50) < percentile(normal, 50) / 2


def test_slurm_gave_each_job_the_priority_the_simulator_gives_it(run, kept):
    """The controller logs each job's priority at submission (``InitPrio``; 26.05 logs the
    job's ``SLUID`` before it)."""
    rec, _, ids, _, _ = run
    text = kept.log.read_text()
    logged = {m[1]: int(m[2]) for m in support.INIT_PRIO.finditer(text)}
    assert set(logged) == set(ids)
    assert {j: job_priority(q, rec["qos"], 10000) for j, (_, _, q) in ids.items()} == logged
    assert set(logged.values()) == {1, 1000, 10000}


def test_the_replay_with_the_qos_priorities_agrees_with_slurm(run, kept, release):
    rec, real, ids, spec, handoff = run
    params = qos_params(rec)
    if miss := support.KNOWN_MISSES.get(kept.label):
        with pytest.raises(AssertionError, match=miss):
            replay_and_compare(spec, params, ids, real, NO_SWITCH, [60.0], handoff, release, kept=kept.label)
        return
    got = replay_and_compare(spec, params, ids, real, NO_SWITCH, [60.0], handoff, release, kept=kept.label)
    for exact in (True, False):
        assert got[exact]["median wait"][0] > 0  # (checked in the comparison too: the run queued)


def test_without_the_qos_priorities_the_high_jobs_wait_behind_the_others_in_the_replay(run, release, kept):
    """Submission order instead of the QOS priorities: the high jobs wait behind the normal
    ones, longer than with the priorities (on the first seed's runs the whole comparison
    then fails: 83 % of pairs in Slurm's order on 22.05; on 22.05's seed 4141 the high jobs'
    median wait is 3.5 s in Slurm, 3.7 s replayed with the priorities and 11.1 s without, and
    the comparison passes all the same)."""
    rec, real, ids, spec, handoff = run
    params = qos_params(rec)
    results: dict[str, dict] = {"with": {}, "without": {}}
    for name, p in (("with", params), ("without", SANDBOX)):
        try:
            replay_and_compare(spec, p, ids, real, NO_SWITCH, [60.0], handoff, release, results=results[name])
        except AssertionError:
            assert name == "without" or support.KNOWN_MISSES.get(kept.label)  # (checked above)
    high = [j for j in ids if ids[j][2] == "high"]

    def replayed(name: str) -> float:
        waits = {str(r.job_id): r.wait_s for r in results[name][True].jobs}
        return percentile(sorted(waits[j] for j in high), 50)

    assert replayed("without") > replayed("with")


@pytest.mark.parametrize(
    ("stem", "phase", "median"),
    [("simulate-qos", (3.5, 3.9), (25.0, 28.9)), ("simulate-qos-s3131", (3.3, 3.6), (12.5, 13.0))],
)
def test_the_known_misses_on_24_11_are_the_backfill_passes_phase_given_them_the_replay_agrees(
    utc,  # noqa: F811
    stem,
    phase,
    median,
):
    """24.11's runs missed the median's tolerance on the replay's own grid (seed 3131's is in
    ``KNOWN_MISSES``; the first seed's, at the tolerance's edge, 30.1 s against 25.0 s, is
    within the median's band): their backfill passes fell
    3.4-3.8 s after that grid.  Given the passes their logs date (each
    pass's first backfill start, ``pass_instants``), the replay agrees within every
    tolerance (seed 3131: median 12.5 s in Slurm, 5.0 s on the grid, 13.0 s given the
    passes).  A site's simulator cannot know them, so the kept runs' errors stay in the
    shipped accuracy (the test above)."""
    kept = support.Kept("24.11", stem)
    rec, real, ids, spec, handoff = support.real_runs(kept)
    params = qos_params(rec)
    passes = support.pass_instants(kept.log, rec["since"])
    epoch = min(v[0] for v in real.values())
    assert len(passes) >= 10 and all(phase[0] < (at - epoch) % 5 < phase[1] for at in passes[:4])
    # seed 3131's run is listed (``KNOWN_MISSES``); the first seed's, at the tolerance's edge
    # on the grid (30.1 s against 25.0 s), is within the median's band (``MEDIAN_BAND``)
    assert support.KNOWN_MISSES.get(kept.label) == ("median wait" if "s3131" in stem else None)
    got = replay_and_compare(spec, params, ids, real, NO_SWITCH, [60.0], handoff, "24.11", passes=passes)
    assert got[True]["median wait"] == pytest.approx(median, abs=0.1)


def test_the_26_05_miss_of_seed_6161_is_the_grids_phase_at_any_other_it_agrees(utc):  # noqa: F811
    """Its replay on the grid from the first submission misses the median (17.0 s against
    Slurm's 23.0 s).  26.05 logs no backfill start, and the recorder set no
    ``DebugFlags=Backfill``, so Slurm's passes cannot be dated; but moved by 1, 2, 3 or 4 s
    (the other phases a 5 s interval can have on sacct's whole seconds) the passes give a
    replay within every tolerance.  So the miss says how much the phase matters on a
    30-second trace, not that a rule is missing."""
    kept = support.Kept("26.05", "simulate-qos-s6161")
    rec, real, ids, spec, handoff = support.real_runs(kept)
    params = qos_params(rec)
    epoch = min(v[0] for v in real.values())
    assert support.pass_instants(kept.log, rec["since"]) == []
    assert support.KNOWN_MISSES[kept.label] == "median wait"
    for phase in (1, 2, 3, 4):
        grid = [epoch + phase + 5 * k for k in range(60)]
        got = replay_and_compare(spec, params, ids, real, NO_SWITCH, [60.0], handoff, "26.05", passes=grid)
        assert got[True]["median wait"][0] == 23.0


def test_seed_7171_on_24_11_is_slurms_run_given_the_logs_submissions_and_passes(utc):  # noqa: F811
    """A known miss (``KNOWN_MISSES``), and the one the passes' phase did not explain: at its
    passes as the log dates them, with sacct's whole seconds, the median wait is 20.6 s
    replayed against 33.0 s.  sacct's seconds moved the submissions up to a second early: the
    normal A100x2 job submitted 0.57 s after a round of the main scheduler was replayed as
    submitted at it, and started before the high job that took its A100 in Slurm.  Given the
    controller's millisecond times too (``logged_times``, which the runs recorded with the
    Epilogs' ends take), the replay is Slurm's run, every wait figure to 0.1 s."""
    kept = support.Kept("24.11", "simulate-qos-s7171")
    rec, real, ids, spec, handoff = support.real_runs(kept)
    assert support.KNOWN_MISSES[kept.label] == "mean wait"
    assert not support.epilog_ends(kept.log, ids, rec["since"])  # recorded at info: sacct's times
    passes = support.pass_instants(kept.log, rec["since"])
    args = (spec, qos_params(rec), ids)
    rest = (NO_SWITCH, [60.0], handoff, "24.11")
    seconds = replay_and_compare(*args, real, *rest, passes=passes, judged=False)
    assert seconds[True]["median wait"] == pytest.approx((33.0, 20.6), abs=0.1)
    runs = {j: [[*v[:3], "COMPLETED", v[3]]] for j, v in real.items()}
    timed = support.logged_times(kept.log, {"since": rec["since"], "runs": runs}, ids)
    logged = {j: (*timed[j], v[3]) for j, v in real.items()}
    got = replay_and_compare(*args, logged, *rest, passes=passes)  # judged: within every tolerance
    for measure in ("median wait", "mean wait", "p90 wait"):
        assert got[True][measure][1] == pytest.approx(got[True][measure][0], abs=0.1), measure


PHASES = [k / 2 for k in range(10)]  # 0, 0.5, ... 4.5 s: the phases a 5 s pass interval can have


@pytest.mark.parametrize("label", sorted(support.KNOWN_MISSES))
def test_every_known_miss_agrees_within_every_tolerance_at_another_phase_of_the_backfill_passes(
    utc,  # noqa: F811
    label,
):
    """Each kept run that misses on the replay's own grid (passes every 5 s from the first
    submission) agrees within every tolerance with the passes moved by 0.5-4.5 s, the phase
    the controller's passes had, which a site's simulator cannot know (24.11's reruns,
    ``test_simulate_reruns.py``: Slurm's own median moved from 33.0 to 14.5 s between two
    runs of one workload).  So each miss is the passes' phase, not a missing rule; the
    misses stay in the shipped accuracy."""
    stem, release = label.split("@")
    kept = support.Kept(release, f"simulate-{stem}")
    rec, real, ids, spec, handoff = support.real_runs(kept)
    params = qos_params(rec)
    epoch = min(v[0] for v in real.values())
    agrees = []
    for phase in PHASES:
        grid = [epoch + phase + 5 * k for k in range(80)]
        try:
            replay_and_compare(spec, params, ids, real, NO_SWITCH, [60.0], handoff, release, passes=grid)
        except AssertionError:
            continue
        agrees.append(phase)
    assert 0 not in agrees  # on the replay's own grid it misses (KNOWN_MISSES)
    assert len(agrees) >= 2, agrees


ROUNDS_RUN = support.Kept("24.11", "simulate-qos-s8181")  # recorded with the Epilogs' ends (debug2)


def test_a_submitted_job_waits_for_the_background_loops_round_in_every_release():
    """sbatch's RPC only tests a job; the controller's background loop asks the main
    scheduler to run at its next round, once a second (``Params.sched_tick_s``).  In the runs
    of seed 8181 a job that fit at once started 0.0-1.0 s after its submission, and most
    such starts fall within 50 ms of one fraction of the second: whole seconds on 24.11 and
    26.05 (22.05's loop sleeps a second after its work, so its phase drifts).  The others
    are hand-overs: an end on the job's nodes, its Epilog, then the main scheduler at once."""
    for release in ("22.05", "24.11", "26.05"):
        kept = support.Kept(release, "simulate-qos-s8181")
        rec, ids, _ = support.recorded(kept.record)
        seen = support.log_events(kept.log, ids, rec["since"])
        waited = [seen["start"][j] - seen["submit"][j] for j in seen["start"] if j in seen["submit"]]
        prompt = [w for w in waited if w <= 1.0]
        assert len(prompt) >= 8 and min(prompt) > 0.0, (release, prompt)
        phase = support.rounds_phase(kept.log, ids, rec["since"])
        assert phase is not None
        if release == "22.05":
            continue  # (its rounds drift: 5 of its 11 such starts are within 50 ms of one phase)
        on = [j for j in seen["start"] if j in seen["submit"] and seen["start"][j] - seen["submit"][j] <= 1.0]
        near = [j for j in on if min(abs(seen["start"][j] % 1 - phase), 1 - abs(seen["start"][j] % 1 - phase)) <= 0.05]
        assert len(near) >= len(on) / 2 and min(phase, 1 - phase) < 0.05, (release, phase, len(near), len(on))


def test_without_the_schedulers_rounds_the_replay_starts_jobs_early_and_misses(utc, monkeypatch):  # noqa: F811
    """24.11's run of seed 8181: with the rounds (a job submitted at x.3 s starts at the next
    whole second) the replay agrees within every tolerance (median wait 16.5 s, Slurm's
    16.7 s).  Started at their submission, the first jobs end half a second early, a
    2-GPU job of the ``high`` QOS misses the A100s it took in Slurm, smaller jobs backfill
    onto them, and the median wait falls to 8.8 s."""
    rec, real, ids, spec, handoff = support.real_runs(ROUNDS_RUN)
    assert handoff.completing and handoff.rounds_phase is not None
    got = replay_and_compare(spec, qos_params(rec), ids, real, NO_SWITCH, [60.0], handoff, "24.11")
    assert got[True]["median wait"][1] == pytest.approx(16.5, abs=0.2)
    monkeypatch.setattr(support, "SCHED_ROUND_S", 0.0)
    with pytest.raises(AssertionError, match="median wait"):
        replay_and_compare(spec, qos_params(rec), ids, real, NO_SWITCH, [60.0], handoff, "24.11")


def test_runs_recorded_with_the_epilogs_ends_give_each_job_its_own_completion(utc):  # noqa: F811
    """The runs of seed 8181 kept the controller's ``debug2`` line at each Epilog's end:
    every job has one, after its end, and the replay takes the log's times to the
    millisecond with them (``real_runs``), the nodes completing meanwhile."""
    for release in ("22.05", "24.11", "26.05"):
        rec, real, ids, _, handoff = support.real_runs(support.Kept(release, "simulate-qos-s8181"))
        assert handoff.completing and set(handoff.own) == set(ids)
        assert all(0.0 < r < 5.0 for r in handoff.own.values()), handoff.own
        assert any(v[2] != int(v[2]) for v in real.values())  # the log's milliseconds, not sacct's seconds


def test_a_requeued_jobs_release_is_its_first_runs_epilog_and_a_multi_node_jobs_its_last_node(tmp_path):
    """``epilog_releases``: each job's end to the last Epilog of that run (one line per node),
    not to a later run's (a requeued job's next run ends two minutes and more after)."""
    log = tmp_path / "slurmctld.log"
    log.write_text(
        "[2026-12-01T01:00:10.000] _job_complete: JobId=5 done\n"
        "[2026-12-01T01:00:10.200] debug2: _slurm_rpc_epilog_complete: JobId=5 Node=a100n1 \n"
        "[2026-12-01T01:00:10.450] debug2: _slurm_rpc_epilog_complete: JobId=5 Node=a100n2 \n"
        "[2026-12-01T01:00:20.000] _job_complete: JobId=6 done\n"
        "[2026-12-01T01:00:20.300] debug2: _slurm_rpc_epilog_complete: JobId=6 Node=a30n1 usec=41\n"
        "[2026-12-01T01:03:00.000] _job_complete: JobId=6 done\n"
        "[2026-12-01T01:03:00.900] debug2: _slurm_rpc_epilog_complete: JobId=6 Node=a30n1 usec=38\n"
        "[2026-12-01T01:03:01.000] debug2: _slurm_rpc_epilog_complete: JobId=7 Node=a30n1 usec=38\n"
    )
    since = support.datetime.fromisoformat("2026-12-01T01:00:00").timestamp()
    got = support.epilog_releases(log, {"5", "6", "7"}, since)
    assert got == {"5": pytest.approx(0.45), "6": pytest.approx(0.3)}  # (7: no end logged)
