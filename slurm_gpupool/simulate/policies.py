"""The policies a simulation compares, from the pool config (pure).

* ``static:<layout>``: every node in one layout for the whole replay (``static:whole`` is
  every GPU whole, made here if the config has no such layout);
* ``schedule``: the config's day/night schedule, switched as the repartitioner does;
* ``elastic``: demand decides (``schedule.elastic`` of the config, or its defaults), the
  clock's rules outside ``elastic.during`` (``simulate.elastic``);
* ``schedule:<file>``-style alternatives come in as extra layouts merged into the config
  (``with_layouts``), then compared as ``static:`` policies.

Times are seconds from the replay's start (``epoch``, a timezone-aware datetime), so the
schedule's weekdays and hours are the trace's own.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

from slurm_gpupool.config.elastic import ElasticSettings
from slurm_gpupool.config.load import parse_config
from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.policy.elastic import Bounds
from slurm_gpupool.core.policy.switch_plan import Timings, estimate_switch_s
from slurm_gpupool.errors import UsageError
from slurm_gpupool.pool.capacity import node_offers
from slurm_gpupool.pool.elastic import allowed_layouts, check_floors
from slurm_gpupool.pool.submit_catalog import elastic_offers
from slurm_gpupool.repartition.rules import lead_time_default
from slurm_gpupool.simulate.elastic import UNION, ElasticSwitcher, cron_interval_s, records
from slurm_gpupool.simulate.engine import Switcher
from slurm_gpupool.simulate.pool import PoolSpec, pool_spec

WHOLE = "whole"
SCHEDULE = "schedule"
ELASTIC = "elastic"
STATIC = "static:"

# Phase medians of a switch measured by benchmarks/bench_repartition.py on the 22.05 sandbox
# (README, 2026-11-21), with node apply taken as a real node's: changing MIG mode and
# instances on eight GPUs (GPU reset included) is a minute, not the simulator's 4 s.
MEASURED = Timings(
    reserve_s=0.3,
    apply_s=60.0,
    install_s=0.15,
    ctld_restart_s=4.7,
    slurmd_stop_s=0.4,
    slurmd_start_s=0.4,
    verify_s=2.1,
)


@dataclass(frozen=True)
class PolicySpec:
    name: str  # static:<layout> | schedule
    layouts: tuple[str, ...]  # every layout it may put a node in


def with_whole_layout(cfg: PoolConfig) -> tuple[PoolConfig, str]:
    """The config plus a layout with every GPU whole, for ``static:whole``: the config's own
    if one layout already is (``night`` in the shipped one), else one named ``whole``."""
    for name, entries in cfg.layouts.items():
        if all(all(t.mode == WHOLE for _, t in e.entries) for e in entries) and all(
            cfg.covers(name, n) for n in cfg.all_nodes()
        ):
            return cfg, name
    raw = copy.deepcopy(cfg.raw)
    raw.setdefault("layouts", {})[WHOLE] = {ns: {"all": WHOLE} for ns in cfg.nodesets}
    return _reparse(cfg, raw, cfg.source), WHOLE


def _reparse(cfg: PoolConfig, raw: dict[str, Any], source: str) -> PoolConfig:
    return parse_config(raw, source, Path(cfg.source).parent)


def with_layouts(cfg: PoolConfig, extra: Mapping[str, Any], source: str) -> PoolConfig:
    """The config with more layouts (a ``layouts:`` mapping from another file), checked
    as the config's own are (feasible MIG placements, known profiles: exit 78/65)."""
    raw = copy.deepcopy(cfg.raw)
    clash = sorted(set(extra) & set(cfg.layouts))
    if clash:
        raise UsageError(f"{source}: layouts {', '.join(clash)}", "the pool config already has them: rename them")
    raw.setdefault("layouts", {}).update(copy.deepcopy(dict(extra)))
    return _reparse(cfg, raw, f"{cfg.source} + {source}")


def policies(cfg: PoolConfig, names: list[str] | None, whole: str) -> list[PolicySpec]:
    """The named policies (default: all-whole, each layout static, the schedule, and elastic
    when the schedule's mode is)."""
    if not names:
        names = [STATIC + whole] + [STATIC + lay for lay in cfg.layout_names() if lay != whole]
        if cfg.schedule is not None:
            names.append(SCHEDULE)
        if cfg.elastic is not None:
            names.append(ELASTIC)
    out = []
    for name in names:
        if name == ELASTIC:
            settings = elastic_settings(cfg)
            lays = {lay for n in cfg.all_nodes() for lay in allowed_layouts(cfg, settings, n)}
            if cfg.schedule is not None:
                lays |= {cfg.schedule.default, *(r.layout for r in cfg.schedule.rules)}
            out.append(PolicySpec(ELASTIC, tuple(sorted(lays))))
        elif name == SCHEDULE:
            if cfg.schedule is None:
                raise UsageError("--policy schedule", "the pool config has no schedule")
            lays = {cfg.schedule.default, *(r.layout for r in cfg.schedule.rules)}
            out.append(PolicySpec(SCHEDULE, tuple(sorted(lays))))
        elif name.startswith(STATIC):
            lay = whole if name == STATIC + WHOLE else name[len(STATIC) :]
            if lay not in cfg.layouts:
                raise UsageError(
                    f"--policy {name}", f"no layout {lay!r}", hint="layouts: " + ", ".join(cfg.layout_names())
                )
            out.append(PolicySpec(name, (lay,)))
        else:
            raise UsageError(f"--policy {name}", "expected static:LAYOUT, static:whole, schedule or elastic")
    return out


