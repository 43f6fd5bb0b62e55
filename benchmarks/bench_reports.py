"""Benchmark: admin reports over a year of 1,000,000 jobs shaped after the Philly trace.

The history (``sacct --parsable2`` text, ~0.01 % truncated lines) and its pool
config come from :mod:`benchmarks.philly_history`; the file is generated once
into ``--cache`` (not timed) and reused while its parameters match.  Each
measured phase runs in a fresh interpreter, so its peak RSS is that phase's own
(VmHWM: on Linux ``ru_maxrss`` carries the parent's peak across exec); phases are
interleaved over ``--runs`` and medians reported:

* baseline: ``pandas.read_csv(path, sep="|", dtype=str)`` of the same file, the
  floor for turning those bytes into a frame;
* load + enrich: ``reports.dataset.build`` (parse, validate, times, layouts,
  grants, capacity);
* reports: ``usage(by="account")`` + ``utilization`` + ``waits`` on the built
  data (peak RSS: the process's peak while they ran, reset after the build);
* total: both in one process, against the target (< 30 s, < 4 GiB).

Times are inside the process, after imports and config; the last row adds
interpreter start-up, imports and config load (the admin's wall time).

Needs the Philly trace (``$SLURM_GPUPOOL_TRACES``/philly); without it, it stops and says
where it looked.  ``--smoke``: 2,000 jobs in a temporary cache, one run, results checked.

    python -m benchmarks.bench_reports [--jobs 1000000] [--runs 3] [--regen] [--json] [--smoke]
    python -m benchmarks.bench_reports --jobs 200000 --profile   # cProfile, in process
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import check, child_peak_rss_mib, run_main, table
from benchmarks.philly_history import SINCE, UNTIL, cached, pool_config

TARGET_S = 30.0
TARGET_MIB = 4096.0
TOP = Path(__file__).resolve().parents[1]
CACHE = Path("/var/tmp/gpupool-bench")


def _rss_mib() -> float:
    """This process's peak RSS: VmHWM on Linux (``ru_maxrss`` survives exec, so a child
    started by a big parent would report the parent's peak), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> bool:
    """Reset this process's peak RSS (Linux ≥ 4.0: /proc/self/clear_refs "5")."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def run_phase(phase: str, path: str, config: str) -> dict[str, Any]:
    """One measured phase, in this process (the parent runs it in a fresh interpreter)."""
    t0 = time.perf_counter()
    import pandas as pd

    if phase == "baseline":
        t = time.perf_counter()
        df = pd.read_csv(path, sep="|", dtype=str)
        return {"seconds": time.perf_counter() - t, "rows": len(df), "setup_s": t - t0, "peak_mib": _rss_mib()}

    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.reports import compute
    from slurm_gpupool.reports.dataset import Source, build

    cfg = load_config(config)
    t = time.perf_counter()
    data, stats, _ = build(cfg, Source(files=(Path(path),), tz="UTC"), SINCE, UNTIL, now=UNTIL)
    build_s = time.perf_counter() - t
    out: dict[str, Any] = {"setup_s": t - t0, "build_s": build_s}
    if phase == "load":
        return {**out, "peak_mib": _rss_mib()}
    build_peak = _rss_mib()
    out["peak_reset"] = _reset_peak()
    steps: dict[str, float] = {}
    t = time.perf_counter()
    u = compute.usage(data, "account")
    steps["usage"] = time.perf_counter() - t
    ut = compute.utilization(data)
    steps["utilization"] = time.perf_counter() - t - steps["usage"]
    w = compute.waits(data)
    reports_s = time.perf_counter() - t
    steps["waits"] = reports_s - steps["usage"] - steps["utilization"]
    reports_peak = _rss_mib()
    by_layout = ut.tables["by layout"]
    overall = w.tables["by type"]
    out.update(
        reports_s=reports_s,
        steps=steps,
        build_peak_mib=build_peak,
        reports_peak_mib=reports_peak if out["peak_reset"] else None,
        total_peak_mib=max(build_peak, reports_peak),
        stats=stats.to_dict(),
        notes=data.notes,
        summary={
            "jobs": len(data.jobs),
            "grants": len(data.grants),
            "accounts": len(u.main),
            "usage_totals": u.meta["totals"],
            "util_pct_by_layout": {r.layout: round(r.util_pct, 1) for r in by_layout.itertuples()},
            "waits": {r.gres: [r.jobs, r.p50_s, r.p90_s] for r in overall.itertuples()},
        },
    )
    return out


def child(phase: str, path: Path, config: Path) -> tuple[float, dict[str, Any]]:
    """(wall time of the whole process, its JSON) for one phase in a fresh interpreter."""
    code = (
        f"sys.path.insert(0, {str(TOP)!r})\n"
        "from benchmarks.bench_reports import run_phase\n"
        f"out = run_phase({phase!r}, {str(path)!r}, {str(config)!r})"
    )
    t = time.perf_counter()
    _, out = child_peak_rss_mib(code)
    return time.perf_counter() - t, out


def profile(path: Path, config: Path, top: int) -> None:
    """build + the three reports under cProfile, in this process; the top functions."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    out = run_phase("reports", str(path), str(config))
    prof.disable()
    print(f"# cProfile: build {out['build_s']:.1f} s, reports {out['reports_s']:.1f} s (with profiling overhead)")
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(top)
        print(s.getvalue())


