"""Reports → text tables, CSV or JSON (HTML lives in ``html.py``)."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from slurm_gpupool.reports.compute import Report
from slurm_gpupool.reports.csv_cells import neutralise


def human_s(seconds: Any) -> str:
    """A wait or runtime for people: ``42 s``, ``3m 07s``, ``1h 05m``, ``2d 04h``; ``–`` if unknown.
    (Two units, padded, for tables; ``core.durations.format_duration`` writes exact spans.)"""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return "–"
    if math.isnan(s):
        return "–"
    if math.isinf(s):
        return "∞" if s > 0 else "-∞"
    sign = "-" if s < 0 else ""
    s = abs(s)
    if 0 < s < 0.5:
        return f"{sign}<1 s"
    if s < 59.5:
        return f"{sign}{s:.0f} s"
    d, rem = divmod(round(s), 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        return f"{sign}{d}d {h:02d}h"
    if h:
        return f"{sign}{h}h {m:02d}m"
    return f"{sign}{m}m {sec:02d}s"


def _num(x: Any) -> str:
    """Two decimals, but small values keep three significant digits (a 2-second job)."""
    if pd.isna(x):
        return ""
    return f"{x:,.2f}" if abs(x) >= 1 or x == 0 else f"{x:.3g}"


def _fmt_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "  (nothing in this period)"
    out = df.copy()
    for c in out.columns:
        if c.endswith("_s"):
            out[c] = out[c].map(human_s)
        elif pd.api.types.is_float_dtype(out[c]):
            out[c] = out[c].map(_num)
    return out.to_string(index=False)


def to_table(reports: list[Report], load: dict[str, Any], notes: list[str]) -> str:
    lines = []
    for r in reports:
        lines.append(f"{r.title}, {r.since:%Y-%m-%d %H:%M} .. {r.until:%Y-%m-%d %H:%M} UTC")
        for name, df in r.tables.items():
            if len(r.tables) > 1:
                lines.append(f"\n-- {name}")
            lines.append(_fmt_table(df))
        if r.text:
            lines.append("\n" + r.text.rstrip("\n"))
        lines.extend(f"note: {n}" for n in r.notes)
        lines.append("")
    lines.append(load_summary(load))
    lines.extend(f"note: {n}" for n in notes)
    return "\n".join(lines) + "\n"


def load_summary(load: dict[str, Any]) -> str:
    text = f"read {load['lines']:,} lines: {load['jobs']:,} jobs, {load['steps']:,} steps"
    if load["malformed_total"]:
        reasons = ", ".join(f"{n:,} {why}" for why, n in load["malformed"].items())
        text += f"; {load['malformed_total']:,} malformed, not used ({reasons})"
        text += "".join(f"\n  e.g. {e}" for e in load["examples"][:3])
    return text


def to_csv(report: Report, table: str | None = None) -> str:
    """The table as CSV, its text cells safe to open in a spreadsheet (csv_cells)."""
    df = report.tables[table] if table else report.main
    return neutralise(df).to_csv(index=False)


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = json.loads(df.to_json(orient="records", date_format="iso", double_precision=10))
    return out


def to_json(reports: list[Report], load: dict[str, Any], notes: list[str]) -> str:
    doc = {
        "reports": [
            {
                "report": r.name,
                "title": r.title,
                "since": r.since.isoformat(),
                "until": r.until.isoformat(),
                "tables": {k: _records(v) for k, v in r.tables.items()},
                "notes": r.notes,
                **({"text": r.text} if r.text else {}),
                **r.meta,
            }
            for r in reports
        ],
        "load": load,
        "notes": notes,
    }
    return json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n"
