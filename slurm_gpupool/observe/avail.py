"""``gpupool avail``: what a user can get now, and when that changes (pure).

Combines what Slurm shows of the nodes (``sinfo --json``: GRES and GresUsed, layout
features, partitions, drains), the pool config's node sets and schedule, the
repartitioner's run (its journal) and hold, and a request as ``gpupool-sbatch``
translated it (``core/submit/plan.py``) with Slurm's own estimate for it (``sbatch
--test-only``) into one answer.  No I/O and no clock here: ``observe/avail_inputs.py``
gathers the inputs, so every rule is unit-tested on made-up clusters and times.

The answer's keys are stable (docs/avail.md documents them): scripts read ``--json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.gres.hostlist import slurm_hostlist
from slurm_gpupool.core.policy.durations import parse_slurm_time_s
from slurm_gpupool.core.policy.schedule import Schedule
from slurm_gpupool.core.submit.sbatch_args import OptionTable, parse
from slurm_gpupool.repartition.rules import FINISHED
from slurm_gpupool.repartition.scheduled import Hold, scheduled_action
from slurm_gpupool.slurm.types import NodeInfo, WillRun, requested_gres

SCHEMA = 1
# a node in one of these (a maintenance or other reservation) starts no job of a user without it
RESERVED_FLAGS = frozenset({"MAINTENANCE", "RESERVED"})
START_NOW_S = 60  # Slurm's scheduler works in minutes: a start within one is "now"


@dataclass(frozen=True)
class GresRow:
    """One GRES (name and type) over a group of nodes: devices (or shards) in all, held by
    jobs, free on nodes that take jobs, and idle on nodes that do not (drained, down, reserved)."""

    gres: str  # gpu | shard
    type: str
    kind: str  # mig | whole | shared | shard | "" (a type no layout names)
    total: int
    used: int
    free: int
    unavailable: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "gres": self.gres,
            "type": self.type,
            "kind": self.kind,
            "total": self.total,
            "used": self.used,
            "free": self.free,
            "unavailable": self.unavailable,
        }


def takes_jobs(info: NodeInfo) -> bool:
    """Would Slurm start a user's job there now: it answers, is not drained and not reserved."""
    return info.responding and not info.drained and not (info.flags & RESERVED_FLAGS)


def node_free(info: NodeInfo) -> dict[tuple[str, str], int]:
    """Free GPU and shard GRES of a node, by (name, type): configured minus held (``sinfo``
    Gres and GresUsed); nothing where the node takes no job."""
    if not takes_jobs(info):
        return {}
    used = info.gres_allocated()
    return {k: max(0, n - used.get(k, 0)) for k, n in info.gres_total().items() if n > 0 and k[0] in ("gpu", "shard")}


def kinds_of(catalog: Mapping[str, Any] | None) -> dict[str, str]:
    """GRES type → kind, from the submit catalog's offers (every layout's)."""
    out: dict[str, str] = {}
    for lay in ((catalog or {}).get("layouts") or {}).values():
        for o in lay.get("offers", []):
            out.setdefault(o["type"], o["kind"])
    return out


def gres_rows(infos: Sequence[NodeInfo], kinds: Mapping[str, str]) -> list[GresRow]:
    """Per GPU and shard GRES of these nodes: total, used, free, unavailable (zero totals left out)."""
    acc: dict[tuple[str, str], list[int]] = {}
    for info in infos:
        used, free = info.gres_allocated(), node_free(info)
        for key, n in info.gres_total().items():
            if n <= 0 or key[0] not in ("gpu", "shard"):
                continue
            held = min(n, used.get(key, 0))
            row = acc.setdefault(key, [0, 0, 0, 0])
            row[0] += n
            row[1] += held
            row[2] += free.get(key, 0)
            row[3] += 0 if takes_jobs(info) else n - held
    return [
        GresRow(name, typ, "shard" if name == "shard" else kinds.get(typ, ""), *row)
        for (name, typ), row in sorted(acc.items())
    ]


