#!/usr/bin/env python3
"""The figures of RESULTS.md, from the package's own model (slurm_gpupool.simulate.packing).

1. FGD's experiment on openb_pod_list_default, BestFit and FGD, against the published means.
2. What MIG rounding costs on the same pod sequences (default and gpushare100): the GPUs as
   MIG GPUs of a catalog model, instances placed by the planner's rules; and the same
   rounding with compute-share arithmetic only, to separate rounding from placement.

Usage (from the repository root; ~10 min of CPU, split over --jobs processes):
  python docs/research/fgd/results.py --jobs 2 > docs/research/fgd/results-output.md
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path

import numpy as np

from slurm_gpupool.reports.traces.openb import load_openb, published
from slurm_gpupool.simulate import packing as P

# FGD's inputs and published results: the packed test fixtures (scripts/pack-data)
TRACES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "traces"

POINTS = (0, 10, 20, 30, 40, 50, 60, 70, 80, 85, 90, 95, 100, 105, 110, 120, 130)
MIG_POINTS = (50, 80, 90, 100, 130)
WORKLOADS = ("openb_pod_list_default", "openb_pod_list_gpushare100")
# (kind, model, start rule) -> a GpuTable, built in each worker
TABLES = {
    "none": ("milli", None, None),
    "A100 compute-only": ("compute", "A100-SXM4-40GB", None),
    "A100-SXM4-40GB MIG": ("mig", "A100-SXM4-40GB", "planner"),
    "A100-SXM4-40GB MIG, room starts": ("mig", "A100-SXM4-40GB", "room"),
    "H100-SXM5-80GB MIG": ("mig", "H100-SXM5-80GB", "planner"),
    "A30 compute-only": ("compute", "A30", None),
    "A30 MIG": ("mig", "A30", "planner"),
}
FGD_TABLES = ("none", "A100-SXM4-40GB MIG", "A30 MIG")


@cache
def _data(workload: str) -> tuple[P.Nodes, P.Pods]:
    return load_openb(workload, TRACES)


def _table(name: str) -> P.GpuTable:
    kind, model, rule = TABLES[name]
    if kind == "milli":
        return P.milli_table()
    if kind == "compute":
        return P.compute_table(model)  # type: ignore[arg-type]
    return P.mig_table(model, rule)  # type: ignore[arg-type]


def _one(job: tuple[str, str, str, int]) -> tuple[tuple[str, str, str], P.Curves, int, float]:
    workload, policy, table, seed = job
    nodes, pods = _data(workload)
    t0 = time.time()
    run = P.simulate(nodes, pods, policy, seed, table=_table(table))
    return (workload, policy, table), P.curves(run), run.failed, time.time() - t0


def _sd(x: np.ndarray) -> np.ndarray:
    return x.std(0, ddof=1) if len(x) > 1 else np.full(x.shape[1:], np.nan)


def _row(label: str, vals: np.ndarray, pts: tuple[int, ...]) -> str:
    return f"| {label} | " + " | ".join(f"{vals[x]:.2f}" for x in pts) + " |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10, help="seeds 42.. per run (FGD published 42-51)")
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args(argv)
    seeds = range(42, 42 + a.seeds)
    jobs = [("openb_pod_list_default", pol, "none", s) for pol in P.POLICIES for s in seeds]
    for wl in WORKLOADS:
        jobs += [(wl, "bestfit", t, s) for t in TABLES if (wl, t) != ("openb_pod_list_default", "none") for s in seeds]
        jobs += [(wl, "fgd", t, s) for t in FGD_TABLES if (wl, t) != ("openb_pod_list_default", "none") for s in seeds]
    t0 = time.time()
    res: dict[tuple[str, str, str], list[tuple[P.Curves, int, float]]] = {}
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        for key, c, failed, dt in ex.map(_one, jobs):
            res.setdefault(key, []).append((c, failed, dt))

    def stack(key: tuple[str, str, str], f: str) -> np.ndarray:
        return np.stack([getattr(c, f) for c, _, _ in res[key]])

    print(
        f"# {a.seeds} seeds ({seeds.start}..{seeds.stop - 1}) per run; wall {time.time() - t0:.0f} s, jobs {a.jobs}\n"
    )
    print("## 1. Reproduction on openb_pod_list_default (tie-break: per-seed node order)\n")
    for pol in P.POLICIES:
        key = ("openb_pod_list_default", pol, "none")
        secs = [dt for _, _, dt in res[key]]
        print(f"### {pol}: {len(secs)} runs, median {np.median(secs):.1f} s per run\n")
        print("| demand % | " + " | ".join(map(str, POINTS)) + " |")
        print("|---|" + "---|" * len(POINTS))
        for f, kind in (("alloc", "allo"), ("frag", "frag")):
            ours = stack(key, f)
            exp = published(kind, policy=pol, traces=TRACES)
            mean = ours.mean(0)
            print(_row(f"{f} ours", mean, POINTS))
            print(_row(f"{f} published", exp, POINTS))
            print(_row(f"{f} \\|diff\\|", np.abs(mean - exp), POINTS))
            print(_row(f"{f} sd of ours", _sd(ours), POINTS))
        print()
        for f, kind in (("alloc", "allo"), ("frag", "frag"), ("frag_ratio", "frag_ratio")):
            d = np.abs(stack(key, f).mean(0) - published(kind, policy=pol, traces=TRACES))
            print(
                f"- max |ours - published| {f}: {np.nanmax(d):.2f} at {int(np.nanargmax(d))} %; "
                f"max seed sd of ours {np.nanmax(_sd(stack(key, f))):.2f}"
            )
        print()

    print("## 2. MIG rounding (useful = requested milli of placed pods; held = GPU capacity held; % of GPUs)\n")
    for wl in WORKLOADS:
        for pol in P.POLICIES:
            names = TABLES if pol == "bestfit" else FGD_TABLES
            print(f"### {wl}, {pol}\n")
            hdr = " | ".join(f"useful / held / frag @{x}" for x in MIG_POINTS)
            print(f"| GPUs | {hdr} | failed pods |")
            print("|---|" + "---|" * (len(MIG_POINTS) + 1))
            for t in names:
                key = (wl, pol, t)
                u, h, fr = (stack(key, f).mean(0) for f in ("useful", "alloc", "frag"))
                cells = " | ".join(f"{u[x]:.2f} / {h[x]:.2f} / {fr[x]:.2f}" for x in MIG_POINTS)
                failed = np.mean([n for _, n, _ in res[key]])
                print(f"| {t} | {cells} | {failed:.0f} |")
            base = stack((wl, pol, "none"), "useful").mean(0)
            print()
            for t in names:
                if t == "none":
                    continue
                u = stack((wl, pol, t), "useful")
                d = u.mean(0) - base
                print(
                    f"- {t}: useful allocation {d[100]:+.2f} points at 100 % demand, {d[130]:+.2f} at 130 % "
                    f"(seed sd {_sd(u)[130]:.2f})"
                )
            print()
    print(f"wall time {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
