"""What each policy buys on the public traces, with ranges: the README's simulation table (#16).

Runs ``gpupool simulate`` (JSON) on a 512-GPU pool (etc/simulate/pool-512.yaml, and its
elastic variant) for several windows of the Philly trace (re-timed to Helios's day/
night curve) and of the openb mix (openb's one-GPU requests on Philly's arrivals), at
several shard slowdowns, and prints per trace and policy the range (min-max over windows and
slowdowns) of GPU-equivalent utilisation, p50 and p90 wait, switches and node-hours out of
service.  Each run is checked (every policy replayed, jobs started, utilisation within
0-100 %).  Needs the traces (``$SLURM_GPUPOOL_TRACES``).  ``--smoke``: one day from
2017-10-02 at slowdown 1, Philly on pool-512 and openb on its elastic variant.

    python -m benchmarks.sim_policies [--days 7] [--starts 2017-10-02,2017-11-06] [--slowdowns 1,2] [--json] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import check, run_checked, run_main, table

TOP = Path(__file__).resolve().parents[1]
POOLS = {"pool-512.yaml": ["static:night", "static:day", "schedule"], "pool-512-elastic.yaml": ["elastic"]}


def run(config: Path, trace: str, start: str, days: float, policies: list[str], slowdowns: str) -> list[dict[str, Any]]:
    args = [sys.executable, "-m", "slurm_gpupool.cli.main", "--config", str(config), "simulate", "--trace", trace]
    args += ["--start", start, "--days", str(days), "--slowdown", slowdowns, "--format", "json"]
    for p in policies:
        args += ["--policy", p]
    out = run_checked(args, f"gpupool simulate --trace {trace} --start {start}", timeout_s=7200).stdout
    runs = json.loads(out)["runs"]
    check({r["policy"] for r in runs} == set(policies), f"{trace} {start}: {[r['policy'] for r in runs]}")
    for r in runs:
        check(r["started"] > 0 and 0 < r["utilisation"] <= 1, f"{trace} {start} {r['policy']}: {r['started']} started")
    return runs


def _range(vals: list[float], fmt: str) -> str:
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if abs(hi - lo) < 1e-9 else f"{fmt.format(lo)}–{fmt.format(hi)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--starts", default="2017-10-02,2017-11-06")
    ap.add_argument("--slowdowns", default="1,2", help="openb's shard slowdowns")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="one day from 2017-10-02, slowdown 1, each pool once")
    a = ap.parse_args(argv)
    traces = [("philly", "1"), ("openb", a.slowdowns)]
    combos = [(t, sd, start, pool) for t, sd in traces for start in a.starts.split(",") for pool in POOLS]
    if a.smoke:  # each trace and each pool once: two runs
        a.days, a.starts, a.slowdowns = 1.0, "2017-10-02", "1"
        combos = [(t, "1", a.starts, pool) for (t, _), pool in zip(traces, POOLS)]
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for trace, slowdowns, start, pool in combos:
        for r in run(TOP / "etc" / "simulate" / pool, trace, start, a.days, POOLS[pool], slowdowns):
            found.setdefault((trace, r["policy"]), []).append(r)
    if a.json:
        print(json.dumps({f"{t} {p}": rs for (t, p), rs in found.items()}, indent=2))
        return 0
    rows = []
    for (trace, policy), rs in found.items():
        rows.append(
            [
                trace,
                policy,
                str(len(rs)),
                _range([100 * r["utilisation"] for r in rs], "{:.0f} %"),
                _range([r["wait_s"]["p50"] / 60 for r in rs], "{:.0f} min"),
                _range([r["wait_s"]["p90"] / 60 for r in rs], "{:,.0f} min"),
                _range([float(r["switches"]) for r in rs], "{:.0f}"),
                _range([r["out_of_service_node_h"] for r in rs], "{:.1f}"),
            ]
        )
    print(f"{a.days:g}-day windows from {a.starts}; openb at shard slowdowns {a.slowdowns}; 512 GPUs")
    print(table(rows, ["trace", "policy", "runs", "GPU-eq util", "p50 wait", "p90 wait", "switches", "node-h out"]))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
