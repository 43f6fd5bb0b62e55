"""What ``gpupool repartition --scheduled`` does at a given moment: the pure decision
(repartition/scheduled.py) the click command only gathers inputs for."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from slurm_gpupool.core.policy.schedule import Rule, Schedule
from slurm_gpupool.repartition.hold import Hold
from slurm_gpupool.repartition.scheduled import (
    ScheduledRun,
    ahead_nodes,
    lead_time_s,
    schedule_gaps_s,
    scheduled_action,
)
from slurm_gpupool.slurm.types import Reservation

WEEKDAYS = frozenset(range(5))
SCHEDULE = Schedule("night", (Rule("day", WEEKDAYS, time(8), time(20)),), UTC)
MONDAY_NOON = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
MONDAY_7 = datetime(2026, 11, 23, 7, 0, tzinfo=UTC)


def hold(layout: str | None, until: datetime | None = None) -> Hold:
    return Hold(layout, until, "root", "2026-11-23T06:00:00+00:00", "hand switch")


def test_the_due_layout_and_a_reservation_ahead_within_the_lead_time():
    assert scheduled_action(SCHEDULE, None, MONDAY_NOON, 6 * 3600) == ScheduledRun("day")  # night at 20:00: 8 h away
    at_8 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
    assert scheduled_action(SCHEDULE, None, MONDAY_7, 2 * 3600) == ScheduledRun("night", ahead=(at_8, "day"))
    assert scheduled_action(SCHEDULE, None, MONDAY_7, None) == ScheduledRun("night")  # lead time unknown: none


def test_a_pause_does_nothing_and_a_pin_keeps_its_layout_without_reserving_ahead():
    paused = scheduled_action(SCHEDULE, hold(None), MONDAY_7, 2 * 3600)
    assert paused.target is None and paused.said.startswith("nothing done: schedule paused until `gpupool schedule")
    pinned = scheduled_action(SCHEDULE, hold("night"), MONDAY_NOON, 10 * 3600)
    assert pinned == ScheduledRun("night", said=hold("night").describe(), pinned=True)  # day is due: the pin wins
    expired = hold(None, until=MONDAY_7 - timedelta(minutes=1))
    assert scheduled_action(SCHEDULE, expired, MONDAY_NOON, 0).target == "day"  # the schedule rules again


def test_in_an_elastic_period_demand_decides_and_no_reservation_is_made_for_one():
    by_day = lambda layout: layout == "day"  # noqa: E731
    assert scheduled_action(SCHEDULE, None, MONDAY_NOON, 10 * 3600, by_day) == ScheduledRun("day", elastic=True)
    # the night: the clock's; the switch into day is where demand takes over: nothing to reserve for it
    assert scheduled_action(SCHEDULE, None, MONDAY_7, 2 * 3600, by_day) == ScheduledRun("night")
    # pinned, demand does not decide either
    assert scheduled_action(SCHEDULE, hold("night"), MONDAY_NOON, 0, by_day).elastic is False


def test_lead_time_auto_is_half_the_shortest_gap_at_most_maxtime():
    gaps = schedule_gaps_s(SCHEDULE, MONDAY_NOON)
    assert min(gaps) == 12 * 3600 and max(gaps) == 60 * 3600  # Friday 20:00 to Monday 08:00
    assert lead_time_s(None, 86400, SCHEDULE, MONDAY_NOON, 86400) == 6 * 3600
    assert lead_time_s(None, 3600, SCHEDULE, MONDAY_NOON, 86400) == 3600
    assert lead_time_s(1800, None, SCHEDULE, MONDAY_NOON, 86400) == 1800  # configured
    assert lead_time_s(None, None, None, MONDAY_NOON, 86400) == 86400


def test_nodes_one_of_our_reservations_holds_now_are_not_reserved_ahead_again():
    now = datetime(2026, 11, 23, 12, 0)
    table = {
        "gpupool_day": Reservation("gpupool_day", frozenset({"b"}), now - timedelta(hours=1), now + timedelta(hours=1)),
        "admin": Reservation("admin", frozenset({"c"}), now - timedelta(hours=1), now + timedelta(hours=1)),
        "gpupool_x": Reservation("gpupool_x", frozenset({"d"}), now + timedelta(hours=1), now + timedelta(hours=2)),
    }
    assert ahead_nodes(["a", "b", "c", "d"], table, "gpupool_", now) == {"a", "c", "d"}
