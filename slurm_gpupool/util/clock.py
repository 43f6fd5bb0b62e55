"""The clock, as one small interface: what time it is, and waiting.

The repartitioner, its journal, the elastic step and ``--scheduled`` read time only
through a :class:`Clock`, so a test hands them one that moves only when someone waits
(``slurm/fake.py``'s ``FakeClock``): a run that waits minutes for jobs, grace times and
verification takes milliseconds, and what it decides at each moment is exact.
:class:`SystemClock` is the one place that reads the real time.
"""

from __future__ import annotations

import time
from datetime import datetime, tzinfo
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch (``time.time()``)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait this long (``time.sleep``)."""
        ...

    def now(self, tz: tzinfo | None = None) -> datetime:
        """The time as a datetime: naive local without ``tz`` (``datetime.now(tz)``)."""
        ...


class SystemClock:
    """The real time."""

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def now(self, tz: tzinfo | None = None) -> datetime:
        return datetime.now(tz)


SYSTEM = SystemClock()


def iso_local(epoch: float) -> str:
    """``2025-03-03T08:00:31+0100``: how the journal writes a moment (local time, its offset)."""
    return datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z")
