"""Concrete recommendations, each with the numbers behind it.

Five rules, with thresholds from ``reports.advice`` / ``reports.efficiency``, and (with
``simulate``) the simulator's recommendation (``simulated``):

* **oversized slices**: most jobs on a MIG type peaked below the memory of a
  smaller profile of the same GPU, and their measured activity fits its compute →
  offer more of the smaller one, saying the jobs and GPU-hours it would free;
* **whole GPU to slice or share**: the same for whole-GPU jobs, towards a MIG profile
  or a share of the GPU;
* **oversized shares**: most shard jobs of a time-sliced type held more shards than their
  measured peak memory and activity needed → ask for fewer (a request's size, no layout change);
* **idle capacity**: a GRES type sat idle most of a layout's hours → offer less;
* **long waits**: a type's p90 queue wait is above ``long_wait`` → offer more.

A layout change is only suggested if the planner places it (the same check as
``gpupool layout check``); the suggestion names the config key to edit.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.mig.catalog import GpuModel, get_model
from slurm_gpupool.core.mig.layouts import MIG
from slurm_gpupool.core.mig.planner import plan_gpu
from slurm_gpupool.errors import DataError, InfeasibleError
from slurm_gpupool.pool.capacity import type_table
from slurm_gpupool.reports import compute
from slurm_gpupool.reports.compute import Data, Report
from slurm_gpupool.reports.output import human_s
from slurm_gpupool.reports.sim_accounting import accounting_jobs
from slurm_gpupool.reports.sim_accuracy import shipped
from slurm_gpupool.reports.sim_report import finite
from slurm_gpupool.simulate.accuracy import margins, to_dict
from slurm_gpupool.simulate.advise import Settings, advise


@dataclass(frozen=True)
class Change:
    key: str  # config key path: layouts.<layout>.<entry>.<selector>
    model: str
    before: dict[str, int]
    after: dict[str, int]

    def text(self) -> str:
        def fmt(c: dict[str, int]) -> str:
            return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(c.items())) + "}"

        return f"{self.key}: mig {fmt(self.before)} -> {fmt(self.after)} (placed by the planner on {self.model})"


def feasible(model: GpuModel, counts: dict[str, int]) -> bool:
    try:
        plan_gpu(model, {k: v for k, v in counts.items() if v})
    except InfeasibleError:
        return False
    return True


def _mig_targets(cfg: PoolConfig, layout: str, profile_model: str | None):
    """(key, model, counts) of every MIG GPU entry of ``layout`` on a model (if given)."""
    for entry in cfg.layouts.get(layout, ()):
        node = sorted(entry.nodes)[0]
        ns = cfg.nodeset_of(node)
        if ns.machine is None:
            continue
        models = [get_model(g.model) for g in ns.machine.gpus]
        for sel, target in entry.entries:
            if target.mode != MIG:
                continue
            idx = sorted(sel.resolve(len(models)))
            model = models[idx[0]] if idx else None
            if model is None or (profile_model and model.key != profile_model):
                continue
            yield f"layouts.{layout}.{entry.key}.{sel.text}", model, dict(target.mig)


def more_of(cfg: PoolConfig, layout: str, want: str, model_key: str | None, spare: list[str]) -> Change | None:
    """One more ``want`` per GPU entry, giving up instances of ``spare`` types (most idle first)."""
    for key, model, counts in _mig_targets(cfg, layout, model_key):
        if model.mig is None or model.mig.by_name(want) is None:
            continue
        after = Counter(counts)
        after[want] += 1
        for victim in [s for s in spare if s != want] + [p for p in sorted(counts) if p != want]:
            while not feasible(model, dict(after)) and after[victim] > 0:
                after[victim] -= 1
        after = Counter({k: v for k, v in after.items() if v})
        if feasible(model, dict(after)) and after != Counter(counts):
            return Change(key, model.key, counts, dict(after))
    return None


def smaller_instead(cfg: PoolConfig, layout: str, big: str, small: str, model_key: str | None) -> Change | None:
    """One ``big`` fewer per GPU entry, and as many more ``small`` as the planner places."""
    for key, model, counts in _mig_targets(cfg, layout, model_key):
        if counts.get(big, 0) < 1:
            continue
        after = Counter(counts)
        after[big] -= 1
        while feasible(model, dict(after + Counter({small: 1}))):
            after[small] += 1
        after = Counter({k: v for k, v in after.items() if v})
        if after[small] > counts.get(small, 0):
            return Change(key, model.key, counts, dict(after))
    return None


ACTIVITY_HEADROOM = 0.8  # a smaller slice is offered only if the job's activity stays under 80 % of it
FIT_SHARE = 0.6  # ... and only when this share of the type's jobs fit it


@dataclass(frozen=True)
class Smaller:
    """Something smaller a job could have run on: a MIG profile or a share of a GPU."""

    name: str  # GRES type (or profile name, if the pool offers no type for it)
    kind: str  # mig | shared
    memory_mib: float
    compute: float  # of the GPU: compute slices / the GPU's, or 1 / shares
    eq: float  # GPU-equivalents, as the reports count them
    profile: str = ""  # mig: NVIDIA's profile name


def _offered(
    types: Mapping[str, Any], model: GpuModel, info: Any, share_counts: set[int]
) -> tuple[float, list[Smaller]]:
    """What a device of this type offers (compute share of its GPU), and the smaller MIG
    profiles of the same GPU and shares of it that the pool or the catalog offer, smallest first."""
    from slurm_gpupool.pool.capacity import mig_fraction

    current = 1.0 if info.kind != MIG else info.fraction
    out: list[Smaller] = []
    for p in model.mig.profiles if model.mig else ():
        frac = mig_fraction(model, p.name)
        if p.has_media_extensions or p.memory_mib >= (info.memory_mib or 0) or frac > current:
            continue
        name = next(  # the pool's type for this profile: same memory and compute
            (
                t
                for t, i in types.items()
                if i.model == model.key
                and i.kind == MIG
                and i.memory_mib == p.memory_mib
                and abs(i.fraction - frac) < 1e-9
            ),
            p.name,
        )
        out.append(Smaller(name, MIG, p.memory_mib, frac, frac, p.name))
    for shares in sorted(share_counts):
        if 1 / shares < current:
            name = f"shares (1 of {shares} of a {model.key})"
            out.append(Smaller(name, "shared", model.memory_mib / shares, 1 / shares, 1 / shares))
    return current, sorted((c for c in out if c.eq < info.fraction), key=lambda c: (c.eq, c.memory_mib))


@dataclass(frozen=True)
class TypeOffer:
    """A measured MIG or whole-GPU type: what one device of it offers, and the smaller offers of its GPU."""

    name: str  # the GRES type, without "gpu:"
    info: Any  # pool.capacity's row for the type
    model: GpuModel
    current: float  # compute share of the GPU one device offers
    smaller: list[Smaller]  # smallest first


@dataclass(frozen=True)
class Fit:
    """The smallest offer that ``FIT_SHARE`` of a group of jobs fit, and what moving them frees."""

    offer: Smaller
    fits: pd.Series  # per job of the group: its peak memory and activity fit the offer
    freed_eq_hours: float


def type_offers(data: Data, eff: pd.DataFrame, types: Mapping[str, Any]) -> Iterator[tuple[TypeOffer, pd.DataFrame]]:
    """Per MIG or whole-GPU type with measured jobs (``efficiency``'s ``per_job``): its offer and those jobs."""
    shares: dict[str, set[int]] = {}  # model -> the shares per GPU the pool's layouts offer
    for o in _all_offers(data.cfg):
        if o.shares and not o.profile:  # a whole GPU's (a time-sliced MIG device's are its slice's)
            shares.setdefault(o.model, set()).add(o.shares)
    for typ, grp in eff[eff["peak_mem_mib"].notna()].groupby(eff["gres"].astype(str)):
        name = typ.removeprefix("gpu:")
        info = types.get(name)
        if info is None or info.kind not in (MIG, "whole") or info.model is None:
            continue
        model = get_model(info.model)
        if info.kind == MIG and model.mig is None:
            continue
        # time-slicing works on any GPU: the shares this model has in the pool, else any the pool uses
        counts = shares.get(model.key) or set().union(*shares.values())
        current, candidates = _offered(types, model, info, counts)
        yield TypeOffer(name, info, model, current, candidates), grp


def _activity(grp: pd.DataFrame) -> pd.Series:
    return grp["activity_pct"] if "activity_pct" in grp else pd.Series(np.nan, index=grp.index)


def job_fits(grp: pd.DataFrame, t: TypeOffer, c: Smaller) -> pd.Series:
    """Per job: its measured peak memory fits ``c``, and its activity (where measured) would keep
    ``c`` under ``ACTIVITY_HEADROOM`` busy (the activity scaled by the two offers' compute)."""
    used = _activity(grp) / 100 * t.current  # of the whole GPU
    return (grp["peak_mem_mib"] <= c.memory_mib) & (used.isna() | (used <= c.compute * ACTIVITY_HEADROOM))


def smallest_fit(grp: pd.DataFrame, t: TypeOffer) -> Fit | None:
    """The smallest smaller offer that ``FIT_SHARE`` of these jobs fit; the freed hours are the
    fitting jobs' GPU-equivalent hours less what the smaller offer would have held."""
    for c in t.smaller:
        fits = job_fits(grp, t, c)
        if fits.mean() >= FIT_SHARE:
            freed = float((grp.loc[fits, "eq_hours"] * (1 - c.eq / max(t.info.fraction, c.eq))).sum())
            return Fit(c, fits, freed)
    return None


def right_size_jobs(data: Data, eff: pd.DataFrame, types: Mapping[str, Any]) -> pd.DataFrame:
    """Per measured job on a MIG or whole-GPU type: what it held and used, the smallest smaller
    offer it fits on its own (``fits``, "" for none) and the offer its type's rule proposes."""
    cols = ["job_id", "user", "gres", "slice_mib", "peak_mem_mib", "activity_pct", "eq_hours"]
    parts = []
    for t, grp in type_offers(data, eff, types):
        part = grp[cols].assign(gres=t.name, fits="", fits_mib=np.nan)
        for c in reversed(t.smaller):  # the smallest last, so it wins
            ok = job_fits(grp, t, c)
            part.loc[ok, "fits"] = c.name
            part.loc[ok, "fits_mib"] = c.memory_mib
        fit = smallest_fit(grp, t)
        part["type_offer"] = fit.offer.name if fit else ""
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=[*cols, "fits", "fits_mib", "type_offer"])
    return pd.concat(parts).sort_values(["gres", "job_id"]).reset_index(drop=True)


