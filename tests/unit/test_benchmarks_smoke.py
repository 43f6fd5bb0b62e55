"""Every benchmark runs in its smoke mode (``python -m benchmarks --smoke``), so none breaks unnoticed.

A benchmark is any module in benchmarks/ that runs as a program; this test finds them on its
own, so a new one without a smoke mode (or one the runner skips) fails here.  Times are
printed by the runner, never asserted (DESIGN §5).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]


def runnable_benchmarks() -> set[str]:
    return {
        p.stem
        for p in (TOP / "benchmarks").glob("*.py")
        if p.stem != "__main__" and re.search(r"^if __name__ == .__main__.:", p.read_text(), re.M)
    }


def test_every_benchmark_passes_its_smoke_run():
    expected = runnable_benchmarks()
    assert {"bench_hooks", "bench_sbatch", "bench_repartition", "bench_reports"} <= expected
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_GPUPOOL_TRACES"}
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke"],
        cwd=TOP,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    lines = [re.match(r"(ok|FAILED)\s+(\S+)\s", ln) for ln in res.stdout.splitlines()]
    reported = {m.group(2): m.group(1) for m in lines if m}
    assert set(reported) == expected, res.stdout + res.stderr
    assert res.returncode == 0 and set(reported.values()) == {"ok"}, res.stdout + res.stderr
