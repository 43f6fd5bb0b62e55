"""When nodes change layout: the interface a policy gives the replay (pure).

Apart from the engine because the policies (``policies.py``, ``elastic.py``) implement it and
need nothing else of the replay but what it shows them (``NodeState``, ``Pending``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from slurm_gpupool.simulate.state import NodeState, Pending


class Switcher:
    """When nodes change layout: the clock's schedule, a static layout, or demand.

    ``boundaries`` are (time, layout) pairs: from that time on, that layout is due; the
    first one is at time 0 or before.  A demand-driven switcher also sets ``tick_s`` and
    answers ``decide`` every tick with (node, layout) switches, which the engine makes as
    the repartitioner would (an idle node at once, a busy one once its jobs end)."""

    tick_s: float = 0.0
    # how long a demand-driven switcher may stay quiet while jobs wait for a switch (its
    # batching window, cool-downs, max_wait): with nothing else left, the replay ticks on
    # that long before it leaves the waiting jobs unstarted
    settle_s: float = 0.0

    def __init__(self, name: str, boundaries: Sequence[tuple[float, str]]):
        if not boundaries:
            raise ValueError("a switcher needs at least its initial layout")
        self.name = name
        self.times = [t for t, _ in boundaries]
        self.layouts = [lay for _, lay in boundaries]

    def decide(self, now: float, nodes: Sequence[NodeState], pending: Sequence[Pending]) -> list[tuple[str, str]]:
        """Switches to make now (demand-driven policies); the clock's make none here."""
        return []

    def idle_now(self, t: float) -> bool:
        """Do submissions at ``t`` take what is idle now (``gpupool-sbatch --gpu-mem`` in an
        elastic period: a whole GPU when no slice of the chosen profile is idle)?"""
        return False

    def drains(self, node: str) -> bool:
        """Was ``node``'s last switch a drain (reserved busy, switched by the first cron run
        after its jobs end, never requeued: ``--deadline 0``)?"""
        return False

    def due(self, t: float) -> str:
        return self.layouts[max(0, bisect_right(self.times, t) - 1)]

    def upcoming(self, t: float) -> list[tuple[float, str]]:
        i = bisect_right(self.times, t)
        return list(zip(self.times[i:], self.layouts[i:]))