def right_size(data: Data, eff: pd.DataFrame, types: Mapping[str, Any]) -> list[tuple[str, str, float, str]]:
    """Per MIG or whole-GPU type: the smallest smaller profile, or share of the GPU, that most of
    its jobs' measured peak memory and activity fit, with the jobs and GPU-equivalent hours it
    would free; a MIG mix is proposed only where the planner places it."""
    s, cfg = data.settings, data.cfg
    rows: list[tuple[str, str, float, str]] = []
    for t, grp in type_offers(data, eff, types):
        fit = smallest_fit(grp, t) if len(grp) >= s.min_jobs else None
        if fit is None:
            continue
        c, fits, name, act = fit.offer, fit.fits, t.name, _activity(grp)
        layout = _layout_of(data, grp)
        check = _feasibility(cfg, layout, name, t.info, t.model, c)
        measured = act.notna().sum()
        rows.append(
            (
                "oversized slices" if t.info.kind == MIG else "whole GPU to slice or share",
                f"most {name} jobs ({int(fits.sum())} of {len(grp)}) peaked below {_gb(c.memory_mib)} "
                f"(p75 peak {_gb(grp['peak_mem_mib'].quantile(0.75))})"
                + (
                    f" and would keep it under {ACTIVITY_HEADROOM:.0%} busy (p75 activity "
                    f"{act.quantile(0.75):.0f} % of the {name}, {measured} measured)"
                    if measured
                    else ""
                )
                + f": offer more {c.name}"
                + (f" in the {layout} layout" if layout else "")
                + f"; it would free {fit.freed_eq_hours:,.1f} GPU-eq-h over {int(fits.sum())} jobs",
                float(grp["eq_hours"].sum()),
                check,
            )
        )
    return rows


