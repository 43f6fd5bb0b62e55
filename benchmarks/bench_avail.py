"""Benchmark: ``gpupool avail``, a user's question, answered in under a second (#30).

Three commands, each a fresh process of the dev venv's ``gpupool`` as a user runs it:
``avail --json`` (``sinfo --json``, the pool config, the submit catalog, the journal);
``avail --json --gpu-mem 18G -t 5`` (the same, gpupool-sbatch's planner, and ``sbatch
--test-only``); ``avail --json --gpus-nvlink 8 -t 60`` (a request only the night layout
offers: ``squeue --json`` and the simulator's replay of the queue through the switch).
Against a running sandbox with ``--sandbox ROOT`` (the real Slurm: the figure
docs/avail.md quotes); without it (and with ``--smoke``) against a ``/bin/sh`` stand-in
printing Slurm 22.05's recorded output (tests/fixtures/slurm/22.05), the shipped pool and
its catalog.  Medians of wall and CPU time, beside the plain interpreter (``/usr/bin/python3
-c pass``) measured in the same run, interleaved.  Target: 1 s wall.

    python -m benchmarks.bench_avail [--runs 20] [--sandbox /var/tmp/slurm-gpupool-sandbox] [--smoke]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import sysconfig
import tempfile
from pathlib import Path

import yaml

from benchmarks.common import SYSTEM_PYTHON, TOP, check, run_main, system_python, table, timed_child

TARGET_S = 1.0
RECORDED = TOP / "tests" / "fixtures" / "slurm" / "22.05"
COMMANDS = {
    "gpupool avail --json": ["avail", "--json"],
    "gpupool avail --json --gpu-mem 18G -t 5": ["avail", "--json", "--gpu-mem", "18G", "-t", "5"],
    # only the night layout offers it: squeue --json and the simulator's replay of the queue
    "gpupool avail --json --gpus-nvlink 8 -t 60": ["avail", "--json", "--gpus-nvlink", "8", "-t", "60"],
}


def stand_in(root: Path) -> dict[str, str]:
    """The shipped pool, its catalog beside a slurm.conf, and ``sinfo``/``sbatch`` printing
    what 22.05 printed; the environment the commands run with."""
    sys.path.insert(0, str(TOP))
    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.pool.submit_catalog import FILE_NAME, submit_catalog
    from tests.unit.site import shipped_raw

    raw = shipped_raw(root)
    (root / "etc").mkdir(parents=True)
    (root / "pool.yaml").write_text(yaml.safe_dump(raw))
    catalog = submit_catalog(load_config(root / "pool.yaml"), installed="day")
    (root / "etc" / FILE_NAME).write_text(json.dumps(catalog))
    will_run = json.loads((RECORDED / "will-run.json").read_text())["cases"]["now"]["stderr"]
    (root / "will-run.txt").write_text(will_run)
    bindir = root / "bin"
    bindir.mkdir()
    script = (
        '#!/bin/sh\ncase "${0##*/} $*" in\n'
        f'  "sinfo --json"*) exec cat "{RECORDED / "sinfo.json"}";;\n'
        f'  "sbatch --test-only"*) exec cat "{root / "will-run.txt"}" >&2;;\n'
        f'  "squeue --json"*) exec cat "{RECORDED / "squeue.json"}";;\n'
        '  *) echo "unrecorded: ${0##*/} $*" >&2; exit 1;;\nesac\n'
    )
    (bindir / "slurm-answers").write_text(script)
    (bindir / "slurm-answers").chmod(0o755)
    for name in ("sinfo", "sbatch", "squeue"):
        (bindir / name).symlink_to("slurm-answers")
    return {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "SLURM_GPUPOOL_CONFIG": str(root / "pool.yaml"),
        "SLURM_CONF": str(root / "etc" / "slurm.conf"),
        "LANG": "C.UTF-8",
    }


def sandbox_env(root: Path) -> dict[str, str]:
    from slurm_gpupool.sandbox.cluster import Sandbox

    sb = Sandbox(root)
    check(sb.exists() and sb.status()["up"], f"no running sandbox at {root} (gpupool sandbox up --root {root})")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return env | sb.env()


def answered(out: str, cmd: list[str]) -> bool:
    """The nodes' GRES; Slurm's start now for --gpu-mem; an estimate for --gpus-nvlink."""
    a = json.loads(out)
    ok = bool(a["nodesets"]) and all(s["gres"] for s in a["nodesets"])
    if "--gpus-nvlink" in cmd:
        return ok and a["request"]["estimate"]["source"] in ("simulator", "slurm")  # slurm: night installed
    return ok and ("--gpu-mem" not in cmd or (a["request"]["slurm"] or {}).get("starts_now") is True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--sandbox", type=Path, help="measure against this running sandbox (the real Slurm)")
    ap.add_argument("--floor", default=SYSTEM_PYTHON)
    ap.add_argument("--smoke", action="store_true", help="2 runs against the stand-in")
    args = ap.parse_args(argv)
    runs = 2 if args.smoke else args.runs
    floor = system_python(args.floor)
    gpupool = str(Path(sysconfig.get_path("scripts")) / "gpupool")
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-bench-avail-"))
    try:
        env = sandbox_env(args.sandbox) if args.sandbox and not args.smoke else stand_in(tmp)
        where = f"the sandbox at {args.sandbox}" if args.sandbox and not args.smoke else "a stand-in (22.05 recorded)"
        results: dict[str, list[tuple[float, float]]] = {f"{floor} -c pass (floor)": [], **{k: [] for k in COMMANDS}}
        for _ in range(runs):
            wall, cpu, _out = timed_child([floor, "-c", "pass"], env)
            results[f"{floor} -c pass (floor)"].append((wall, cpu))
            for name, cmd in COMMANDS.items():
                wall, cpu, out = timed_child([gpupool, *cmd], env)
                check(answered(out, cmd), f"{name}: unexpected answer {out[:300]!r}")
                results[name].append((wall, cpu))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows, worst = [], 0.0
    for name, xs in results.items():
        wall, cpu = statistics.median(w for w, _ in xs), statistics.median(c for _, c in xs)
        rows.append([name, f"{wall * 1e3:.0f} ms", f"{cpu * 1e3:.0f} ms"])
        if name.startswith("gpupool"):
            worst = max(worst, wall)
    print(f"# gpupool avail, {datetime.date.today()}, {runs} runs, Slurm: {where}; gpupool: {gpupool}")
    print(table(rows, ["program", "wall median", "CPU median (incl. Slurm's clients)"]))
    print(f"target: every answer under {TARGET_S:g} s: {'PASS' if worst < TARGET_S else 'FAIL'} (worst {worst:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
