"""Which layout is due when: the one place that answers "which layout at time T".

Rules are checked in order; the first whose weekdays and time window contain T
wins, else the default layout.  A window whose end is before its start wraps
past midnight (``20:00``-``07:00``); it belongs to the weekday it starts on.
Pure: times come in, names go out.
"""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta, tzinfo

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
END_OF_DAY = time(23, 59, 59, 999999)  # a rule's "24:00"


class Rule:
    """One schedule rule.  Plain classes here, not dataclasses: gpupool-sbatch imports
    this module and must start fast (dataclasses pulls in ``inspect``)."""

    __slots__ = ("days", "end", "layout", "start")

    def __init__(self, layout: str, days: frozenset[int], start: time, end: time) -> None:
        self.layout, self.days, self.start, self.end = layout, days, start, end  # days: 0 = Monday

    def __repr__(self) -> str:
        return f"Rule({self.layout!r}, {sorted(self.days)}, {self.start}, {self.end})"

    def contains(self, t: datetime) -> bool:
        clock = t.timetz().replace(tzinfo=None)
        if self.start < self.end:
            return t.weekday() in self.days and self.start <= clock < self.end
        if self.start == self.end:  # the whole day
            return t.weekday() in self.days
        # wraps midnight: evening part on a listed day, morning part on the day after one
        if clock >= self.start:
            return t.weekday() in self.days
        return clock < self.end and (t.weekday() - 1) % 7 in self.days


class Schedule:
    __slots__ = ("default", "rules", "tz")

    def __init__(self, default: str, rules: tuple[Rule, ...], tz: tzinfo | None = None) -> None:
        self.default, self.rules, self.tz = default, rules, tz  # tz None: the machine's local time

    def __repr__(self) -> str:
        return f"Schedule({self.default!r}, {self.rules!r}, {self.tz!r})"

    def due(self, t: datetime) -> str:
        """The layout due at ``t``."""
        t = self.localise(t)
        for r in self.rules:
            if r.contains(t):
                return r.layout
        return self.default

    def localise(self, t: datetime) -> datetime:
        if t.tzinfo is None:
            t = t.astimezone()
        return t.astimezone(self.tz) if self.tz is not None else t.astimezone()

    def next_change(self, t: datetime, horizon_days: int = 8) -> tuple[datetime, str] | None:
        """When the due layout next changes after ``t``, and to what (minute resolution)."""
        t = self.localise(t).replace(second=0, microsecond=0)
        current = self.due(t)
        # Only rule boundaries can change the answer: check those, in time order.
        candidates = set()
        for day in range(horizon_days + 1):
            d = (t + timedelta(days=day)).date()
            for r in self.rules:
                for clock in (r.start, r.end):
                    if clock == END_OF_DAY:  # "24:00": the change is at the next midnight
                        c = datetime.combine(d + timedelta(days=1), time(0), tzinfo=t.tzinfo)
                    else:
                        c = datetime.combine(d, clock, tzinfo=t.tzinfo)
                    if c > t:
                        candidates.add(c)
        for c in sorted(candidates):
            layout = self.due(c)
            if layout != current:
                return c, layout
        return None


def parse_days(text: str) -> frozenset[int]:
    """``mon-fri``, ``sat,sun``, ``daily`` or ``all`` → weekday numbers."""
    text = text.strip().lower()
    if text in ("daily", "all", "*"):
        return frozenset(range(7))
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            i, j = WEEKDAYS.index(a[:3]), WEEKDAYS.index(b[:3])
            k = i
            while True:
                out.add(k)
                if k == j:
                    break
                k = (k + 1) % 7
        else:
            out.add(WEEKDAYS.index(part[:3]))
    return frozenset(out)


_CLOCK = re.compile(r"([0-9]{1,2}):([0-9]{2})")


def parse_clock(text: str) -> time:
    """``07:30`` → time(7, 30); ``24:00`` means the end of the day.  ASCII digits only,
    two at most for the hour (ValueError otherwise: int() read 20-digit hours and
    Arabic-Indic digits, and time() then overflowed)."""
    m = _CLOCK.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not HH:MM: {text[:20]!r}")
    hour, minute = int(m[1]), int(m[2])
    if (hour, minute) == (24, 0):
        return END_OF_DAY
    return time(hour, minute)