def oversized_shares(data: Data, eff: pd.DataFrame) -> list[tuple[str, str, float, str]]:
    """Per time-sliced type with measured shard jobs: most of them held more shards than their
    measured peak memory and activity needed (a shard's memory is the device's over its
    shares; a job's activity is its part of the GPU's utilization, to stay under
    ``ACTIVITY_HEADROOM`` of what it holds).  The request's size is the user's to make
    smaller (``--gres=shard:N``, ``gpupool-sbatch --gpu-mem``); no layout changes."""
    offers = {o.type: o for o in _all_offers(data.cfg) if o.kind == "shared" and o.shares}
    rows: list[tuple[str, str, float, str]] = []
    measured = eff[eff["peak_mem_mib"].notna() & eff["gres"].astype(str).str.startswith("shard:")]
    for typ, grp in measured.groupby(measured["gres"].astype(str)):
        o = offers.get(typ.removeprefix("shard:"))
        if o is None or len(grp) < data.settings.min_jobs:
            continue
        each = o.memory_mib / o.shares
        held = (grp["slice_mib"] / each).round()
        # a job's activity is of its device (a GPU, or a time-sliced MIG device): unmeasured
        # (NVML has no utilization for MIG), it may need all it held
        by_activity = np.ceil(_activity(grp) / 100 * o.shares / ACTIVITY_HEADROOM).fillna(held)
        need = np.maximum(1, np.maximum(np.ceil(grp["peak_mem_mib"] / each), by_activity))
        fewer = need < held
        if fewer.mean() < FIT_SHARE:
            continue
        device = f"{o.profile} slice of a {o.model}" if o.profile else o.model
        freed = float((grp.loc[fewer, "eq_hours"] * (1 - need[fewer] / held[fewer])).sum())
        rows.append(
            (
                "oversized shares",
                f"most {o.type} shard jobs ({int(fewer.sum())} of {len(grp)}) held more shards than they used: "
                f"median {held[fewer].median():g} held, {need[fewer].median():g} would have done "
                f"(p75 peak {_gb(grp['peak_mem_mib'].quantile(0.75))}; one share is {_gb(each)} and "
                f"{1 / o.shares:.0%} of a {device}): ask for fewer (--gres=shard:N, or gpupool-sbatch --gpu-mem); "
                f"it would free {freed:,.1f} GPU-eq-h over {int(fewer.sum())} jobs",
                float(grp["eq_hours"].sum()),
                "a request's size: no layout change",
            )
        )
    return rows