def check_runs(runs: dict[str, list[dict[str, Any]]], meta: dict) -> None:
    """Each phase read every line; the reports saw the jobs, accounts and periods; the malformed
    lines the generator wrote were counted."""
    for r in runs["baseline"]:
        check(r["rows"] >= meta["jobs"], f"read_csv read {r['rows']} rows for {meta['jobs']} jobs")
    for r in runs["reports"]:
        s, st = r["summary"], r["stats"]
        check(s["jobs"] > 0 and s["accounts"] > 0, f"reports over no jobs or accounts: {s}")
        check(s["usage_totals"]["gpu_hours"] > 0, f"no GPU hours: {s['usage_totals']}")
        check(bool(s["util_pct_by_layout"]) and bool(s["waits"]), f"no utilization or waits: {s}")
        check(st["malformed_total"] == meta["malformed_lines"], f"malformed {st['malformed_total']} of {meta}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="admin reports (usage, utilization, waits) over a synthetic year")
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--regen", action="store_true", help="regenerate the cached history")
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"where the history is kept (default {CACHE})")
    ap.add_argument("--trace", type=Path, help="the Philly extracts (default: <traces>/philly)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--profile", action="store_true", help="cProfile build + reports in process instead")
    ap.add_argument("--smoke", action="store_true", help="2,000 jobs, one run, in a temporary cache")
    args = ap.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
            args.jobs, args.runs, args.cache, args.regen = 2000, 1, Path(tmp), True
            return run(args)
    return run(args)


