"""Benchmark: gpupool-sbatch's overhead over bare sbatch, on the sandbox cluster.

Interleaved runs of ``sbatch --hold --wrap true``, ``gpupool-sbatch`` with the same
arguments, and ``gpupool-sbatch --gpu-mem=18G``; the jobs are cancelled after.
Reports medians (wall time and child CPU time from wait4) and the overhead of
the median wall times.  Needs the sandbox: ``gpupool sandbox up`` first.

    python -m benchmarks.bench_sbatch [--runs 20]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import table


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    t = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read().decode() if p.stdout else ""
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv} failed")
    return wall, ru.ru_utime + ru.ru_stime, out.strip().split(";")[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    from slurm_gpupool.sandbox.cluster import Sandbox

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(Sandbox().env())
    beside = Path(sys.executable).parent / "gpupool-sbatch"
    wrapper = str(beside) if beside.exists() else shutil.which("gpupool-sbatch") or "gpupool-sbatch"
    base = ["--parsable", "--hold", "--wrap", "true"]
    cmds = {
        "python -c pass (interpreter floor)": [sys.executable, "-c", "pass"],
        "sbatch": ["sbatch", *base],
        "gpupool-sbatch (pass-through)": [wrapper, *base],
        "gpupool-sbatch --gpu-mem=18G": [wrapper, "--gpu-mem=18G", "--submit-anyway", *base],
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    jobs = []
    try:
        for _ in range(args.runs):
            for name, argv in cmds.items():
                wall, cpu, job = timed(argv, env)
                results[name].append((wall, cpu))
                if job:
                    jobs.append(job)
    finally:
        if jobs:
            subprocess.run(["scancel", *jobs], env=env, check=False, timeout=60)
    base_wall = statistics.median(w for w, _ in results["sbatch"])
    floor = statistics.median(w for w, _ in results["python -c pass (interpreter floor)"])
    rows = []
    for name, xs in results.items():
        med = statistics.median(w for w, _ in xs)
        cpu = statistics.median(c for _, c in xs)
        over = med - base_wall if name.startswith("gpupool") else None
        rows.append(
            [
                name,
                f"{med * 1e3:.1f} ms",
                f"{cpu * 1e3:.1f} ms",
                f"{over * 1e3:+.1f} ms" if over is not None else "",
                f"{(over - floor) * 1e3:+.1f} ms" if over is not None else "",
            ]
        )
    print(f"# gpupool-sbatch overhead, {datetime.date.today()}, {args.runs} runs each, sandbox Slurm 22.05")
    print(f"# interpreter: {sys.executable}")
    print(table(rows, ["command", "wall median", "CPU median", "overhead vs sbatch", "overhead - interpreter"]))


if __name__ == "__main__":
    main()
