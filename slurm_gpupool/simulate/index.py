"""Which nodes offer each GRES type now, and how soon each could hold a request (pure).

A job walks only the nodes whose current layout offers its types (``by_type``, ``offering``).
Backfill looks at nodes soonest first: per request shape, a list of (lower bound of the start,
node, type) kept sorted across passes (``_by_bound``), since on a large pool rebuilding it for
every tested job would cost more than the search it prunes.  A job's start or end moves only
its node's entries of the types it holds (``_records_changed``); a switch, which changes which
nodes offer what or which take jobs, drops the lists, and they are rebuilt when next asked for.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence

from slurm_gpupool.simulate.earliest import lower_bound
from slurm_gpupool.simulate.records import Part, SimNode, timeline
from slurm_gpupool.simulate.replay import ReplayState
from slurm_gpupool.simulate.state import Need


class NodeIndex(ReplayState):
    """The nodes by type offered, and by how soon a request's records are idle on them."""

    def _index_types(self) -> None:
        """Which nodes offer each type now, in node order (a job walks only those)."""
        by: dict[str, list[SimNode]] = {}
        for n in self.nodes:
            for t in (*n.cap, *n.shared):
                by.setdefault(t, []).append(n)
        self.by_type = by
        self.offering = {}
        self._forget_bounds()  # the nodes offering each type changed

    def _configured(self, need: Need) -> bool:
        return len(self._offering(need.types)) >= need.nodes

    def _offering(self, types: tuple[str, ...]) -> list[SimNode]:
        """The nodes whose current layout has one of ``types``, in node order."""
        nodes = self.offering.get(types)
        if nodes is None:
            if len(types) == 1:
                nodes = self.by_type.get(types[0], [])
            else:
                nodes = sorted({n.index: n for t in types for n in self.by_type.get(t, ())}.values(), key=_index)
            self.offering[types] = nodes
        return nodes

    def _by_bound(self, need: Need) -> list[tuple[float, int, str]]:
        """(lower bound of the start, node, type) for every usable node offering one of
        ``need.types``, soonest first (NOW: it could start now): when ``need.count`` records
        are first idle as running jobs reach their limits (``lower_bound``).  The bound
        ignores reservations, which can only make it later.  Kept across passes: a job's start
        or end moves only its node's entries (``_records_changed``); a switch rebuilds them."""
        key = (need.types, need.count)
        lst = self.bound_lists.get(key)
        if lst is None:
            lst = []
            for typ in need.types:
                for n in self.by_type.get(typ, ()):
                    if n.usable:
                        lb = self._bounds_of(n)[(*key, typ)] = lower_bound(n, typ, need.count, self._line(n, typ))
                        lst.append((lb, n.index, typ))
            lst.sort()
            self.bound_lists[key] = lst
        return lst

    def _line(self, n: SimNode, typ: str) -> list[tuple[float, list[Part]]]:
        line = n.lines.get(typ)
        if line is None:
            line = n.lines[typ] = timeline(n, typ)
        return line

    def _records_changed(self, n: SimNode, parts: Sequence[Part]) -> None:
        """A job started or ended on ``n``: its timeline and its entries in the bound lists
        of those types are out of date."""
        bounds = self._bounds_of(n)
        for typ in {part[1] for part in parts}:
            n.lines.pop(typ, None)
            for (types, count, t), old in list(bounds.items()):
                if t != typ:
                    continue
                lst = self.bound_lists[(types, count)]
                del lst[bisect_left(lst, (old, n.index, t))]
                lb = bounds[(types, count, t)] = lower_bound(n, t, count, self._line(n, t))
                insort(lst, (lb, n.index, t))

    def _bounds_of(self, n: SimNode) -> dict[tuple[tuple[str, ...], int, str], float]:
        """``n``'s entries in the current bound lists (those of forgotten lists dropped)."""
        if n.bounds_epoch != self.bounds_epoch:
            n.bounds.clear()
            n.bounds_epoch = self.bounds_epoch
        return n.bounds

    def _set_usable(self, n: SimNode, usable: bool) -> None:
        """A node takes jobs again, or stops (a switch): the bound lists hold usable nodes only."""
        n.usable = usable
        self._forget_bounds()

    def _forget_bounds(self) -> None:
        """Nodes came or went (a switch): the bound lists are rebuilt when next asked for."""
        self.bound_lists = {}
        self.bounds_epoch += 1  # each node's entries: cleared when next used

    def _idle_now(self, typ: str) -> bool:
        """Does any usable node have an idle record (or shard) of ``typ``?"""
        for n in self.by_type.get(typ, ()):
            if not n.usable:
                continue
            if n.free.get(typ, 0) > 0:
                return True
            gpus = n.shared.get(typ)
            if gpus is not None and any(0 <= u < n.shares[typ] for u in gpus):
                return True
        return False


def _index(n: SimNode) -> int:
    return n.index