def run(args: argparse.Namespace) -> int:

    label = "1m" if args.jobs == 1_000_000 else str(args.jobs)
    path = args.cache / f"philly-{label}{'' if args.seed == 1 else f'-s{args.seed}'}.txt"
    meta, generated = cached(path, args.jobs, args.seed, args.regen, args.trace)
    config = pool_config(args.cache / f"config-{path.stem}", meta["nodes"])
    gen_line = (
        f"# history: {path}, {meta['bytes'] / 1e6:.0f} MB, {meta['jobs']:,} jobs + {meta['malformed_lines']} "
        f"truncated lines; {'generated now' if generated else 'cached, generated'} in {meta['generate_s']:.1f} s "
        "(not measured)"
    )
    if not args.json:
        print(gen_line)
        print(f"# shaped after {meta['source']}")
        print(
            f"# pool: {', '.join(f'{k} {v} nodes' for k, v in meta['nodes'].items())} "
            f"(offered load {meta['offered_load_eq']:,} GPU-eq); config {config}"
        )
        sys.stdout.flush()
    if args.profile:
        profile(path, config, 30)
        return 0

    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "load": [], "reports": []}
    walls: list[float] = []
    for _ in range(args.runs):
        for phase in runs:
            wall, out = child(phase, path, config)
            runs[phase].append(out)
            if phase == "reports":
                walls.append(wall)
    check_runs(runs, meta)
    med = statistics.median
    base_s = med(r["seconds"] for r in runs["baseline"])
    base_mib = med(r["peak_mib"] for r in runs["baseline"])
    rep = runs["reports"]
    total = [r["build_s"] + r["reports_s"] for r in rep]
    total_mib = med(r["total_peak_mib"] for r in rep)
    reports_mib = [r["reports_peak_mib"] for r in rep if r["reports_peak_mib"] is not None]
    phases = {
        "baseline": ([r["seconds"] for r in runs["baseline"]], base_mib),
        "load+enrich": ([r["build_s"] for r in runs["load"]], med(r["peak_mib"] for r in runs["load"])),
        "reports": ([r["reports_s"] for r in rep], med(reports_mib) if reports_mib else None),
        "total": (total, total_mib),
        "total-process": (walls, total_mib),
    }
    steps = {k: med(r["steps"][k] for r in rep) for k in rep[0]["steps"]}
    total_s = med(total)
    ok = total_s < TARGET_S and total_mib < TARGET_MIB
    last = rep[-1]
    if args.json:
        doc = {
            "date": str(datetime.date.today()),
            "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine()},
            "history": {**meta, "path": str(path), "generated_now": generated},
            "runs": args.runs,
            "phases": {
                k: {"median_s": med(v), "runs_s": v, "peak_rss_mib": mib, "ratio_to_baseline": med(v) / base_s}
                for k, (v, mib) in phases.items()
            },
            "report_steps_s": steps,
            "target": {"seconds": TARGET_S, "peak_rss_mib": TARGET_MIB, "pass": ok},
            "load_stats": last["stats"],
            "notes": last["notes"],
            "summary": last["summary"],
        }
        print(json.dumps(doc, indent=1, default=str))
        return 0

    import pandas as pd

    names = {
        "baseline": "baseline: pandas.read_csv(sep='|', dtype=str)",
        "load+enrich": "load + enrich: dataset.build",
        "reports": "usage(account) + utilization + waits",
        "total": "total: build + reports, one process",
        "total-process": "  same, whole process (start-up, imports, config)",
    }
    rows = []
    for k, (v, mib) in phases.items():
        target = ""
        if k == "total":
            target = f"{'PASS' if total_s < TARGET_S else 'FAIL'} < {TARGET_S:.0f} s, "
            target += f"{'PASS' if total_mib < TARGET_MIB else 'FAIL'} < {TARGET_MIB:.0f} MiB"
        rows.append(
            [
                names[k],
                f"{med(v):.2f} s",
                f"{min(v):.2f}–{max(v):.2f}",
                f"{mib:,.0f}" if mib is not None else "n/a",
                f"{med(v) / base_s:.2f}x",
                f"{mib / base_mib:.2f}x" if mib is not None else "",
                target,
            ]
        )
    for k, v in steps.items():
        rows.append([f"  {k}", f"{v:.2f} s", "", "", "", "", ""])
    print(
        f"\n# admin reports, {datetime.date.today()}, {args.runs} runs each (fresh process per phase), "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, pandas {pd.__version__}"
    )
    print(table(rows, ["phase", "median", "min–max s", "peak RSS MiB", "time/baseline", "RSS/baseline", "target"]))
    st = last["stats"]
    print(
        f"\n# load stats: {st['lines']:,} lines, {st['jobs']:,} jobs, {st['steps']:,} steps, "
        f"{st['malformed_total']:,} malformed counted {st['malformed']} (generated: {meta['malformed_lines']})"
    )
    print("# notes: " + "; ".join(last["notes"]))
    s = last["summary"]
    ut = s["usage_totals"]
    print(
        f"# usage: {ut['jobs']:,} jobs, {ut['gpu_jobs']:,} GPU jobs, {ut['gpu_hours']:,.0f} GPU-h, "
        f"{ut['eq_hours']:,.0f} GPU-eq-h over {s['accounts']} accounts; {s['grants']:,} grants"
    )
    print(f"# utilization by layout in force: {s['util_pct_by_layout']} %")
    top = sorted(s["waits"].items(), key=lambda kv: -kv[1][0])[:5]
    print("# waits (jobs, p50 s, p90 s): " + "; ".join(f"{k} {v[0]:,} {v[1]:.0f} {v[2]:.0f}" for k, v in top))
    print(f"\n{'PASS' if ok else 'FAIL'}: total {total_s:.1f} s (< {TARGET_S:.0f}), peak {total_mib:,.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
