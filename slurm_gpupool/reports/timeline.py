"""Piecewise-constant levels over time (GPU-equivalents allocated, or offered) and their integrals.

A level is a set of (time, delta) events.  Its integral up to any time is read
off a cumulative sum with ``searchsorted``: exact (no sampling), and linear in
the number of events, so a year of a million jobs costs a sort.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Level:
    times: np.ndarray  # event times (epoch s), ascending
    level: np.ndarray  # level right after each event
    area: np.ndarray  # integral from the first event up to each event time

    @staticmethod
    def from_intervals(start: np.ndarray, end: np.ndarray, value: np.ndarray) -> Level:
        """A level that is the sum of ``value`` over the intervals [start, end)."""
        keep = end > start
        t = np.concatenate([start[keep], end[keep]]).astype(float)
        d = np.concatenate([value[keep], -value[keep]]).astype(float)
        if not len(t):
            return Level(np.array([0.0]), np.array([0.0]), np.array([0.0]))
        order = np.argsort(t, kind="stable")
        t, d = t[order], d[order]
        level = np.cumsum(d)
        area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])
        return Level(t, level, area)

    def integral(self, at: np.ndarray) -> np.ndarray:
        """∫ level dt from −∞ to each time in ``at`` (level-seconds)."""
        at = np.asarray(at, dtype=float)
        k = np.searchsorted(self.times, at, side="right") - 1
        kk = np.clip(k, 0, len(self.times) - 1)
        val = self.area[kk] + self.level[kk] * (at - self.times[kk])
        return np.where(k < 0, 0.0, val)

    def between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """∫ level dt over each [a, b) (level-seconds)."""
        return self.integral(b) - self.integral(a)
