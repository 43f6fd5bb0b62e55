"""When the replay's backfill passes fall (``simulate.cadence``): on its own grid, or at the
instants a recorded run's controller logged, with their phase and drift."""

from __future__ import annotations

import math

import pytest

from slurm_gpupool.simulate.cadence import next_pass
from tests.unit.test_simulate_engine import job, run, spec  # noqa: F401  (the engine tests' pool)

NEVER = -math.inf


@pytest.mark.parametrize(
    ("now", "last", "expected"),
    [
        (0.0, NEVER, 0.0),  # a grid instant that had no pass yet has it
        (0.1, NEVER, 5.0),
        (5.0, 5.0, 10.0),  # ... once only: the change came at the pass's instant, after it
        (7.0, 5.0, 10.0),
        (12.0, 5.0, 15.0),
    ],
)
def test_without_known_passes_they_fall_on_the_interval_grid_from_time_0(now, last, expected):
    assert next_pass(now, last, 5.0) == pytest.approx(expected)


def test_the_grid_may_start_elsewhere_than_time_0():
    """``gpupool simulate`` starts it at the trace's first submission (a site's accounting
    replays from midnight, for the clock's schedule): a pass falls there, then every 5 s."""
    assert next_pass(53078.0, NEVER, 5.0, (), 53078.0) == 53078.0
    assert next_pass(53079.0, 53078.0, 5.0, (), 53078.0) == 53083.0
    assert next_pass(53079.0, NEVER, 5.0) == 53080.0  # from 0: 3 s apart


def test_an_interval_of_zero_passes_at_once():
    assert next_pass(3.3, 3.3, 0.0) == 3.3


# a run's logged passes: Slurm's phase (4.59), a cadence a little over 5 s, a pause while
# nothing changed (14.63 -> 30.0), then one more
KNOWN = (4.59, 9.6, 14.63, 30.0, 35.2)


@pytest.mark.parametrize(
    ("now", "last", "expected", "why"),
    [
        (0.0, NEVER, 4.59, "the first known pass, not the grid's 0 or 5"),
        (-3.0, NEVER, -0.41, "before the first: back from it by the interval"),
        (4.59, 4.59, 9.6, "known one after another: the next known, not 4.59 + 5"),
        (5.0, 4.59, 9.6, "the drift is Slurm's: 9.6"),
        (14.7, 14.63, 19.63, "a long gap: the grid anchored at the latest known pass"),
        (20.0, 14.63, 24.63, "... on it"),
        (25.0, 24.63, 30.0, "... stopping half an interval short of the next known one"),
        (31.0, 30.0, 35.2, "known again"),
        (36.0, 35.2, 40.2, "after the last: the grid from it"),
    ],
)
def test_known_passes_fall_where_slurm_logged_them_and_the_grid_fills_only_longer_gaps(now, last, expected, why):
    assert next_pass(now, last, 5.0, KNOWN) == pytest.approx(expected), why


def test_a_replay_backfills_at_the_known_passes(spec):  # noqa: F811
    """The engine test's backfill case (job 4 backfilled at the first pass), given a known pass
    at 41.5 s with the interval 30: the passes have that phase (11.5, 41.5, ...), so job 4
    starts at 11.5 s, not at the grid's 30 s."""
    jobs = [
        job(1, 0, 100, gpus=2, limit=100),  # n1: 2 of 4 until 100
        job(2, 0, 1000, gpus=4, limit=1000),  # n2: full until 1000
        job(3, 1, 100, gpus=4, limit=100),  # head: waits for n1 (100)
        job(4, 2, 30, gpus=1, limit=50),  # backfilled: ends before 100 either way
    ]
    _, r = run(spec, jobs, bf_resolution_s=0)
    assert r[4].start_s == 30
    _, r = run(spec, jobs, bf_resolution_s=0, bf_passes_s=(41.5,))
    assert r[4].start_s == 11.5 and r[3].start_s == 100


