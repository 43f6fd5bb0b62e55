"""Benchmark: ``gpupool simulate`` at scale (#16).

* **Philly**: the whole trace (82,247 jobs, 109 days, re-timed to Helios's daily curve) on
  a 1,000-GPU pool (117 DGX A100 + 8 HGX H100 with the shipped day/night idea), once per
  policy: all-whole static and the day/night schedule. Target: under 60 s per replay.
  (The day layout held all the time cannot carry Philly's whole-GPU load: its backlog
  reaches 50,000 jobs and the replay drains it over 600 simulated days, minutes of work
  that measure the backlog, not the engine.)
* **1,000,000 jobs**: the Philly trace repeated back to back in time (13 copies, 1,069,211
  jobs, ~3.9 years, same load per GPU) on the same pool, all-whole (a steady load). Target: under 10
  min, peak RSS under 4 GiB. (Under the day/night schedule the copies pile up a backlog the
  simulator shows Slurm would have too: jobs whose limits outlast the window before the next
  switch wait at the head of the queue, and once 500 of them are there backfill's
  ``bf_max_job_test`` never reaches the jobs behind them; that run measures the backlog.)

Each replay runs in a fresh interpreter (``child_peak_rss_mib``), so the peak RSS is its
own; the time is the engine's run after the jobs are loaded (load time shown apart).
Baseline measured in the same run: a bare event loop over the same jobs (a heap push and
pop per submission and end), the floor any discrete-event replay in Python pays.

Every replay is checked (jobs loaded, some started, utilisation within 0-100 %).  Needs the
Philly and Helios traces (``$SLURM_GPUPOOL_TRACES``).  ``--smoke``: one day of Philly
(2017-10-02), the "million" run as 2 copies of it, one run each.

    python -m benchmarks.bench_simulate [--runs 3] [--copies 13] [--start DATE --days D] [--skip-million]
                                        [--json] [--smoke]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import check, child_peak_rss_mib, run_main, table

TOP = Path(__file__).resolve().parents[1]
POOL = """
version: 1
nodesets:
  dgx: {nodes: "dgx[001-117]", machine: dgx-a100}
  hgx: {nodes: "hgx[01-08]", machine: hgx-h100}
layouts:
  day:
    dgx:
      "0-1": {mig: {1g.5gb: 7}}
      "2-3": {mig: {3g.20gb: 1, 2g.10gb: 1, 1g.5gb: 2}}
      "4-5": {shared: 4}
      "6-7": whole
    hgx:
      "0-1": {mig: {1g.10gb: 7}}
      "2-7": whole
  night:
    dgx: {all: whole}
    hgx: {all: whole}
schedule:
  timezone: UTC
  default: night
  rules: [{layout: day, days: mon-fri, start: "08:00", end: "20:00"}]
paths: {state_dir: /tmp/gpupool-bench, run_dir: /tmp/gpupool-bench, spool_dir: /tmp/gpupool-bench}
"""

CHILD = """
import time, heapq
t0 = time.perf_counter()
from datetime import UTC
from slurm_gpupool.config.load import load_config
from slurm_gpupool.reports.traces.philly import helios_curve, philly_jobs
from slurm_gpupool.simulate import policies as P
from slurm_gpupool.simulate.engine import Engine, Params
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.metrics import summarise
from slurm_gpupool.simulate.pool import pool_spec
cfg = load_config({config!r})
epoch, base = philly_jobs(curve=helios_curve(), days={days!r}, start={start!r})
span = max(j.submit_s for j in base) + 86400.0
jobs = [
    SimJob(k * len(base) + j.job_id, j.submit_s + k * span, j.duration_s, j.limit_s, j.request, j.account)
    for k in range({copies}) for j in base
]
load_s = time.perf_counter() - t0
out = {{"jobs": len(jobs), "load_s": load_s}}
if {baseline}:
    t = time.perf_counter()
    heap = []
    for j in jobs:
        heapq.heappush(heap, (j.submit_s, j.job_id))
        heapq.heappush(heap, (j.submit_s + j.duration_s, j.job_id))
    while heap:
        heapq.heappop(heap)
    out["run_s"] = time.perf_counter() - t
