"""``gpupool repartition --elastic``: one elastic step on the controller.

1. Read Slurm: nodes (``sinfo --json``: layout feature, GRES and GRES in use, state),
   jobs (``squeue --json``: pending jobs' GRES per node, node count, submit time;
   running jobs' nodes), our reservations, and the repartitioner's journal (a run
   under way: its nodes are switching).
2. Decide: :func:`slurm_gpupool.core.policy.elastic.decide`, the function the simulator calls,
   with the config's bounds (``schedule.elastic``) and the last decision's time and each
   node's last switch from ``<controller_dir>/elastic.json``.
3. Act: per target layout of the decision, one repartitioner run on exactly its nodes
   (``repartition --to LAYOUT --nodes ...``: reservation, apply, GRES, restarts, verify);
   a busy node drained for starving jobs gets a run with ``--deadline 0`` and no
   requeue: it is reserved and skipped at once, its jobs run to their end, and it stays
   in the run's reservation ``<prefix>_<layout>``, which is how later steps know it is
   switching.  Each step first finishes those: a reserved node whose jobs have ended is
   switched (``finish_drains``).  Then record the decision (``elastic.json``, and one
   ``elastic`` line in ``journal.log``).  With ``--dry-run`` only the decision is shown.

Reading pending jobs (not those held, or waiting for a dependency or a begin time):
``tres_per_node`` (``--gres``) per node; ``tres_per_job``
(``--gpus``) spread over the job's nodes; an untyped ``gpu:N`` may take any whole-GPU
type, an untyped ``shard:N`` any time-sliced type.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_gpupool.config.elastic import ElasticSettings
from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.policy.elastic import GPU, SHARD, SHARED, WHOLE, Bounds, Decision, Job, Node, decide
from slurm_gpupool.pool.elastic import allowed_layouts, check_floors, shapes_of
from slurm_gpupool.repartition import journal as jr
from slurm_gpupool.repartition.journal import Journal
from slurm_gpupool.repartition.rules import BUSY_STATES
from slurm_gpupool.slurm.protocol import Slurm
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation, requested_gres
from slurm_gpupool.util.atomic import write_json_atomic
from slurm_gpupool.util.clock import SYSTEM, Clock, iso_local

STATE_FILE = "elastic.json"
# pending for a reason no layout change helps: not demand (yet)
NOT_DEMAND = frozenset({"Dependency", "DependencyNeverSatisfied", "BeginTime", "JobHeldUser", "JobHeldAdmin"})


def free_records(info: NodeInfo) -> dict[str, int]:
    """Idle records by type: plain GPU types in records, time-sliced types in shards."""
    total, used = info.gres_total(), info.gres_allocated()
    out: dict[str, int] = {}
    for (name, typ), n in total.items():
        if name == "gpu" or name == SHARD:
            out[typ] = out.get(typ, 0) + max(0, n - used.get((name, typ), 0))
    return out


def pending_jobs(jobs: Sequence[JobInfo], types: Mapping[str, str], now: float) -> list[Job]:
    """Pending jobs asking for GPUs or shards, in priority order (highest first, then submit
    time), as the decision reads them.  ``types``: GRES type -> kind (whole | mig | shared)."""
    whole = tuple(sorted(t for t, k in types.items() if k == WHOLE))
    shared = tuple(sorted(t for t, k in types.items() if k == SHARED))
    out: list[tuple[tuple[int, int, int], Job]] = []
    for j in jobs:
        if j.state != "PENDING" or j.state_reason in NOT_DEMAND:
            continue
        nodes = max(1, j.node_count)
        per_node = requested_gres(j.gres)
        if not per_node and j.tres_per_job:
            per_node = {k: math.ceil(v / nodes) for k, v in requested_gres(j.tres_per_job).items()}
        for (name, typ), count in sorted(per_node.items()):
            kind = GPU if name == "gpu" else SHARD
            if typ:
                alts: tuple[str, ...] = (typ,)
            else:
                alts = whole if kind == GPU else shared
            if not alts:
                continue
            waited = max(0.0, now - j.submit_time) if j.submit_time else 0.0
            key = (-(j.priority or 0), j.submit_time, j.job_id)
            out.append((key, Job(str(j.job_id), kind, alts, count, nodes, waited)))
            break  # one GRES per job: the GPU request (a job asking for two types is rare; first wins)
    return [job for _, job in sorted(out, key=lambda kv: kv[0])]


@dataclass
class State:
    """``elastic.json``: when the last switching decision was made, each node's last switch,
    and the last decision (for ``gpupool status``)."""

    last_decision_s: float = -math.inf
    switched_at: dict[str, float] | None = None
    last: dict[str, Any] | None = None

    @classmethod
    def load(cls, directory: Path) -> State:
        try:
            raw = json.loads((directory / STATE_FILE).read_text())
        except (OSError, ValueError):
            return cls(switched_at={})
        if not isinstance(raw, dict):
            return cls(switched_at={})
        last_s = raw.get("last_decision_epoch")
        return cls(
            float(last_s) if isinstance(last_s, int | float) else -math.inf,
            {str(k): float(v) for k, v in (raw.get("switched_at") or {}).items() if isinstance(v, int | float)},
            raw.get("last") if isinstance(raw.get("last"), dict) else None,
        )

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(
            directory / STATE_FILE,
            {
                "last_decision_epoch": None if self.last_decision_s == -math.inf else self.last_decision_s,
                "switched_at": dict(sorted((self.switched_at or {}).items())),
                "last": self.last,
            },
        )


def cluster_view(
    cfg: PoolConfig,
    settings: ElasticSettings,
    infos: Mapping[str, NodeInfo],
    jobs: Sequence[JobInfo],
    reservations: Mapping[str, Reservation],
    journal: Mapping[str, Any],
    state: State,
    now: float,
) -> tuple[list[Node], list[Job]]:
    """The decision's inputs from what Slurm and our files show (pure over them)."""
    busy = {n for j in jobs if j.state in BUSY_STATES for n in j.nodes}
    free_at: dict[str, float] = {}
    for j in jobs:
        if j.state in BUSY_STATES:
            end = j.start_time + j.time_limit_s if j.time_limit_s is not None else math.inf
            for n in j.nodes:
                free_at[n] = max(free_at.get(n, -math.inf), end)
    run = journal.get("run") or {}
    switching: dict[str, str] = {}
    if run and jr.FINISHED not in run.get("steps", []):
        for n in run.get("nodes", []):
            if (journal.get("nodes", {}).get(n) or {}).get("step") not in jr.OUTCOMES:
                switching[n] = run["target"]
    prefix = cfg.repartition.reservation_prefix + "_"
    held = {n for r in reservations.values() if r.name.startswith(prefix) for n in r.nodes}
    drains = draining(cfg, reservations)
    nodes: list[Node] = []
    kinds: dict[str, str] = {}
    for name in cfg.all_nodes():
        if cfg.nodeset_of(name).machine is None:
            continue
        info = infos.get(name)
        allowed = allowed_layouts(cfg, settings, name)
        layout = info.layout if info is not None else None
        shapes = shapes_of(cfg, name, sorted({*allowed, *([layout] if layout else [])}))
        for shape in shapes.values():
            for r in shape:
                kinds.setdefault(r.type, r.kind)
        usable = info is not None and info.responding and not info.drained and name not in held
        nodes.append(
            Node(
                name,
                layout if layout in shapes else None,
                shapes,
                allowed,
                idle=name not in busy,
                usable=usable and name not in switching,
                target=switching.get(name) or (drains.get(name) if drains.get(name) != layout else None),
                last_switch_s=(state.switched_at or {}).get(name, -math.inf),
                free=free_records(info) if info is not None else {},
                free_at_s=free_at.get(name, now),
            )
        )
    return nodes, pending_jobs(jobs, kinds, now)