def test_a_pass_never_falls_before_now_even_within_float_noise_of_a_grid_instant():
    assert next_pass(30.000000000000004, NEVER, 5.0) == 30.000000000000004
    assert next_pass(4.59 + 1e-10, NEVER, 5.0, KNOWN) == 4.59 + 1e-10
    assert next_pass(4.59 + 1e-10, 4.59, 5.0, KNOWN) == 9.6


def test_a_replay_puts_its_grid_at_the_first_submission_unless_told(spec):  # noqa: F811
    """Job 2 (8 GPUs) heads the queue from 1003.5 and blocks job 3 (submitted 1004), which a
    backfill pass starts on the other node: at 1033 on the grid from the first submission
    (1003, the default: a site's accounting starts at midnight), at 1020 on a grid from 0."""
    from slurm_gpupool.simulate.jobs import SimJob
    from slurm_gpupool.simulate.mapping import TraceRequest

    jobs = [
        SimJob(1, 1003.0, 100.0, 300.0, TraceRequest(4)),
        SimJob(2, 1003.5, 10.0, 60.0, TraceRequest(8)),
        SimJob(3, 1004.0, 10.0, 60.0, TraceRequest(4)),
    ]
    _, r = run(spec, jobs, bf_grid_from_s=None)
    assert r[3].start_s == 1033.0
    _, r = run(spec, jobs, bf_grid_from_s=0.0)
    assert r[3].start_s == 1020.0


def test_passes_are_dated_by_the_starts_neither_a_submission_nor_an_end_explains():
    """sacct's whole seconds: a start in its submission's second or the next (the main
    scheduler's round for it), or within a second of an end (its round for a completion),
    dates no pass; any other start is a backfill pass's, in its second, once per second."""
    from slurm_gpupool.simulate.cadence import passes_from_starts

    jobs = [
        (0.0, 0.0),  # at submission
        (3.0, 4.0),  # the round after its submission
        (5.0, 12.0),  # 12: a pass (no end near)
        (6.0, 12.0),  # the same pass
        (7.0, 20.0),  # an end at 19.5: the main scheduler
        (8.0, 27.0),  # 27: a pass (the end at 19.5 is long before)
        (9.0, 31.0),  # an end at 31.0, the same second: the main scheduler
    ]
    assert passes_from_starts(jobs, [19.5, 31.0, 40.0], 5.0) == (12.0, 27.0)
    assert passes_from_starts([], [], 5.0) == ()
    # a long pass starts jobs over several seconds: those within half an interval are its own
    assert passes_from_starts([(0.0, 12.0), (0.0, 13.0), (0.0, 14.0), (0.0, 15.0)], [], 5.0) == (12.0, 15.0)
    assert passes_from_starts([(0.0, 12.0), (0.0, 13.0), (0.0, 40.0)], [], 30.0) == (12.0, 40.0)


def test_dated_passes_put_the_replays_grid_where_the_sites_was():
    """The grid anchors at each dated pass (``next_pass``): a job submitted at 14 s waits for
    the pass at 17 s, not for 15 s on a grid from the first submission."""
    from slurm_gpupool.simulate.cadence import passes_from_starts

    known = passes_from_starts([(0.0, 12.0)], [], 5.0)
    assert known == (12.0,)
    assert next_pass(14.0, 12.0, 5.0, known, origin=0.0) == 17.0
    assert next_pass(14.0, 10.0, 5.0, (), origin=0.0) == 15.0


def test_a_known_pass_at_the_instant_sought_has_its_pass_whatever_follows():
    """A known pass at ``now`` is that pass, even with the next known one within half a step
    (dated passes are whole seconds, as submissions and ends are: they meet often)."""
    assert next_pass(100.0, 50.0, 30.0, (100.0, 110.0)) == 100.0
    assert next_pass(100.0, 50.0, 30.0, (100.0, 130.0)) == 100.0
    assert next_pass(101.0, 100.0, 30.0, (100.0, 110.0)) == 110.0  # the grid stops short of the next
