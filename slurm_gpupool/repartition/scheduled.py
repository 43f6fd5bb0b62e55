"""``gpupool repartition --scheduled``: what a scheduled run does now, as pure functions.

cron runs it every 5 minutes.  It switches to the layout the schedule says is due,
unless an admin paused the schedule (nothing) or pinned a layout (that one, and no
reservation ahead); in an elastic period demand decides (one elastic step); and when
the next switch is within the lead time, the nodes it will change are reserved from
its time on (a reservation ``<prefix>_<layout>_ahead``), so backfill starts there only
jobs that end before it.  The command gathers the inputs (the clock, the hold file,
the partition's MaxTime) and does what :func:`scheduled_action` answers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from slurm_gpupool.core.policy.schedule import Schedule
from slurm_gpupool.repartition.rules import lead_time_default
from slurm_gpupool.slurm.types import Reservation


class Hold(Protocol):
    """A pause or a pin (``repartition/hold.py``'s ``Hold``)."""

    @property
    def layout(self) -> str | None: ...

    def active(self, now: datetime) -> bool: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class ScheduledRun:
    """What a scheduled run does: nothing (``target`` None: paused), one elastic step
    (``elastic``), or a switch to ``target``, then (``ahead``: (when, layout)) reserve the
    nodes the next switch changes from its time.  ``said``: the hold in force, to show;
    ``pinned``: the target is an admin's pin, not the schedule's (the journal's trigger)."""

    target: str | None
    elastic: bool = False
    ahead: tuple[datetime, str] | None = None
    said: str = ""
    pinned: bool = False


def scheduled_action(
    schedule: Schedule,
    hold: Hold | None,
    now: datetime,
    lead_time_s: float | None,
    elastic_during: Callable[[str], bool] | None = None,
) -> ScheduledRun:
    """``now`` aware, in the schedule's zone; ``lead_time_s`` None when it could not be known
    (Slurm did not answer: no reservation ahead); ``elastic_during(layout)``: does demand
    decide while that layout is due (None: clock mode)."""
    if hold is not None and hold.active(now.astimezone()):
        if hold.layout is None:
            return ScheduledRun(None, said=f"nothing done: {hold.describe()}")
        return ScheduledRun(hold.layout, said=hold.describe(), pinned=True)  # no switch ahead either
    target = schedule.due(now)
    if elastic_during is not None and elastic_during(target):
        return ScheduledRun(target, elastic=True)  # an elastic period: demand decides, not the clock
    nxt = schedule.next_change(now)
    ahead = clock_switch_ahead(nxt, now, lead_time_s, elastic_during) if lead_time_s is not None else None
    return ScheduledRun(target, ahead=ahead)


def clock_switch_ahead(
    nxt: tuple[datetime, str] | None, now: datetime, lead_time_s: float, elastic_during: Callable[[str], bool] | None
) -> tuple[datetime, str] | None:
    """The clock's next switch to reserve nodes for now: within the lead time, and not the
    start of an elastic period (``elastic_during(layout)``): there demand decides, the clock
    switches nothing, so a reservation ahead would only keep jobs off nodes that never
    switch (the simulator's elastic policy makes no switch there either)."""
    if nxt is None or (nxt[0] - now).total_seconds() > lead_time_s:
        return None
    if elastic_during is not None and elastic_during(nxt[1]):
        return None
    return nxt


def schedule_gaps_s(schedule: Schedule, now: datetime) -> list[int]:
    """Seconds between the schedule's switches over the coming week."""
    t = now
    times: list[datetime] = []
    while len(times) < 64 and (not times or (times[-1] - times[0]).days < 8):
        nxt = schedule.next_change(t)
        if nxt is None:
            break
        times.append(nxt[0])
        t = nxt[0] + timedelta(minutes=1)
    return [int((b - a).total_seconds()) for a, b in itertools.pairwise(times)]


def lead_time_s(
    configured_s: int | None, max_time_s: int | None, schedule: Schedule | None, now: datetime, cap_s: int
) -> int:
    """``lead_time``, or auto (``configured_s`` None): see
    :func:`~slurm_gpupool.repartition.rules.lead_time_default`."""
    if configured_s is not None:
        return configured_s
    gaps = schedule_gaps_s(schedule, now) if schedule is not None else []
    return lead_time_default(max_time_s, gaps, cap_s)


def ahead_nodes(
    changing: Iterable[str], reservations: Mapping[str, Reservation], prefix: str, now: datetime
) -> set[str]:
    """The nodes to reserve ahead of a switch: those it changes, but for those one of our
    reservations holds already (``now``: naive local, as Slurm's reservation times)."""
    held = {n for r in reservations.values() if r.name.startswith(prefix) and r.start <= now for n in r.nodes}
    return set(changing) - held
