"""What each policy buys on the public traces, with ranges: the README's simulation table (#16).

Runs ``gpupool simulate`` (JSON) on a 512-GPU pool (etc/simulate/pool-512.yaml, and its
elastic variant) for several windows of the Philly trace (re-timed to Helios's day/
night curve) and of the openb mix (openb's one-GPU requests on Philly's arrivals), at
several shard slowdowns, and prints per trace and policy the range (min-max over windows and
slowdowns) of GPU-equivalent utilisation, p50 and p90 wait, switches and node-hours out of
service.

    python -m benchmarks.sim_policies [--days 7] [--starts 2017-10-02,2017-11-06] [--slowdowns 1,2] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import table

TOP = Path(__file__).resolve().parents[1]
POOLS = {"pool-512.yaml": ["static:night", "static:day", "schedule"], "pool-512-elastic.yaml": ["elastic"]}


def run(config: Path, trace: str, start: str, days: float, policies: list[str], slowdowns: str) -> list[dict[str, Any]]:
    args = [sys.executable, "-m", "slurm_gpupool.cli.main", "--config", str(config), "simulate", "--trace", trace]
    args += ["--start", start, "--days", str(days), "--slowdown", slowdowns, "--format", "json"]
    for p in policies:
        args += ["--policy", p]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=7200).stdout
    return json.loads(out)["runs"]


def _range(vals: list[float], fmt: str) -> str:
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if abs(hi - lo) < 1e-9 else f"{fmt.format(lo)}–{fmt.format(hi)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--starts", default="2017-10-02,2017-11-06")
    ap.add_argument("--slowdowns", default="1,2", help="openb's shard slowdowns")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for trace, slowdowns in (("philly", "1"), ("openb", a.slowdowns)):
        for start in a.starts.split(","):
            for pool, policies in POOLS.items():
                for r in run(TOP / "etc" / "simulate" / pool, trace, start, a.days, policies, slowdowns):
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
    raise SystemExit(main())