def _all_offers(cfg: PoolConfig | None) -> Iterator[Any]:
    from slurm_gpupool.pool.capacity import node_offers

    if cfg is None:
        return
    for layout in cfg.layout_names():
        for node in cfg.all_nodes():
            yield from node_offers(cfg, layout, node)


def _feasibility(cfg: PoolConfig | None, layout: str | None, name: str, info: Any, model: GpuModel, c: Smaller) -> str:
    """The layout change, placed by the planner; or why none is proposed."""
    if c.kind == "shared":
        return f"time-slicing needs no placement: {{shared: {round(1 / c.compute)}}} on GPUs that serve these jobs"
    small = c.profile
    if info.kind == MIG:
        change = smaller_instead(cfg, layout, name, c.name, model.key) if cfg and layout else None
        return change.text() if change else "no MIG mix of this pool's layouts makes room for it (planner)"
    n = 0  # a whole GPU becomes as many of the smaller profile as the planner places
    while feasible(model, {small: n + 1}):
        n += 1
    return f"a whole {model.key} as mig {{{small}: {n}}} (placed by the planner)" if n else "no MIG placement"


def _gb(mib: float) -> str:
    return f"{mib / 1024:.1f} GB"


def advice(
    data: Data,
    spool: pd.DataFrame,
    done: Mapping[str, Report] | None = None,
    simulate: Settings | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """The recommendations, most valuable first (by the GPU-equivalent hours behind them).
    ``done``: reports already computed for this data (``report all``), by name, reused.
    ``simulate``: also replay the window's jobs under the current policy and candidate
    layouts and schedules (``simulated``), with these settings."""

    done = done or {}
    s = data.settings
    cfg = data.cfg
    types = type_table(cfg)
    rows: list[tuple[str, str, float, str]] = []  # (rule, advice, weight, change)
    util = (done.get("utilization") or compute.utilization(data)).tables["by type"]
    idle_rank = util.assign(idle_share=util["idle_eq_hours"] / util["capacity_eq_hours"].replace(0, np.nan))

    # 1. oversized slices and whole GPUs: the measured peak memory and activity fit less
    eff = (done.get("efficiency") or compute.efficiency(data, spool)).series["per_job"]
    rows += right_size(data, eff, types)
    rows += oversized_shares(data, eff)

    # 2. idle capacity, per layout in force and type (the five largest; at least a GPU-hour offered)
    idle = idle_rank[(idle_rank["capacity_eq_hours"] >= 1) & (idle_rank["idle_share"] >= s.idle_fraction)]
    for r in idle.sort_values("idle_eq_hours", ascending=False).head(5).itertuples(index=False):
        rows.append(
            (
                "idle capacity",
                f"{r.type} was idle {r.idle_share:.0%} of {r.layout} hours "
                f"({r.capacity_eq_hours:,.1f} GPU-eq-h offered, {r.allocated_eq_hours:,.1f} used): "
                f"offer less {r.type} in the {r.layout} layout, or steer {r.layout} work to it",
                float(r.idle_eq_hours),
                "",
            )
        )

    # 3. long waits, per type and layout in force
    waits = (done.get("waits") or compute.waits(data)).tables["by type and layout"]
    for r in waits.itertuples(index=False):
        waited = r.jobs >= s.min_jobs and r.p90_s > s.long_wait_s
        stuck = r.pending_now >= s.min_jobs and r.oldest_pending_s > s.long_wait_s
        if not (waited or stuck):
            continue
        name = str(r.gres).split(":", 1)[-1]
        info = types.get(name)
        change = None
        if cfg and info is not None and info.kind == MIG:
            spare = idle_rank[idle_rank["layout"] == r.layout].sort_values("idle_share", ascending=False)["type"]
            change = more_of(cfg, str(r.layout), name, info.model, [str(x) for x in spare])
        rows.append(
            (
                "long waits",
                (
                    f"jobs waiting for {r.gres} in the {r.layout} layout waited p90 = {human_s(r.p90_s)} "
                    f"({r.jobs} jobs, p50 {human_s(r.p50_s)}"
                    if waited
                    else f"{r.pending_now} jobs for {r.gres} are still pending in the {r.layout} layout "
                    f"(the oldest for {human_s(r.oldest_pending_s)}"
                )
                + f"): offer more {name}"
                + (f" in the {r.layout} layout" if r.layout != "all" else ""),
                float(r.jobs + r.pending_now),
                change.text() if change else "",
            )
        )
    t = pd.DataFrame(rows, columns=["rule", "advice", "weight", "layout_change"])
    t = t.sort_values(["rule", "weight"], ascending=[True, False]).reset_index(drop=True)
    notes = [] if len(t) else ["nothing to change: no rule fired for this period"]
    tables = {"advice": t}
    meta: dict[str, Any] = {}
    text = ""
    if simulate is not None:
        table, text, sim_notes, sim = simulated(data, simulate, progress)
        notes += sim_notes
        if table is not None:
            tables["simulated policies"] = table
        meta["simulation"] = sim
    series = {"right_size": right_size_jobs(data, eff, types)}  # the HTML page's right-sizing chart
    return Report("advice", "Advice", data.since, data.until, tables, notes=notes, meta=meta, text=text, series=series)


def _layout_of(data: Data, grp: pd.DataFrame) -> str | None:
    """The layout most of these jobs ran in."""
    ids = set(grp["job_id"].astype(str))
    lay = data.jobs.loc[data.jobs["job_id"].astype(str).isin(ids), "layout"].dropna().astype(str)
    return lay.mode().iloc[0] if len(lay) else None


# -- the simulator's recommendation -----------------------------------------------------


def simulated(
    data: Data, settings: Settings, progress: Callable[[str], None] | None = None
) -> tuple[pd.DataFrame | None, str, list[str], dict[str, Any] | None]:
    """Replay the window's finished GPU jobs under the current policy and the candidate
    layouts and schedules (``simulate.advise``): a table of the policies, the recommendation
    with the YAML to paste, notes, and the whole result for JSON.  Skipped, with a note,
    without a pool config or with fewer than ``settings.min_jobs`` jobs."""

    cfg = data.cfg
    if cfg is None:
        return None, "", ["simulation skipped: no pool config (files from elsewhere), no layout to replay"], None
    if not any(ns.machine is not None for ns in cfg.nodesets.values()):
        return None, "", ["simulation skipped: no node set has a machine description to replay"], None
    try:
        epoch, jobs, skipped = accounting_jobs(data)
    except DataError:
        jobs, skipped = [], {}
    if len(jobs) < settings.min_jobs:
        return (
            None,
            "",
            [
                f"simulation skipped: {len(jobs)} finished GPU jobs in the window, "
                f"at least {settings.min_jobs} are needed for a replay to say anything"
            ],
            None,
        )
    parallel = process_map(settings.workers) if settings.workers > 1 else None
    # a change is recommended only where its gain is larger than the simulator's measured error
    acc = shipped()
    wait_margin, mean_margin, util_margin = margins(
        settings.wait_margin, settings.mean_margin, settings.util_margin, acc
    )
    settings = dataclasses.replace(settings, wait_margin=wait_margin, mean_margin=mean_margin, util_margin=util_margin)
    sim = finite(advise(cfg, epoch, jobs, settings, progress, parallel))
    sim["accuracy"] = to_dict(acc)
    sim["margins"] = {"p90_wait": wait_margin, "mean_wait": mean_margin, "utilisation": util_margin}
    notes = [f"simulation: {v:,} jobs left out ({k})" for k, v in skipped.items() if v]
    notes += [f"simulation: {n}" for n in settings.priority_notes]
    return _policy_table(sim), _recommendation_text(sim), notes, sim


def process_map(workers: int) -> Callable[[Callable[[Any], Any], list[Any]], Iterator[Any]]:
    """A map over ``workers`` processes forked when it is called (they inherit the replays'
    inputs), results in order."""

    def run(fn: Callable[[Any], Any], items: list[Any]) -> Iterator[Any]:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(min(workers, len(items))) as pool:
            yield from pool.imap(fn, items)

    return run


def _pct(x: Any) -> float:
    return 100 * x if isinstance(x, int | float) else float("nan")


def _pct1(x: float) -> str:
    """A margin in per cent to a tenth, as measured (16.7, not 17)."""
    return f"{round(100 * x, 1):g}"


def _bound(rng: dict[str, Any], metric: str, i: int) -> Any:
    return (rng.get(metric) or [None, None])[i]


def _policy_table(sim: dict[str, Any]) -> pd.DataFrame:
    """The current policy and every candidate at the point estimate, with the range where
    it was replayed in every scenario."""
    rows = []
    for what, r in [("current", sim["current"]), *(("candidate", c) for c in sim["candidates"])]:
        p, rng = r["point"], r.get("range") or {}
        rows.append(
            {
                "policy": r["name"],
                "p50_wait_s": p["p50_wait_s"],
                "p90_wait_s": p["p90_wait_s"],
                "p90_low_s": _bound(rng, "p90_wait_s", 0),
                "p90_high_s": _bound(rng, "p90_wait_s", 1),
                "mean_wait_s": p["mean_wait_s"],
                "utilisation_pct": _pct(p["utilisation"]),
                "util_low_pct": _pct(_bound(rng, "utilisation", 0)),
                "util_high_pct": _pct(_bound(rng, "utilisation", 1)),
                "held_pct": _pct(p["held"]),
                "not_started": p["not_started"],
                "switches": p["switches"],
                "verdict": "the policy now" if what == "current" else r["verdict"],
            }
        )
    t = pd.DataFrame(rows)
    for c in ("p90_low_s", "p90_high_s", "mean_wait_s"):
        t[c] = pd.to_numeric(t[c], errors="coerce")
    return t


def _error(sim: dict[str, Any]) -> str:
    """The simulator's measured error, and the margins a gain had to clear because of it."""
    acc, m = sim.get("accuracy"), sim.get("margins")
    if not acc or not m:
        return "the simulator's error is not known"
    return (
        f"the simulator's {acc['summary']}; a gain had to clear "
        f"{_pct1(m['p90_wait'])} % of the p90 wait or {_pct1(m['utilisation'])} points of utilisation, "
        f"with the mean wait no more than {_pct1(m['mean_wait'])} % longer"
    )


def _recommendation_text(sim: dict[str, Any]) -> str:
    """What to do, with the gain and its range, and the YAML to paste."""
    import yaml

    sds = sim["slowdowns"]
    over = f"over slowdown {sds[0]:g}-{sds[-1]:g} and {sim['resamples']} resamples"
    rec = sim.get("recommendation")
    cur = sim["current"]
    if rec is None:
        best = next(iter(sim["candidates"]), None)
        head = (
            f"simulation ({sim['jobs']:,} jobs, {sim['gpus']} GPUs): no change recommended: "
            f"no candidate beat {cur['name'].removeprefix('current: ')} in every scenario ({over})"
        )
        if best is not None:
            head += (
                f"; the closest, {best['name']}: p90 wait {human_s(cur['point']['p90_wait_s'])} -> "
                f"{human_s(best['point']['p90_wait_s'])}, "
                f"mean wait {human_s(cur['point']['mean_wait_s'])} -> {human_s(best['point']['mean_wait_s'])}, "
                f"utilisation {_pct(cur['point']['utilisation']):.0f} % -> "
                f"{_pct(best['point']['utilisation']):.0f} % ({best['verdict']})"
            )
        return head + f"\n  ({_error(sim)})\n"
    p, r = rec["point"], rec["range"]
    cp = rec["current_point"]
    lines = [
        f"recommended by the simulator ({sim['jobs']:,} jobs replayed on {sim['gpus']} GPUs): {rec['name']}",
        f"  {_error(sim)}",
        f"  p90 wait {human_s(cp['p90_wait_s'])} -> {human_s(p['p90_wait_s'])} "
        f"(range {human_s(r['p90_wait_s'][0])}-{human_s(r['p90_wait_s'][1])} {over}); "
        f"mean wait {human_s(cp['mean_wait_s'])} -> {human_s(p['mean_wait_s'])}; "
        f"utilisation {_pct(cp['utilisation']):.0f} % -> {_pct(p['utilisation']):.0f} % "
        f"(range {_pct(r['utilisation'][0]):.0f}-{_pct(r['utilisation'][1]):.0f} %) at equal capacity",
        "  its MIG mixes are the planner's maximal combinations, placed again by the config parser; "
        f"switches cost {human_s(sim['switch_s'])} out of service per node, lead time from a MaxTime "
        f"of {human_s(sim['max_time_s'])} (the longest time limit)",
        "",
        "# paste into the pool config: add these layouts, replace the schedule",
        yaml.safe_dump(
            {**({"layouts": rec["layouts"]} if rec["layouts"] else {}), "schedule": rec["schedule"]},
            sort_keys=False,
            default_flow_style=None,
        ).rstrip("\n"),
    ]
    return "\n".join(lines) + "\n"