def draining(cfg: PoolConfig, reservations: Mapping[str, Reservation]) -> dict[str, str]:
    """Nodes held in a run's reservation ``<prefix>_<layout>`` (skipped while busy: a drain,
    or a clock switch past its deadline) -> that layout."""
    out: dict[str, str] = {}
    for lay in cfg.layout_names():
        r = reservations.get(f"{cfg.repartition.reservation_prefix}_{lay}")
        for n in r.nodes if r is not None else ():
            out[n] = lay
    return out


def outstanding(
    cfg: PoolConfig, infos: Mapping[str, NodeInfo], reservations: Mapping[str, Reservation]
) -> dict[str, list[str]]:
    """Target layout -> its reserved nodes not yet in it (drains under way).  Every run to
    that layout must take them all: a run sets its reservation to its own nodes, and one
    left out would be released, its switch forgotten."""
    out: dict[str, list[str]] = {}
    for node, lay in sorted(draining(cfg, reservations).items()):
        info = infos.get(node)
        if info is not None and info.layout != lay:
            out.setdefault(lay, []).append(node)
    return out


def finish_drains(
    cfg: PoolConfig, infos: Mapping[str, NodeInfo], jobs: Sequence[JobInfo], reservations: Mapping[str, Reservation]
) -> dict[str, tuple[list[str], set[str]]]:
    """Target layout -> (its outstanding nodes, those still busy) where at least one has no
    job left: one run switches the idle ones, and skips the busy ones again (they stay
    reserved)."""
    busy = {n for j in jobs if j.state in BUSY_STATES for n in j.nodes}
    out: dict[str, tuple[list[str], set[str]]] = {}
    for lay, nodes in outstanding(cfg, infos, reservations).items():
        if any(n not in busy for n in nodes):
            out[lay] = (nodes, {n for n in nodes if n in busy})
    return out


