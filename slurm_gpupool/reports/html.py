"""One self-contained HTML page for a set of reports: tables, notes and inline SVG charts.

The page must open from a mail attachment or an air-gapped share, so nothing is
fetched: CSS is inline, charts are SVG text drawn by matplotlib, there is no
JavaScript.  Output is deterministic (fixed SVG hash salt, no dates in the SVG
metadata) so two runs over the same data give the same bytes and diffs stay small.
Malformed input lines are always shown in the header: a report over data that
could not all be read must say so.
"""

from __future__ import annotations

import html
import inspect
import io
import math
import re
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from slurm_gpupool.reports.compute import Report
from slurm_gpupool.reports.layout_history import ALL
from slurm_gpupool.reports.output import human_s as format_duration

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["format_duration", "render_html"]

MAX_ROWS = 1000  # rows per table in the page; the rest is counted, not shown
OPEN_ROWS = 25  # a longer table is folded under "all N rows", its first rows shown
USAGE_TOP = 15
WAITS_MAX_BOXES = 24
# layout label -> band colour; unknown labels cycle through _BAND_CYCLE
_BAND_COLOURS = {"day": "#f6c85f", "night": "#6f8fbf"}
_BAND_CYCLE = ("#9dd866", "#ca472f", "#8dddd0", "#ffa056", "#a77bca", "#c9c9c9")

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:1.5em auto;
max-width:1200px;padding:0 1em;color:#1d1d1f;background:#fff;line-height:1.4}
h1{font-size:1.6em;margin:0 0 .2em}h2{font-size:1.3em;margin:2em 0 .4em;border-bottom:2px solid #d0d7de}
h3{font-size:1.05em;margin:1.2em 0 .3em;color:#444}
.period{color:#555;margin:0 0 1em}
.load{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.6em 1em;margin:1em 0}
.load dl{display:grid;grid-template-columns:max-content auto;gap:.15em 1em;margin:.3em 0}
.load dt{font-weight:600}.load dd{margin:0}
.warn{color:#9a3412;font-weight:600}.ok{color:#166534}
ul.examples{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:.85em;margin:.3em 0}
table.data{border-collapse:collapse;margin:.4em 0 1em;font-size:.9em}
table.data th,table.data td{border:1px solid #d0d7de;padding:.2em .6em;text-align:left;vertical-align:top}
table.data thead th{background:#f0f3f6}
table.data tbody tr:nth-child(even){background:#fafbfc}
.tablewrap{overflow-x:auto}
figure.chart{margin:1em 0;padding:0}
figure.chart svg{max-width:100%;height:auto;display:block}
figcaption{color:#555;font-size:.9em;margin-top:.3em}
.notes li{margin:.15em 0}.nochart{color:#555;font-style:italic}
.headline dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1.2em;font-size:1.1em;margin:.6em 0}
.headline dt{color:#555}.headline dd{margin:0;font-weight:600}
details.long summary{cursor:pointer;color:#0550ae;margin:.2em 0 .6em}
pre.text{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.6em 1em;overflow-x:auto}
"""


# -- formatting ------------------------------------------------------------------------------


def _format_float(v: float) -> str:
    return f"{v:,.2f}"


def _is_duration_column(name: Any) -> bool:
    return isinstance(name, str) and name.endswith("_s")


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def _as_utc(value: Any) -> pd.Timestamp | None:
    """Report bounds may be naive (meaning UTC) or aware; None or junk gives None."""
    try:
        ts = pd.Timestamp(value)
    except (TypeError, ValueError):
        return None
    if ts is pd.NaT:
        return None
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def _fmt_when(value: Any) -> str:
    ts = _as_utc(value)
    if ts is None:
        return str(value) if value not in (None, "") else "?"
    return ts.strftime("%Y-%m-%d %H:%M UTC")


# -- tables ----------------------------------------------------------------------------------


def _table_html(df: pd.DataFrame, table_id: str) -> str:
    """One DataFrame as an escaped HTML table; numbers right-aligned via a per-table style.

    A table longer than OPEN_ROWS shows its first rows, and all of them under a fold."""
    if df is None or len(df.columns) == 0 or len(df) == 0:
        return '<p class="nochart">No rows.</p>'
    if len(df) <= OPEN_ROWS:
        return _plain_table(df, table_id)
    first = _plain_table(df.head(OPEN_ROWS), table_id)
    every = _plain_table(df, f"{table_id}-all")
    return f'{first}<details class="long"><summary>all {len(df)} rows</summary>{every}</details>'


def _plain_table(df: pd.DataFrame, table_id: str) -> str:
    shown = df.head(MAX_ROWS)
    formatters: dict[Any, Callable[[Any], str]] = {
        c: format_duration for c in shown.columns if _is_duration_column(c) and _numeric(shown[c])
    }
    body = shown.to_html(
        index=False,
        escape=True,
        na_rep="–",
        border=0,
        classes="data",
        table_id=table_id,
        formatters=formatters,
        float_format=_format_float,
        justify="left",
    )
    numeric = [i + 1 for i, c in enumerate(shown.columns) if _numeric(shown[c])]
    style = ""
    if numeric:
        sel = ",".join(f"#{table_id} td:nth-child({i})" for i in numeric)
        style = f"<style>{sel}{{text-align:right;font-variant-numeric:tabular-nums}}</style>"
    more = ""
    if len(df) > MAX_ROWS:
        more = f'<p class="nochart">First {MAX_ROWS} of {len(df)} rows shown.</p>'
    return f'{style}<div class="tablewrap">{body}</div>{more}'


def _numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


# -- charts ----------------------------------------------------------------------------------


def _mpl() -> Any:
    """matplotlib, headless: select Agg unless pyplot already chose a backend (never switch it)."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    return matplotlib


def _svg(fig: Figure, name: str) -> str:
    """A figure as inline SVG text: no XML prolog/DOCTYPE, no metadata block, ids unique per chart.

    The fixed hash salt keeps ids stable run to run; once inlined, all SVGs share the page's
    id namespace (matplotlib numbers ``figure_1``, ``patch_1``... afresh per figure), so every
    id and every reference to one is prefixed with the chart name.
    """
    mpl = _mpl()
    buf = io.StringIO()
    with mpl.rc_context({"svg.hashsalt": f"slurm-gpupool-{name}", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": "slurm_gpupool"})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    pre = f"{_slug(name)}-"
    text = re.sub(r'(\sid=")', rf"\g<1>{pre}", text)
    text = re.sub(r'(href=")#', rf"\g<1>#{pre}", text)
    text = re.sub(r"url\(#", f"url(#{pre}", text)
    return text.strip()


def _new_figure(width: float, height: float) -> Figure:
    """A pyplot-free Figure: nothing is registered globally, so nothing leaks if we forget to close."""
    _mpl()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _figure(name: str, svg: str, caption: str) -> str:
    return f'<figure class="chart" id="chart-{_esc(name)}">\n{svg}\n<figcaption>{_esc(caption)}</figcaption>\n</figure>'


def _no_chart(name: str, sentence: str) -> str:
    return f'<p class="nochart" id="nochart-{_esc(name)}">{_esc(sentence)}</p>'


def _runs(labels: Iterable[str]) -> list[tuple[str, int, int]]:
    """Contiguous runs of one label as (label, first index, last index + 1)."""
    out: list[tuple[str, int, int]] = []
    for i, lab in enumerate(labels):
        if out and out[-1][0] == lab:
            out[-1] = (lab, out[-1][1], i + 1)
        else:
            out.append((lab, i, i + 1))
    return out


def _band_colour(label: str, seen: dict[str, str]) -> str:
    if label not in seen:
        seen[label] = _BAND_COLOURS.get(label, _BAND_CYCLE[len(seen) % len(_BAND_CYCLE)])
    return seen[label]


def _utilization_chart(report: Report) -> str:
    """Allocated vs offered GPU-equivalents over time, on bands that show which layout was due."""
    ts = report.series.get("utilization")
    need = {"time", "allocated_eq", "capacity_eq"}
    if ts is None or len(ts) == 0 or not need <= set(ts.columns):
        return _no_chart("utilization", "No utilization data in this window: no chart.")
    from matplotlib import dates as mdates

    ts = ts.copy()
    times = pd.to_datetime(ts["time"], utc=True, errors="coerce")
    keep = times.notna().to_numpy()
    ts, times = ts[keep], times[keep]
    if len(ts) == 0:
        return _no_chart("utilization", "No utilization data in this window: no chart.")
    order = np.argsort(times.to_numpy(), kind="stable")
    ts, times = ts.iloc[order], times.iloc[order]
    x = mdates.date2num(times.dt.tz_localize(None).dt.to_pydatetime())
    x = np.asarray(x, dtype=float)
    step = float(np.median(np.diff(x))) if len(x) > 1 else 1 / 24
    if step <= 0:
        step = 1 / 24
    end = _as_utc(report.until)
    last = mdates.date2num(end.tz_localize(None).to_pydatetime()) if end is not None else None
    last_edge = last if last is not None and x[-1] < last <= x[-1] + 2 * step else x[-1] + step
    edges = np.append(x, last_edge)
    alloc = pd.to_numeric(ts["allocated_eq"], errors="coerce").to_numpy(dtype=float)
    cap = pd.to_numeric(ts["capacity_eq"], errors="coerce").to_numpy(dtype=float)

    fig = _new_figure(10, 4)
    ax: Axes = fig.add_subplot()
    handles: list[Any] = []
    layouts = ts["layout"].astype(str).tolist() if "layout" in ts.columns else []
    colours: dict[str, str] = {}
    if layouts and set(layouts) != {ALL}:
        labelled: set[str] = set()
        for lab, a, b in _runs(layouts):
            h = ax.axvspan(edges[a], edges[b], color=_band_colour(lab, colours), alpha=0.25, lw=0, zorder=0)
            if lab not in labelled:
                labelled.add(lab)
                h.set_label(f"layout: {lab}")
                handles.append(h)
    h_alloc = ax.stairs(alloc, edges, fill=True, color="#2563eb", alpha=0.45, label="allocated", zorder=2)
    h_cap = ax.stairs(cap, edges, baseline=None, color="#111827", lw=1.5, label="capacity", zorder=3)
    handles = [h_cap, h_alloc, *handles]
    ax.set_ylabel("GPU-equivalents")
    ax.set_xlabel("time (UTC)")
    finite = np.concatenate([alloc[np.isfinite(alloc)], cap[np.isfinite(cap)]])
    top = float(finite.max()) if finite.size else 0.0
    ax.set_ylim(0, top * 1.1 if top > 0 else 1)
    ax.set_xlim(edges[0], edges[-1])
    loc = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))
    ax.grid(axis="y", alpha=0.3)
    if "util_pct" in ts.columns:
        util = pd.to_numeric(ts["util_pct"], errors="coerce").to_numpy(dtype=float)
        if np.isfinite(util).any():
            ax2 = ax.twinx()
            h_util = ax2.stairs(util, edges, baseline=None, color="#dc2626", lw=1.0, alpha=0.8, label="util %")
            ax2.set_ylabel("utilization %")
            ax2.set_ylim(0, max(100.0, float(np.nanmax(util)) * 1.05))
            handles.append(h_util)
    # above the axes, so it never hides the data
    fig.legend(handles=handles, loc="outside upper center", fontsize=8, ncols=min(len(handles), 6), frameon=False)
    svg = _svg(fig, "utilization")
    with np.errstate(invalid="ignore", divide="ignore"):
        total_cap = np.nansum(cap)
        mean = 100 * np.nansum(alloc) / total_cap if total_cap > 0 else float("nan")
    bands = (
        f"shaded bands: the layout in force on most nodes ({', '.join(sorted(colours))})"
        if colours
        else "no schedule or journal, no bands"
    )
    mean_txt = f"{mean:.1f} %" if math.isfinite(mean) else "n/a"
    caption = f"Allocated vs offered GPU-equivalents per time bin (UTC); {bands}. Mean utilization {mean_txt}."
    return _figure("utilization", svg, caption)


def _usage_chart(report: Report) -> str:
    """Who used the pool: eq-hours per group, biggest first, capped so the chart stays legible."""
    t = report.main if report.tables else None
    if t is None or len(t) == 0 or "eq_hours" not in t.columns:
        return _no_chart("usage", "No GPU usage in this window: no chart.")
    others = [c for c in t.columns if c not in {"jobs", "gpu_jobs", "gpu_hours", "eq_hours", "eq_share_pct"}]
    group = others[0] if others else None
    vals = pd.to_numeric(t["eq_hours"], errors="coerce")
    names = t[group].astype(str) if group is not None else pd.Series(t.index.astype(str), index=t.index)
    d = pd.DataFrame({"name": names.to_numpy(), "eq_hours": vals.to_numpy()}).dropna()
    d = d[d["eq_hours"] > 0]
    if len(d) == 0:
        return _no_chart("usage", "No GPU-equivalent hours in this window: no chart.")
    d = d.sort_values(["eq_hours", "name"], ascending=[False, True], kind="stable")
    shown = d.head(USAGE_TOP).iloc[::-1]
    fig = _new_figure(10, max(2.0, 0.35 * len(shown) + 1.2))
    ax: Axes = fig.add_subplot()
    y = np.arange(len(shown))
    ax.barh(y, shown["eq_hours"].to_numpy(), color="#2563eb")
    ax.set_yticks(y)
    ax.set_yticklabels([n if len(n) <= 40 else n[:39] + "…" for n in shown["name"]])
    ax.set_xlabel("GPU-equivalent hours")
    ax.set_ylabel(str(group) if group is not None else "")
    ax.grid(axis="x", alpha=0.3)
    top = float(shown["eq_hours"].max())
    ax.set_xlim(0, top * 1.15)
    for yi, v in zip(y, shown["eq_hours"]):
        ax.text(v + top * 0.01, float(yi), f"{v:,.1f}", va="center", fontsize=8)
    svg = _svg(fig, "usage")
    caption = f"GPU-equivalent hours per {group or 'group'}"
    if len(d) > USAGE_TOP:
        caption += f" (top {USAGE_TOP} of {len(d)})"
    return _figure("usage", svg, caption + ".")


def _boxplot_kwargs(ax: Axes) -> dict[str, Any]:
    """Horizontal boxes across matplotlib versions (``vert`` gave way to ``orientation`` in 3.10)."""
    if "orientation" in inspect.signature(ax.boxplot).parameters:
        return {"orientation": "horizontal"}
    return {"vert": False}


# log-scale wait ticks people read at a glance: (seconds, label)
_WAIT_TICKS = (
    (1, "1 s"), (10, "10 s"), (60, "1 min"), (600, "10 min"), (3600, "1 h"), (6 * 3600, "6 h"),
    (86400, "1 d"), (7 * 86400, "1 w"), (30 * 86400, "30 d"),
)  # fmt: skip


def _null_locator() -> Any:
    from matplotlib.ticker import NullLocator

    return NullLocator()


def _waits_chart(report: Report) -> str:
    """Distribution of queue waits per GRES type (and layout in force, when there are several)."""
    w = report.series.get("waits")
    if w is None or len(w) == 0 or not {"gres", "wait_s"} <= set(w.columns):
        return _no_chart("waits", "No started GPU jobs in this window: no wait chart.")
    d = pd.DataFrame(
        {
            "gres": w["gres"].astype(str).to_numpy(),
            "layout": w["layout"].astype(str).to_numpy() if "layout" in w.columns else ALL,
            "wait_s": pd.to_numeric(w["wait_s"], errors="coerce").to_numpy(),
        }
    )
    d = d[np.isfinite(d["wait_s"])]
    d = d[d["wait_s"] >= 0]
    if len(d) == 0:
        return _no_chart("waits", "No started GPU jobs in this window: no wait chart.")
    layouts = sorted(set(d["layout"]) - {ALL})
    split = len(layouts) > 1 and d.groupby(["gres", "layout"]).ngroups <= WAITS_MAX_BOXES
    d["key"] = d["gres"] + " · " + d["layout"] if split else d["gres"]
    counts = d.groupby("key").size().sort_values(ascending=False, kind="stable")
    keys = sorted(counts.index[:WAITS_MAX_BOXES], reverse=True)  # boxes go bottom-up: A at the top
    hidden = len(counts) - len(keys)
    mx = float(d["wait_s"].max())
    floor_s = 1.0
    pos = d.loc[d["wait_s"] > 0, "wait_s"]
    # log scale when waits span two decades or more; zero waits cannot sit on it, so they are floored
    wide = len(pos) > 0 and mx / max(float(pos.min()), floor_s) >= 100
    unit, div = ("hours", 3600.0) if mx >= 3 * 3600 else ("minutes", 60.0)
    if wide:
        unit, div = "log scale", 1.0
    data = []
    for k in keys:
        v = d.loc[d["key"] == k, "wait_s"].to_numpy(dtype=float)
        if wide:
            v = np.maximum(v, floor_s)
        data.append(v / div)
    fig = _new_figure(10, max(2.2, 0.4 * len(keys) + 1.3))
    ax: Axes = fig.add_subplot()
    ax.boxplot(
        data,
        **_boxplot_kwargs(ax),
        widths=0.6,
        patch_artist=True,
        boxprops={"facecolor": "#bfdbfe", "edgecolor": "#1e3a8a"},
        medianprops={"color": "#dc2626"},
        flierprops={"marker": ".", "markersize": 3, "alpha": 0.5},
    )
    ax.set_yticks(np.arange(1, len(keys) + 1))
    ax.set_yticklabels([f"{k} (n={int(counts[k])})" for k in keys])
    if wide:
        ax.set_xscale("log")
        ticks = [t for t in _WAIT_TICKS if floor_s <= t[0] <= mx * 1.5]
        ax.set_xticks([t[0] for t in ticks], [t[1] for t in ticks])
        ax.xaxis.set_minor_locator(_null_locator())
    else:
        ax.set_xlim(0, max(mx / div * 1.05, 1.0))  # waits are >= 0; all-zero waits still get an axis
    ax.set_xlabel(f"queue wait ({unit})")
    ax.grid(axis="x", alpha=0.3)
    svg = _svg(fig, "waits")
    caption = f"Queue waits (start − submit) per GRES type{' and layout in force' if split else ''}; boxes: quartiles, "
    caption += "whiskers: 1.5 IQR, red: median."
    if wide:
        caption += f" Waits under {floor_s:g} s are drawn at {floor_s:g} s (log scale)."
    if hidden:
        caption += f" {hidden} less used groups not shown."
    return _figure("waits", svg, caption)


RIGHT_SIZE_MAX_TYPES = 16
_FITS, _NEEDS = "#ea580c", "#2563eb"  # a job that would fit a smaller offer; one that needed its own


def _right_size_chart(report: Report) -> str:
    """Per GRES type: each measured job's peak memory against what the type offered (the grey
    bar), orange where a smaller offer would have fitted it; beside it, its measured activity."""
    d = report.series.get("right_size")
    need = {"gres", "slice_mib", "peak_mem_mib", "fits"}
    if d is None or len(d) == 0 or not need <= set(d.columns):
        return _no_chart("right-size", "No measured peak memory on MIG or whole-GPU types: no right-sizing chart.")
    d = d[pd.to_numeric(d["peak_mem_mib"], errors="coerce").notna()]
    counts = d.groupby(d["gres"].astype(str)).size().sort_values(ascending=False, kind="stable")
    keys = sorted(counts.index[:RIGHT_SIZE_MAX_TYPES], reverse=True)  # bottom-up: A at the top
    acts = "activity_pct" in d.columns and pd.to_numeric(d["activity_pct"], errors="coerce").notna().any()
    fig = _new_figure(10, max(2.2, 0.5 * len(keys) + 1.4))
    axes = fig.subplots(1, 2, sharey=True, width_ratios=(3, 1)) if acts else [fig.add_subplot()]
    ax: Axes = axes[0]
    labels = []
    for y, k in enumerate(keys):
        g = d[d["gres"].astype(str) == k]
        offered = float(pd.to_numeric(g["slice_mib"], errors="coerce").max()) / 1024
        peak = pd.to_numeric(g["peak_mem_mib"], errors="coerce").to_numpy(dtype=float) / 1024
        fits = (g["fits"].astype(str) != "").to_numpy()
        # a fixed, even spread around the row (no random jitter: the same page every run)
        jitter = (np.arange(len(g)) % 7 - 3) * 0.05
        ax.barh(y, offered, height=0.7, color="#e5e7eb", edgecolor="#9ca3af", zorder=1)
        ax.scatter(peak, y + jitter, s=12, c=np.where(fits, _FITS, _NEEDS), alpha=0.8, zorder=3, lw=0)
        smaller = pd.to_numeric(g.loc[g["fits"].astype(str) != "", "fits_mib"], errors="coerce").dropna()
        if len(smaller):  # the offer most of the fitting jobs would have fitted
            ax.vlines(float(smaller.mode().iloc[0]) / 1024, y - 0.35, y + 0.35, colors=_FITS, lw=1.5, zorder=2)
        labels.append(f"{k} (n={len(g)}, {int(fits.sum())} fit smaller)")
        if acts:
            a = pd.to_numeric(g["activity_pct"], errors="coerce").to_numpy(dtype=float)
            ok = np.isfinite(a)
            axes[1].scatter(a[ok], (y + jitter)[ok], s=12, c=np.where(fits, _FITS, _NEEDS)[ok], alpha=0.8, lw=0)
    ax.set_yticks(np.arange(len(keys)), labels)
    ax.set_xlabel("GPU memory (GB): grey, what the type offered; dots, each job's measured peak")
    ax.set_xlim(0, None)
    ax.grid(axis="x", alpha=0.3)
    if acts:
        axes[1].set_xlim(0, 100)
        axes[1].set_xlabel("activity (% of the device)")
        axes[1].grid(axis="x", alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], ls="", marker="o", color=_FITS, label="would fit a smaller offer (tick: the usual one)"),
        Line2D([], [], ls="", marker="o", color=_NEEDS, label="needed what it held"),
    ]
    fig.legend(handles=handles, loc="outside upper center", fontsize=8, ncols=2, frameon=False)
    svg = _svg(fig, "right-size")
    total, fit = len(d), int((d["fits"].astype(str) != "").sum())
    caption = (
        f"Right-sizing: {fit} of {total} measured jobs would have fitted a smaller MIG profile or share of their GPU "
        "(peak memory under its memory, activity under 80 % of its compute)."
    )
    if len(counts) > len(keys):
        caption += f" {len(counts) - len(keys)} less used types not shown."
    return _figure("right-size", svg, caption)


CHARTS: dict[str, Callable[[Report], str]] = {
    "utilization": _utilization_chart,
    "usage": _usage_chart,
    "waits": _waits_chart,
    "advice": _right_size_chart,
}


# -- page ------------------------------------------------------------------------------------


def _load_html(load: dict[str, Any]) -> str:
    """What was read and what could not be: malformed lines by reason, with examples, always shown."""
    if not load:
        return '<section class="load"><p class="warn">No load statistics were given.</p></section>'

    def num(key: str) -> str:
        v = load.get(key)
        return f"{v:,}" if isinstance(v, int) else _esc(v if v is not None else "?")

    bad = int(load.get("malformed_total") or 0)
    malformed = dict(load.get("malformed") or {})
    rows = [
        ("Jobs", num("jobs")),
        ("Lines read", num("lines")),
    ]
    if "steps" in load:
        rows.append(("Steps", num("steps")))
    cls = "warn" if bad else "ok"
    rows.append(("Malformed lines", f'<span class="{cls}" id="malformed-total">{bad:,}</span>'))
    parts = ['<section class="load" id="load"><h3>Input</h3><dl>']
    parts += [f"<dt>{_esc(k)}</dt><dd>{v}</dd>" for k, v in rows]
    sources = load.get("sources") or []
    if sources:
        parts.append(f"<dt>Sources</dt><dd>{_esc(', '.join(map(str, sources)))}</dd>")
    parts.append("</dl>")
    if malformed:
        parts.append('<table class="data" id="malformed"><thead><tr><th>malformed: reason</th><th>lines</th></tr>')
        parts.append("</thead><tbody>")
        for reason, n in malformed.items():
            parts.append(f'<tr><td>{_esc(reason)}</td><td style="text-align:right">{_esc(n)}</td></tr>')
        parts.append("</tbody></table>")
    examples = load.get("examples") or []
    if examples:
        parts.append('<p>Examples of malformed lines:</p><ul class="examples">')
        parts += [f"<li>{_esc(e)}</li>" for e in examples]
        parts.append("</ul>")
    notes = dict(load.get("notes") or {})
    if notes:
        parts.append("<p>Also read (usable, worth knowing): ")
        parts.append(", ".join(f"{_esc(k)}: {_esc(v)}" for k, v in notes.items()))
        parts.append("</p>")
    parts.append("</section>")
    return "".join(parts)


def _headline(reports: list[Report]) -> str:
    """The figures a reader wants first, from the reports on the page (those present)."""
    meta = {r.name: r.meta for r in reports}
    items: list[tuple[str, str]] = []
    if "usage" in meta:
        t = meta["usage"].get("totals", {})
        eq = _format_float(t.get("eq_hours", 0.0))
        items.append(("GPU-equivalent hours", f"{eq} ({t.get('gpu_jobs', 0)} GPU jobs)"))
    if "utilization" in meta:
        u = meta["utilization"]
        cap, used = u.get("capacity_eq_hours", 0.0), u.get("allocated_eq_hours", 0.0)
        items.append(("utilization", f"{100 * used / cap:.1f} % of what was offered" if cap else "no capacity known"))
    if "waits" in meta and meta["waits"].get("started"):
        w = meta["waits"]
        items.append(("queue wait p50 / p90", f"{format_duration(w['p50_s'])} / {format_duration(w['p90_s'])}"))
        items.append(("pending at the end", str(w.get("pending_now", 0))))
    if "cost" in meta:
        items.append(("cost", f"{meta['cost'].get('total', 0.0):,.2f} {meta['cost'].get('currency', '')}"))
    if "efficiency" in meta:
        items.append(("jobs flagged as oversized or idle", str(meta["efficiency"].get("flagged", 0))))
    if not items:
        return ""
    rows = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in items)
    return f'<section class="headline" id="headline"><dl>{rows}</dl></section>'


def _notes_html(notes: Iterable[Any], cls: str = "notes") -> str:
    items = [f"<li>{_esc(n)}</li>" for n in notes if str(n).strip()]
    return f'<ul class="{cls}">{"".join(items)}</ul>' if items else ""


def _report_html(report: Report, index: int, charts: dict[str, Callable[[Report], str]]) -> str:
    sid = _slug(report.name)
    parts = [f'<section class="report" id="report-{sid}">', f"<h2>{_esc(report.title)}</h2>"]
    since, until = _fmt_when(report.since), _fmt_when(report.until)
    parts.append(f'<p class="period">{_esc(since)} → {_esc(until)}</p>')
    chart = charts.get(report.name)
    if chart is not None:
        parts.append(chart(report))
    for j, (name, df) in enumerate(report.tables.items()):
        if len(report.tables) > 1:
            parts.append(f"<h3>{_esc(name)}</h3>")
        parts.append(_table_html(df, f"t{index}-{j}-{_slug(str(name))}"))
    if report.text:
        parts.append(f'<pre class="text">{_esc(report.text)}</pre>')
    parts.append(_notes_html(report.notes))
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def render_html(
    reports: list[Report], context: dict[str, Any], charts: dict[str, Callable[[Report], str]] | None = None
) -> str:
    """The whole page: header (title, period, input and malformed-line summary), then each report.

    ``context`` holds "title", "since"/"until" (ISO strings), "load" (LoadStats.to_dict())
    and "notes" (list of str); unknown keys are ignored.  ``charts``: chart builders by report
    name beside the accounting reports' own (``gpupool simulate`` brings its own).
    """
    title = str(context.get("title") or "GPU pool report")
    since, until = context.get("since"), context.get("until")
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>{_esc(title)}</h1>",
        f'<p class="period">Period: {_esc(_fmt_when(since))} → {_esc(_fmt_when(until))}</p>',
        _headline(reports),
        _load_html(dict(context.get("load") or {})),
        _notes_html(context.get("notes") or []),
        "</header>",
        "<main>",
    ]
    builders = {**CHARTS, **(charts or {})}
    body = [_report_html(r, i, builders) for i, r in enumerate(reports)]
    if not reports:
        body.append('<p class="nochart">No reports were requested.</p>')
    tail = ["</main>", "</body>", "</html>", ""]
    return "\n".join([*(h for h in head if h), *body, *tail])
