"""Demand-driven (elastic) repartitioning: which idle nodes go to which layout now (pure).

One function, :func:`decide`, from (demand, cluster view, bounds, time) to actions, each
explained.  The real repartitioner (``gpupool repartition --elastic``, built from
``squeue``/``sinfo``) and the simulator (``gpupool simulate``, built from the replay's
nodes and queue) both call it, so what a simulation measures is what runs.

The rules, in the order they apply:

1. **Batching window.**  A pending job counts as demand only once it has waited
   ``window_s`` (Slurm starts what fits within a scheduler pass or two; what still waits
   after the window does not fit), and after a decision that switched nodes the next one
   comes no sooner than ``window_s`` later: switches are made in batches, one restart of
   the controller per batch, and the effect of one batch is seen before the next.
2. **Unmet demand.**  Of the counted jobs (priority order), those that the idle records
   of nodes not switching could start now are left out (Slurm is about to start them,
   or they wait behind a higher-priority job: a switch would not help), and so are
   those that nodes already switching will take in their new layout.  The rest is
   *unmet*, grouped by request (kind, types, count per node).
3. **Floors first.**  A floor (``floors``: per kind ``whole``/``mig``/``shared``, or per
   GRES type, in GPU-equivalents) is kept at all times: no switch may take capacity
   below it, and a floor not met (a start from all-whole, say) is restored first, with
   idle nodes, whatever the demand.  A floor of at least one device per GRES type your
   users submit keeps that type *submittable*: Slurm refuses at submission a job whose
   GRES type no node has, so demand for a layout installed nowhere never reaches the
   queue and cannot be seen (see docs/elastic.md).
4. **Demand.**  Candidates are idle, usable nodes not switching, past their cool-down
   (``cooldown_s`` since their last switch).  For each, each layout it may take
   (``allowed``) that keeps every floor: the *expected gain* is the GPU-equivalents of
   unmet jobs that node in that layout would start (first fit, priority order).  The
   best (node, layout) is taken if its gain is at least ``min_gain_eq`` (or it starts a
   job that has waited ``starve_s``: no request is too small to ever be served); the jobs it
   serves leave the unmet demand; repeat while fewer than ``max_changing`` nodes are
   switching.
5. **Drain for starving demand** (``drain_within_s`` > 0).  When no idle node serves
   jobs that have waited ``starve_s``, a busy node may be taken instead: usable, past
   its cool-down, every job on it due to end (time limits) within ``drain_within_s``,
   and a layout that starts a starving job.  The earliest to be free wins (then the
   larger gain).  It is reserved now (no new job lands there; its jobs run to their
   end, none is killed) and switches once idle.  Under a load that keeps every node
   busy, idle nodes never come, and without this slice or shard jobs could wait for
   ever.

Thrash is bounded by construction: a node switches at most once per ``cooldown_s``, and
at most ``max_changing`` nodes switch per ``window_s`` (:func:`max_switches_per_hour`).

Multi-node jobs count per node part (a 2-node job is two parts of half its size): the
gain of a node is what it alone would hold.  Nodes are whole units: a node's layout
changes only when it is idle, at once or after a drain (per-GPU changes while other GPUs
run jobs are not made; docs/elastic.md says what each Slurm release allows).

Time is seconds on any clock (epoch on the controller, replay seconds in simulation).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

WHOLE, MIG, SHARED = "whole", "mig", "shared"
KINDS = (WHOLE, MIG, SHARED)
GPU, SHARD = "gpu", "shard"
_EPS = 1e-9


@dataclass(frozen=True)
class Records:
    """One GRES type a node offers in one layout."""

    type: str
    kind: str  # whole | mig | shared
    count: int  # records: whole GPUs, MIG devices, or time-sliced GPUs (shared)
    eq_each: float  # GPU-equivalents of one record (a time-sliced GPU: 1.0)
    shares: int = 0  # shared: shards per GPU


Shape = tuple[Records, ...]


def shape_eq(shape: Shape, key: str | None = None) -> float:
    """GPU-equivalents of a shape, of one kind or GRES type (``key``), or all (None)."""
    return sum(r.count * r.eq_each for r in shape if key is None or key in (r.kind, r.type))


@dataclass(frozen=True)
class Node:
    """A node as the policy sees it."""

    name: str
    layout: str | None  # installed (None: unknown: never a candidate)
    shapes: Mapping[str, Shape]  # layout -> what it offers there: its current layout and each allowed
    allowed: tuple[str, ...]  # layouts the policy may put it in
    idle: bool  # no job running on it
    usable: bool  # up, not drained by someone, not held
    target: str | None = None  # switching to this layout now
    last_switch_s: float = -math.inf  # when it last came back from a switch
    free: Mapping[str, int] = field(default_factory=dict)  # idle records now (shared types: idle shards)
    free_at_s: float = math.inf  # busy: when its last job reaches its time limit (inf: no limit known)

    @property
    def effective(self) -> str | None:
        """Its layout once the switches under way are done."""
        return self.target or self.layout


@dataclass(frozen=True)
class Job:
    """A pending job's GRES request, per node, and how long it has waited."""

    job_id: str
    kind: str  # gpu | shard
    types: tuple[str, ...]  # the GRES type asked for, then types that hold it as well
    count: int  # per node
    nodes: int = 1
    waited_s: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.types[0]}:{self.count}" + (f" x{self.nodes} nodes" if self.nodes > 1 else "")


