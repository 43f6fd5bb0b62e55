"""The job hooks' usage spool: per job, the GPU devices it held and their peaks.

The Prolog writes ``<spool_dir>/jobs/<job>.json`` on each node and the Epilog
adds peak memory and utilization per device (MIG devices included, which
Slurm's own accounting cannot measure), and where GPM measures it (Hopper and
later) SM and tensor activity per MIG instance or GPU.  Sites collect the spools to the
report host (or run reports where they are mounted): ``reports.spool_dirs``,
else ``paths.spool_dir`` of every node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from slurm_gpupool.config.model import PoolConfig

COLUMNS = ["job_id", "node", "start_time", "types", "peak_mem_mib", "memory_mib", "mean_util_pct"]
# GPM's per-instance activity (Hopper and later), the mean over the job's devices; peak: the highest
ACTIVITY = {"sm_activity_pct": "mean_sm_activity_pct", "tensor_pct": "mean_tensor_activity_pct"}
ACTIVITY_PEAK = {"peak_sm_activity_pct": "peak_sm_activity_pct"}


def spool_dirs(cfg: PoolConfig | None, extra: Iterable[str] = ()) -> list[Path]:
    dirs = [Path(d) for d in extra]
    if cfg is not None:
        dirs += [Path(d) for d in cfg.reports.spool_dirs]
        if not dirs:
            dirs = sorted({cfg.paths.for_node("spool_dir", n) for n in cfg.all_nodes()})
    return dirs


def read_records(dirs: Iterable[Path]) -> tuple[pd.DataFrame, int]:
    """One row per job (its devices summarized); and the count of unreadable records."""
    rows, bad = [], 0
    for d in dirs:
        for p in sorted((d / "jobs").glob("*.json")) if (d / "jobs").is_dir() else []:
            try:
                rec = json.loads(p.read_text())
                usage = rec.get("usage") or []
                devices = rec.get("devices") or []
                peaks = [u for u in usage if u.get("peak_memory_mib") is not None]
                fullest = max(
                    peaks, key=lambda u: u["peak_memory_mib"] / max(u.get("memory_total_mib") or 1, 1), default=None
                )
                utils = [u["mean_utilization_pct"] for u in usage if u.get("mean_utilization_pct") is not None]
                acts = [_mean(usage, key) for key in ACTIVITY.values()]
                peaks_act = [max((u[k] for u in usage if _num(u.get(k))), default=None) for k in ACTIVITY_PEAK]
                rows.append(
                    (
                        str(rec["job_id"]),
                        str(rec.get("node", "")),
                        float(rec.get("start_time") or "nan"),
                        ",".join(sorted({str(x.get("type")) for x in devices})),
                        float(fullest["peak_memory_mib"]) if fullest else None,
                        (float(fullest.get("memory_total_mib") or 0) or None) if fullest else None,
                        sum(utils) / len(utils) if utils else None,
                        *acts,
                        *peaks_act,
                    )
                )
            except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
                bad += 1
    df = pd.DataFrame(rows, columns=COLUMNS + list(ACTIVITY) + list(ACTIVITY_PEAK))
    # a multi-node job has a record on each node: keep its fullest device, average the utilization
    for c in ["mean_util_pct", *ACTIVITY, *ACTIVITY_PEAK]:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    df["ratio"] = df["peak_mem_mib"] / df["memory_mib"]
    means = {c: df.groupby("job_id")[c].mean() for c in ["mean_util_pct", *ACTIVITY]}
    top = {c: df.groupby("job_id")[c].max() for c in ACTIVITY_PEAK}
    first = df.groupby("job_id")["start_time"].min()
    df = df.sort_values("ratio", na_position="first").drop_duplicates("job_id", keep="last")
    for c, v in {**means, **top}.items():
        df[c] = df["job_id"].map(v)
    df["start_time"] = df["job_id"].map(first)
    return df.drop(columns=["ratio"]).reset_index(drop=True), bad


def _num(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _mean(usage: list[dict], key: str) -> float | None:
    """The mean of ``key`` over the devices that measured it (None: none did)."""
    vals = [float(u[key]) for u in usage if _num(u.get(key))]
    return sum(vals) / len(vals) if vals else None
