"""Per user: what they ran, what it used, what would have fitted, and how long they waited.

The figures of ``report usage``, ``efficiency``, ``waits`` and ``advice`` cut by user, so a
person gets their own numbers and a suggestion they can act on: the right-sizing rule of
``report advice`` (``advice.smallest_fit``) applied to their jobs alone. No ``advice.min_jobs``
here: one job is enough to tell its owner. ``user_text`` makes the text, JSON and mail.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from slurm_gpupool.pool.capacity import type_table
from slurm_gpupool.reports import compute
from slurm_gpupool.reports.advice import smallest_fit, type_offers
from slurm_gpupool.reports.compute import Data


@dataclass(frozen=True)
class TypeUse:
    """One GRES type a user held: hours, and what the hooks measured against what it offered."""

    gres: str  # gpu:3g.40gb, shard:v100_shared
    jobs: int
    gpu_hours: float  # Slurm's count: a slice is a GPU, a shard none
    eq_hours: float  # GPU-equivalent hours
    offered_mib: float | None  # memory of one device of the type (a slice's, a share's)
    measured: int  # jobs with a measured peak memory
    peak_mem_mib: float | None  # the highest measured peak
    median_peak_mem_mib: float | None
    activity_pct: float | None  # mean measured activity, of the device
    activity_source: str  # "utilization" (NVML), "SM activity" (GPM) or "" (none measured)
    right_sized: bool  # the right-sizing rule was applied (a measured MIG or whole-GPU type the pool knows)


@dataclass(frozen=True)
class Suggestion:
    """A smaller offer most of a user's measured jobs on a type fitted (``advice.smallest_fit``)."""

    gres: str
    offer: str  # the pool's GRES type, the catalog's profile, or "shares (1 of N of a MODEL)"
    kind: str  # mig | shared
    offer_mib: float
    shares: int  # shared: N, the GPU's share count; 0 otherwise
    jobs: int  # jobs that fit it
    measured: int  # of the measured jobs on the type
    peak_mem_mib: float  # the highest peak of the jobs that fit
    freed_eq_hours: float


@dataclass(frozen=True)
class UserSummary:
    user: str
    jobs: int  # every job in the window
    gpu_jobs: int  # jobs that held GPUs (or shares) in the window
    gpu_hours: float
    eq_hours: float
    types: tuple[TypeUse, ...]  # most GPU-equivalent hours first
    suggestions: tuple[Suggestion, ...]  # most freed hours first
    started: int  # GPU jobs submitted in the window that started
    median_wait_s: float | None
    pending_now: int  # GPU jobs still pending at the end of the window


def _num(v: object) -> float | None:
    f = float(v)  # type: ignore[arg-type]
    return f if np.isfinite(f) else None


def _type_uses(g: pd.DataFrame, eff: pd.DataFrame, assessed: set[str]) -> tuple[TypeUse, ...]:
    out = []
    for gres, grp in g.groupby(g["gres"].astype(str), observed=True):
        m = eff[eff["gres"].astype(str) == gres]
        peaks = m["peak_mem_mib"].dropna()
        act = m["activity_pct"].dropna()
        source = "utilization" if m["util_pct"].notna().any() else "SM activity" if len(act) else ""
        out.append(
            TypeUse(
                gres=str(gres),
                jobs=int(grp["job"].nunique()),
                gpu_hours=float(grp["gpu_hours"].sum()),
                eq_hours=float(grp["eq_hours"].sum()),
                offered_mib=_num(grp["memory_mib"].max()),
                measured=len(peaks),
                peak_mem_mib=_num(peaks.max()) if len(peaks) else None,
                median_peak_mem_mib=_num(peaks.median()) if len(peaks) else None,
                activity_pct=_num(act.mean()) if len(act) else None,
                activity_source=source,
                right_sized=str(gres) in assessed,
            )
        )
    return tuple(sorted(out, key=lambda t: (-t.eq_hours, t.gres)))


def _suggestions(data: Data, eff: pd.DataFrame) -> tuple[dict[str, list[Suggestion]], dict[str, set[str]]]:
    """The right-sizing rule on each user's measured jobs of each type; and per user, the
    types it was applied to."""
    out: dict[str, list[Suggestion]] = {}
    assessed: dict[str, set[str]] = {}
    for t, grp in type_offers(data, eff, type_table(data.cfg)):
        for user, ug in grp.groupby(grp["user"].astype(str), observed=True):
            assessed.setdefault(str(user), set()).add(f"gpu:{t.name}")
            fit = smallest_fit(ug, t)
            if fit is None:
                continue
            c = fit.offer
            out.setdefault(str(user), []).append(
                Suggestion(
                    gres=f"gpu:{t.name}",
                    offer=c.name,
                    kind=c.kind,
                    offer_mib=float(c.memory_mib),
                    shares=round(1 / c.compute) if c.kind == "shared" else 0,
                    jobs=int(fit.fits.sum()),
                    measured=len(ug),
                    peak_mem_mib=float(ug.loc[fit.fits, "peak_mem_mib"].max()),
                    freed_eq_hours=fit.freed_eq_hours,
                )
            )
    return out, assessed


def user_summaries(
    data: Data, usage_records: pd.DataFrame, users: Iterable[str] = (), eff: pd.DataFrame | None = None
) -> list[UserSummary]:
    """One summary per user with a GPU job in the window (or per user asked for, jobs or none),
    by name. ``eff``: ``efficiency``'s ``per_job`` series when already computed."""
    jobs = data.jobs
    if eff is None:
        eff = compute.efficiency(data, usage_records).series["per_job"]
    g = data.grants.join(jobs[["user", "hours", "ran"]], on="job")
    g = g[g["ran"]].assign(gpu_hours=g["gpus"] * g["hours"], eq_hours=g["eq"] * g["hours"])
    user_of_job = jobs["user"].astype(str)
    gpu = jobs[jobs["gres"].astype(str) != ""]
    waited = gpu[(gpu["submit"] >= pd.Timestamp(data.since)) & gpu["wait_s"].notna()]
    pending = gpu[gpu["start"].isna() & gpu["end"].isna()]
    tips, assessed = _suggestions(data, eff)
    wanted = list(dict.fromkeys(users)) or sorted(set(gpu["user"].astype(str)))
    out = []
    for user in wanted:
        ug = g[g["user"].astype(str) == user]
        w = waited.loc[waited["user"].astype(str) == user, "wait_s"]
        out.append(
            UserSummary(
                user=user,
                jobs=int((user_of_job == user).sum()),
                gpu_jobs=int(ug["job"].nunique()),
                gpu_hours=float(ug["gpu_hours"].sum()),
                eq_hours=float(ug["eq_hours"].sum()),
                types=_type_uses(ug, eff[eff["user"].astype(str) == user], assessed.get(user, set())),
                suggestions=tuple(sorted(tips.get(user, ()), key=lambda s: (-s.freed_eq_hours, s.gres))),
                started=len(w),
                median_wait_s=float(w.median()) if len(w) else None,
                pending_now=int((pending["user"].astype(str) == user).sum()),
            )
        )
    return out