@dataclass(frozen=True)
class Bounds:
    """What the admin allows (``schedule.elastic`` in the pool config)."""

    floors: Mapping[str, float] = field(default_factory=dict)  # kind or GRES type -> GPU-eq kept
    max_changing: int = 2  # nodes switching at once
    window_s: float = 300.0  # batching window (and how long a job waits before it counts)
    cooldown_s: float = 3600.0  # per node, between two switches
    min_gain_eq: float = 1.0  # GPU-equivalents of waiting jobs a switch must serve
    starve_s: float = 3600.0  # a switch that starts a job waiting this long is made whatever its gain
    drain_within_s: float = 0.0  # a busy node whose jobs end within this may be drained for starving jobs (0: never)


@dataclass(frozen=True)
class Action:
    """One node to switch, and why."""

    node: str
    current: str
    target: str
    reason: str  # demand | floor | drain (a busy node, reserved now, switching once its jobs end)
    gain_eq: float  # GPU-equivalents of unmet jobs it serves (demand), or floor capacity added
    jobs: tuple[str, ...]  # the job ids it is expected to serve
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "from": self.current,
            "to": self.target,
            "reason": self.reason,
            "gain_eq": round(self.gain_eq, 3),
            "jobs": list(self.jobs),
            "why": self.why,
        }


@dataclass(frozen=True)
class Unmet:
    """Waiting jobs of one request that no idle capacity holds now."""

    label: str
    jobs: int
    eq: float  # GPU-equivalents they would hold (0: no layout offers the type)
    longest_wait_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "request": self.label,
            "jobs": self.jobs,
            "gpu_eq": round(self.eq, 3),
            "longest_wait_s": self.longest_wait_s,
        }


@dataclass(frozen=True)
class Decision:
    now: float
    actions: tuple[Action, ...]
    unmet: tuple[Unmet, ...]  # before the actions
    held: tuple[tuple[str, str], ...]  # (node or "-", why nothing / not more was done)
    floors: tuple[tuple[str, float, float], ...]  # (key, floor, capacity after the actions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "actions": [a.to_dict() for a in self.actions],
            "unmet": [u.to_dict() for u in self.unmet],
            "held": [{"node": n, "why": w} for n, w in self.held],
            "floors": [{"key": k, "floor": f, "capacity_eq": round(c, 3)} for k, f, c in self.floors],
        }

    def by_target(self) -> dict[str, list[str]]:
        """Target layout -> nodes (one repartitioner run per target)."""
        out: dict[str, list[str]] = {}
        for a in self.actions:
            out.setdefault(a.target, []).append(a.node)
        return out


def max_switches_per_hour(bounds: Bounds, nodes: int) -> float:
    """The most node switches an hour can see: per node one per cool-down, and at most
    ``max_changing`` per batching window."""
    per_node = nodes * math.ceil(3600 / bounds.cooldown_s) if bounds.cooldown_s > 0 else math.inf
    per_window = bounds.max_changing * math.ceil(3600 / bounds.window_s) if bounds.window_s > 0 else math.inf
    return min(per_node, per_window)


# -- packing -----------------------------------------------------------------------------


