"""Loaded jobs → a file that ``--from`` reads back (reports away from the cluster)."""

from __future__ import annotations

import json

import pandas as pd

from slurm_gpupool.reports.csv_cells import neutralise
from slurm_gpupool.reports.sacct_load import COLUMNS, EXPORT_MARK

EXPORT_COLUMNS = [c for c in COLUMNS if c != "usage_tres"] + ["gpumem_mib", "gpuutil_pct"]


def _plain(jobs: pd.DataFrame) -> pd.DataFrame:
    out = jobs[EXPORT_COLUMNS].copy()
    for c in ("submit", "start", "end"):
        out[c] = out[c].dt.strftime("%Y-%m-%dT%H:%M:%S+00:00").fillna("Unknown")
    for c in out.columns:
        if isinstance(out[c].dtype, pd.CategoricalDtype):
            out[c] = out[c].astype(str)
    return out


def export_jobs(jobs: pd.DataFrame, fmt: str = "csv") -> str:
    """CSV (a ``# gpupool-jobs v1`` line, then a header; cells that a spreadsheet would run
    as formulas marked as text) or JSON; times in UTC."""
    out = _plain(jobs)
    if fmt == "json":
        records = json.loads(out.to_json(orient="records"))
        return json.dumps({"format": EXPORT_MARK, "version": 1, "jobs": records}, indent=0) + "\n"
    return f"# {EXPORT_MARK} v1\n" + neutralise(out).to_csv(index=False)  # safe in a spreadsheet