def changes(schedule: Schedule, start: datetime, horizon_days: int = 8) -> Iterator[tuple[datetime, str]]:
    """The schedule's switches after ``start``, in order, for ``horizon_days``."""
    t, end = start, start + timedelta(days=horizon_days)
    while t < end:
        nxt = schedule.next_change(t)
        if nxt is None or nxt[0] > end:
            return
        yield nxt
        t = nxt[0] + timedelta(minutes=1)


@dataclass(frozen=True)
class ScheduleView:
    """What the schedule says now: the layout due (None: paused, or demand decides), why, and
    the hold text; ``resumes``: when a hold ends (None: it does not, or there is none)."""

    due: str | None
    why: str
    mode: str  # clock | elastic | paused | pinned | none
    hold: str
    resumes: datetime | None


def schedule_view(cfg: PoolConfig, hold: Hold | None, now: datetime) -> ScheduleView:
    """:func:`~slurm_gpupool.repartition.scheduled.scheduled_action` (what the next scheduled
    run does), read for users."""
    if cfg.schedule is None:
        return ScheduleView(None, "no schedule: layouts change only by an admin", "none", "", None)
    run = scheduled_action(cfg.schedule, hold, now, None, cfg.elastic.active if cfg.elastic else None)
    held = hold is not None and hold.active(now)
    resumes = getattr(hold, "until", None) if held else None
    if held and run.target is None:
        said = hold.describe() if hold else run.said
        return ScheduleView(None, said, "paused", said, resumes)
    if run.pinned:
        return ScheduleView(run.target, run.said, "pinned", run.said, resumes)
    if run.elastic:
        return ScheduleView(None, "demand decides (schedule.elastic)", "elastic", "", None)
    return ScheduleView(run.target, "the schedule's", "clock", "", None)


def next_switch(
    cfg: PoolConfig, nodes: Sequence[str], current: str | None, view: ScheduleView, now: datetime
) -> tuple[datetime, str] | None:
    """When the schedule next brings these nodes a layout other than ``current``: a hold's end
    if the schedule then has another layout due, else its next change to a layout that
    covers them.  None: no schedule, paused until resumed, or demand decides."""
    sched = cfg.schedule
    if sched is None or view.mode == "elastic" or (view.mode in ("paused", "pinned") and view.resumes is None):
        return None
    resuming = view.mode in ("paused", "pinned") and view.resumes is not None
    start = view.resumes if resuming and view.resumes is not None else now
    if resuming:  # the schedule takes over again when the hold ends
        due = sched.due(start)
        if due != current and any(cfg.covers(due, n) for n in nodes):
            return start, due
        current = due if any(cfg.covers(due, n) for n in nodes) else current
    for when, layout in changes(sched, start):
        if cfg.elastic is not None and cfg.elastic.active(layout):
            return None  # from then on demand decides
        if layout != current and any(cfg.covers(layout, n) for n in nodes):
            return when, layout
    return None


def _iso(t: datetime | None) -> str | None:
    return t.isoformat(timespec="minutes") if t is not None else None


