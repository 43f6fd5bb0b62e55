"""The reports: usage, utilization, waits, cost and efficiency, as pandas tables.

Every figure is in two units where it matters: Slurm's GPU count (a MIG slice
is one GPU, a shard none) and GPU-equivalents (a slice is its compute share, a
shard its share of a time-sliced GPU).  Hours are clipped to the report window;
running jobs count up to now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from slurm_gpupool.config.model import PoolConfig, ReportSettings
from slurm_gpupool.pool.tiers import pool_types, resolve, tres_of
from slurm_gpupool.reports.layout_history import ALL, epoch_s, lookup
from slurm_gpupool.reports.timeline import Level

_JOB_COLUMN = {
    "account": "account",
    "user": "user",
    "partition": "partition",
    "layout": "layout",
    "day-night": "period",
    "tier": "tier",  # the service tier (QOS gpupool_<tier>; "-" for none): docs/tiers.md
}


@dataclass
class Report:
    """What a report says: tables (the first is the main one), notes, chart data."""

    name: str
    title: str
    since: datetime
    until: datetime
    tables: dict[str, pd.DataFrame]
    notes: list[str] = field(default_factory=list)
    series: dict[str, pd.DataFrame] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    text: str = ""  # preformatted lines after the tables (advice's YAML to paste)

    @property
    def main(self) -> pd.DataFrame:
        return next(iter(self.tables.values()))


@dataclass
class Data:
    """Everything the reports read: enriched jobs, their grants, capacity and periods."""

    jobs: pd.DataFrame
    grants: pd.DataFrame
    capacity: pd.DataFrame  # type, kind, model, start, end, eq, memory_mib (epoch s)
    layouts: tuple[np.ndarray, list[str]]  # when the layout most nodes were in changed, and to what
    since: datetime
    until: datetime
    settings: ReportSettings
    notes: list[str] = field(default_factory=list)
    cfg: PoolConfig | None = None  # layouts and schedule (None: files from elsewhere)


def _grants_with(data: Data, cols: list[str]) -> pd.DataFrame:
    g = data.grants
    j = data.jobs[cols]
    return g.join(j, on="job")


def _group_col(by: str) -> str:
    return "gres" if by == "gres-type" else _JOB_COLUMN[by]


# -- usage ---------------------------------------------------------------------------


def usage(data: Data, by: str = "account") -> Report:
    """GPU-hours (Slurm's count) and GPU-equivalent hours per group, and job counts."""
    col = _group_col(by)
    jobs = data.jobs
    g = _grants_with(data, ["hours", "ran", "account", "user", "partition", "layout", "period", "tier"])
    g["gpu_hours"] = g["gpus"] * g["hours"]
    g["eq_hours"] = g["eq"] * g["hours"]
    g = g[g["ran"]]  # held GPUs inside the window, if only for less than a second (pending jobs hold none)
    gpu_jobs = jobs[(jobs["gpu_eq"] > 0) & jobs["ran"]]
    key = g[col].astype(str)
    t = g.groupby(key, observed=True).agg(
        gpu_jobs=("job", "nunique"), gpu_hours=("gpu_hours", "sum"), eq_hours=("eq_hours", "sum")
    )
    if col != "gres":
        t["jobs"] = jobs.groupby(jobs[col].astype(str), observed=True).size().reindex(t.index)
    else:
        t["jobs"] = t["gpu_jobs"]
    total = t["eq_hours"].sum()
    t["eq_share_pct"] = 100 * t["eq_hours"] / total if total else 0.0
    t = t.sort_values("eq_hours", ascending=False)
    t.index.name = by
    t = t.reset_index()[[by, "jobs", "gpu_jobs", "gpu_hours", "eq_hours", "eq_share_pct"]]
    totals = {
        "jobs": len(jobs),
        "gpu_jobs": len(gpu_jobs),
        "gpu_hours": float(g["gpu_hours"].sum()),
        "eq_hours": float(total),
    }
    notes = [ROUNDING]
    brief = int(((jobs["hours"] == 0) & jobs["ran"] & (jobs["gpus"] > 0)).sum())
    if brief:
        notes.append(f"{brief} GPU jobs ran under a second (0 GPU-hours as Slurm times them): counted as jobs")
    return Report(
        "usage", f"GPU usage by {by}", data.since, data.until, {"usage": t}, notes=notes, meta={"totals": totals}
    )


# how the usage and cost reports round, said in their notes
ROUNDING = (
    "every job that held GPUs in the window is counted; hours come from Slurm's whole-second times, "
    "clipped to the window; tables show 2 decimals (3 significant digits below 1), JSON and CSV the full figure"
)


# -- utilization ----------------------------------------------------------------------


BIN_STEPS_S = (60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400)


def _bins(since: datetime, until: datetime) -> np.ndarray:
    """Chart bin edges: the finest step giving at most 400 bins (a minute for a demo, a day for a year)."""
    span = until.timestamp() - since.timestamp()
    step = next((s for s in BIN_STEPS_S if span / s <= 400), BIN_STEPS_S[-1])
    return np.arange(since.timestamp(), until.timestamp() + step, step, dtype=float).clip(max=until.timestamp())


def utilization(data: Data) -> Report:
    """Allocated GPU-equivalents over offered ones, per layout in force and GRES type, and
    over time.  A node's capacity counts under the layout it was in (the journal; the
    schedule before it), a job's under the layout its node was in when it started: after
    a manual switch to day on a weekend, the slices count under day, not under the night
    the schedule said was due."""
    g = _grants_with(data, ["run_start", "run_end", "hours", "layout"])
    g = g[(g["hours"] > 0) & g["eq"].notna()]
    start, end = epoch_s(g["run_start"]), epoch_s(g["run_end"])
    cap = data.capacity
    lo, hi = data.since.timestamp(), data.until.timestamp()
    cap_hours = cap["eq"] * (cap["end"].clip(lo, hi) - cap["start"].clip(lo, hi)).clip(lower=0) / 3600
    offered = cap_hours.groupby([cap["layout"].fillna(ALL).astype(str), cap["type"].astype(str)]).sum()
    used = (g["eq"] * g["hours"]).groupby([_layout_col(g), g["type"].astype(str)]).sum()
    rows = []
    for layout, typ in sorted(set(offered.index) | set(used.index)):
        a, c = float(used.get((layout, typ), 0.0)), float(offered.get((layout, typ), 0.0))
        if a == 0 and c == 0:
            continue
        rows.append((layout, typ, c, a, 100 * a / c if c else np.nan, max(c - a, 0.0)))
    edges = _bins(data.since, data.until)
    series = {"time": pd.to_datetime(edges[:-1], unit="s", utc=True)}
    width = np.diff(edges)
    alloc = Level.from_intervals(start, end, g["eq"].to_numpy())
    total = Level.from_intervals(cap["start"].to_numpy(), cap["end"].to_numpy(), cap["eq"].to_numpy())
    series["allocated_eq"] = alloc.between(edges[:-1], edges[1:]) / width
    series["capacity_eq"] = total.between(edges[:-1], edges[1:]) / width
    t = pd.DataFrame(
        rows, columns=["layout", "type", "capacity_eq_hours", "allocated_eq_hours", "util_pct", "idle_eq_hours"]
    )
    summary = (
        t.groupby("layout")
        .agg(capacity_eq_hours=("capacity_eq_hours", "sum"), allocated_eq_hours=("allocated_eq_hours", "sum"))
        .reset_index()
    )
    summary["util_pct"] = 100 * summary["allocated_eq_hours"] / summary["capacity_eq_hours"].replace(0, np.nan)
    ts = pd.DataFrame(series)
    ts["util_pct"] = 100 * ts["allocated_eq"] / ts["capacity_eq"].replace(0, np.nan)
    ts["layout"] = _layout_in_force(data, edges[:-1], edges[1:])
    return Report(
        "utilization",
        "Pool utilization (GPU-equivalents allocated / offered), by the layout in force",
        data.since,
        data.until,
        {"by type": t, "by layout": summary},
        series={"utilization": ts},
        meta={
            "capacity_eq_hours": float(t["capacity_eq_hours"].sum()),
            "allocated_eq_hours": float(t["allocated_eq_hours"].sum()),
        },
    )


def _layout_col(df: pd.DataFrame) -> pd.Series:
    """A frame's ``layout`` as text (unknown: ALL)."""
    return df["layout"].astype(object).where(df["layout"].notna(), ALL).astype(str)


def _layout_in_force(data: Data, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each time bin [a, b)'s label: the layout most nodes were in for most of the bin (the
    HTML chart shades the bins with it)."""
    starts, names = data.layouts
    mid = (a + b) / 2
    return lookup(starts, names, mid)


# -- waits ----------------------------------------------------------------------------


def _percentiles(s: pd.Series) -> dict[str, float]:
    q = s.quantile([0.5, 0.9, 0.99]) if len(s) else pd.Series([np.nan] * 3, index=[0.5, 0.9, 0.99])
    return {
        "p50_s": float(q[0.5]),
        "p90_s": float(q[0.9]),
        "p99_s": float(q[0.99]),
        "mean_s": float(s.mean()) if len(s) else np.nan,
        "max_s": float(s.max()) if len(s) else np.nan,
    }


def _wait_table(started: pd.DataFrame, pending: pd.DataFrame, keys: list[str], until: pd.Timestamp) -> pd.DataFrame:
    """Wait percentiles of started jobs and the pending ones (count, oldest) per group."""
    cols = ["jobs", "p50_s", "p90_s", "p99_s", "mean_s", "max_s"]
    rows = []
    for k, grp in started.groupby([started[c].astype(str) for c in keys], observed=True):
        rows.append({**dict(zip(keys, k)), "jobs": len(grp), **_percentiles(grp["wait_s"])})
    t = pd.DataFrame(rows, columns=[*keys, *cols])
    p = pd.DataFrame({c: pending[c].astype(str) for c in keys})
    p["oldest_pending_s"] = (until - pending["submit"]).dt.total_seconds()
    p = p.groupby(keys, observed=True).agg(
        pending_now=("oldest_pending_s", "size"), oldest_pending_s=("oldest_pending_s", "max")
    )
    t = t.merge(p.reset_index(), on=keys, how="outer")
    t["jobs"] = t["jobs"].fillna(0).astype(int)
    t["pending_now"] = t["pending_now"].fillna(0).astype(int)
    return t


def waits(data: Data, by: str = "gres-type") -> Report:
    """Queue waits (start − submit) per GRES type and per layout in force (the job's node's
    when it started; for a job still pending, the one most nodes were in when it was
    submitted), and the jobs still pending at the end of the window (how many, the
    oldest's wait so far)."""
    jobs = data.jobs
    jobs = jobs[(jobs["gres"].astype(str) != "") & (jobs["submit"] >= pd.Timestamp(data.since))]
    jobs = jobs.assign(layout=_layout_col(jobs))
    started = jobs[jobs["wait_s"].notna()]
    pending = jobs[jobs["start"].isna() & jobs["end"].isna()]  # cancelled while pending: not pending
    col = _group_col(by)
    keys = ["gres", "layout"] if col == "gres" else [col, "gres"]
    until = pd.Timestamp(data.until)
    t = _wait_table(started, pending, keys, until).sort_values(keys).reset_index(drop=True)
    o = _wait_table(started, pending, ["gres"], until).sort_values("p90_s", ascending=False, na_position="last")
    series = {"waits": started[["gres", "layout", "wait_s"]].reset_index(drop=True)}
    return Report(
        "waits",
        "Queue waits per GRES type and layout in force",
        data.since,
        data.until,
        {"by type and layout": t, "by type": o.reset_index(drop=True)},
        series=series,
        meta={
            "started": len(started),
            "pending_now": len(pending),
            **{k: _percentiles(started["wait_s"])[k] for k in ("p50_s", "p90_s")},
        },
    )


# -- cost -----------------------------------------------------------------------------


def price_fraction(settings: ReportSettings, gres_type: str, fraction: float) -> float:
    """A device's share of its model's price: the configured profile fraction, else its
    GPU-equivalent share (the profile name is the type with any model prefix cut)."""
    table = dict(settings.profile_prices)
    for name in (gres_type, gres_type.rsplit("_", 1)[-1]):
        if name in table:
            return table[name]
    return fraction


def cost(data: Data, by: str = "account") -> Report:
    """Chargeback: hours × devices × the model's price × the device's price fraction."""
    s = data.settings
    col = _group_col(by)
    g = _grants_with(data, ["hours", "ran", "account", "user", "partition", "layout", "period", "tier"])
    g = g[g["ran"]]  # what ran inside the window, if briefly (pending jobs cost nothing)
    # a shard on a node whose share count is unknown has no GPU-equivalents: it costs nothing (noted)
    per_device = (g["eq"] / g["gpus"].where(g["gpus"] > 0, 1)).where(g["kind"] != "shard", g["eq"]).fillna(0.0)
    fracs = {}
    for typ, frac in set(zip(g["type"].astype(str), per_device.round(6))):
        fracs[(typ, frac)] = price_fraction(s, typ, float(frac))
    units = g["gpus"].where(g["kind"] != "shard", 1)
    frac = pd.Series([fracs[(t, f)] for t, f in zip(g["type"].astype(str), per_device.round(6))], index=g.index)
    prices = {m: s.price(m) for m in g["model"].astype(object).unique()}
    unpriced = g["model"].astype(object).map(lambda m: prices.get(m) is None)
    price = g["model"].astype(object).map(lambda m: prices.get(m) or 0.0).astype(float)
    g["eq_hours"] = g["eq"] * g["hours"]
    g["cost"] = g["hours"] * units * frac * price
    key = g[col].astype(str)
    # gpu_jobs: as in the usage report ("jobs" there counts every job of the group)
    t = g.groupby(key, observed=True).agg(
        gpu_jobs=("job", "nunique"), eq_hours=("eq_hours", "sum"), cost=("cost", "sum")
    )
    t = t.sort_values("cost", ascending=False)
    t.index.name = by
    t = t.reset_index()
    notes = []
    if unpriced.any():
        missing = sorted({m if isinstance(m, str) else "unknown model" for m, u in zip(g["model"], unpriced) if u})
        notes.append(
            f"{int(g.loc[unpriced, 'job'].nunique())} jobs on GPUs without a price ({', '.join(missing)}): "
            "cost 0; set reports.prices (or reports.prices.default)"
        )
    return Report(
        "cost",
        f"Chargeback by {by} ({s.currency})",
        data.since,
        data.until,
        {"cost": t},
        notes=[*notes, ROUNDING],
        meta={"currency": s.currency, "total": float(t["cost"].sum()), "gpu_jobs": int(g["job"].nunique())},
    )


# -- quota ----------------------------------------------------------------------------


def held_level(start: np.ndarray, end: np.ndarray, count: np.ndarray, lo: float, hi: float, limit: float):
    """What an account held at once over [lo, hi): (peak, time-averaged, hours at or over
    ``limit``) of the sum of ``count`` over the intervals [start, end) (epoch s, inside the window)."""
    level = Level.from_intervals(start, end, count)
    span = hi - lo
    mean = float(level.between(np.array([lo]), np.array([hi]))[0]) / span if span > 0 else 0.0
    # the level is constant from each event to the next; a job starting the second another
    # ends makes a level of no duration (both events at one time): it was never held
    held = np.diff(np.clip(np.append(level.times, hi), lo, hi))
    peak = float(level.level[held > 0].max()) if (held > 0).any() else 0.0
    at = float(held[level.level >= limit - 1e-9].sum()) if limit > 0 else 0.0
    return peak, mean, at / 3600


def quota(data: Data) -> Report:
    """Each account's holdings of every GRES type it has a quota for, against the quota.

    A quota is an association GrpTRES limit (docs/tiers.md): a cap on what the account's
    running jobs hold *at once* (devices of a type, or shards), not a budget of hours.  So
    it is measured by concurrent holdings: the peak, the time average over the window and
    the hours spent at the quota (while there, the account's further jobs of that type
    waited with AssocGrpGRES), each as a count and as a share of the quota; GPU-equivalent
    hours held tie it to the usage and cost reports."""

    cols = [
        "account",
        "type",
        "quota",
        "quota_eq",
        "peak",
        "peak_pct",
        "mean",
        "mean_pct",
        "hours_at_quota",
        "jobs",
        "eq_hours",
    ]
    cfg = data.cfg
    quotas = cfg.quotas if cfg is not None else {}
    notes = []
    if not quotas:
        notes.append("no quotas in the pool config (quotas:, docs/tiers.md)")
    lo, hi = data.since.timestamp(), data.until.timestamp()
    g = _grants_with(data, ["account", "run_start", "run_end", "hours"])
    g = g[g["hours"] > 0]
    account = g["account"].astype(str)
    is_shard = (g["kind"] == "shard").to_numpy()
    typ = g["type"].astype(str).to_numpy()
    start, end = epoch_s(g["run_start"]), epoch_s(g["run_end"])
    rows = []
    types = pool_types(cfg) if cfg is not None and quotas else {}
    for acct in sorted(quotas):
        assert cfg is not None  # quotas come from it
        limits = resolve(cfg, quotas[acct], f"quotas.{acct}", types)
        for name, _amount in quotas[acct]:
            limit = limits[tres_of(name)]
            mine = (account == acct).to_numpy() & (is_shard if name == "shard" else (~is_shard & (typ == name)))
            counts = g["count"].to_numpy()[mine].astype(float)
            peak, mean, at = held_level(start[mine], end[mine], counts, lo, hi, limit)
            eq_each = types[name].eq_each
            rows.append(
                {
                    "account": acct,
                    "type": name,
                    "quota": limit,
                    "quota_eq": limit * eq_each if eq_each > 0 else np.nan,
                    "peak": peak,
                    "peak_pct": 100 * peak / limit,
                    "mean": mean,
                    "mean_pct": 100 * mean / limit,
                    "hours_at_quota": at,
                    "jobs": int(g.loc[mine, "job"].nunique()),
                    "eq_hours": float((g["eq"].to_numpy()[mine] * g["hours"].to_numpy()[mine]).sum()),
                }
            )
    t = pd.DataFrame(rows, columns=cols)
    if len(t) and (t["peak"] > t["quota"]).any():
        over = t[t["peak"] > t["quota"]]
        notes.append(
            "held more than the quota: "
            + ", ".join(f"{a} {ty}" for a, ty in zip(over["account"], over["type"]))
            + " (a quota set or lowered while jobs ran, or one Slurm does not enforce: `gpupool qos diff`)"
        )
    return Report(
        "quota",
        "Quotas: what each account held at once, against its quota",
        data.since,
        data.until,
        {"quota": t},
        notes=notes,
        meta={"at_quota": int((t["hours_at_quota"] > 0).sum()) if len(t) else 0},
    )


# -- efficiency -----------------------------------------------------------------------


def _measured_by(per_job: pd.DataFrame, key: str) -> pd.DataFrame:
    """Per user or account: GPU-equivalent hours, and activity and peak memory against what
    the slices or shares offered, each weighted by the jobs' GPU-equivalent hours."""
    cols = [key, "jobs", "eq_hours", "mem_used_pct", "max_mem_used_pct", "activity_pct", "sm_activity_pct"]
    if not len(per_job):
        return pd.DataFrame(columns=cols)

    def weighted(g: pd.DataFrame, col: str) -> float:
        ok = g[col].notna() & (g["eq_hours"] > 0)
        return float(np.average(g.loc[ok, col], weights=g.loc[ok, "eq_hours"])) if ok.any() else np.nan

    rows = [
        (
            k,
            len(g),
            float(g["eq_hours"].sum()),
            weighted(g, "mem_used_pct"),
            float(g["mem_used_pct"].max()),
            weighted(g, "activity_pct"),
            weighted(g, "sm_activity_pct"),
        )
        for k, g in per_job.groupby(per_job[key].astype(str))
    ]
    return pd.DataFrame(rows, columns=cols).sort_values("eq_hours", ascending=False).reset_index(drop=True)


def efficiency(data: Data, usage_records: pd.DataFrame, top: int = 20) -> Report:
    """Jobs whose peak GPU memory was far below their slice's, or that held a GPU idle; and per
    job, user and account, the measured activity and peak memory against what was offered.

    Activity is NVML's utilization where it exists (whole GPUs; a shared GPU's split by the
    job's processes), else GPM's SM activity (MIG instances and GPUs, Hopper and later)."""
    s = data.settings
    jobs = data.jobs
    g = _grants_with(data, ["job_id", "user", "account", "hours", "gpumem_mib", "gpuutil_pct"])
    g = g[g["hours"] > 0]
    per_job = g.groupby("job").agg(
        job_id=("job_id", "first"),
        user=("user", "first"),
        account=("account", "first"),
        gres=("gres", lambda x: "+".join(sorted(map(str, set(x))))),
        eq_hours=("eq", "sum"),
        slice_mib=("memory_mib", "max"),
        devices=("gpus", "sum"),
    )
    per_job["eq_hours"] = per_job["eq_hours"] * jobs["hours"].reindex(per_job.index)
    # peaks: the hooks' spool (MIG included), else sacct's gpumem/gpuutil (NVML acct_gather)
    acct = jobs[["job_id", "gpumem_mib", "gpuutil_pct"]].reindex(per_job.index)
    per_job["peak_mem_mib"] = pd.to_numeric(acct["gpumem_mib"], errors="coerce")
    per_job["util_pct"] = pd.to_numeric(acct["gpuutil_pct"], errors="coerce")
    per_job["sm_activity_pct"] = per_job["peak_sm_activity_pct"] = per_job["tensor_pct"] = np.nan
    if len(usage_records):
        u = usage_records.set_index("job_id")
        ids = per_job["job_id"].astype(str)
        # a spool record is this job's only if it started within an hour of sacct's start
        # (job ids restart with a new slurmctld state; a stale record must not be joined)
        start = epoch_s(jobs["start"].reindex(per_job.index))
        ids = ids.where(np.abs(ids.map(u["start_time"]).astype(float).to_numpy() - start) < 3600, "")
        per_job["peak_mem_mib"] = ids.map(u["peak_mem_mib"]).fillna(per_job["peak_mem_mib"])
        per_job["util_pct"] = ids.map(u["mean_util_pct"]).fillna(per_job["util_pct"])
        per_job["slice_mib"] = per_job["slice_mib"].fillna(ids.map(u["memory_mib"]))  # untyped: the device's
        for col in ("sm_activity_pct", "peak_sm_activity_pct", "tensor_pct"):
            if col in u:
                per_job[col] = pd.to_numeric(ids.map(u[col]), errors="coerce")
    measured = per_job["peak_mem_mib"].notna()
    per_job["mem_used_pct"] = 100 * per_job["peak_mem_mib"] / per_job["slice_mib"]
    per_job["activity_pct"] = per_job["util_pct"].fillna(per_job["sm_activity_pct"])
    low_mem = measured & (per_job["mem_used_pct"] < 100 * s.low_memory_fraction)
    idle = per_job["activity_pct"].notna() & (per_job["activity_pct"] < s.idle_utilization_pct)
    per_job["why"] = np.select(
        [low_mem & idle, low_mem, idle],
        [
            f"peak memory < {s.low_memory_fraction:.0%} of the slice and activity < {s.idle_utilization_pct:g} %",
            f"peak memory < {s.low_memory_fraction:.0%} of the slice",
            f"activity < {s.idle_utilization_pct:g} %",
        ],
        "",
    )
    flagged = per_job[per_job["why"] != ""].sort_values("eq_hours", ascending=False)
    cols = [
        "job_id",
        "user",
        "account",
        "gres",
        "eq_hours",
        "peak_mem_mib",
        "slice_mib",
        "mem_used_pct",
        "util_pct",
        "sm_activity_pct",
        "why",
    ]
    wasters = (
        flagged.groupby(flagged["user"].astype(str))
        .agg(jobs=("job_id", "count"), wasted_eq_hours=("eq_hours", "sum"))
        .sort_values("wasted_eq_hours", ascending=False)
        .head(top)
        .reset_index()
    )
    seen = per_job[measured | per_job["activity_pct"].notna()]
    measured_cols = ["job_id", "user", "account", "gres", "eq_hours", "peak_mem_mib", "slice_mib"]
    measured_cols += ["mem_used_pct", "util_pct", "sm_activity_pct", "peak_sm_activity_pct", "tensor_pct"]
    notes = [
        f"{int(measured.sum())} of {len(per_job)} GPU jobs have a measured peak memory "
        "(hooks' usage spool, or sacct gres/gpumem)",
        f"{int(per_job['sm_activity_pct'].notna().sum())} have GPM's SM activity (MIG instances and GPUs, "
        "Hopper and later); utilization, where NVML gives it, counts as activity otherwise",
    ]
    if len(flagged) > top * 5:  # said, not silently cut: every flagged job is in --format json/csv
        notes.append(f"the {top * 5} of {len(flagged)} flagged jobs with the most GPU-equivalent hours are listed")
    return Report(
        "efficiency",
        "GPU efficiency: oversized slices and idle GPUs",
        data.since,
        data.until,
        {
            "jobs": flagged[cols].head(top * 5).reset_index(drop=True),
            "top wasters": wasters,
            "measured jobs": seen.sort_values("eq_hours", ascending=False)[measured_cols]
            .head(top * 5)
            .reset_index(drop=True),
            "by user": _measured_by(seen, "user"),
            "by account": _measured_by(seen, "account"),
        },
        notes=notes,
        meta={"flagged": len(flagged), "measured": int(measured.sum())},
        series={"per_job": per_job.reset_index(drop=True)},
    )
