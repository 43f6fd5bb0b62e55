"""The elastic policy in a replay: the engine's demand-driven hook calling the same
:func:`slurm_gpupool.core.policy.elastic.decide` as ``gpupool repartition --elastic`` (pure).

Every ``tick_s`` (the cron interval of ``repartition --scheduled``) the switcher turns the
engine's nodes and queue into the decision's inputs and returns its actions.  In the
schedule's clock periods (outside ``elastic.during``) it makes the clock's switches
instead, as ``--scheduled`` does.

What the queue shows: a job the wrapper refused (no allowed layout holds it:
``Pending.need`` None) is not in squeue, so it is not demand here either.  In elastic
periods jobs are mapped in ``UNION``, the offers of every allowed layout together: a
user asks for the GRES that fits the work (``--gres=gpu:1g.5gb:1``), which floors keep
submittable (docs/elastic.md), and it waits in the queue until a node offers it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_gpupool.core.policy.elastic import Bounds, Decision, Job, Node, Records, Shape, decide
from slurm_gpupool.simulate.engine import NodeState, Pending, Switcher

UNION = "elastic"  # the mapping layout of elastic periods (covers no node: the clock switches nothing)


def cron_interval_s(cron: str) -> float:
    """How often ``repartition.cron`` runs: ``*/N * * * *`` is N minutes; else hourly (``M * * * *``) or 5 minutes."""
    minute, hour, *_ = [*cron.split(), "*", "*"]
    m = re.fullmatch(r"\*/(\d+)", minute)
    if m and hour == "*":
        return 60.0 * int(m.group(1))
    if minute == "*" and hour == "*":
        return 60.0
    if minute.isdigit() and hour == "*":
        return 3600.0
    return 300.0


@dataclass
class Stats:
    decisions: int = 0  # decisions that switched nodes
    demand: int = 0  # node switches for demand
    floor: int = 0  # node switches to restore a floor
    drain: int = 0  # busy nodes reserved for starving jobs (switched once idle)
    log: list[Decision] = field(default_factory=list)  # the decisions that switched (keep_log)


class ElasticSwitcher(Switcher):
    """``boundaries``: the clock's layouts, with ``UNION`` where an elastic period begins."""

    def __init__(
        self,
        name: str,
        boundaries: Sequence[tuple[float, str]],
        shapes: Mapping[str, Mapping[str, Shape]],
        allowed: Mapping[str, tuple[str, ...]],
        bounds: Bounds,
        tick_s: float,
        keep_log: bool = False,
        idle_first: bool = True,  # schedule.elastic.idle_first: submissions take an idle whole GPU
    ) -> None:
        super().__init__(name, boundaries)
        self.idle_first = idle_first
        self.shapes, self.allowed, self.bounds = shapes, allowed, bounds
        self.tick_s = tick_s
        self.settle_s = max(bounds.window_s, bounds.cooldown_s, bounds.starve_s) + 2 * tick_s
        self.last = -math.inf
        self.stats = Stats()
        self.keep_log = keep_log
        self.draining: set[str] = set()

    def drains(self, node: str) -> bool:
        return node in self.draining

    def idle_now(self, t: float) -> bool:
        return self.idle_first and self.due(t) == UNION

    def decide(self, now: float, nodes: Sequence[NodeState], pending: Sequence[Pending]) -> list[tuple[str, str]]:
        period = self.due(now)
        self.draining = set()
        if period != UNION:  # a clock period: every node in the due layout (engine checks coverage)
            return [(n.name, period) for n in nodes if n.target is None and n.layout != period]
        view = [
            Node(
                n.name,
                n.layout,
                self.shapes[n.name],
                self.allowed[n.name],
                n.idle,
                n.usable,
                n.target,
                n.since_s,
                dict(n.free),
                n.expected_free_s if not n.idle else now,
            )
            for n in nodes
        ]
        jobs = [
            Job(str(i), p.need.kind, p.need.types, p.need.count, p.need.nodes, p.waited_s)
            for i, p in enumerate(pending)
            if p.need is not None
        ]
        d = decide(now, view, jobs, self.bounds, self.last)
        if d.actions:
            self.last = now
            self.stats.decisions += 1
            self.stats.demand += sum(1 for a in d.actions if a.reason == "demand")
            self.stats.floor += sum(1 for a in d.actions if a.reason == "floor")
            self.stats.drain += sum(1 for a in d.actions if a.reason == "drain")
            self.draining = {a.node for a in d.actions if a.reason == "drain"}
            if self.keep_log:
                self.stats.log.append(d)
        return [(a.node, a.target) for a in d.actions]


def records(offers: Sequence[object]) -> Shape:
    """``pool.capacity.Offer``s as the decision's records."""
    return tuple(
        Records(o.type, o.kind, o.count, o.eq_each, o.shares)  # type: ignore[attr-defined]
        for o in offers
    )
