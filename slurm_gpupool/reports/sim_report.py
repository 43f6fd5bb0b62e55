"""``gpupool simulate``'s output: policies side by side as a table, JSON or HTML with charts.

The summaries come from ``simulate.metrics``; this module only lays them out (pandas and
matplotlib live here, not in the engine).
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from slurm_gpupool.reports.compute import Report
from slurm_gpupool.reports.html import _figure, _new_figure, _no_chart, _svg, render_html
from slurm_gpupool.reports.output import human_s

COLUMNS = {
    "utilisation": "GPU-eq util %",
    "p50": "wait p50",
    "p90": "wait p90",
    "mean": "wait mean",
    "p99": "wait p99",
    "jct_p50": "JCT p50",
    "idle": "idle %",
    "fragmented": "fragmented %",
    "switches": "switches",
    "oos": "out of service node-h",
    "rounding": "rounding loss %",
    "started": "jobs started",
    "rejected": "never runnable",
}


def _run(s: dict[str, Any]) -> dict[str, Any]:
    """A row's first columns: the policy, and the parameter that varied if one did."""
    return {"policy": s["policy"], **({"variant": s["variant"]} if s.get("variant") else {})}


def _pct(v: float) -> float:
    return 100 * v if v == v else math.nan


def comparison(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run (policy, and the parameter that varied): the headline figures."""
    rows = []
    for s in runs:
        w = s["wait_s"]
        rows.append(
            {
                **_run(s),
                COLUMNS["utilisation"]: 100 * s["utilisation"],
                COLUMNS["p50"]: w["p50"],
                COLUMNS["p90"]: w["p90"],
                # beside the p90: a busy week's p90 sits where the waits rise to a day, and
                # can fall while the mean wait grows (docs/elastic.md)
                COLUMNS["mean"]: w["mean"],
                COLUMNS["p99"]: w["p99"],
                COLUMNS["jct_p50"]: s["completion_s"]["p50"],
                COLUMNS["idle"]: 100 * s["idle_fraction"],
                COLUMNS["fragmented"]: 100 * s["fragmented_fraction"],
                COLUMNS["switches"]: s["switches"],
                COLUMNS["oos"]: s["out_of_service_node_h"],
                COLUMNS["rounding"]: 100 * s["rounding_loss_fraction"],
                COLUMNS["started"]: s["started"],
                COLUMNS["rejected"]: s["rejected"],
            }
        )
    return pd.DataFrame(rows)


def by_type(runs: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            **_run(s),
            "type": typ,
            "kind": r.get("kind", ""),
            "capacity eq-h": r["capacity_eq_h"],
            "allocated eq-h": r["allocated_eq_h"],
            "util %": _pct(r["utilisation"]),
        }
        for s in runs
        for typ, r in s["by_type"].items()
    )


def by_period(runs: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        {**_run(s), "period": period, "util %": _pct(r["utilisation"]), "capacity eq-h": r["capacity_eq_h"]}
        for s in runs
        for period, r in s["by_period"].items()
    )


def waits_by_kind(runs: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            **_run(s),
            "kind": kind,
            "jobs": int(w["count"]),
            "wait p50": w["p50"],
            "wait p90": w["p90"],
            "wait p99": w["p99"],
        }
        for s in runs
        for kind, w in s["wait_s_by_kind"].items()
    )


def _show(df: pd.DataFrame) -> str:
    out = df.copy()
    for c in out.columns:
        if c.startswith(("wait", "JCT")):
            out[c] = out[c].map(human_s)
        elif pd.api.types.is_float_dtype(out[c]):
            out[c] = out[c].map(lambda v: "-" if v != v else f"{v:,.1f}")
    return out.to_string(index=False)


def to_table(runs: list[dict[str, Any]], context: dict[str, Any]) -> str:
    acc = context.get("accuracy")
    parts = [
        _header(context),
        _show(_with_error(comparison(runs), acc)),
        "",
        "waits by kind:",
        _show(waits_by_kind(runs)),
    ]
    parts += ["", "utilisation by layout period:", _show(by_period(runs))]
    return "\n".join(parts) + "\n" + "".join(f"note: {n}\n" for n in context.get("notes", []))


def _header(context: dict[str, Any]) -> str:
    lines = [f"{context.get('title', 'simulation')}: {context.get('jobs', 0):,} jobs, {context.get('pool', '')}"]
    if context.get("since"):
        lines.append(f"replayed from {context['since']} to {context.get('until', '')}")
    for k, v in context.get("parameters", {}).items():
        lines.append(f"  {k}: {v}")
    if context.get("accuracy"):
        lines.append(f"  accuracy: {context['accuracy']['summary']}")
    return "\n".join(lines) + "\n"


def _with_error(df: pd.DataFrame, acc: dict[str, Any] | None) -> pd.DataFrame:
    """The headline columns named with the simulator's measured error (``wait p90 ±9 %``);
    ``acc``: ``simulate.accuracy.to_dict``'s."""
    if not acc:
        return df
    from slurm_gpupool.simulate.accuracy import from_dict

    a = from_dict(acc, "accuracy")
    names = {
        COLUMNS["p50"]: f"{COLUMNS['p50']} {a.wait('median')}",
        COLUMNS["p90"]: f"{COLUMNS['p90']} {a.wait('p90')}",
        COLUMNS["mean"]: f"{COLUMNS['mean']} {a.wait('mean')}",
        COLUMNS["utilisation"]: f"{COLUMNS['utilisation']} ±{a.utilisation_points:g}",
    }
    return df.rename(columns=names)


def to_json(runs: list[dict[str, Any]], context: dict[str, Any]) -> str:
    return json.dumps(finite({"context": context, "runs": runs}), indent=2, allow_nan=False)


def finite(obj: Any) -> Any:
    """NaN and infinities as None, for strict JSON."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def to_html(runs: list[dict[str, Any]], context: dict[str, Any], series: dict[str, list[tuple[float, float]]]) -> str:
    since = datetime.fromisoformat(context["since"]) if context.get("since") else datetime.now()
    until = datetime.fromisoformat(context["until"]) if context.get("until") else since + timedelta(days=1)
    main = Report(
        "simulate",
        "Policies side by side",
        since,
        until,
        {
            "policies": _html_frame(_with_error(comparison(runs), context.get("accuracy"))),
            "waits by kind": _html_frame(waits_by_kind(runs)),
        },
        notes=list(context.get("notes", [])),
        series={"utilisation": _series_frame(series)},
        meta={"runs": runs},
    )
    detail = Report(
        "simulate-detail",
        "Utilisation by GRES type and by layout period",
        since,
        until,
        {"by type": _html_frame(by_type(runs)), "by period": _html_frame(by_period(runs))},
    )
    ctx = {
        "title": context.get("title", "gpupool simulate"),
        "since": context.get("since"),
        "until": context.get("until"),
    }
    ctx["notes"] = [_header(context)]
    return render_html([main, detail], ctx, charts={"simulate": _charts})


def _html_frame(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for c in out.columns:
        if c.startswith(("wait", "JCT")):
            out[c] = out[c].map(human_s)
    return out


def _series_frame(series: dict[str, list[tuple[float, float]]]) -> pd.DataFrame:
    rows = [(name, t, u) for name, pts in series.items() for t, u in pts]
    return pd.DataFrame(rows, columns=["run", "day", "util"])


def _charts(report: Report) -> str:
    """Waits and utilisation per policy (bars), and utilisation over the replay (lines)."""
    runs: list[dict[str, Any]] = report.meta.get("runs", [])
    if not runs:
        return _no_chart("simulate", "No run: no chart.")
    labels = [r["policy"] + (f" ({r['variant']})" if r.get("variant") else "") for r in runs]
    fig = _new_figure(10, max(2.5, 0.45 * len(runs) + 1.5))
    ax_w, ax_u = fig.subplots(1, 2)
    y = np.arange(len(runs))
    p50 = [r["wait_s"]["p50"] / 3600 for r in runs]
    p90 = [r["wait_s"]["p90"] / 3600 for r in runs]
    ax_w.barh(y - 0.2, p50, height=0.4, color="#2563eb", label="p50")
    ax_w.barh(y + 0.2, p90, height=0.4, color="#f59e0b", label="p90")
    ax_w.set_yticks(y)
    ax_w.set_yticklabels(labels)
    ax_w.set_xlabel("queue wait (hours)")
    ax_w.legend(loc="lower right", fontsize=8)
    ax_u.barh(y, [100 * r["utilisation"] for r in runs], color="#16a34a")
    ax_u.set_yticks(y)
    ax_u.set_yticklabels([])
    ax_u.set_xlabel("GPU-equivalent utilisation (%)")
    ax_u.set_xlim(0, 100)
    parts = [_figure("simulate-bars", _svg(fig, "simulate-bars"), "Queue waits and utilisation per policy.")]
    frame = report.series.get("utilisation")
    if frame is not None and len(frame):
        fig2 = _new_figure(10, 3.2)
        ax = fig2.add_subplot()
        for name, g in frame.groupby("run", sort=False):
            ax.plot(g["day"], 100 * g["util"], label=str(name), linewidth=1)
        ax.set_xlabel("day of the replay")
        ax.set_ylabel("allocated / offered (%)")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=8, ncol=2)
        ax.grid(alpha=0.3)
        parts.append(_figure("simulate-series", _svg(fig2, "simulate-series"), "Utilisation over the replay (hourly)."))
    return "\n".join(parts)