def schedule_boundaries(cfg: PoolConfig, epoch: datetime, span_s: float) -> list[tuple[float, str]]:
    """(seconds from ``epoch``, layout due from then) over the replay, first at 0."""
    sched = cfg.schedule
    assert sched is not None
    out = [(0.0, sched.due(epoch))]
    t = epoch
    end = epoch + timedelta(seconds=span_s)
    while True:
        nxt = sched.next_change(t)
        if nxt is None or nxt[0] > end:
            return out
        t, layout = nxt
        out.append(((t - epoch).total_seconds(), layout))


def elastic_settings(cfg: PoolConfig) -> ElasticSettings:
    """The config's elastic bounds (floors checked against the layouts' types, as the real
    step checks them), or the defaults (demand decides at all times, no floor)."""
    settings = cfg.elastic if cfg.elastic is not None else ElasticSettings(Bounds())
    check_floors(cfg, settings)
    return settings


def elastic_boundaries(
    cfg: PoolConfig, settings: ElasticSettings, epoch: datetime, span_s: float
) -> list[tuple[float, str]]:
    """The clock's boundaries with ``UNION`` where an elastic period begins (merged runs)."""
    base = schedule_boundaries(cfg, epoch, span_s) if cfg.schedule is not None else [(0.0, UNION)]
    out: list[tuple[float, str]] = []
    for t, lay in base:
        lay = UNION if lay == UNION or settings.active(lay) else lay
        if not out or out[-1][1] != lay:
            out.append((t, lay))
    return out


def tier_priorities(cfg: PoolConfig) -> dict[str, int]:
    """The tiers' QOS and their Priority, as ``gpupool qos apply`` sets them in Slurm: the
    queue's order in a replay (``Params.qos_priority``)."""
    return {t.qos: t.priority for t in cfg.tiers}


def pool_for(cfg: PoolConfig, policy: PolicySpec, nodes: list[str], fallback: str) -> PoolSpec:
    """The replay's pool for a policy; for ``elastic`` with the offers of every allowed
    layout together (``UNION``), which jobs are mapped in during elastic periods."""
    pool = pool_spec(cfg, policy.layouts, nodes, fallback)
    if policy.name != ELASTIC:
        return pool
    merged = elastic_offers(cfg, elastic_settings(cfg), nodes, policy.layouts)  # as gpupool-sbatch's
    return replace(pool, offers={**pool.offers, UNION: merged})


def switcher(cfg: PoolConfig, policy: PolicySpec, epoch: datetime, span_s: float) -> Switcher:
    if policy.name == ELASTIC:
        settings = elastic_settings(cfg)
        nodes = [n for n in cfg.all_nodes() if cfg.nodeset_of(n).machine is not None]
        shapes = {n: {lay: records(node_offers(cfg, lay, n)) for lay in policy.layouts} for n in nodes}
        allowed = {n: allowed_layouts(cfg, settings, n) for n in nodes}
        return ElasticSwitcher(
            ELASTIC,
            elastic_boundaries(cfg, settings, epoch, span_s),
            shapes,
            allowed,
            settings.bounds,
            cron_interval_s(cfg.repartition.cron),
            idle_first=settings.idle_first,
        )
    if policy.name == SCHEDULE:
        return Switcher(SCHEDULE, schedule_boundaries(cfg, epoch, span_s))
    return Switcher(policy.name, [(0.0, policy.layouts[0])])


def lead_time_s(cfg: PoolConfig, boundaries: list[tuple[float, str]], max_time_s: float | None) -> float:
    """``repartition.lead_time`` as the repartitioner works it out (``auto``: MaxTime, half the
    shortest switch gap, ``max_lead_time``)."""
    if cfg.repartition.lead_time_s is not None:
        return float(cfg.repartition.lead_time_s)
    gaps = [int(b[0] - a[0]) for a, b in pairwise(boundaries[1:])]  # between switches, not from 0
    return float(lead_time_default(int(max_time_s) if max_time_s else None, gaps, cfg.repartition.max_lead_time_s))


def switch_seconds(cfg: PoolConfig, nodes: int, timings: Timings = MEASURED) -> float:
    """How long a switch of ``nodes`` nodes takes a node away from jobs: the timing model the
    repartition benchmark uses (apply batches of ``parallel``, restart batches).  In one wave,
    its time out of service; in waves of ``wave_size``, its time held in the run's
    reservation until its wave is through, the mean over the nodes."""
    r = cfg.repartition
    est = estimate_switch_s(nodes, r.parallel, r.restart_batch, timings, r.wave_size)
    return float(est["mean_node_unavailable_s"])


def elastic_switch_s(cfg: PoolConfig, policy: PolicySpec, switch_s: float, default: bool) -> float:
    """A node's time out of service per switch: elastic decisions switch at most
    ``max_changing`` nodes per run, so with the default timing model its runs are that
    small, unless the policy also has clock periods, whose switches move every node (the
    engine has one switch time: the larger, against elastic)."""
    if policy.name != ELASTIC or not default:
        return switch_s
    settings = elastic_settings(cfg)
    if settings.during and cfg.schedule is not None and cfg.schedule.rules:
        return switch_s
    return switch_seconds(cfg, settings.bounds.max_changing)
