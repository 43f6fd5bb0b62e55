"""Benchmark: time of the job hooks per job, against the plain interpreter (#29).

Each hook runs as Slurm runs it: a fresh process with a job's environment, both through
the isolated launcher Slurm is pointed at (``python -m slurm_gpupool.hooks.launcher DIR``:
``-IS``, only the package and pynvml on the path) and through the console script
(``gpupool-prolog`` ...), on a simulated HGX H100 node in
its day layout (no Slurm needed: the hooks never call it).  The hooks come from a
wheel installed (not editable) into a throwaway venv, as admins deploy them;
``--editable`` measures the dev venv's scripts instead.  The floor, measured in the
same run, interleaved, is the plain system interpreter ``/usr/bin/python3 -c pass``
(no venv, no editable-install hook); the venv's own ``python -c pass`` is shown too.

Reports medians (and p99) of wall time and of the child's CPU time (user + sys,
from ``RUSAGE_CHILDREN``), each with its ratio to the floor's median.  Target:
the launched prolog's median within 3x the floor.  Every run's results are checked: each job's
record written by the prolog and closed by the epilog, the taskprolog's device
line, and no hook failing open.

    python -m benchmarks.bench_hooks [--runs 40] [--editable] [--floor /usr/bin/python3] [--smoke]
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.common import (
    check,
    python_version,
    run_checked,
    run_main,
    scripts_under_test,
    start_up_args,
    system_python,
    table,
    timed_child,
)

NODE = "bench1"
HOOKS = ("prolog", "taskprolog", "epilog")
TARGET_X = 3.0  # the prolog's median within this many times the floor's


def setup(root: Path) -> tuple[dict[str, str], int]:
    """A simulated node in its day layout and the hook settings; (the job environment, a MIG
    device's Slurm index)."""
    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.config.machines import find_machine
    from slurm_gpupool.hw import open_backend
    from slurm_gpupool.hw.sim.state import create_node_state
    from slurm_gpupool.node.apply import apply_node

    cfg = {
        "version": 1,
        "nodesets": {"h": {"nodes": NODE, "machine": "hgx-h100"}},
        "layouts": {
            "day": {"h": {"0-3": {"mig": {"1g.10gb": 7}}, "4-5": {"mig": {"3g.40gb": 2}}, "6-7": {"shared": 4}}}
        },
    }
    sim = root / "sim"
    create_node_state(sim / f"{NODE}.json", NODE, find_machine("hgx-h100"))
    with open_backend(NODE, sim) as b:
        apply_node(b, parse_config(cfg, "bench.yaml", Path(".")), "day", root / "state" / NODE)
    (root / "etc").mkdir(parents=True)
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
    devices = json.loads((root / "state" / NODE / "node-state.json").read_text())["slurm_devices"]
    mig = next(d["index"] for d in devices if d["kind"] == "mig")
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_CONF": f"{root}/etc/slurm.conf",
        "SLURMD_NODENAME": NODE,
        "SLURM_JOB_UID": str(os.getuid()),
        "SLURM_JOB_USER": "bench",
        "SLURM_JOB_GPUS": str(mig),
        "SLURM_STEP_GPUS": str(mig),
        "CUDA_VISIBLE_DEVICES": "0",
    }
    return env, mig


def check_jobs(root: Path, jobs: list[str], taskprolog_out: list[str]) -> None:
    """What the hooks must have done for every job: the prolog's record with the device, closed
    by the epilog; the taskprolog's MIG UUID; no hook failed open (they exit 0 when they do)."""
    for jid in jobs:
        path = root / "spool" / NODE / "jobs" / f"{jid}.json"
        check(path.is_file(), f"the prolog wrote no job record {path}")
        rec = json.loads(path.read_text())
        check(bool(rec.get("devices")), f"job {jid}: no device recorded")
        check(rec.get("end_time", 0) >= rec["start_time"], f"job {jid}: the epilog did not close the record")
    check(
        all("export CUDA_VISIBLE_DEVICES=MIG-" in out for out in taskprolog_out),
        f"the taskprolog did not name the MIG device: {taskprolog_out[:1]}",
    )
    stats = root / "state" / NODE / "hook-stats.json"
    failures = json.loads(stats.read_text()).get("hook_failures") if stats.exists() else None
    check(not failures, f"hooks failed open: {failures}")


