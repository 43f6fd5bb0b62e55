"""What a replay measures as it goes: capacity and allocation per period and GRES type,
node-seconds per layout, and fragmentation samples (pure).

Integrals are kept lazily, per type: a type's capacity and allocation are added up to now
only when one of them changes, so a job's start or end costs one type's update, not the
pool's.  Everything is measured over ``[start, window]`` (while jobs arrive): before the
first submission the pool only waits (a site's accounting starts at its first day's
midnight: counted from there, a two-hour run at 70 % read 6 %), and after the last only
the drain of the longest jobs is left, which no policy changes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from slurm_gpupool.simulate.records import SimNode, usable_eq
from slurm_gpupool.simulate.state import Need


class Meter:
    """Capacity and allocation integrals, layout node-seconds and samples of one replay."""

    def __init__(self, window: float, period: str, typical_share: float, start: float = 0.0) -> None:
        self.window, self.period, self.typical_share = window, period, typical_share
        self.start = min(start, window)
        self.cap_int: dict[tuple[str, str], float] = {}  # (period, type) -> GPU-eq seconds offered
        self.alloc_int: dict[tuple[str, str], float] = {}  # (period, type) -> GPU-eq seconds allocated
        self.cap_now: dict[str, float] = {}
        self.alloc_now: dict[str, float] = {}
        self.last_t: dict[str, float] = {}
        self.layout_s: dict[str, float] = {}
        self.samples: list[tuple[float, float, float, float]] = []
        self.typical: Counter[Need] = Counter()  # requests as submitted (FGD's typical tasks)

    def flush(self, typ: str, t: float) -> None:
        """Integrate one type's capacity and allocation up to ``t`` (lazily, per type)."""
        last = self.last_t.get(typ, self.start)
        t = self._clamp(t)
        if t > last:
            key = (self.period, typ)
            self.cap_int[key] = self.cap_int.get(key, 0.0) + self.cap_now.get(typ, 0.0) * (t - last)
            self.alloc_int[key] = self.alloc_int.get(key, 0.0) + self.alloc_now.get(typ, 0.0) * (t - last)
        self.last_t[typ] = t

    def _clamp(self, t: float) -> float:
        return min(max(t, self.start), self.window)

    def flush_all(self, t: float) -> None:
        for typ in list(self.cap_now):
            self.flush(typ, t)

    def new_period(self, layout: str, t: float) -> None:
        """A switch run to ``layout`` begins a new period at ``t``."""
        self.flush_all(t)
        self.period = layout

    def capacity(self, n: SimNode, sign: int, t: float) -> None:
        """``n``'s records join (``sign`` +1) or leave (-1) the capacity at ``t``."""
        for typ, c in n.cap.items():
            self.flush(typ, t)
            self.cap_now[typ] = self.cap_now.get(typ, 0.0) + sign * c * n.eq[typ]
        for typ, gpus in n.shared.items():
            self.flush(typ, t)
            self.cap_now[typ] = self.cap_now.get(typ, 0.0) + sign * len(gpus) * n.eq[typ]

    def alloc(self, typ: str, eq: float, t: float) -> None:
        self.flush(typ, t)
        self.alloc_now[typ] = self.alloc_now.get(typ, 0.0) + eq

    def begin(self, layout: str) -> None:
        """A node is in ``layout`` when the replay begins (its node-seconds count from ``start``)."""
        self.layout_s[layout] = self.layout_s.get(layout, 0.0) - self.start

    def relayout(self, old: str, new: str, t: float) -> None:
        """A node left ``old`` for ``new`` at ``t`` (node-seconds: + at the end, - at the start)."""
        self.layout_s[old] = self.layout_s.get(old, 0.0) + self._clamp(t)
        self.layout_s[new] = self.layout_s.get(new, 0.0) - self._clamp(t)

    def close(self, t: float, layouts: Iterable[str]) -> None:
        """The replay ended at ``t`` with the nodes in ``layouts``."""
        self.flush_all(t)
        for layout in layouts:
            self.layout_s[layout] = self.layout_s.get(layout, 0.0) + self._clamp(t)

    def sample(self, now: float, nodes: Iterable[SimNode]) -> None:
        """Capacity, idle and fragmented GPU-equivalents now.  Fragmentation is FGD's measure on
        our GRES: for each typical request (weighted by frequency), the idle capacity of a
        node that request cannot use there."""
        total = sum(self.cap_now.values())
        typical = _typical(self.typical, self.typical_share)
        idle = frag = 0.0
        for n in nodes:
            if n.out_until > now:
                continue
            f = n.free_eq()
            if f <= 1e-12:
                continue
            idle += f
            frag += sum(w * (f - max(usable_eq(n, need, t) for t in need.types)) for need, w in typical)
        if self.start <= now <= self.window:
            self.samples.append((now, total, idle, frag))


def _typical(counts: Counter[Need], share: float) -> list[tuple[Need, float]]:
    """FGD's typical tasks: the most frequent requests up to ``share`` of all, as weights."""
    total = sum(counts.values())
    if not total:
        return []
    out, seen = [], 0
    for need, c in counts.most_common():
        out.append((need, c))
        seen += c
        if seen >= share * total:
            break
    return [(n, c / seen) for n, c in out]