class _Pool:
    """Idle records of one node, to fit jobs in (plain types: records; shared: shards per GPU)."""

    def __init__(self, shape: Shape | None = None, free: Mapping[str, int] | None = None) -> None:
        self.plain: dict[str, int] = {}
        self.shards: dict[str, list[int]] = {}  # type -> free shards per GPU
        self.shares: dict[str, int] = {}
        self.eq: dict[str, float] = {}
        for r in shape or ():
            self.eq[r.type] = r.eq_each
            if r.kind == SHARED:
                self.shares[r.type] = r.shares
                self.shards[r.type] = [r.shares] * r.count
            else:
                self.plain[r.type] = r.count
        if free is not None:  # a busy node: what is idle now (shards: a total, spread over its GPUs)
            for t in list(self.plain):
                self.plain[t] = max(0, min(self.plain[t], free.get(t, 0)))
            for t, gpus in self.shards.items():
                left = free.get(t, 0)
                for g in range(len(gpus)):
                    gpus[g] = min(self.shares[t], left)
                    left -= gpus[g]

    def take(self, job: Job) -> float | None:
        """Fit one node part of ``job`` (first fit over its types); its GPU-eq, None if it does not fit."""
        for t in job.types:
            if job.kind == GPU and t in self.plain:
                if self.plain[t] >= job.count:
                    self.plain[t] -= job.count
                    return job.count * self.eq[t]
            elif t in self.shards:
                s, gpus = self.shares[t], self.shards[t]
                if job.kind == GPU:  # time-sliced GPUs given whole
                    idle = [g for g, f in enumerate(gpus) if f == s][: job.count]
                    if len(idle) == job.count:
                        for g in idle:
                            gpus[g] = 0
                        return float(job.count) * self.eq[t]
                else:
                    for g, f in enumerate(gpus):
                        if f >= job.count:
                            gpus[g] -= job.count
                            return job.count / s * self.eq[t]
        return None


def _parts(jobs: Iterable[Job]) -> list[Job]:
    """Each job's node parts, in order."""
    out = []
    for j in jobs:
        out += [j] * j.nodes
    return out


def _fit_all(parts: list[Job], pools: Sequence[_Pool]) -> tuple[list[Job], list[tuple[Job, float]]]:
    """First fit of the parts, in order, over the pools: (left over, [(fitted, eq)])."""
    left, fitted = [], []
    for p in parts:
        for pool in pools:
            eq = pool.take(p)
            if eq is not None:
                fitted.append((p, eq))
                break
        else:
            left.append(p)
    return left, fitted


def _capacity(nodes: Sequence[Node], layouts: Mapping[str, str | None], key: str) -> float:
    return sum(shape_eq(n.shapes.get(layouts[n.name] or "", ()), key) for n in nodes)


def _fmt_wait(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f}h"
    return f"{s / 60:.0f}m" if s >= 60 else f"{s:.0f}s"


def _part_eq(p: Job, nodes: Sequence[Node]) -> float:
    """GPU-equivalents one node part of ``p`` holds (its first type any shape names; 0 if none)."""
    for n in nodes:
        for shape in n.shapes.values():
            for r in shape:
                if r.type in p.types:
                    return p.count * r.eq_each / (r.shares if p.kind == SHARD and r.shares else 1)
    return 0.0


def _summary(parts: Sequence[Job], nodes: Sequence[Node]) -> list[Unmet]:
    """Unmet parts grouped by request, in the order the requests first appear."""
    by: dict[str, tuple[set[str], float, float]] = {}
    eq: dict[tuple[str, tuple[str, ...], int], float] = {}
    for p in parts:
        ids, wait, total = by.get(p.label, (set(), 0.0, 0.0))
        ids.add(p.job_id)
        k = (p.kind, p.types, p.count)
        if k not in eq:
            eq[k] = _part_eq(p, nodes)
        by[p.label] = (ids, max(wait, p.waited_s), total + eq[k])
    return [Unmet(label, len(ids), total, wait) for label, (ids, wait, total) in by.items()]


def _describe_served(fitted: Sequence[tuple[Job, float]]) -> str:
    by: dict[str, tuple[set[str], float]] = {}
    for p, _ in fitted:
        ids, wait = by.get(p.label, (set(), 0.0))
        ids.add(p.job_id)
        by[p.label] = (ids, max(wait, p.waited_s))
    return "; ".join(
        f"{len(ids)} job{'s' if len(ids) > 1 else ''} {label} (waited up to {_fmt_wait(w)})"
        for label, (ids, w) in by.items()
    )


# -- the decision ------------------------------------------------------------------------