else:
    cfg, whole = P.with_whole_layout(cfg)
    spec_p = P.policies(cfg, [{policy!r}], whole)[0]
    pool = pool_spec(cfg, spec_p.layouts)
    sw = P.switcher(cfg, spec_p, epoch.replace(tzinfo=UTC), max(j.submit_s for j in jobs) + 30 * 86400)
    lead = P.lead_time_s(cfg, list(zip(sw.times, sw.layouts)), None) if spec_p.name == "schedule" else 0.0
    t = time.perf_counter()
    res = Engine(pool, sw, Params(switch_s=P.switch_seconds(cfg, len(pool.nodes)), lead_time_s=lead)).run(jobs)
    out["run_s"] = time.perf_counter() - t
    s = summarise(res)
    out.update(started=s["started"], util=s["utilisation"], p90_wait_s=s["wait_s"]["p90"], switches=s["switches"])
"""


def replay(
    config: Path, policy: str, copies: int, baseline: bool = False, days: float | None = None, start: str | None = None
) -> dict[str, Any]:
    code = CHILD.format(config=str(config), policy=policy, copies=copies, baseline=baseline, days=days, start=start)
    rss, out = child_peak_rss_mib(code)
    out["peak_rss_mib"] = rss
    check(out["jobs"] > 0 and out["run_s"] > 0, f"{policy} x{copies}: {out}")
    if not baseline:
        check(0 < out["started"] <= out["jobs"], f"{policy} x{copies}: {out['started']} of {out['jobs']} started")
        check(0 < out["util"] <= 1, f"{policy} x{copies}: utilisation {out['util']}")
    return out


def _row(name: str, r: dict[str, Any], median_s: float, rss: float, base_s: float) -> list[str]:
    util, p90 = r.get("util", 0.0), r.get("p90_wait_s", 0.0)
    return [
        name,
        f"{r['jobs']:,}",
        f"{median_s:.2f}",
        f"{median_s / base_s:.0f}x",
        f"{r['load_s']:.1f}",
        f"{rss:.0f}",
        f"{100 * util:.1f}",
        f"{p90 / 3600:.2f}",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--copies", type=int, default=13, help="Philly copies for the million-job run (13: 1,069,211)")
    ap.add_argument("--start", help="Philly from this date (default: its first job)")
    ap.add_argument("--days", type=float, help="only DAYS days of Philly (default: the whole trace)")
    ap.add_argument("--skip-million", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="one day of Philly, 2 copies, one run: seconds")
    a = ap.parse_args(argv)
    if a.smoke:
        a.runs, a.copies, a.start, a.days, a.skip_million = 1, 2, "2017-10-02", 1.0, False
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "pool-1000.yaml"
        config.write_text(POOL)
        rows, results = [], {}
        base_s = 0.0  # the bare event loop's median, the first row
        for name, policy, copies, baseline in [
            ("baseline: bare event loop", "schedule", 1, True),
            ("Philly, static all-whole", "static:whole", 1, False),
            ("Philly, day/night schedule", "schedule", 1, False),
        ]:
            runs = [replay(config, policy, copies, baseline, a.days, a.start) for _ in range(a.runs)]
            med = statistics.median(r["run_s"] for r in runs)
            base_s = base_s or med
            results[name] = {"median_s": med, "runs": runs, "ratio_to_baseline": med / base_s}
            rows.append(_row(name, runs[-1], med, max(r["peak_rss_mib"] for r in runs), base_s))
        if not a.skip_million:
            runs = [replay(config, "static:whole", a.copies, False, a.days, a.start) for _ in range(a.runs)]
            one = results["Philly, static all-whole"]["runs"][-1]["jobs"]
            check(runs[-1]["jobs"] == a.copies * one, f"{runs[-1]['jobs']} jobs in {a.copies} copies of {one}")
            med = statistics.median(r["run_s"] for r in runs)
            rss = max(r["peak_rss_mib"] for r in runs)
            results["1M, static all-whole"] = {"median_s": med, "runs": runs}
            rows.append(_row(f"{a.copies} x Philly, static all-whole", runs[-1], med, rss, base_s))
    if a.json:
        print(json.dumps({"date": datetime.date.today().isoformat(), "results": results}, indent=2))
    else:
        span = "the whole trace" if a.days is None else f"{a.days:g} days from {a.start or 'its start'}"
        print(f"gpupool simulate benchmark, {datetime.date.today()} (1,000 GPUs: 117 DGX A100 + 8 HGX H100)")
        print(f"# Philly: {span}; baseline: the bare event loop's median, {base_s:.2f} s")
        headers = ["replay", "jobs", "run s (median)", "/ baseline", "load s", "peak RSS MiB", "util %", "p90 wait h"]
        print(table(rows, headers))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
