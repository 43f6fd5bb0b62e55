"""Benchmark: gpupool-sbatch's overhead over bare sbatch, on the sandbox cluster.

Interleaved runs of ``sbatch --hold --wrap true``, ``gpupool-sbatch`` with the same
arguments, and ``gpupool-sbatch --gpu-mem=18G``; the jobs are cancelled after.
Reports medians (wall time and child CPU time, user + sys) with their ratio to bare
sbatch, and the overhead of the median wall times over sbatch and over the plain
interpreter ``/usr/bin/python3 -c pass`` (the floor any Python wrapper pays), both
measured in the same run.  Needs the sandbox: ``gpupool sandbox up`` first.

By default the wrapper is measured as admins deploy it: a wheel built from this
tree, installed (not editable) into a throwaway venv (needs the dev extra's
``build``).  An editable install adds ~25 ms of import-hook start-up to *every*
Python process, which is not ours to count; ``--editable`` measures the dev venv's
script anyway.

``--smoke`` needs no Slurm: a stand-in sbatch (``$SLURM_GPUPOOL_SBATCH``) that prints
a job id, with the submit catalog of etc/gpupool.yaml; it checks that every wrapper
call reached it and that ``--gpu-mem`` became a GRES request.

    python -m benchmarks.bench_sbatch [--runs 20] [--editable] [--smoke]
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import (
    TOP,
    check,
    installed_venv,
    python_version,
    run_main,
    start_up_args,
    system_python,
    table,
    timed_child,
)

BASE = ["--parsable", "--hold", "--wrap", "true"]
STAND_IN = """#!/bin/sh
# sbatch stand-in: log the arguments and the GRES the wrapper exported, answer as --parsable does
printf '%s|%s\\n' "$SLURM_GPUPOOL_GRES" "$*" >> "$STAND_IN_LOG"
echo "4242;smoke"
"""


def sandbox_env() -> dict[str, str]:
    from slurm_gpupool.sandbox.cluster import Sandbox

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(Sandbox().env())
    return env


def stand_in_env(tmp: Path) -> dict[str, str]:
    """No Slurm: the submit catalog of etc/gpupool.yaml beside a made-up slurm.conf, and an
    sbatch stand-in that logs what it got."""
    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.pool.submit_catalog import submit_catalog

    etc = tmp / "etc"
    etc.mkdir(parents=True)
    catalog = submit_catalog(load_config(TOP / "etc" / "gpupool.yaml"), installed="night")
    (etc / "gpupool-submit.json").write_text(json.dumps(catalog))
    fake = tmp / "sbatch"
    fake.write_text(STAND_IN)
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(SLURM_CONF=str(etc / "slurm.conf"), SLURM_GPUPOOL_SBATCH=str(fake), STAND_IN_LOG=str(tmp / "log"))
    return env


def measure(
    runs: int, wrapper: str, env: dict[str, str], sbatch: str, floor: str
) -> dict[str, list[tuple[float, float]]]:
    cmds = {
        f"{floor} -c pass (interpreter floor)": [floor, "-c", "pass"],
        "sbatch": [sbatch, *BASE],
        "gpupool-sbatch (pass-through)": [wrapper, *BASE],
        "gpupool-sbatch --gpu-mem=18G": [wrapper, "--gpu-mem=18G", "--submit-anyway", *BASE],
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    jobs = []
    try:
        for _ in range(runs):  # interleaved, so machine noise hits every line alike
            for name, argv in cmds.items():
                wall, cpu, out = timed_child(argv, env)
                results[name].append((wall, cpu))
                job = out.strip().split(";")[0]
                if name != next(iter(cmds)):
                    check(job.isdigit(), f"{name} printed no job id: {out.strip()[:200]!r}")
                    jobs.append(job)
    finally:
        if jobs and "SLURM_GPUPOOL_SBATCH" not in env:
            subprocess.run(["scancel", *jobs], env=env, check=False, timeout=60)
    return results


def check_stand_in(log: Path, runs: int) -> None:
    lines = log.read_text().splitlines() if log.exists() else []
    check(len(lines) == 3 * runs, f"the stand-in sbatch got {len(lines)} calls, not {3 * runs}")
    check(not any("--gpu-mem" in ln for ln in lines), "gpupool-sbatch passed its own --gpu-mem on to sbatch")
    check(any(ln.split("|", 1)[0] for ln in lines), "--gpu-mem=18G became no GRES request")


def report(results: dict[str, list[tuple[float, float]]], runs: int, wrapper: str, where: str, floor: str) -> None:
    floor_name = next(iter(results))
    med = {k: statistics.median(w for w, _ in xs) for k, xs in results.items()}
    cpu = {k: statistics.median(c for _, c in xs) for k, xs in results.items()}
    rows = []
    for name in results:
        wrapped = name.startswith("gpupool")
        over = med[name] - med["sbatch"]
        rows.append(
            [
                name,
                f"{med[name] * 1e3:.1f} ms",
                f"{med[name] / med['sbatch']:.2f}x",
                f"{cpu[name] * 1e3:.1f} ms",
                f"{cpu[name] / cpu['sbatch']:.2f}x",
                f"{over * 1e3:+.1f} ms" if wrapped else "",
                f"{(over - med[floor_name]) * 1e3:+.1f} ms" if wrapped else "",
            ]
        )
    print(f"# gpupool-sbatch overhead, {datetime.date.today()}, {runs} runs each, {where}")
    print(f"# wrapper: {wrapper}; floor {floor} is {python_version(floor)}")
    heads = ["command", "wall median", "/ sbatch", "CPU median", "/ sbatch", "over sbatch", "over - floor"]
    print(table(rows, heads))


def main(argv: list[str] | None = None) -> int:
    args = start_up_args(argv, 20, 3, "script", "3 runs against a stand-in sbatch: no Slurm needed")
    floor = system_python(args.floor)
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp_:
        tmp = Path(tmp_)
        if args.editable:
            beside = Path(sys.executable).parent / "gpupool-sbatch"
            wrapper = str(beside) if beside.exists() else shutil.which("gpupool-sbatch") or "gpupool-sbatch"
        else:
            wrapper = str(installed_venv(tmp / "install") / "gpupool-sbatch")
        if args.smoke:
            env = stand_in_env(tmp / "smoke")
            results = measure(args.runs, wrapper, env, env["SLURM_GPUPOOL_SBATCH"], floor)
            check_stand_in(Path(env["STAND_IN_LOG"]), args.runs)
            where = "stand-in sbatch (smoke: no Slurm)"
        else:
            results = measure(args.runs, wrapper, sandbox_env(), "sbatch", floor)
            where = "sandbox Slurm"
        report(results, args.runs, wrapper, where, floor)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
