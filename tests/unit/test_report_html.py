"""The HTML report page: one self-contained document, charts as inline SVG, malformed input shown.

Reports are built by hand from small synthetic frames (no Slurm).  The browser test renders
the page in headless Chromium and checks that charts really paint; it is skipped, with the
reason, when /usr/bin/chromium is missing (CI installs the ``chromium`` apt package).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from slurm_gpupool.reports.compute import Report
from slurm_gpupool.reports.html import format_duration, render_html

SINCE = datetime(2024, 5, 1, tzinfo=UTC)
UNTIL = datetime(2024, 5, 3, tzinfo=UTC)
CHROMIUM = "/usr/bin/chromium"
CHART_IDS = ("chart-utilization", "chart-usage", "chart-waits", "chart-right-size")


def _utilization(n: int = 48, periods: bool = True) -> Report:
    t = pd.date_range(SINCE, periods=n, freq="h")
    alloc = np.clip(np.sin(np.arange(n) / 4) * 6 + 7, 0, None)
    cap = np.full(n, 14.0)
    layout = np.where((t.hour >= 8) & (t.hour < 20), "day", "night") if periods else np.full(n, "all")
    ts = pd.DataFrame(
        {"time": t, "allocated_eq": alloc, "capacity_eq": cap, "util_pct": 100 * alloc / cap, "layout": layout}
    )
    by_layout = pd.DataFrame(
        {"layout": ["day", "night"], "capacity_eq_hours": [336.0, 336.0], "util_pct": [55.123, 40.0]}
    )
    return Report("utilization", "Pool utilization", SINCE, UNTIL, {"by layout": by_layout}, series={"utilization": ts})


def _usage(groups: int = 20) -> Report:
    eq = np.linspace(100, 1, groups)
    t = pd.DataFrame(
        {
            "account": [f"acct{i:02d}" for i in range(groups)],
            "jobs": np.arange(groups) + 10,
            "gpu_jobs": np.arange(groups) + 5,
            "gpu_hours": eq * 1.5,
            "eq_hours": eq,
            "eq_share_pct": 100 * eq / eq.sum() if groups else eq,
        }
    )
    return Report("usage", "GPU usage by account", SINCE, UNTIL, {"usage": t})


def _waits(n: int = 300) -> Report:
    rng = np.random.default_rng(7)
    w = pd.DataFrame(
        {
            "gres": rng.choice(["gpu:a100", "gpu:1g.10gb", "shard:a100"], n),
            "layout": rng.choice(["day", "night"], n),
            "wait_s": rng.exponential(600, n) * rng.choice([1, 30], n),
        }
    )
    if n:
        w.loc[0, "wait_s"] = 0.0
    by_type = pd.DataFrame(
        {
            "gres": ["gpu:a100", "shard:a100"],
            "jobs": [120, 80],
            "p50_s": [42.0, 3900.0],
            "p90_s": [187.0, 90000.0],
            "p99_s": [np.nan, 200000.0],
        }
    )
    return Report(
        "waits",
        "Queue waits per GRES type",
        SINCE,
        UNTIL,
        {"by type": by_type},
        series={"waits": w},
        notes=["<b>pending</b> jobs counted & shown"],
    )


def _right_size() -> pd.DataFrame:
    """Measured jobs as ``advice.right_size_jobs`` gives them: 3g.40gb jobs of which two would fit
    a 1g.10gb, whole A100s of which one would fit a quarter share, a 1g.10gb job that fits nothing."""
    rows = [
        ("1", "3g.40gb", 40448, 3000, 20.0, "1g.10gb", 9984),
        ("2", "3g.40gb", 40448, 6000, np.nan, "1g.10gb", 9984),
        ("3", "3g.40gb", 40448, 30000, 70.0, "", np.nan),
        ("4", "a100", 40960, 5000, 10.0, "shares (1 of 4 of a A100-SXM4-40GB)", 10240),
        ("5", "a100", 40960, 39000, 95.0, "", np.nan),
        ("6", "1g.10gb", 9984, 9000, 60.0, "", np.nan),
    ]
    cols = ["job_id", "gres", "slice_mib", "peak_mem_mib", "activity_pct", "fits", "fits_mib"]
    return pd.DataFrame(rows, columns=cols).assign(user="u", eq_hours=1.0, type_offer="")


def _advice(right_size: pd.DataFrame | None = None) -> Report:
    t = pd.DataFrame({"action": ["add 1g.10gb slices"], "why": ["p90 wait > 1 h <script>alert(1)</script>"]})
    series = {"right_size": _right_size() if right_size is None else right_size}
    return Report("advice", "Recommendations", SINCE, UNTIL, {"recommendations": t}, series=series)


def _context() -> dict:
    return {
        "title": "GPU pool — May & June",
        "since": SINCE.isoformat(),
        "until": UNTIL.isoformat(),
        "load": {
            "sources": ["sacct.json"],
            "lines": 12345,
            "jobs": 1000,
            "steps": 40,
            "malformed_total": 17,
            "malformed": {"bad time": 12, "unparsable TRES": 5},
            "examples": ["sacct.json:3: bad time"],
            "notes": {"running": 3},
        },
        "notes": ["window clipped to the retention"],
    }


@pytest.fixture(scope="module")
def page() -> str:
    return render_html([_utilization(), _usage(), _waits(), _advice()], _context())


def test_single_self_contained_document(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<html") == 1 and page.count("</html>") == 1
    assert page.count("<body") == 1 and "<?xml" not in page and "<!DOCTYPE svg" not in page
    # nothing is fetched: no src/href to the network; the only URLs are SVG namespace names
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    for m in re.finditer(r"https?://", page):
        before = page[max(0, m.start() - 20) : m.start()]
        assert re.search(r'xmlns(?::\w+)?="$', before), before
    assert "<script" not in page  # no JS; the advice text with a script tag is escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;pending&lt;/b&gt; jobs counted &amp; shown" in page
    assert "GPU pool — May &amp; June" in page


def test_charts_tables_and_load_summary(page: str) -> None:
    for cid in CHART_IDS:
        m = re.search(rf'<figure class="chart" id="{cid}">(.*?)</figure>', page, re.S)
        assert m, cid
        assert "<svg" in m.group(1) and "<figcaption>" in m.group(1)
    # ids (matplotlib's figure_1, clip paths, markers) do not collide once the SVGs share one page
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert len(ids) > 100 and len(ids) == len(set(ids))
    for ref in re.findall(r'(?:href="#|url\(#)([^")]+)', page):
        assert ref in ids, ref
    # the utilization legend names the bands
    util = page[page.index('id="chart-utilization"') : page.index('id="chart-usage"')]
    assert "layout: night" in util and "layout: day" in util
    # tables
    assert len(re.findall(r"<table[^>]*class=\"[^\"]*\bdata\b", page)) >= 5
    assert "acct00" in page and "acct19" in page and "add 1g.10gb slices" in page
    assert "55.12" in page  # 2-decimal floats
    # malformed lines are shown, with reasons and examples
    assert re.search(r'id="malformed-total">17<', page)
    assert "unparsable TRES" in page and "sacct.json:3: bad time" in page
    assert "12,345" in page and "window clipped to the retention" in page


def test_durations_are_human() -> None:
    assert format_duration(42) == "42 s"
    assert format_duration(3900) == "1h 05m"
    assert format_duration(187) == "3m 07s"
    assert format_duration(200000) == "2d 07h"
    assert format_duration(0) == "0 s"
    assert format_duration(0.2) == "<1 s"
    assert format_duration(float("nan")) == "–"
    assert format_duration(None) == "–"


def test_duration_columns_formatted_in_tables(page: str) -> None:
    waits = page[page.index('id="report-waits"') :]
    table = waits[waits.index("<table") : waits.index("</table>")]
    for text in ("42 s", "1h 05m", "3m 07s", "2d 07h"):
        assert f">{text}<" in table, text
    assert "3900.00" not in table and "42.00" not in table


def test_rendering_is_deterministic(page: str) -> None:
    assert render_html([_utilization(), _usage(), _waits(), _advice()], _context()) == page


def test_empty_and_degenerate_series() -> None:
    empty_util = _utilization(0)
    empty_waits = _waits(0)
    out = render_html([empty_util, _usage(0), empty_waits], {"title": "empty", "load": {}, "notes": []})
    assert out.startswith("<!DOCTYPE html>") and "<svg" not in out
    for name in ("utilization", "usage", "waits"):
        assert f'id="nochart-{name}"' in out
    assert "No load statistics" in out

    # one point, NaNs, no schedule (layout "all"), a single wait, zero waits only
    one = _utilization(1, periods=False)
    nan = _utilization(6, periods=False)
    nan.series["utilization"].loc[2:4, ["allocated_eq", "util_pct"]] = np.nan
    nan.series["utilization"]["capacity_eq"] = 0.0
    nan.series["utilization"]["util_pct"] = np.nan
    single_wait = _waits(1)
    zero_waits = _waits(5)
    zero_waits.series["waits"]["wait_s"] = 0.0
    ctx = _context()
    for reports in ([one], [nan], [single_wait], [zero_waits], [_usage(1)]):
        html = render_html(reports, ctx)
        assert html.count('<figure class="chart"') == 1, reports[0].name
        assert "<svg" in html
    assert "layout: " not in render_html([one], ctx)  # no bands when there is no schedule


def test_right_size_chart_shows_each_types_jobs_and_how_many_fit_a_smaller_offer(page: str) -> None:
    chart = re.search(r'<figure class="chart" id="chart-right-size">(.*?)</figure>', page, re.S).group(1)
    for label in ("3g.40gb (n=3, 2 fit smaller)", "a100 (n=2, 1 fit smaller)", "1g.10gb (n=1, 0 fit smaller)"):
        assert label in chart
    assert "3 of 6 measured jobs would have fitted a smaller MIG profile or share" in chart
    assert "activity (% of the device)" in chart  # measured activity: its own panel
    # without measured activity: memory only; without measured jobs: said, no chart
    no_act = _right_size().assign(activity_pct=np.nan)
    out = render_html([_advice(no_act)], {"title": "t", "load": {}})
    assert 'id="chart-right-size"' in out and "activity (% of the device)" not in out
    out = render_html([_advice(_right_size().iloc[0:0])], {"title": "t", "load": {}})
    assert 'id="nochart-right-size"' in out and "<svg" not in out


def test_no_pyplot_figures_leak() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    render_html([_utilization(), _usage(), _waits()], _context())
    assert plt.get_fignums() == before


# -- browser -------------------------------------------------------------------------------------


def _chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess[str]:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={user_data}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(
    not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None,
    reason="needs headless Chromium at /usr/bin/chromium (apt package 'chromium') to check the page paints",
)
def test_page_paints_in_headless_chromium(page: str, tmp_path: Path) -> None:
    from matplotlib import image

    html_file = tmp_path / "report.html"
    html_file.write_text(page, encoding="utf-8")
    url = html_file.as_uri()

    t0 = time.monotonic()
    dom = _chromium("--dump-dom", url, user_data=tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    for cid in CHART_IDS:
        m = re.search(rf'<figure class="chart" id="{cid}">(.*?)</figure>', dom.stdout, re.S)
        assert m and "<svg" in m.group(1), cid

    png = tmp_path / "shot.png"
    shot = _chromium("--window-size=1280,3000", f"--screenshot={png}", url, user_data=tmp_path / "profile-shot")
    elapsed = time.monotonic() - t0
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert png.exists() and png.stat().st_size > 0
    img = image.imread(str(png))  # float RGB(A) in [0, 1]
    assert img.shape[0] >= 2000 and img.shape[1] >= 1000, img.shape
    rgb = (img[..., :3] * 255).round().astype(np.uint8)
    # the charts sit below the header (the utilization chart starts near y=600 at this width).
    # Measured: ~1,600 colours and ~21 % ink with the charts, ~900 and ~5 % with the SVGs removed.
    region = rgb[450:2600]
    packed = region[..., 0].astype(np.uint32) << 16 | region[..., 1].astype(np.uint32) << 8 | region[..., 2]
    colours = np.unique(packed)
    assert len(colours) >= 500, len(colours)  # anti-aliased plots, bands, bars: many colours
    non_white = (region < 245).any(axis=2).mean()
    assert non_white >= 0.12, non_white
    # the usage bars are solid #2563eb, a colour only the charts use (~190k pixels; 0 without SVG)
    bar_blue = (np.abs(rgb.astype(np.int16) - np.array([0x25, 0x63, 0xEB])).max(axis=2) <= 12).sum()
    assert bar_blue >= 20000, bar_blue
    assert elapsed < 120


def test_the_page_opens_with_the_headline_figures_and_folds_long_tables() -> None:
    """#15.19: the page had no summary, and a table of 100+ rows ran on for screens."""
    t = pd.DataFrame({"job_id": [str(i) for i in range(130)], "eq_hours": [1.0] * 130})
    reports = [
        Report("usage", "u", SINCE, UNTIL, {"usage": t.head(2)}, meta={"totals": {"eq_hours": 12.5, "gpu_jobs": 7}}),
        Report("utilization", "x", SINCE, UNTIL, {}, meta={"capacity_eq_hours": 100.0, "allocated_eq_hours": 41.0}),
        Report("cost", "c", SINCE, UNTIL, {}, meta={"total": 1234.5, "currency": "EUR"}),
        Report("efficiency", "e", SINCE, UNTIL, {"jobs": t}, meta={"flagged": 130}),
    ]
    html = render_html(reports, _context())
    head = html[html.index('<section class="headline"') : html.index("</section>")]
    for figure in ("12.50 (7 GPU jobs)", "41.0 % of what was offered", "1,234.50 EUR", "130"):
        assert figure in head, figure
    assert html.index('class="headline"') < html.index('<section class="report"')
    assert "<summary>all 130 rows</summary>" in html
    first = html.index('id="t3-0-jobs"')
    shown = html[first : html.index("</table>", first)]
    assert shown.count("<tr>") == 25  # the first 25 rows (the header row has a style), then the fold
    folded = html[html.index('id="t3-0-jobs-all"') :]
    assert folded[: folded.index("</table>")].count("<tr>") == 130
