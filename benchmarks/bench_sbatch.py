"""Benchmark: gpupool-sbatch's overhead over bare sbatch, on the sandbox cluster.

Interleaved runs of ``sbatch --hold --wrap true``, ``gpupool-sbatch`` with the same
arguments, and ``gpupool-sbatch --gpu-mem=18G``; the jobs are cancelled after.
Reports medians (wall time and child CPU time from wait4) and the overhead of
the median wall times.  Needs the sandbox: ``gpupool sandbox up`` first.

By default the wrapper is measured as admins deploy it: a wheel built from this
tree, installed (not editable) into a throwaway venv.  An editable install adds
~25 ms of import-hook start-up to *every* Python process, which is not ours to
count; ``--editable`` measures the dev venv's script anyway.

    python -m benchmarks.bench_sbatch [--runs 20] [--editable]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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


TOP = Path(__file__).resolve().parents[1]


def installed_wrapper(tmp: Path) -> tuple[str, str]:
    """Build a wheel and install it into a fresh venv; dependencies come from ours.

    Returns (gpupool-sbatch, that venv's python).  The dev venv's site-packages
    is added with a plain path line, so its editable-install hook is not loaded.
    """
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp / "dist"), str(TOP)],
        check=True,
        capture_output=True,
        cwd=tmp,  # not the tree: a stray build/ directory there would shadow the `build` module
    )
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    import sysconfig

    Path(purelib, "gpupool-bench-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next((tmp / "dist").glob("*.whl"))
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
        check=True,
    )
    return str(venv / "bin" / "gpupool-sbatch"), str(py)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--editable", action="store_true", help="measure the dev venv's (editable) script")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
        if args.editable:
            beside = Path(sys.executable).parent / "gpupool-sbatch"
            wrapper = str(beside) if beside.exists() else shutil.which("gpupool-sbatch") or "gpupool-sbatch"
            python = sys.executable
        else:
            wrapper, python = installed_wrapper(Path(tmp))
        run(args.runs, wrapper, python)


def run(runs: int, wrapper: str, python: str) -> None:
    from slurm_gpupool.sandbox.cluster import Sandbox

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(Sandbox().env())
    base = ["--parsable", "--hold", "--wrap", "true"]
    cmds = {
        "python -c pass (interpreter floor)": [python, "-c", "pass"],
        "sbatch": ["sbatch", *base],
        "gpupool-sbatch (pass-through)": [wrapper, *base],
        "gpupool-sbatch --gpu-mem=18G": [wrapper, "--gpu-mem=18G", "--submit-anyway", *base],
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    jobs = []
    try:
        for _ in range(runs):
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
    print(f"# gpupool-sbatch overhead, {datetime.date.today()}, {runs} runs each, sandbox Slurm 22.05")
    print(f"# wrapper: {wrapper}")
    print(table(rows, ["command", "wall median", "CPU median", "overhead vs sbatch", "overhead - interpreter"]))


if __name__ == "__main__":
    main()
