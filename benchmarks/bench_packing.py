"""Benchmark: one run of FGD's openb experiment (simulate/packing.py) per policy and GPU table.

A run places the ~10,800 pods of openb_pod_list_default (inflated to 130 % of 6,212 GPUs)
on 1,213 nodes.  Reports the median wall and CPU time over repeats, pods per second, and each
table's times as a ratio to FGD's milli GPUs measured in the same run (machines are noisy).
Every run is checked (pods placed, some failing at 130 %).  Reads FGD's inputs from the test
fixtures (``tests/fixtures/traces``) or ``--traces DIR``.
``--smoke``: the first 60 nodes (and pods for 130 % of their GPUs), one repeat.

    python -m benchmarks.bench_packing [--repeats 3] [--nodes N] [--smoke]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import platform
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import check, median_times, run_main, table
from slurm_gpupool.reports.traces.openb import load_openb
from slurm_gpupool.simulate import packing as P

FIXTURE_TRACES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "traces"
TABLES: dict[str, Callable[[], P.GpuTable]] = {
    "milli (FGD)": P.milli_table,
    "MIG A100-SXM4-40GB": lambda: P.mig_table("A100-SXM4-40GB"),
    "MIG A30": lambda: P.mig_table("A30"),
}


def first_nodes(nodes: P.Nodes, n: int) -> P.Nodes:
    """The cluster's first ``n`` nodes (the pods are drawn for 130 % of their GPUs)."""
    return P.Nodes(nodes.cpu_milli[:n], nodes.memory_mib[:n], nodes.gpus[:n], nodes.model[:n])


def checked(run: P.PackingRun, what: str) -> int:
    """Events of a sane run: pods arrived, most placed, and at 130 % of the GPUs some failed."""
    events = len(run.order)
    check(events > 0 and int(run.placed.sum()) > 0, f"{what}: {events} events, {int(run.placed.sum())} placed")
    check(run.failed > 0, f"{what}: no pod failed at 130 % of the GPUs")
    return events


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--traces", type=Path, default=FIXTURE_TRACES, help="a folder laid out like the fixtures'")
    ap.add_argument("--nodes", type=int, help="only the first N nodes (default: all 1,213)")
    ap.add_argument("--smoke", action="store_true", help="60 nodes, one repeat: seconds")
    a = ap.parse_args(argv)
    if a.smoke:
        a.repeats, a.nodes = 1, 60
    nodes, pods = load_openb(traces=a.traces)
    if a.nodes:
        nodes = first_nodes(nodes, a.nodes)
    load, load_cpu, _ = median_times(lambda: load_openb(traces=a.traces), a.repeats)
    rows: list[list[object]] = [["load CSVs (pandas)", "", f"{load:.2f} s", f"{load_cpu:.2f} s", "", "", ""]]
    for policy in P.POLICIES:
        base = base_cpu = 0.0
        for name, make in TABLES.items():
            table_ = make()
            n_events = checked(P.simulate(nodes, pods, policy, 42, table=table_), f"{policy} on {name}")
            run = functools.partial(P.simulate, nodes, pods, policy, 42, table=table_)
            med, cpu, _ = median_times(run, a.repeats)
            base, base_cpu = base or med, base_cpu or cpu
            row = [policy, name, f"{med:.2f} s", f"{cpu:.2f} s", f"{n_events / med:,.0f}"]
            rows.append([*row, f"{med / base:.2f}", f"{cpu / base_cpu:.2f}"])
    print(f"# bench_packing {datetime.date.today()} {platform.node()} python {platform.python_version()}")
    print(f"# {len(nodes):,} nodes, {nodes.total_gpus:,} GPUs; baseline: FGD's milli GPUs, same policy, same run")
    print(table(rows, ["policy", "GPUs", "wall median", "CPU median", "pods/s (wall)", "/ milli", "CPU / milli"]))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
