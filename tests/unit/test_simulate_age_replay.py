"""#27's age factor, replayed from recorded runs: the QOS family's sandbox (``high`` 100,
``low`` 10, the rest ``normal``; MIG slices beside whole A100s and V100s) with the age
factor weighed as sites weigh it (``PriorityWeightAge=10000``, ``PriorityMaxAge`` 2 minutes,
``PriorityCalcPeriod`` 1 minute) and a queue minutes deep: 96 jobs of 10-40 s, run on the
sandbox of each release by ``tests/fixtures/record_simulate_age.py``
(``tests/fixtures/slurm/<release>/simulate-age*``: what sacct said of each job, its request,
QOS, user and account, the priority settings, and the controller's log lines of those jobs,
each round of the decay thread among them).  Every kept run's replay must agree within the
published tolerances with the age factor modelled (``simulate.aging``)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from slurm_gpupool.simulate.metrics import percentile
from tests.integration import simulate_support as support
from tests.integration.priority_support import age_params, age_priorities_checked, rounds
from tests.integration.simulate_support import NO_SWITCH, SANDBOX, replay_and_compare
from tests.unit.test_simulate_qos_replay import run  # noqa: F401  (the kept run, its times read in UTC)


@pytest.fixture(params=support.kept_runs("age"), ids=lambda k: k.label)
def kept(request) -> support.Kept:
    return request.param


def test_the_record_queued_deep_and_the_decay_thread_ran_every_minute(run, kept):  # noqa: F811
    rec, real, ids, _, _ = run
    support.assert_spread_over_users(rec)
    assert len(real) == len(ids) == 96
    found = rounds(kept, rec["since"])
    assert len(found) >= 3
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(found)]
    assert all(abs(g - 60) < 0.5 for g in gaps), gaps
    waits = sorted(real[j][1] - real[j][0] for j in ids)
    assert percentile(waits, 50) > 60  # most jobs saw at least one round


def test_slurm_gave_each_waiting_job_the_priority_the_simulator_gives_it(run, kept):  # noqa: F811
    """Every priority the decay thread logged is ``multifactor``'s: the QOS part plus the
    weight times the job's whole seconds of age (from its submission's second to the
    round's) over PriorityMaxAge, at most 1, truncated."""
    rec, real, ids, _, _ = run
    checked = age_priorities_checked(kept, rec, real, ids)
    assert checked >= 50


def test_the_replay_with_the_age_factor_agrees_with_slurm(run, kept):  # noqa: F811
    """Replayed with the run's age settings, the decay thread's rounds on the phase its log
    dates, the replay agrees within every tolerance (22.05: median wait 108.7 s in Slurm,
    107.9 s replayed; 99.7 % of pairs in Slurm's order).  The kept run's error, which
    ``gpupool simulate`` prints, is measured as a site's simulator replays it: with no phase
    known, the rounds on the clock's whole minutes."""
    rec, real, ids, spec, handoff = run
    params, site = age_params(rec, kept), age_params(rec, kept, phased=False)
    replay_and_compare(spec, site, ids, real, NO_SWITCH, [60.0], handoff, kept.release, kept=kept.label, judged=False)
    got = replay_and_compare(spec, params, ids, real, NO_SWITCH, [60.0], handoff, kept.release)
    for exact in (True, False):
        assert got[exact]["median wait"][0] > 60


def test_without_the_age_factor_the_replay_misses(run, kept):  # noqa: F811
    """The same replay with the QOS factor alone (the engine before the age factor): the
    jobs that waited longest no longer pass newer ones of a higher QOS, and the median wait
    misses (22.05: 76.0 s replayed, 108.7 s in Slurm; 97.0 % of pairs in order)."""
    rec, real, ids, spec, handoff = run
    qos_only = replace(SANDBOX, qos_priority=tuple(rec["qos"].items()))
    with pytest.raises(AssertionError, match="median wait"):
        replay_and_compare(spec, qos_only, ids, real, NO_SWITCH, [60.0], handoff, kept.release)