def nodeset_views(
    cfg: PoolConfig,
    infos: Mapping[str, NodeInfo],
    run: Mapping[str, Any] | None,
    view: ScheduleView,
    now: datetime,
    kinds: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Per node set: its nodes, partitions, active layout (the nodes' ``layout_<name>``
    features; None when they differ), a switch under way, the layout due, the next switch
    and its GRES."""
    switching = run is not None and FINISHED not in run.get("steps", [])
    out = []
    for ns in sorted(cfg.nodesets.values(), key=lambda n: n.name):
        seen = [infos[n] for n in ns.nodes if n in infos]
        layouts: dict[str, int] = {}
        for info in seen:
            key = info.layout or "unknown"
            layouts[key] = layouts.get(key, 0) + 1
        active = next(iter(layouts)) if len(layouts) == 1 and "unknown" not in layouts else None
        target = run.get("target") if run and switching and set(run.get("nodes", ())) & set(ns.nodes) else None
        due = view.due if view.due is not None and any(cfg.covers(view.due, n) for n in ns.nodes) else None
        nxt = next_switch(cfg, ns.nodes, due or active, view, now)  # from the layout they are in or going to
        out.append(
            {
                "name": ns.name,
                "nodes": slurm_hostlist(ns.nodes),
                "missing": sorted(set(ns.nodes) - set(infos)),  # in the config, not in Slurm
                "partitions": sorted({p for info in seen for p in info.partitions}),
                "layout": active,
                "layouts": dict(sorted(layouts.items())),
                "switching_to": target,
                "due": due,
                "next_switch": {"layout": nxt[1], "at": _iso(nxt[0])} if nxt else None,
                "gres": [r.to_dict() for r in gres_rows(seen, kinds)],
            }
        )
    return out


def partition_views(infos: Mapping[str, NodeInfo], kinds: Mapping[str, str]) -> list[dict[str, Any]]:
    """Per partition (as sinfo lists them): its GPU nodes and their GRES."""
    parts: dict[str, list[NodeInfo]] = {}
    for info in infos.values():
        if any(k[0] in ("gpu", "shard") and n > 0 for k, n in info.gres_total().items()):
            for p in info.partitions:
                parts.setdefault(p, []).append(info)
    return [
        {
            "name": p,
            "nodes": slurm_hostlist(i.name for i in members),
            "gres": [r.to_dict() for r in gres_rows(members, kinds)],
        }
        for p, members in sorted(parts.items())
    ]


# -- a request --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Translated:
    """A request as gpupool-sbatch plans it (``core/submit/plan.py``'s Plan, as plain values)."""

    asked: tuple[str, ...]  # the options as the user gave them
    argv: tuple[str, ...]  # what gpupool-sbatch would give sbatch
    changes: tuple[tuple[str, str, str], ...]  # (option, value, why)
    notes: tuple[str, ...]
    later: tuple[str, datetime | None] | None  # only this layout offers it, from then
    table: OptionTable


# slurmctld's refusals of a name the user gave that does not exist (slurm_errno.c's texts)
NO_SUCH_NAME = ("Invalid partition name specified", "Invalid account", "Invalid qos specification")


def user_mistake(w: WillRun) -> bool:
    """Slurm refused the request for a mistake in it (a malformed option, a partition,
    account or QOS that does not exist), not for what the cluster has: a usage error."""
    return w.start is None and (w.by_sbatch or any(t in w.reason for t in NO_SUCH_NAME))


def per_node(t: Translated) -> tuple[dict[tuple[str, str], int], int, str | None]:
    """GPU and shard GRES per node (``--gres``, ``--gpus-per-node``), nodes (``-N``, its
    minimum) and partition of the translated command line."""
    args = parse(list(t.argv), t.table)
    want = requested_gres(args.value("gres") or "")
    for item in (args.value("gpus-per-node") or "").split(","):
        parts = item.split(":")
        if parts[-1].isdigit():
            key = ("gpu", ":".join(parts[:-1]))
            want[key] = want.get(key, 0) + int(parts[-1])
    text = (args.value("nodes") or "1").split("-")[0]
    nodes = int(text) if text.isdigit() and text.isascii() else 1
    return want, max(1, nodes), args.value("partition")


def time_limit_s(t: Translated) -> int | None:
    """The request's ``--time`` in seconds (None: none given, or UNLIMITED)."""
    text = parse(list(t.argv), t.table).value("time")
    try:
        return parse_slurm_time_s(text) if text else None
    except ValueError:
        return None


def installed_layout(catalog: Mapping[str, Any] | None, sets: Sequence[Mapping[str, Any]]) -> str | None:
    """The layout in force: the one Slurm's GRES were installed from (the submit catalog
    says), else the one most node sets are in."""
    if catalog and catalog.get("installed"):
        return str(catalog["installed"])
    seen = [s["layout"] for s in sets if s["layout"]]
    return max(sorted(set(seen)), key=seen.count) if seen else None


def fits(free: Mapping[tuple[str, str], int], want: Mapping[tuple[str, str], int]) -> bool:
    """Does a node's free GRES hold the request (an untyped one: any type of that name)?"""
    for (name, typ), n in want.items():
        have = free.get((name, typ), 0) if typ else sum(v for (g, _), v in free.items() if g == name)
        if have < n:
            return False
    return True


def request_view(
    t: Translated, infos: Mapping[str, NodeInfo], will_run: WillRun | None, now: datetime
) -> dict[str, Any]:
    """What the request becomes, the nodes whose free GRES hold it now (by ``sinfo``: GPUs
    only; CPUs, memory and limits are Slurm's to judge), and Slurm's own answer (``sbatch
    --test-only``): when, where, or why not.  ``now``: aware; Slurm's times are local."""
    want, nodes, partition = per_node(t)
    partitions = partition.split(",") if partition else None
    candidates = sorted(
        name
        for name, info in infos.items()
        if want and (partitions is None or set(partitions) & set(info.partitions)) and fits(node_free(info), want)
    )
    slurm: dict[str, Any] | None = None
    if will_run is not None:
        start = will_run.start.astimezone() if will_run.start is not None else None
        wait_s = max(0, int((start - now).total_seconds())) if start is not None else None
        slurm = {
            "starts_at": _iso_s(start),
            "wait_s": wait_s,
            "starts_now": wait_s is not None and wait_s < START_NOW_S,
            "nodes": sorted(will_run.nodes),
            "partition": will_run.partition or None,
            "cpus": will_run.cpus or None,
            "preempts": list(will_run.preempts),
            "refused": will_run.refused or None,
        }
    return {
        "asked": list(t.asked),
        "sbatch": list(t.argv),
        "changes": [{"option": o, "value": v, "why": w} for o, v, w in t.changes],
        "notes": list(t.notes),
        "later": {"layout": t.later[0], "at": _iso(t.later[1])} if t.later else None,
        "per_node": [{"gres": g, "type": typ, "count": n} for (g, typ), n in sorted(want.items())],
        "nodes": nodes,
        "partition": partition,
        "free_on": candidates,
        "fits_now": bool(want) and len(candidates) >= nodes and t.later is None,
        "slurm": slurm,
    }


def _iso_s(t: datetime | None) -> str | None:
    return t.isoformat(timespec="seconds") if t is not None else None


# -- a wait estimate --------------------------------------------------------------------------

# what it is, whichever source: said with every estimate
CAVEAT = "an estimate, not a promise: jobs may end before their limits and new ones may come first"
# (switch time, layout) -> (start or None, what the replay assumed)
Replay = Callable[[datetime, str], tuple[datetime | None, str]]


def per_node_of(request: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """``request_view``'s ``per_node`` rows back as GRES by (name, type)."""
    return {(p["gres"], p["type"]): p["count"] for p in request["per_node"]}


def offers_enough(
    catalog: Mapping[str, Any] | None, layout: str, want: Mapping[tuple[str, str], int], nodes: int
) -> bool:
    """Does ``layout`` (the submit catalog's offers) have nodes enough whose GRES hold ``want``
    each (shards: the shared GPUs per node times their shares)?"""
    offers = (((catalog or {}).get("layouts") or {}).get(layout) or {}).get("offers", [])
    if not want:
        return False
    for (name, typ), n in want.items():
        ok = False
        for o in offers:
            if name == "shard":
                per = o.get("per_node", o["count"]) * o.get("shares", 0) if o["kind"] == "shared" else 0
            else:
                per = o.get("per_node", o["count"]) if o["kind"] != "shared" else 0
            if (not typ or o["type"] == typ) and per >= n and o.get("nodes", 1) >= nodes:
                ok = True
                break
        if not ok:
            return False
    return True


def switch_to(sets: Sequence[Mapping[str, Any]], layout: str, now: datetime) -> datetime | None:
    """When the schedule brings ``layout`` to a node set: now where it is due and the nodes
    are not in it yet, else the earliest next switch to it (None: no switch is coming)."""
    if any(s["due"] == layout and s["layout"] != layout for s in sets):
        return now
    times = [
        datetime.fromisoformat(s["next_switch"]["at"])
        for s in sets
        if s["next_switch"] and s["next_switch"]["layout"] == layout
    ]
    return min(times) if times else None


def _waiting_for(
    request: Mapping[str, Any], sets: Sequence[Mapping[str, Any]], catalog: Mapping[str, Any] | None
) -> str | None:
    """The layout the request waits for: the one only a later layout offers (the wrapper's
    answer), or, where Slurm refuses it because the installed layout offers too little,
    a coming layout (due, or the next switch's) that offers enough."""
    if request["later"]:
        return str(request["later"]["layout"])
    s = request["slurm"]
    if s is None or s["starts_at"] is not None:
        return None
    want, nodes = per_node_of(request), request["nodes"]
    installed = (catalog or {}).get("installed")
    if installed and offers_enough(catalog, installed, want, nodes):
        return None  # the installed layout has it: Slurm refuses for something else
    coming = sorted(
        {x["due"] for x in sets if x["due"]} | {x["next_switch"]["layout"] for x in sets if x["next_switch"]}
    )
    return next((lay for lay in coming if lay != installed and offers_enough(catalog, lay, want, nodes)), None)


def _estimate(source: str | None, start: datetime | None, now: datetime, why: str) -> dict[str, Any]:
    wait_s = max(0, int((start - now).total_seconds())) if start is not None else None
    return {"source": source, "start": _iso_s(start), "wait_s": wait_s, "why": why}


def estimate(
    request: Mapping[str, Any],
    sets: Sequence[Mapping[str, Any]],
    catalog: Mapping[str, Any] | None,
    now: datetime,
    replay: Replay | None,
) -> dict[str, Any]:
    """When the request would start: Slurm's own estimate (``sbatch --test-only``) where the
    layout in force offers it, else the simulator's replay of the queue through the switch
    that brings a layout offering it (``replay``: None, not replayed); ``source`` None when
    there is no estimate, and ``why`` says why."""
    layout = _waiting_for(request, sets, catalog)
    if layout is not None:
        at = switch_to(sets, layout, now)
        if at is None:
            return _estimate(
                None,
                None,
                now,
                f"no switch is coming: no scheduled switch brings layout {layout}"
                " (no schedule, a pause or pin until resumed, or demand decides)",
            )
        if replay is None:
            return _estimate(None, None, now, f"waits for layout {layout} at {_iso(at)}; the queue was not replayed")
        start, assumed = replay(at, layout)
        if start is None:
            return _estimate(None, None, now, f"the simulator found no start: {assumed}")
        return _estimate("simulator", start, now, f"{assumed}; {CAVEAT}")
    s = request["slurm"]
    if s is None:
        return _estimate(None, None, now, "Slurm was not asked")
    if s["starts_at"] is None:
        return _estimate(None, None, now, f"Slurm would refuse it: {s['refused']}")
    start = datetime.fromisoformat(s["starts_at"])
    why = "Slurm's backfill plan (sbatch --test-only): running jobs to their time limits, the queue as it is now"
    return _estimate("slurm", start, now, f"{why}; {CAVEAT}")


def availability(
    cfg: PoolConfig,
    infos: Mapping[str, NodeInfo],
    run: Mapping[str, Any] | None,
    hold: Hold | None,
    catalog: Mapping[str, Any] | None,
    now: datetime,
    request: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """The whole answer (``gpupool avail --json``).  ``now``: aware, in the schedule's zone;
    ``run``: the journal's run (None: none, or not readable: say so in ``notes``)."""
    kinds = kinds_of(catalog)
    view = schedule_view(cfg, hold, now)
    sets = nodeset_views(cfg, infos, run, view, now, kinds)
    firsts = [s["next_switch"] for s in sets if s["next_switch"]]
    nxt = min(firsts, key=lambda s: s["at"]) if firsts else None
    return {
        "schema": SCHEMA,
        "now": now.isoformat(timespec="seconds"),
        "schedule": {
            "due": view.due,
            "why": view.why,
            "mode": view.mode,
            "hold": view.hold or None,
            "next_switch": nxt,
        },
        "run": {"target": run.get("target"), "nodes": list(run.get("nodes", ()))}
        if run is not None and FINISHED not in run.get("steps", [])
        else None,
        "nodesets": sets,
        "partitions": partition_views(infos, kinds),
        "request": request,
        "notes": list(notes),
    }
