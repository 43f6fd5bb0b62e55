"""Benchmark: render GRES for 10,000 nodes of mixed machine descriptions and layouts.

Planned render (config + machine descriptions), so no node state is needed: the MIG
device files take the simulator's GPU-instance ids (``gpupool gres render --planned L
--simulated-ids``), since a planned render refuses to guess the ids a real driver chooses.
Reports the median wall and CPU time over repeats, the peak RSS of a fresh process doing
one render, the output size, and two ratios measured in the same run: time per
node at 10,000 vs 1,000 nodes (linearity), and output size with hostlist folding
vs one block per node.

    python -m benchmarks.bench_gres_render [--nodes 10000] [--repeats 3] [--smoke]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from typing import Any

from benchmarks.common import check, child_peak_rss_mib, median_times, run_main, table

MACHINES = ["dgx-a100", "hgx-h100", "pcie-a30", "dgx1-v100", "h100-nvl-pair"]
DAY = {
    "dgx-a100": {
        "0-3": {"mig": {"1g.5gb": 7}},
        "4-5": {"mig": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}},
        "6-7": "whole",
    },
    "hgx-h100": {"0-3": {"mig": {"1g.10gb": 7}}, "4-5": {"mig": {"3g.40gb": 2}}, "6-7": {"shared": 4}},
    "pcie-a30": {"0-1": {"mig": {"1g.6gb": 4}}, "2-3": {"shared": 4}},
    "dgx1-v100": {"0-3": {"shared": 4}, "4-7": "whole"},
    "h100-nvl-pair": {"0": {"mig": {"2g.24gb": 3, "1g.12gb": 1}}, "1": "whole"},
}
# a second flavour per machine, given to a hostlist slice, to mix layouts within node sets
DAY_ALT = {
    "dgx-a100": {"0-7": {"mig": {"4g.20gb": 1, "3g.20gb": 1}}},
    "hgx-h100": {"all": {"mig": {"2g.20gb": 3, "1g.10gb": 1}}},
    "pcie-a30": {"all": {"mig": {"2g.12gb": 2}}},
    "dgx1-v100": {"all": {"shared": 2}},
    "h100-nvl-pair": {"all": {"shared": 8}},
}


def machine_counts(n_nodes: int) -> list[int]:
    """Nodes per machine of :data:`MACHINES`: ``n_nodes`` spread evenly (at least one each)."""
    per, extra = divmod(max(n_nodes, len(MACHINES)), len(MACHINES))
    return [per + (i < extra) for i in range(len(MACHINES))]


def make_config(n_nodes: int) -> dict:
    nodesets, day, night = {}, {}, {}
    for m, per in zip(MACHINES, machine_counts(n_nodes), strict=True):
        name = m.replace("-", "")
        nodesets[name] = {"nodes": f"{name}n[{1:05d}-{per:05d}]", "machine": m}
        day[name] = DAY[m]
        night[name] = {"all": "whole"}
        day[f"{name}n[{1:05d}-{max(1, per // 4):05d}]"] = DAY_ALT[m]
    return {"version": 1, "nodesets": nodesets, "layouts": {"day": day, "night": night}}


def run_render(n_nodes: int, layout: str = "day"):
    from pathlib import Path

    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.controller.gres_install import render
    from slurm_gpupool.pool.planned import IDS_SIMULATED

    cfg = parse_config(make_config(n_nodes), "bench.yaml", Path("."))
    return render(cfg, cfg.all_nodes(), layout, mig_ids=IDS_SIMULATED)


def unfolded_size(rendered) -> int:
    return sum(len(r.line()) + 20 for n in rendered.nodes for r in n.records) + sum(120 for _ in rendered.nodes)


def check_rendered(rendered, n_nodes: int) -> None:
    """Every node rendered, and the MIG slices name device files."""
    want = sum(machine_counts(n_nodes))
    check(len(rendered.nodes) == want, f"{len(rendered.nodes)} nodes rendered, not {want}")
    gres = rendered["gres.conf"]
    check("NodeName=" in gres and "nvidia-caps" in gres, "gres.conf names no node or no MIG device file")
    check(rendered["nodes.conf"].count("NodeName=") >= len(MACHINES), "nodes.conf lacks a node set")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="50 nodes, one repeat: the same path in a second")
    args = ap.parse_args(argv)
    if args.smoke:
        args.nodes, args.repeats = 50, 1
    small = max(len(MACHINES), args.nodes // 10)
    holder: dict[str, Any] = {}
    t_small, c_small, _ = median_times(lambda: holder.__setitem__("s", run_render(small)), args.repeats)
    t_big, c_big, runs = median_times(lambda: holder.__setitem__("r", run_render(args.nodes)), args.repeats)
    check_rendered(holder["s"], small)
    r = holder["r"]
    check_rendered(r, args.nodes)
    out_size = sum(len(v) for v in r.files.files.values())
    peak, _ = child_peak_rss_mib(
        f"from benchmarks.bench_gres_render import run_render\nrun_render({args.nodes})\nout = {{}}"
    )
    base_peak, _ = child_peak_rss_mib("import slurm_gpupool.controller.gres_install\nout = {}")
    rows = [
        [f"{small} nodes", f"{t_small:.2f} s", f"{c_small:.2f} s", f"{t_small / small * 1e3:.3f} ms"],
        [f"{args.nodes} nodes", f"{t_big:.2f} s", f"{c_big:.2f} s", f"{t_big / args.nodes * 1e3:.3f} ms"],
    ]
    print(f"# GRES render benchmark, {datetime.date.today()}, Python {platform.python_version()}, {platform.machine()}")
    print(table(rows, ["render (planned, layout day, simulated MIG ids)", "wall median", "CPU median", "per node"]))
    linear = (t_big / args.nodes) / (t_small / small)
    linear_cpu = (c_big / args.nodes) / (c_small / small) if c_small > 0 else float("nan")
    print(f"time per node ratio {args.nodes}/{small}: {linear:.2f} wall, {linear_cpu:.2f} CPU (1.0 = linear)")
    print(f"peak RSS, fresh process rendering {args.nodes} nodes: {peak:.1f} MiB (import only: {base_peak:.1f} MiB)")
    lines = {k: v.count("\n") for k, v in r.files.files.items()}
    print(f"output: {out_size / 1024:.0f} KiB in {lines} lines")
    print(f"output with folding vs one block per node: {out_size / unfolded_size(r):.4f}")
    print(f"runs: {', '.join(f'{x:.2f}' for x in runs)} s")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