def record(
    directory: Path,
    state: State,
    decision: Decision,
    outcomes: Mapping[str, str],
    now: float,
    back: float,
    finished: Mapping[str, str] | None = None,
    clock: Clock = SYSTEM,
) -> None:
    """Keep the decision: ``elastic.json`` (status, next decision's window and cool-downs from
    ``back``, when the switches ended) and one line in ``journal.log`` (the audit trail the
    repartitioner's steps are in)."""
    if decision.actions:
        state.last_decision_s = now
    switched = state.switched_at if state.switched_at is not None else {}
    for a in decision.actions:
        if outcomes.get(a.node) == "done":
            switched[a.node] = back
    state.switched_at = switched
    state.last = {**decision.to_dict(), "at": iso_local(now)}
    if outcomes:
        state.last["outcomes"] = dict(outcomes)
    if finished:
        state.last["drains_finished"] = dict(finished)  # reserved nodes switched once their jobs ended
    state.save(directory)
    line = json.dumps({"at": jr.now_iso(clock), "elastic": state.last}, sort_keys=True)
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / "journal.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(line + "\n")


def step(
    cfg: PoolConfig,
    cluster: Slurm,
    run_switch: Callable[[str, list[str], set[str]], dict[str, str]] | None,
    now: float | None = None,
    clock: Clock = SYSTEM,
) -> tuple[Decision, dict[str, str]]:
    """One elastic step: finish the drains whose jobs have ended, decide, and (``run_switch``
    given) switch and record.  ``run_switch`` (target, nodes, may_skip) -> node outcomes is
    the repartitioner's run; with ``may_skip`` (busy nodes a drain reserves) it runs with
    ``--deadline 0`` and no requeue, and their skip is the plan.  Returns the decision and
    the outcomes of its actions and of the drains finished ({} for a dry run)."""

    settings = cfg.elastic if cfg.elastic is not None else ElasticSettings(_default_bounds())
    check_floors(cfg, settings)
    directory = Path(cfg.paths.controller_dir)
    state = State.load(directory)
    now = clock.time() if now is None else now
    finished: dict[str, str] = {}
    if run_switch is not None:
        for target, (targets, busy) in finish_drains(
            cfg, cluster.nodes(), cluster.jobs(), cluster.reservations()
        ).items():
            finished.update({n: o for n, o in run_switch(target, targets, busy).items() if n not in busy})
        if finished:
            back = clock.time()
            state.switched_at = {
                **(state.switched_at or {}),
                **{n: back for n, outcome in finished.items() if outcome == "done"},
            }
    nodes, jobs = cluster_view(
        cfg,
        settings,
        cluster.nodes(),
        cluster.jobs(),
        cluster.reservations(),
        Journal(directory).load().data,
        state,
        now,
    )
    decision = decide(now, nodes, jobs, settings.bounds, state.last_decision_s)
    if run_switch is None:
        return decision, {}
    outcomes: dict[str, str] = {}
    drained = {a.node for a in decision.actions if a.reason == "drain"}
    pending = outstanding(cfg, cluster.nodes(), cluster.reservations()) if decision.actions else {}
    for target, targets in decision.by_target().items():
        held = [n for n in pending.get(target, []) if n not in targets]  # drains under way to it
        may_skip = {n for n in targets if n in drained} | set(held)
        got = run_switch(target, sorted({*targets, *held}), may_skip)
        outcomes.update({n: o for n, o in got.items() if n in targets})
    record(directory, state, decision, outcomes, now, clock.time() if decision.actions else now, finished, clock)
    return decision, {**finished, **outcomes}


def _default_bounds() -> Any:

    return Bounds()
