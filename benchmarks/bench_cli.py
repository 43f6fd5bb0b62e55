"""Benchmark: start-up of the admin command ``gpupool``, per command, against the plain interpreter (#29).

Admins, cron and CI run ``gpupool`` all day (CI alone runs ``node apply``/``node assert``
and friends thousands of times), so each command's start matters.  Every command runs as
an admin runs it: a fresh process of the installed entry point, from a wheel installed
(not editable) into a throwaway venv; ``--editable`` measures the dev venv's script
instead.  The site is the shipped pool (etc/gpupool.yaml) with its paths in a temporary
directory; ``h100n1`` is a simulated HGX H100 already in the day layout (so ``node
apply day`` is the idempotent re-apply cron and CI mostly do), and Slurm is a small
``/bin/sh`` stand-in on PATH that prints output recorded from Slurm 22.05
(tests/fixtures/slurm): its own start (a few ms per Slurm command) is in the figures of
``status``, ``metrics`` and ``repartition``, as the real commands' would be.

The floor, measured in the same run, interleaved, is the plain system interpreter
``/usr/bin/python3 -c pass``; the venv's own ``python -c pass`` is shown too.  Reports
medians of wall time and of the child's CPU time (user + sys, from ``RUSAGE_CHILDREN``),
each with its ratio to the floor's median.  Target: every command within 3x the floor.
Each run's output is checked (the help lists every command, the node matches its layout,
the status names the nodes, ...).  ``--baseline REF`` also installs a wheel of the commit
``REF`` and runs its commands interleaved with this tree's, on the same site: on a shared
machine whose load moves between two runs, only that compares two trees.

    python -m benchmarks.bench_cli [--runs 20] [--editable] [--floor /usr/bin/python3] [--smoke]
                                   [--baseline REF]
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml

from benchmarks.common import (
    TOP,
    check,
    installed_venv,
    python_version,
    run_main,
    scripts_under_test,
    start_up_args,
    system_python,
    table,
    timed_child,
)

NODE = "h100n1"
TARGET_X = 3.0  # every command's median within this many times the floor's
RECORDED = TOP / "tests" / "fixtures" / "slurm" / "22.05"

# what the stand-in answers, by command line prefix (the calls status, metrics and repartition make)
SLURM_ANSWERS = {
    "sinfo --json": "sinfo.json",
    "squeue --json": "squeue.json",
    "scontrol -o show reservation": "reservations.txt",
    "scontrol ping": "ping.txt",
}


def _has(*needles: str) -> Callable[[str], bool]:
    return lambda out: all(n in out for n in needles)


def _status_ok(out: str) -> bool:
    return {n["node"] for n in json.loads(out)["nodes"]} >= {NODE}


def _plan_ok(out: str) -> bool:
    return "nodes" in json.loads(out)


# (name, arguments after `gpupool`, a check of its stdout); the most-run commands first after --help
COMMANDS: list[tuple[str, list[str], Callable[[str], bool]]] = [
    ("--help", ["--help"], _has("node", "repartition", "status", "metrics", "report")),
    ("node apply day", ["--node", NODE, "node", "apply", "day"], _has(f"node {NODE}: layout day")),
    ("node assert day", ["--node", NODE, "node", "assert", "day"], _has(f"node {NODE} matches layout day")),
    ("gres render", ["gres", "render", "--nodes", NODE], _has(f"NodeName={NODE}")),
    ("gres install", ["gres", "install", "--nodes", NODE, "--no-backup"], _has("gres.conf")),
    ("repartition --dry-run", ["repartition", "--to", "day", "--dry-run", "--json"], _plan_ok),
    ("status --json", ["status", "--json"], _status_ok),
    ("metrics", ["metrics"], _has("gpupool_build_info")),
]


def fake_slurm(bindir: Path, answers: dict[str, Path] | None = None) -> None:
    """``sinfo``, ``squeue``, ``scontrol``: one /bin/sh script printing the recorded answers
    (or ``answers``: command line prefix -> the file to print)."""
    answers = answers or {k: RECORDED / v for k, v in SLURM_ANSWERS.items()}
    cases = "\n".join(f'  "{k}"*) exec cat "{v}";;' for k, v in answers.items())
    script = f'#!/bin/sh\ncase "${{0##*/}} $*" in\n{cases}\n  *) echo "unrecorded: ${{0##*/}} $*" >&2; exit 1;;\nesac\n'
    bindir.mkdir(parents=True)
    (bindir / "slurm-answers").write_text(script)
    (bindir / "slurm-answers").chmod(0o755)
    for name in ("sinfo", "squeue", "scontrol"):
        (bindir / name).symlink_to("slurm-answers")


def setup(root: Path, scripts: Path) -> dict[str, str]:
    """The shipped pool under ``root``, its node ``h100n1`` simulated and in the day layout;
    the environment every command runs with."""
    sys.path.insert(0, str(TOP))
    from tests.unit.site import shipped_raw

    raw = shipped_raw(root)
    raw["slurm"] = {"config_dir": str(root / "etc"), "version": "22.05.8"}
    (root / "etc").mkdir(parents=True)
    (root / "pool.yaml").write_text(yaml.safe_dump(raw))
    fake_slurm(root / "bin")
    env = {
        "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
        "SLURM_GPUPOOL_CONFIG": str(root / "pool.yaml"),
        "SLURM_GPUPOOL_SIM_DIR": str(root / "sim"),
        "SLURM_CONF": str(root / "etc" / "slurm.conf"),
        "LANG": "C.UTF-8",
    }
    gpupool = str(scripts / "gpupool")
    for argv in (
        ["--node", NODE, "sim", "init", "hgx-h100", "--dev-root", str(root / "dev")],
        ["--node", NODE, "node", "apply", "day"],
    ):
        timed_child([gpupool, *argv], env)
    return env


def measure(
    runs: int, scripts: Path, floor_python: str, root: Path, baseline: tuple[str, Path] | None = None
) -> dict[str, list[tuple[float, float]]]:
    """Medians' inputs per program; ``baseline``: (its label, its scripts), each of its
    commands run right after the same command of this tree."""
    env = setup(root, scripts)
    gpupool = str(scripts / "gpupool")
    programs: dict[str, tuple[list[str], Callable[[str], bool] | None]] = {
        f"{floor_python} -c pass (floor)": ([floor_python, "-c", "pass"], None),
        "venv python -c pass": ([str(scripts / "python"), "-c", "pass"], None),
    }
    for name, args, ok in COMMANDS:
        programs[f"gpupool {name}"] = ([gpupool, *args], ok)
        if baseline is not None:
            programs[f"{baseline[0]}: gpupool {name}"] = ([str(baseline[1] / "gpupool"), *args], ok)
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in programs}
    for _ in range(runs):  # interleaved, so machine noise hits every line alike
        for name, (argv, ok) in programs.items():
            wall, cpu, out = timed_child(argv, env)
            results[name].append((wall, cpu))
            if ok is not None:
                check(ok(out), f"{name}: unexpected output: {out[:300]!r}")
    return results


def report(results: dict[str, list[tuple[float, float]]], runs: int, where: str, pythons: str) -> None:
    floor_name = next(iter(results))
    floor = statistics.median(w for w, _ in results[floor_name])
    cpu_floor = statistics.median(c for _, c in results[floor_name])
    rows, worst = [], (0.0, "")
    for name, xs in results.items():
        med, cmed = statistics.median(w for w, _ in xs), statistics.median(c for _, c in xs)
        ratios = (med / floor, cmed / cpu_floor)
        rows.append([name, f"{med * 1e3:.1f} ms", f"{ratios[0]:.2f}x", f"{cmed * 1e3:.1f} ms", f"{ratios[1]:.2f}x"])
        if name.startswith("gpupool "):
            worst = max(worst, (max(ratios), name))
    print(f"# gpupool start-up per command, {datetime.date.today()}, {runs} runs, shipped pool, simulated {NODE}")
    print(f"# gpupool: {where}; {pythons}; Slurm: a /bin/sh stand-in printing Slurm 22.05's recorded output")
    print(table(rows, ["program", "wall median", "/ floor", "CPU median", "/ floor"]))
    verdict = "PASS" if worst[0] <= TARGET_X else "FAIL"
    print(f"target: every command within {TARGET_X:g}x the floor: {verdict} (worst {worst[1]}: {worst[0]:.2f}x)")
    against = [(name, base) for name in results for base in results if base.endswith(f": {name}")]
    if against:
        cpu = {name: statistics.median(c for _, c in xs) for name, xs in results.items()}
        print("CPU median, this tree / baseline: " + ", ".join(f"{n[8:]} {cpu[n] / cpu[b]:.2f}" for n, b in against))


def main(argv: list[str] | None = None) -> int:
    args = start_up_args(argv, 20, 2, "gpupool", "2 runs: the same path in seconds", baseline=True)
    floor_python = system_python(args.floor)
    root = Path(tempfile.mkdtemp(prefix="gpupool-bench-cli-"))
    try:
        scripts, where = scripts_under_test(args.editable, root)
        baseline = None
        if args.baseline:
            baseline = (args.baseline, installed_venv(root / "baseline", args.baseline))
            where += f"; interleaved with a wheel of {args.baseline}"
        results = measure(args.runs, scripts, floor_python, root / "site", baseline)
        pythons = f"floor {python_version(floor_python)}, gpupool {python_version(str(scripts / 'python'))}"
        report(results, args.runs, where, pythons)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
