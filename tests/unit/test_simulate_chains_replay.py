"""#27's dependency family, replayed from recorded runs: pipelines of one to three jobs
submitted together (the second stage ``--dependency=afterany:J``, the third ``afterok:J``)
with MIG slices and whole A100s and V100s on the day layout's mixed nodes, a stage now and
then running into its limit, so that after a second stage's the third never runs
(DependencyNeverSatisfied), run
on the sandbox of each release by ``tests/fixtures/record_simulate_chains.py``
(``tests/fixtures/slurm/<release>/simulate-chains*``).  Every kept run's replay must agree
within the published tolerances (docs/simulate.md), and must not run the jobs Slurm never
ran."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.integration import simulate_support as support
from tests.integration.burst_support import checks, limit_phase, with_checks
from tests.integration.simulate_support import NO_SWITCH, replay_and_compare
from tests.unit.test_simulate_validation_replay import utc  # noqa: F401  (the recorded times are UTC)


@pytest.fixture(params=support.kept_runs("chains"), ids=lambda k: k.label)
def kept(request) -> support.Kept:
    return request.param


@pytest.fixture
def run(utc, kept):  # noqa: F811
    return support.first_runs(kept)


def _params(kept: support.Kept):
    """The sandbox's settings, with the time-limit checks at the phase the log shows (the
    stages that ran into their limit end at them, as in trace A)."""
    return with_checks(limit_phase(kept))


def test_the_record_has_pipelines_and_a_dependency_never_satisfied(run):
    rec, real, ids, _, _ = run
    support.assert_spread_over_users(rec)
    after = rec["after"]
    assert len(ids) >= 50 and len(after) >= 25
    assert any(any_end for _, any_end in after.values()) and any(not any_end for _, any_end in after.values())
    states = {j: r[0][3] for j, r in rec["runs"].items()}
    # each job that never ran depended (afterok) on one that did not complete
    assert rec["never"]
    for j in rec["never"]:
        (dep,), any_end = after[j]
        assert not any_end and states[dep] != "COMPLETED" and real[j][1] is None, (j, dep, states[dep])
    # each dependent that ran started after its dependency ended, in sacct's seconds and in
    # the log's times the replay takes
    sacct = {j: r[0] for j, r in rec["runs"].items()}
    for j, (deps, _) in after.items():
        if sacct[j][1] is not None:
            assert all(sacct[j][1] >= sacct[d][2] for d in deps), j
            assert all(real[j][1] >= real[d][2] for d in deps), j


def test_the_replay_with_the_dependencies_agrees_with_slurm_and_never_runs_the_same_jobs(run, kept):
    rec, real, ids, spec, handoff = run
    work = support.sleeps(rec, ids, rec["never"], real)
    results: dict = {}
    args = (spec, _params(kept), ids, real, NO_SWITCH, [60.0], handoff, kept.release, work, (), results)
    if miss := support.KNOWN_MISSES.get(kept.label):
        with pytest.raises(AssertionError, match=miss):
            replay_and_compare(*args, kept=kept.label, after=rec["after"], checks=checks(kept))
    else:
        got = replay_and_compare(*args, kept=kept.label, after=rec["after"], checks=checks(kept))
        for exact in (True, False):
            assert got[exact]["median wait"][0] > 0
    for exact, res in results.items():
        never = {str(r.job_id) for r in res.jobs if r.rejected}
        assert never == set(rec["never"]), exact


def test_without_the_dependencies_the_replay_starts_the_later_stages_too_early_and_the_comparison_says_so(run, kept):
    rec, real, ids, spec, handoff = run
    ran = {j: v for j, v in ids.items() if j not in rec["never"]}
    with pytest.raises(AssertionError, match=r"wait|order"):
        replay_and_compare(
            spec, _params(kept), ran, real, NO_SWITCH, [60.0], handoff, kept.release, support.sleeps(rec, ran)
        )


# CI's live run of the family on 22.05 (seed 22052bf4, a loaded 2-core machine), kept with
# its passes: not a kept run of the family (``kept_runs``)
LIVE_MISS = support.Kept("22.05", "simulate-chains-live-s570764276")


def test_a_live_run_under_ci_s_load_still_misses_where_slurm_ran_two_stages_the_other_way(utc):  # noqa: F811
    """This record's two stages cannot be replayed in Slurm's order (its figures agree only
    since the median's band, ``MEDIAN_BAND``): Slurm started job 59 (whose
    dependency ended at 78 s) at 79 s and job 64 (eligible from 69 s) only at 124 s; the
    replay starts 64 at its first pass after 69 s and 59 at 124 s, and the waits of the
    stages after them follow: median wait 45.6 s against Slurm's 33.3 s.  On a quiet
    machine four live runs of the family agreed.  The likely mechanism (docs/simulate.md):
    Slurm starts no job on a node while one of its jobs is completing (its Epilog, seconds
    under CI's load), and at 64 s jobs 52, 61 and 63 waited so, where the replay started
    them on the nodes' other free GPUs.  That rule is modelled now
    (``Params.completing_blocks_node``), but it wants each Epilog's end, which this run,
    logged at ``info``, lacks; the live test logs them (``debug2``), and the family is in
    CI's rotation since."""
    rec, real, ids, spec, handoff = support.first_runs(LIVE_MISS)
    passes = support.pass_instants(LIVE_MISS.log, rec["since"])
    results: dict = {}
    args = (
        spec,
        _params(LIVE_MISS),
        ids,
        real,
        NO_SWITCH,
        [60.0],
        handoff,
        "22.05",
        support.sleeps(rec, ids, rec["never"]),
    )
    got = replay_and_compare(*args, (), results, after=rec["after"], passes=passes, checks=checks(LIVE_MISS))
    # it missed the median's tolerance (12.3 s beyond Slurm's), and agrees only since the
    # median's band (``MEDIAN_BAND``): Slurm's waits two jobs either side of its median
    # span the replay's, the jobs below go on as Slurm's did
    med_r, med_s = got[True]["median wait"]
    assert (med_r, med_s) == pytest.approx((33.3, 45.6), abs=0.1)
    assert abs(med_s - med_r) > max(support.WAIT_REL * med_r, support.WAIT_ABS)
    sim = {str(r.job_id): r for r in results[True].jobs}
    epoch = min(v[0] for v in real.values())
    assert real["59"][1] - epoch < 80 < 120 < real["64"][1] - epoch
    assert sim["64"].start_s < 80 < 120 < sim["59"].start_s
    # where it starts: the replay starts 52, 61 and 63 at the pass of 64 s, Slurm at 69 s,
    # after jobs 54 (a30n1, ended 60 s) and 51 (a100n1, 62 s) had ended on their nodes
    for j in ("52", "61", "63"):
        assert 68 < real[j][1] - epoch < 70 and 63 < sim[j].start_s < 65, j
    assert real["54"][2] - epoch < 61 < real["51"][2] - epoch < 63
    # what a CI log shows of such a miss (``first_apart``): the first start 2 s or more apart,
    # job 45 (a pass apart: 33.9 s in Slurm, 38.9 s replayed), beside the MIG job on its node
    ran = [j for j in ids if real[j][1] is not None]
    shown = support.first_apart(real, epoch, sim, ran).splitlines()
    assert shown[0].startswith("  first start apart: 45 (gpu:a100:2) Slurm 33.93-106.44, replay 38.93-110.93")
    assert any("43 (gpu:3g.20gb:1) Slurm 33.92-109.42, replay 33.92-108.92" in line for line in shown[1:])
    alike = {j: replace(sim[j], start_s=real[j][1] - epoch) for j in ran}
    assert support.first_apart(real, epoch, alike, ran) == "  no start more than 2 s apart"


def test_a_job_past_its_limit_runs_what_it_ran_in_slurm_bounded_by_its_launch():
    """``sleeps``: a job that never ran, and one the check ended at its limit, run their
    sleep; one whose sleep ended before the check ran its sleep and its launch and
    completion (0.37 s here), at most ``LAUNCH_MAX_S`` more (a start from sacct's whole
    second reads up to 1 s early); a completed job is not in it (it runs what it ran)."""
    rec = {
        "runs": {
            "1": [[0, 10.0, 90.37, "TIMEOUT"]],  # sleep 80 ended before the check
            "2": [[0, 10.0, 70.02, "TIMEOUT"]],  # sleep 75, ended by the check at 60 s
            "3": [[0, 9.0, 80.9, "TIMEOUT"]],  # sleep 71, its start sacct's second
            "4": [[0, None, 99.0, "CANCELLED"]],  # never ran: sleep 5
            "5": [[0, 10.0, 20.5, "COMPLETED"]],
        }
    }
    ids = {"1": (None, 80), "2": (None, 75), "3": (None, 71), "4": (None, 5), "5": (None, 10)}
    real = {j: (r[0][0], r[0][1], r[0][2], "n1") for j, r in rec["runs"].items()}
    work = support.sleeps(rec, ids, ["4"], real)
    assert work == pytest.approx({"1": 80.37, "2": 75.0, "3": 71.0 + support.LAUNCH_MAX_S, "4": 5.0})
    assert support.sleeps(rec, ids, ["4"]) == {"1": 80.0, "2": 75.0, "3": 71.0, "4": 5.0}  # without real: the sleeps