def stop_sampler(root: Path) -> None:
    """The prolog starts the node's usage sampler (it exits after a few idle rounds); stop ours now,
    by the pid it recorded, before its directory goes."""
    try:
        pid = int((root / "run" / NODE / "sampler.pid").read_text())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            ours = str(root).encode() in f.read()
    except (OSError, ValueError):
        return
    if ours:
        os.kill(pid, signal.SIGTERM)


def stats(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]


def install_launchers(scripts: Path, dest: Path) -> Path:
    """The hooks' isolated launchers for that venv's interpreter, as the sandbox and the
    Ansible role write them."""
    run_checked([str(scripts / "python"), "-m", "slurm_gpupool.hooks.launcher", str(dest)], "writing the launchers")
    return dest


def measure(runs: int, scripts: Path, floor_python: str, root: Path) -> dict[str, list[tuple[float, float]]]:
    env, _ = setup(root)
    venv_python = str(scripts / "python")
    launchers = install_launchers(scripts, root / "libexec")
    programs = {
        f"{floor_python} -c pass (floor)": [floor_python, "-c", "pass"],
        "venv python -c pass": [venv_python, "-c", "pass"],
        "venv python -IS -c pass": [venv_python, "-IS", "-c", "pass"],
        **{f"launcher gpupool-{h}": [str(launchers / f"gpupool-{h}")] for h in HOOKS},
        **{f"gpupool-{h}": [str(scripts / f"gpupool-{h}")] for h in HOOKS},
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in programs}
    jobs, task_out = [], []
    for k in range(runs):  # interleaved, so machine noise hits every line alike
        jid = str(1000 + k)
        job_env = {**env, "SLURM_JOB_ID": jid}
        for name, argv in programs.items():
            wall, cpu, out = timed_child(argv, job_env)
            results[name].append((wall, cpu))
            if name.endswith("gpupool-taskprolog"):
                task_out.append(out)
        jobs.append(jid)
    check_jobs(root, jobs, task_out)
    return results


def report(results: dict[str, list[tuple[float, float]]], runs: int, where: str, pythons: str) -> None:
    floor_name = next(iter(results))
    floor = stats([w for w, _ in results[floor_name]])[0]
    cpu_floor = stats([c for _, c in results[floor_name]])[0]
    rows = []
    for name, xs in results.items():
        med, p99 = stats([w for w, _ in xs])
        cmed, cp99 = stats([c for _, c in xs])
        rows.append(
            [
                name,
                f"{med * 1e3:.1f} ms",
                f"{med / floor:.2f}x",
                f"{cmed * 1e3:.1f} ms",
                f"{cmed / cpu_floor:.2f}x",
                f"{p99 * 1e3:.1f} ms",
                f"{cp99 * 1e3:.1f} ms",
            ]
        )
    print(f"# hook time per job, {datetime.date.today()}, {runs} runs, simulated HGX H100 (day layout), MIG job")
    print(f"# hooks: {where}; {pythons}")
    print(table(rows, ["program", "wall median", "/ floor", "CPU median", "/ floor", "wall p99", "CPU p99"]))
    for name in ("launcher gpupool-prolog", "gpupool-prolog"):
        wall_x = statistics.median(w for w, _ in results[name]) / floor
        cpu_x = statistics.median(c for _, c in results[name]) / cpu_floor
        verdict = "PASS" if max(wall_x, cpu_x) <= TARGET_X else "FAIL"
        print(f"target: {name} median within {TARGET_X:g}x the floor: {verdict} (wall {wall_x:.2f}x, CPU {cpu_x:.2f}x)")


def main(argv: list[str] | None = None) -> int:
    args = start_up_args(argv, 40, 3, "scripts", "3 runs: the same path in seconds")
    floor_python = system_python(args.floor)
    root = Path(tempfile.mkdtemp(prefix="gpupool-bench-"))
    try:
        scripts, where = scripts_under_test(args.editable, root)
        try:
            results = measure(args.runs, scripts, floor_python, root / "node")
        finally:
            stop_sampler(root / "node")
        pythons = f"floor {python_version(floor_python)}, hooks {python_version(str(scripts / 'python'))}"
        report(results, args.runs, where, pythons)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
