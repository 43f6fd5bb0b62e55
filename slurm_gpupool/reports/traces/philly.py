"""Jobs for ``gpupool simulate``: public traces and a site's own accounting (pandas).

Every file is found by :func:`slurm_gpupool.data.trace_file`: the packed copies shipped
in the package (``slurm_gpupool/data/traces``, each folder with its SOURCE.md), or the
folder ``$SLURM_GPUPOOL_TRACES`` names (the originals, say).

* **Philly** (``philly/philly.csv``): submit time, run time and GPUs of 82 k jobs; no time
  limits and no GPU model.  Optionally **re-timed** to the Helios day/night submission
  curve: within each day, a job's time of day is moved by quantile mapping from Philly's
  own time-of-day distribution to Helios Earth's (``retime``), so daily volumes, the
  order of jobs and their sizes stay Philly's while the daily shape is Helios's.
* **Helios curve**: the per-minute GPU demand arriving in Helios Earth's 16 virtual
  clusters (May 2020): the rises of running + pending GPUs, summed over VCs, by minute
  of the day.  The Venus per-job log is not public in a form we hold; Earth's aggregate
  is (``helios/SOURCE.md``).  The package ships those per-minute-of-day sums
  (``HELIOS_PACKED``); the per-VC original (``HELIOS``) gives the same curve.
* **openb mix**: Alibaba's fractional GPU requests (``gpu_milli``) on Philly's arrivals
  and run times (openb's own lifetimes are too short to replay, its SOURCE.md says): each
  one-GPU Philly job takes the request of a one-GPU openb pod drawn with a fixed seed.
* **Accounting** (``--from`` files in any format ``gpupool report`` reads, or live sacct):
  each job's GRES becomes a request (``accounting_jobs``): a MIG device its compute share
  and memory, shards their share of the GPU, whole GPUs their count and model.

Every rule is explicit here so a report can name it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from slurm_gpupool.data import trace_file
from slurm_gpupool.errors import DataError
from slurm_gpupool.reports.traces.openb import OPENB, _read, _whole, load_gpu_requests
from slurm_gpupool.simulate.jobs import SimJob, time_limit_s
from slurm_gpupool.simulate.mapping import TraceRequest

if TYPE_CHECKING:  # pandas loads only where a trace is read, not at the CLI's start-up
    import pandas as pd

PHILLY = "philly/philly.csv"
HELIOS = "helios/earth-vcs-2020-05/earth_vcs_gpu_minutely_2020-05.csv"  # the original, per VC and minute
HELIOS_PACKED = "helios/earth_gpu_arrivals_by_minute_of_day.csv"  # helios_arrivals of it: 1,440 sums
DAY_S = 86400


def philly_frame(path: Path | None = None) -> pd.DataFrame:
    """philly.csv as (submit datetime, duration s, gpus, vc), sorted by submission."""
    import pandas as pd

    path = path or trace_file(PHILLY)
    df = _read(path, ("timestamp", "duration", "num_gpus", "cluster"))
    submit = pd.to_datetime(df["timestamp"], format="%Y-%m-%d %H:%M:%S", errors="coerce")
    dur = pd.to_numeric(df["duration"], errors="coerce")
    for bad, col in ((submit.isna(), "timestamp"), (dur.isna() | (dur < 0), "duration")):
        if bad.any():
            k = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataError(str(path), f"column {col!r}, line {k + 2}: {df[col].iloc[k]!r} is not usable")
    gpus = _whole(df, "num_gpus", path)
    out = pd.DataFrame({"submit": submit, "duration": dur.to_numpy(float), "gpus": gpus, "vc": df["cluster"]})
    out = out[out["gpus"] > 0]
    return out.sort_values("submit", kind="stable").reset_index(drop=True)


def helios_arrivals(path: Path) -> np.ndarray:
    """1,440 sums, one per minute of the day: the GPUs whose demand arrived then in Helios
    Earth over May 2020, i.e. the rises of each VC's running + pending GPUs, summed over
    its 16 VCs and 31 days.  Reads the original per-VC, per-minute file (``HELIOS``) or
    its packed form (``HELIOS_PACKED``: ``minute_of_day,gpu_arrivals``)."""
    import pandas as pd

    df = _read(path, ())
    if "minute_of_day" in df.columns:
        if "gpu_arrivals" not in df.columns:
            raise DataError(str(path), "column 'gpu_arrivals' missing beside 'minute_of_day'")
        minute, arrivals = _whole(df, "minute_of_day", path), _whole(df, "gpu_arrivals", path)
        if (minute >= 1440).any():
            k = int(np.flatnonzero(minute >= 1440)[0])
            raise DataError(str(path), f"column 'minute_of_day', line {k + 2}: {minute[k]} is not a minute of a day")
        return np.bincount(minute, weights=arrivals.astype(np.float64), minlength=1440)
    if "time" not in df.columns:
        raise DataError(str(path), "column 'time' missing (or 'minute_of_day' for the packed curve)")
    cols = [c for c in df.columns if c.endswith("_running_gpu_num")]
    if not cols:
        raise DataError(str(path), "no <vc>_running_gpu_num columns")
    demand = np.zeros(len(df))
    for run in cols:
        vc = run.removesuffix("_running_gpu_num")
        pend = f"{vc}_pending_gpu_num"
        level = pd.to_numeric(df[run], errors="coerce").fillna(0).to_numpy()
        if pend in df.columns:
            level = level + pd.to_numeric(df[pend], errors="coerce").fillna(0).to_numpy()
        demand += np.maximum(np.diff(level, prepend=level[0]), 0)
    minute = pd.to_datetime(df["time"], errors="coerce")
    if minute.isna().any():
        k = int(np.flatnonzero(minute.isna().to_numpy())[0])
        raise DataError(str(path), f"column 'time', line {k + 2}: not a time")
    of_day = (minute.dt.hour * 60 + minute.dt.minute).to_numpy()
    return np.bincount(of_day, weights=demand, minlength=1440)[:1440]


def helios_curve(path: Path | None = None) -> np.ndarray:
    """1,440 weights, one per minute of the day: GPU demand arriving then in Helios Earth."""
    curve = helios_arrivals(path or trace_file(HELIOS_PACKED, HELIOS))
    return curve / curve.sum()


def retime(seconds_of_day: np.ndarray, curve: np.ndarray) -> np.ndarray:
    """Move times of day (s) so their distribution follows ``curve`` (per minute), keeping
    their order: each time goes to the same quantile of the target distribution."""
    if len(seconds_of_day) == 0:
        return seconds_of_day
    order = np.argsort(seconds_of_day, kind="stable")
    q = (np.arange(len(order)) + 0.5) / len(order)
    cdf = np.cumsum(curve)
    minute = np.searchsorted(cdf, q * cdf[-1])
    before = np.concatenate([[0.0], cdf[:-1]])
    within = (q * cdf[-1] - before[minute]) / np.maximum(curve[minute], 1e-12)
    out = np.empty(len(order))
    out[order] = (minute + np.clip(within, 0, 0.999)) * 60.0
    return out


def philly_jobs(
    path: Path | None = None,
    curve: np.ndarray | None = None,
    days: float | None = None,
    start: str | None = None,
    limit_factor: float = 2.0,
    max_time_s: float | None = None,
    min_duration_s: float = 0.0,
) -> tuple[datetime, list[SimJob]]:
    """Philly's jobs from the midnight before the first (or ``start``), for ``days`` days;
    re-timed to ``curve`` when given.  Time limits: ``limit_factor`` x run time (Philly
    has none), in whole minutes, at most ``max_time_s``."""
    import pandas as pd

    df = philly_frame(path)
    if start:
        df = df[df["submit"] >= pd.Timestamp(start)]
    if df.empty:
        raise DataError(str(path or PHILLY), f"no job from {start}")
    epoch = df["submit"].iloc[0].normalize()
    offset = (df["submit"] - epoch).dt.total_seconds().to_numpy()
    if days is not None:
        keep = offset < days * DAY_S
        df, offset = df[keep], offset[keep]
    keep = df["duration"].to_numpy() >= min_duration_s
    df, offset = df[keep], offset[keep]
    if curve is not None:
        day = np.floor(offset / DAY_S)
        for d in np.unique(day):
            sel = day == d
            offset[sel] = d * DAY_S + retime(offset[sel] - d * DAY_S, curve)
        order = np.argsort(offset, kind="stable")
        df, offset = df.iloc[order], offset[order]
    jobs = _jobs(offset, df["duration"].to_numpy(), df["gpus"].to_numpy(), df["vc"], limit_factor, max_time_s)
    return epoch.to_pydatetime(), jobs


def _jobs(
    offset: np.ndarray,
    duration: np.ndarray,
    gpus: np.ndarray,
    accounts: Sequence[str] | pd.Series,
    limit_factor: float,
    max_time_s: float | None,
    milli: np.ndarray | None = None,
) -> list[SimJob]:
    reqs: dict[tuple[int, int], TraceRequest] = {}  # a million jobs share a few dozen requests
    out = []
    for k, (t, d, g, acc) in enumerate(zip(offset.tolist(), duration.tolist(), gpus.tolist(), list(accounts))):
        m = int(milli[k]) if milli is not None and g == 1 else 1000
        req = reqs.get((g, m))
        if req is None:
            req = reqs[(g, m)] = TraceRequest(int(g), m)
        limit = time_limit_s(d, limit_factor, maximum_s=max_time_s)
        out.append(SimJob(k + 1, float(t), float(d), limit, req, str(acc)))
    return out


def openb_milli(workload: str = "openb_pod_list_default", traces: Path | None = None) -> np.ndarray:
    """The ``gpu_milli`` of every one-GPU pod of an openb list (fractions and whole GPUs)."""
    num_gpu, gpu_milli = load_gpu_requests(trace_file(f"{OPENB}/{workload}.csv", traces=traces))
    one = num_gpu == 1
    return np.where(gpu_milli[one] > 1000, 1000, gpu_milli[one])


def openb_mix(jobs: list[SimJob], milli: np.ndarray, seed: int = 0) -> list[SimJob]:
    """Philly's arrivals and run times with openb's one-GPU request shapes (seeded)."""
    rnd = random.Random(seed)
    pool = [int(m) for m in milli if m > 0]
    reqs: dict[int, TraceRequest] = {}
    out = []
    for j in jobs:
        if j.request.gpus == 1:
            m = pool[rnd.randrange(len(pool))]
            req = reqs.get(m)
            if req is None:
                req = reqs[m] = TraceRequest(1, m)
            j = SimJob(j.job_id, j.submit_s, j.duration_s, j.limit_s, req, j.account)
        out.append(j)
    return out
