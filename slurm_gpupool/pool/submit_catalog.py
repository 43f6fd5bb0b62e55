"""``gpupool-submit.json``: what each layout offers, for gpupool-sbatch and job_submit.lua.

Built from the planned view of every layout on every node set with a machine
description, so it answers "what would the night layout offer" during the day.
Written beside slurm.conf by ``gpupool gres install``; the wrapper reads it with
``json`` only (it must start fast), and ``job_submit.lua`` embeds the same data.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from slurm_gpupool.config.elastic import ElasticSettings
from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.gres.records import device_order, largest_nvlink_clique
from slurm_gpupool.core.mig.catalog import get_model
from slurm_gpupool.core.mig.layouts import MIG, SHARED
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.pool.elastic import allowed_layouts
from slurm_gpupool.pool.planned import planned_node
from slurm_gpupool.pool.tiers import check_tier_gres, pool_types, resolve

FILE_NAME = "gpupool-submit.json"


def layout_offers(cfg: PoolConfig, layout: str, nodes: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The GRES a layout offers, aggregated over nodes (``nodes``: only these): type, memory,
    count, the most on one node (``per_node``: a job's GRES count is per node), NVLink sets."""
    agg: dict[tuple[str, str, int], dict[str, Any]] = {}
    for node in cfg.all_nodes() if nodes is None else nodes:
        if not cfg.covers(layout, node) or cfg.nodeset_of(node).machine is None:
            continue
        view = planned_node(cfg, layout, node)
        devices = device_order(view.gpus, cfg.slurm.type_naming, cfg.slurm.autodetect)
        here: dict[tuple[str, str, int], int] = {}  # this node's count per offer
        for g, inst, typ in devices:
            model = get_model(g.model)
            prof = None
            if inst is not None:
                assert model.mig is not None
                prof = model.mig.by_name(inst.profile)
                assert prof is not None
                kind, mem, shares = (SHARED if g.shares else MIG), prof.memory_mib, g.shares
            elif g.mode == SHARED:
                kind, mem, shares = SHARED, model.memory_mib, g.shares
            else:
                kind, mem, shares = "whole", model.memory_mib, 0
            key = (kind, typ, shares)
            o = agg.setdefault(
                key,
                {"kind": kind, "type": typ, "model": model.key, "memory_mib": mem, "count": 0, "nodes": 0},
            )
            if shares:
                o["shares"] = shares
            if prof is not None and model.mig is not None:  # its share of the GPU's compute
                o["compute_share"] = round(prof.compute_slices / model.mig.compute_slices, 6)
            o["count"] += 1
            here[key] = here.get(key, 0) + 1
            o["per_node"] = max(o.get("per_node", 0), here[key])
            if here[key] == 1:  # the offer's first device on this node
                o["nodes"] += 1
                if kind == "whole":
                    same = [x.index for x, i, t in devices if i is None and t == typ]
                    o["nvlink_clique"] = max(o.get("nvlink_clique", 0), largest_nvlink_clique(view, same))
    return sorted(agg.values(), key=lambda o: (o["kind"], o["memory_mib"], o["type"]))


