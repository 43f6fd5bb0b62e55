"""Benchmark: one run of FGD's openb experiment (simulate/packing.py) per policy and GPU table.

A run places the ~10,800 pods of openb_pod_list_default (inflated to 130 % of 6,212 GPUs)
on 1,213 nodes.  Reports the median wall time over repeats, pods per second, and each
table's time as a ratio to FGD's milli GPUs measured in the same run (machines are noisy).
Reads FGD's inputs from the test fixtures (``tests/fixtures/traces``) or ``--traces DIR``.

    python -m benchmarks.bench_packing [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

from benchmarks.common import median_seconds, table
from slurm_gpupool.simulate import packing as P
from slurm_gpupool.simulate.traces.openb import load_openb

FIXTURE_TRACES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "traces"
TABLES = {
    "milli (FGD)": P.milli_table,
    "MIG A100-SXM4-40GB": lambda: P.mig_table("A100-SXM4-40GB"),
    "MIG A30": lambda: P.mig_table("A30"),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--traces", type=Path, default=FIXTURE_TRACES, help="a folder laid out like the fixtures'")
    a = ap.parse_args()
    nodes, pods = load_openb(traces=a.traces)
    load, _ = median_seconds(lambda: load_openb(traces=a.traces), a.repeats)
    rows: list[list[object]] = [["load CSVs (pandas)", "", f"{load:.2f} s", "", ""]]
    for policy in P.POLICIES:
        base = None
        for name, make in TABLES.items():
            table_ = make()
            n_events = len(P.simulate(nodes, pods, policy, 42, table=table_).order)
            med, _ = median_seconds(lambda t=table_, p=policy: P.simulate(nodes, pods, p, 42, table=t), a.repeats)
            base = base or med
            rows.append([policy, name, f"{med:.2f} s", f"{n_events / med:,.0f}", f"{med / base:.2f}"])
    print(f"# bench_packing {datetime.date.today()} {platform.node()} python {platform.python_version()}")
    print(table(rows, ["policy", "GPUs", "median", "pods/s", "/ milli"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
