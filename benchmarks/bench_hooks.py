"""Benchmark: wall time of the job hooks per job, against the interpreter floor.

Each hook runs as Slurm runs it: a fresh process of the installed entry point
(``gpupool-prolog`` ...) with a job's environment, on a simulated HGX H100 node
in its day layout.  The baseline, measured in the same run, is ``python3 -c pass``
with the same interpreter.  Reports median and p99 over N runs, and the ratio of
the medians.  Target: prolog median within 3x the floor.

    python -m benchmarks.bench_hooks [--runs 40]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from benchmarks.common import table


def setup(root: Path) -> tuple[dict[str, str], dict[str, int]]:
    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.config.machines import find_machine
    from slurm_gpupool.hw import open_backend
    from slurm_gpupool.hw.sim.state import create_node_state
    from slurm_gpupool.node.apply import apply_node

    node = "bench1"
    cfg = {
        "version": 1,
        "nodesets": {"h": {"nodes": node, "machine": "hgx-h100"}},
        "layouts": {
            "day": {"h": {"0-3": {"mig": {"1g.10gb": 7}}, "4-5": {"mig": {"3g.40gb": 2}}, "6-7": {"shared": 4}}}
        },
    }
    sim = root / "sim"
    create_node_state(sim / f"{node}.json", node, find_machine("hgx-h100"))
    with open_backend(node, sim) as b:
        apply_node(b, parse_config(cfg, "bench.yaml", Path(".")), "day", root / "state" / node)
    (root / "etc").mkdir()
    (root / "etc" / "gpupool-hooks.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "state_dir": f"{root}/state/{{node}}",
                "run_dir": f"{root}/run/{{node}}",
                "spool_dir": f"{root}/spool/{{node}}",
                "sim_dir": str(sim),
                "kmsg": f"{sim}/{{node}}.kmsg",
            }
        )
    )
    table_ = json.loads((root / "state" / node / "node-state.json").read_text())["slurm_devices"]
    mig = next(d["index"] for d in table_ if d["kind"] == "mig")
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_CONF": f"{root}/etc/slurm.conf",
        "SLURMD_NODENAME": node,
        "SLURM_JOB_UID": str(os.getuid()),
        "SLURM_JOB_USER": "bench",
        "SLURM_JOB_GPUS": str(mig),
        "SLURM_STEP_GPUS": str(mig),
        "CUDA_VISIBLE_DEVICES": "0",
    }
    return env, {"mig": mig}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child): wall time on this VM moves in coarse
    steps, CPU time from wait4's rusage does not."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {p.returncode}")
    return wall, ru.ru_utime + ru.ru_stime


def stats(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args()
    scripts = Path(sysconfig.get_path("scripts"))
    root = Path(tempfile.mkdtemp(prefix="gpupool-bench-"))
    try:
        env, _ = setup(root)
        results: dict[str, list[tuple[float, float]]] = {
            "python3 -c pass": [],
            "gpupool-prolog": [],
            "gpupool-taskprolog": [],
            "gpupool-epilog": [],
        }
        for k in range(args.runs):  # interleaved, so machine noise hits every line alike
            job_env = {**env, "SLURM_JOB_ID": str(1000 + k)}
            results["python3 -c pass"].append(timed([sys.executable, "-c", "pass"], job_env))
            for hook in ("prolog", "taskprolog", "epilog"):
                results[f"gpupool-{hook}"].append(timed([str(scripts / f"gpupool-{hook}")], job_env))
        floor = stats([w for w, _ in results["python3 -c pass"]])[0]
        cpu_floor = stats([c for _, c in results["python3 -c pass"]])[0]
        rows = []
        for name, xs in results.items():
            med, p99 = stats([w for w, _ in xs])
            cmed, cp99 = stats([c for _, c in xs])
            rows.append(
                [
                    name,
                    f"{med * 1e3:.1f} ms",
                    f"{p99 * 1e3:.1f} ms",
                    f"{med / floor:.2f}x",
                    f"{cmed * 1e3:.1f} ms",
                    f"{cp99 * 1e3:.1f} ms",
                    f"{cmed / cpu_floor:.2f}x",
                ]
            )
        when, py = datetime.date.today(), platform.python_version()
        print(f"# hook wall time per job, {when}, Python {py}, {args.runs} runs, simulated HGX H100")
        print(table(rows, ["program", "wall median", "wall p99", "/ floor", "CPU median", "CPU p99", "/ floor"]))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