def merged_offers(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two offer lists as one (the same type on both sides: counts and nodes add up)."""
    out = {(o["kind"], o["type"], o.get("shares", 0)): dict(o) for o in a}
    for o in b:
        key = (o["kind"], o["type"], o.get("shares", 0))
        if key not in out:
            out[key] = dict(o)
            continue
        m = out[key]
        m["count"] += o["count"]
        m["nodes"] += o["nodes"]
        m["per_node"] = max(m.get("per_node", 0), o.get("per_node", 0))
        if "nvlink_clique" in o:
            m["nvlink_clique"] = max(m.get("nvlink_clique", 0), o["nvlink_clique"])
    return sorted(out.values(), key=lambda o: (o["kind"], o["memory_mib"], o["type"]))


def elastic_offers(
    cfg: PoolConfig,
    settings: ElasticSettings | None = None,
    nodes: Iterable[str] | None = None,
    layouts: Iterable[str] | None = None,
) -> list[dict[str, Any]]:
    """What an elastic period offers: each layout's offers on the nodes the elastic policy
    may put in it (``schedule.elastic.layouts``), together.  The one list the wrapper, the
    Lua and the simulator choose a request's GRES from in elastic periods."""

    settings = settings if settings is not None else cfg.elastic
    assert settings is not None
    names = [n for n in (cfg.all_nodes() if nodes is None else nodes) if cfg.nodeset_of(n).machine is not None]
    merged: list[dict[str, Any]] = []
    for lay in cfg.layout_names() if layouts is None else layouts:
        holders = [n for n in names if lay in allowed_layouts(cfg, settings, n)]
        if holders:
            merged = merged_offers(merged, layout_offers(cfg, lay, holders))
    return merged


def submit_catalog(cfg: PoolConfig, installed: str | None = None) -> dict[str, Any]:
    """What the wrapper and the Lua read; ``installed`` is the layout Slurm's GRES are in
    now (None: mixed or unknown, and the schedule's due layout stands in for it)."""
    sched = None
    if cfg.schedule is not None:
        s = cfg.schedule
        sched = {
            "default": s.default,
            "timezone": getattr(s.tz, "key", None) if s.tz else "local",
            "rules": [
                {"layout": r.layout, "days": sorted(r.days), "start": r.start.strftime("%H:%M"), "end": _end(r.end)}
                for r in s.rules
            ],
        }
    layouts = {name: {"offers": layout_offers(cfg, name)} for name in cfg.layout_names()}
    check_untyped_gpu_types(cfg, layouts)
    return {
        "schema": 1,
        "source": cfg.source,
        "schedule": sched,
        "installed": installed if installed in cfg.layout_names() else None,
        "layouts": layouts,
        "rules": dict(cfg.submit),
        # schedule.mode elastic: in these periods (all, if empty) choices span every layout
        "elastic": (
            {
                "during": list(cfg.elastic.during),
                "idle_first": cfg.elastic.idle_first,
                "offers": elastic_offers(cfg),
            }
            if cfg.elastic is not None
            else None
        ),
        **tiers_section(cfg),
    }


def check_untyped_gpu_types(cfg: PoolConfig, layouts: dict[str, Any]) -> None:
    """``submit.untyped_gpu_types`` names whole-GPU types the layouts offer (ConfigError)."""
    whole = sorted({o["type"] for lay in layouts.values() for o in lay["offers"] if o["kind"] == "whole"})
    for i, t in enumerate(cfg.submit.get("untyped_gpu_types") or ()):
        if t not in whole:
            raise ConfigError(
                cfg.source,
                f"submit.untyped_gpu_types[{i}]",
                f"{t!r} is not a whole-GPU type any layout offers",
                hint="whole-GPU types: " + (", ".join(whole) or "none"),
            )


def tiers_section(cfg: PoolConfig) -> dict[str, Any]:
    """``tiers`` (name → QOS, default, GRES it may use, --signal) and ``quotas`` (account →
    TRES → count) for the wrapper and the Lua; nothing without tiers and quotas."""
    if not cfg.tiers and not cfg.quotas:
        return {}

    types = pool_types(cfg)
    check_tier_gres(cfg, types)
    return {
        "tiers": {
            t.name: {
                "qos": t.qos,
                "default": t.default,
                "gres": list(t.gres),
                "signal": t.signal_option(),
                "grace_s": t.grace_s,
                "priority": t.priority,
            }
            for t in cfg.tiers
        },
        "quotas": {a: resolve(cfg, q, f"quotas.{a}", types) for a, q in cfg.quotas.items()},
    }


def _end(t: Any) -> str:
    return "24:00" if (t.hour, t.minute, t.second) == (23, 59, 59) else t.strftime("%H:%M")
