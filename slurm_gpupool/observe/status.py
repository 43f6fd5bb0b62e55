"""``gpupool status``: per node the active and desired layout, the switch state and why.

Active: the ``layout_<name>`` feature Slurm shows (what its GRES are).  Desired:
the target of an unfinished run, else the layout the schedule says is due.
State: from the journal while a run handles the node, else ``done`` or
``scheduled``.  Plus the next scheduled switch and our reservations.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.repartition import journal as jr
from slurm_gpupool.repartition.hold import Hold
from slurm_gpupool.slurm.types import NodeInfo, Reservation

STATES = {
    jr.WAITING: "draining",
    jr.APPLYING: "applying",
    jr.APPLIED: "applying",
    jr.DRAINED: "applying",
    jr.VERIFYING: "verifying",
    jr.DONE: "done",
    jr.FAILED: "failed",
    jr.SKIPPED: "skipped",
    jr.ROLLED_BACK: "rolled back",
}


def slurm_state(info: NodeInfo | None) -> str:
    """As sinfo abbreviates: ``idle+drain+maint*`` (``*``: not responding)."""
    if info is None:
        return "unknown"
    marks = [("DRAIN", "+drain"), ("MAINTENANCE", "+maint"), ("RESERVED", "+resv")]
    text = info.state + "".join(m for flag, m in marks if flag in info.flags)
    return text + ("*" if "NOT_RESPONDING" in info.flags else "")


def _why_active(rec: dict[str, Any] | None, active: str | None, desired: str, run: dict[str, Any]) -> str:
    """Why a node is in ``active`` rather than the ``desired`` layout, from its last run."""
    if not active or not rec or rec.get("target") != active or rec.get("step") != jr.DONE:
        return ""
    trigger = rec.get("trigger") or (run.get("trigger") if run.get("target") == active else None)
    when = f" at {rec['since']}" if rec.get("since") else ""
    if trigger == jr.TRIGGER_BY_HAND:
        return (
            f"; in {active} since a switch by hand{when}: the next scheduled run switches it back "
            f"(`gpupool schedule pin {active}` keeps it)"
        )
    if trigger == jr.TRIGGER_PINNED:
        return f"; in {active} since a pin{when}, which has ended"
    if trigger == jr.TRIGGER_ELASTIC:
        return f"; in {active} since the elastic step{when}"
    return ""


def pool_status(
    cfg: PoolConfig,
    infos: dict[str, NodeInfo],
    journal: dict[str, Any],
    reservations: dict[str, Reservation],
    now: datetime,
    hold: Hold | None = None,
    elastic: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``elastic``: the last elastic decision (``elastic.json``'s ``last``), shown as is."""
    run = journal.get("run") or {}
    running = bool(run) and jr.FINISHED not in run.get("steps", [])
    due = cfg.schedule.due(now) if cfg.schedule else None
    sched_due = due
    due_source = "the schedule's"
    demand = cfg.elastic is not None and cfg.elastic.active(due)
    if demand:
        due = None  # an elastic period: no layout is due, demand decides (the run's target is desired)
    paused = False
    if hold is not None and hold.active(now):
        due = hold.layout  # pinned (None: paused, nothing is due)
        demand = False
        paused = hold.layout is None
        due_source = hold.describe()
    prefix = cfg.repartition.reservation_prefix + "_"
    naive_now = now.astimezone().replace(tzinfo=None)
    held_in = {
        n: r.name for r in reservations.values() if r.name.startswith(prefix) and r.start <= naive_now for n in r.nodes
    }
    in_the_run = frozenset(run.get("nodes", [])) if running else frozenset()  # a set: a list is N x N
    nodes = []
    for name in cfg.all_nodes():
        info = infos.get(name)
        rec = journal.get("nodes", {}).get(name)
        in_run = name in in_the_run
        desired = run["target"] if in_run else due
        if desired is not None and not cfg.covers(desired, name):
            desired = None
        active = info.layout if info else None
        if rec and (in_run or rec["step"] in (jr.FAILED, jr.SKIPPED, jr.ROLLED_BACK)) and rec.get("target") == desired:
            state, since, reason = STATES[rec["step"]], rec.get("since"), rec.get("reason", "")
        elif desired is None or active == desired:
            state, since, reason = "done", None, ""
            if paused and active and sched_due and active != sched_due and cfg.covers(sched_due, name):
                reason = f"schedule paused: stays in layout {active} (the schedule has {sched_due} due)"
        else:
            state, since = "scheduled", None
            reason = f"due: layout {desired} ({due_source})" + _why_active(rec, active, desired, run)
        if name in held_in and state in ("done", "scheduled"):  # e.g. skipped past a deadline: no new job lands
            state = "held"
            reason = f"in reservation {held_in[name]} until it switches" + (f"; {reason}" if reason else "")
        if info is not None and info.reason and not reason:
            reason = info.reason
        nodes.append(
            {
                "node": name,
                "active": active,
                "desired": desired,
                "state": state,
                "since": since,
                "reason": reason,
                "slurm_state": slurm_state(info),
            }
        )
    nxt = cfg.schedule.next_change(now) if cfg.schedule else None
    held = hold is not None and hold.active(now)
    return {
        "hold": hold.to_dict() | {"text": hold.describe()} if hold is not None and held else None,
        "now": now.isoformat(timespec="seconds"),
        "due": due,
        "schedule_due": sched_due,  # what the schedule alone says (a pin or a pause may differ)
        "due_why": due_source if held else ("demand decides (schedule.elastic)" if demand else due_source),
        "mode": "elastic" if demand else "clock",
        "elastic": elastic,
        "next_switch": {"layout": nxt[1], "at": nxt[0].isoformat(timespec="minutes")} if nxt else None,
        "run": {
            "id": run.get("id"),
            "target": run.get("target"),
            "started_at": run.get("started_at"),
            "finished": not running,
            "steps": run.get("steps", []),
        }
        if run
        else None,
        "reservations": [
            {
                "name": r.name,
                "nodes": sorted(r.nodes),
                "start": r.start.isoformat(timespec="minutes"),
                "end": r.end.isoformat(timespec="minutes"),
            }
            for r in reservations.values()
            if r.name.startswith(prefix)
        ],
        "nodes": nodes,
    }