def decide(
    now: float,
    nodes: Sequence[Node],
    jobs: Sequence[Job],
    bounds: Bounds,
    last_decision_s: float = -math.inf,
) -> Decision:
    """The switches to make now (see the module's rules), each explained.

    ``jobs`` are the pending jobs in priority order; ``last_decision_s`` is when the last
    decision that switched nodes was made (the batching window counts from it)."""
    held: list[tuple[str, str]] = []
    layouts: dict[str, str | None] = {n.name: n.effective for n in nodes}
    floors = dict(bounds.floors)

    def floor_report() -> tuple[tuple[str, float, float], ...]:
        return tuple((k, f, _capacity(nodes, layouts, k)) for k, f in sorted(floors.items()))

    counted = [j for j in jobs if j.waited_s >= bounds.window_s]
    # what idle capacity would start now, and what switches under way will take
    steady = [_Pool(n.shapes.get(n.layout or "", ()), n.free) for n in nodes if n.usable and not n.target]
    incoming = [_Pool(n.shapes.get(n.target, ())) for n in nodes if n.target]
    left, _ = _fit_all(_parts(counted), steady)
    unmet_parts, _ = _fit_all(left, incoming)
    unmet = tuple(_summary(unmet_parts, nodes))
    if now - last_decision_s < bounds.window_s:
        wait = last_decision_s + bounds.window_s - now
        held.append(
            (
                "-",
                f"batching window: the last switches were {_fmt_wait(now - last_decision_s)} ago;"
                f" next decision in {_fmt_wait(wait)}",
            )
        )
        return Decision(now, (), unmet, tuple(held), floor_report())

    switching = sum(1 for n in nodes if n.target)
    actions: list[Action] = []

    def candidates(busy: bool = False) -> list[Node]:
        """Idle nodes free to switch; ``busy``: busy ones whose jobs end within the drain bound."""
        out = []
        for n in nodes:
            if n.name in {a.node for a in actions} or n.target or n.layout is None or not n.usable:
                continue
            if n.idle == busy or (busy and n.free_at_s - now > bounds.drain_within_s):
                continue
            if now - n.last_switch_s < bounds.cooldown_s:
                left_s = n.last_switch_s + bounds.cooldown_s - now
                if not any(h[0] == n.name for h in held):
                    held.append(
                        (
                            n.name,
                            f"cool-down: switched {_fmt_wait(now - n.last_switch_s)} ago,"
                            f" free to switch in {_fmt_wait(left_s)}",
                        )
                    )
                continue
            out.append(n)
        return out

    def breaks_floor(n: Node, to: str) -> str:
        """The floor this switch would break ("" if none): a floor may not drop below its
        level, nor drop further when it is already below it."""
        trial = dict(layouts)
        trial[n.name] = to
        for key, f in sorted(floors.items()):
            before, after = _capacity(nodes, layouts, key), _capacity(nodes, trial, key)
            if after + _EPS < f and after + _EPS < before:
                return f"{key} would drop to {after:g} GPU-eq, below its floor {f:g}"
        return ""

    def room() -> bool:
        if switching + len(actions) >= bounds.max_changing:
            held.append(
                (
                    "-",
                    f"at most {bounds.max_changing} nodes switch at once ({switching} switching already)"
                    if switching
                    else f"at most {bounds.max_changing} nodes switch at once",
                )
            )
            return False
        return True

    # 1. floors not met: restore them with idle nodes
    for key, f in sorted(floors.items()):
        while _capacity(nodes, layouts, key) + _EPS < f:
            if not room():
                break
            best: tuple[float, str, Node, str] | None = None
            for n in candidates():
                for to in n.allowed:
                    if to == layouts[n.name] or to not in n.shapes:
                        continue
                    add = shape_eq(n.shapes[to], key) - shape_eq(n.shapes.get(layouts[n.name] or "", ()), key)
                    if add <= _EPS or breaks_floor(n, to):
                        continue
                    if best is None or add > best[0] + _EPS or (abs(add - best[0]) <= _EPS and n.name < best[1]):
                        best = (add, n.name, n, to)
            if best is None:
                have = _capacity(nodes, layouts, key)
                held.append(
                    (
                        "-",
                        f"floor {key} ({f:g} GPU-eq) not met ({have:g}): no idle node past its cool-down can add to it",
                    )
                )
                break
            add, _, n, to = best
            cur = layouts[n.name] or ""
            have = _capacity(nodes, layouts, key)
            actions.append(
                Action(
                    n.name,
                    cur,
                    to,
                    "floor",
                    add,
                    (),
                    f"floor: {key} has {have:g} GPU-eq, below its floor {f:g}; layout {to} adds {add:g}",
                )
            )
            layouts[n.name] = to

    def drain() -> tuple[Action, list[Job]] | None:
        """Rule 5: the busy node, free soonest, whose new layout starts a starving job."""
        if bounds.drain_within_s <= 0 or not any(p.waited_s >= bounds.starve_s for p in unmet_parts):
            return None
        best: tuple[tuple[float, float, str], Node, str, list[tuple[Job, float]], list[Job]] | None = None
        for n in candidates(busy=True):
            for to in n.allowed:
                if to == layouts[n.name] or to not in n.shapes or breaks_floor(n, to):
                    continue
                rest, fitted = _fit_all(unmet_parts, [_Pool(n.shapes[to])])
                if not any(p.waited_s >= bounds.starve_s for p, _ in fitted):
                    continue
                key = (n.free_at_s, -sum(eq for _, eq in fitted), n.name)
                if best is None or key < best[0]:
                    best = (key, n, to, fitted, rest)
        if best is None:
            held.append(
                (
                    "-",
                    f"jobs have waited over {_fmt_wait(bounds.starve_s)}, and no busy node past its cool-down"
                    f" whose jobs end within {_fmt_wait(bounds.drain_within_s)} may take a layout that starts them",
                )
            )
            return None
        (free_at, neg_gain, _), n, to, fitted, rest = best
        served = tuple(sorted({p.job_id for p, _ in fitted}, key=_job_order))
        why = (
            f"drain: {_describe_served(fitted)}; no idle node starts them; {n.name}'s jobs end within"
            f" {_fmt_wait(max(0.0, free_at - now))} (time limits): reserved now, layout {to} once idle"
            f" ({-neg_gain:g} GPU-eq)"
        )
        return Action(n.name, layouts[n.name] or "", to, "drain", -neg_gain, served, why), rest

    # 2. demand: the (node, layout) that starts the most unmet work, while room is left
    while unmet_parts:
        if not room():
            break
        best2: tuple[float, str, Node, str, list[tuple[Job, float]], list[Job]] | None = None
        feeds: tuple[float, str, Node, str, list[tuple[Job, float]], list[Job]] | None = None  # serves a starving job
        refused: dict[str, str] = {}
        for n in candidates():
            for to in n.allowed:
                if to == layouts[n.name] or to not in n.shapes:
                    continue
                why = breaks_floor(n, to)
                if why:
                    refused.setdefault(n.name, f"not to {to}: {why}")
                    continue
                rest, fitted = _fit_all(unmet_parts, [_Pool(n.shapes[to])])
                gain = sum(eq for _, eq in fitted)
                # ties: the first node in name order (deterministic), the first allowed layout
                if best2 is None or gain > best2[0] + _EPS or (abs(gain - best2[0]) <= _EPS and n.name < best2[1]):
                    best2 = (gain, n.name, n, to, fitted, rest)
                if any(p.waited_s >= bounds.starve_s for p, _ in fitted) and (
                    feeds is None or gain > feeds[0] + _EPS or (abs(gain - feeds[0]) <= _EPS and n.name < feeds[1])
                ):
                    feeds = (gain, n.name, n, to, fitted, rest)
        if best2 is not None and best2[0] < bounds.min_gain_eq - _EPS and feeds is not None:
            best2 = feeds  # below min_gain either way: the switch that starts a starving job
        starving = best2 is not None and any(p.waited_s >= bounds.starve_s for p, _ in best2[4])
        if best2 is None or (best2[0] < bounds.min_gain_eq - _EPS and not starving):
            drained = drain()
            if drained is not None:
                actions.append(drained[0])
                layouts[drained[0].node] = drained[0].target
                unmet_parts = drained[1]
                continue
            if best2 is None:
                why = "no idle node past its cool-down may take a layout that serves the waiting jobs"
                if refused:
                    why += " (" + "; ".join(f"{k} {v}" for k, v in sorted(refused.items())) + ")"
                held.append(("-", why))
            else:
                held.append(
                    (
                        "-",
                        f"best switch ({best2[1]} to {best2[3]}) would serve {best2[0]:g} GPU-eq,"
                        f" below min_gain {bounds.min_gain_eq:g}",
                    )
                )
            break
        gain, _, n, to, fitted, rest = best2
        cur = layouts[n.name] or ""
        served = tuple(sorted({p.job_id for p, _ in fitted}, key=_job_order))
        why = f"demand: {_describe_served(fitted)}; layout {to} on {n.name} starts them ({gain:g} GPU-eq)"
        if gain < bounds.min_gain_eq - _EPS:
            why += f"; below min_gain {bounds.min_gain_eq:g}, but a job has waited over {_fmt_wait(bounds.starve_s)}"
        actions.append(Action(n.name, cur, to, "demand", gain, served, why))
        layouts[n.name] = to
        unmet_parts = rest
    if not actions and not unmet and not held:
        held.append(("-", "no job has waited longer than the batching window for capacity"))
    return Decision(now, tuple(actions), unmet, tuple(held), floor_report())


def _job_order(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (0, job_id)
