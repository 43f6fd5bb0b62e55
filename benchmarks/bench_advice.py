"""Benchmark: ``report advice``'s simulator part on a week of a busy site.

A week of Philly (from 2017-10-02, re-timed to Helios Earth's daily curve) with openb's
one-GPU fractions (``gpupool simulate --trace openb``'s jobs), thinned to about 5,000
jobs, taken as the site's accounting jobs; replayed by ``simulate.advise.advise`` (the
current policy and every candidate at the point, the promising ones over slowdown 1-2 and
3 resamples; in one process, then in forked workers) on two pools:
etc/simulate/pool-512.yaml (512 GPUs, ~30 % busy) and a 192-GPU pool of the same DGX
day/night layouts (~85 % busy).  Then the whole command on saved
accounting: ``gpupool report advice --from`` a 5,000-job sacct file of the tests' kind.
Reads the traces shipped in the package (or ``$SLURM_GPUPOOL_TRACES``).

    python -m benchmarks.bench_advice [--repeats 1]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path

import yaml

from benchmarks.common import median_seconds, table
from slurm_gpupool.config.load import load_config, parse_config
from slurm_gpupool.reports.advice import process_map
from slurm_gpupool.simulate.advise import advise
from slurm_gpupool.simulate.traces import philly as st

ROOT = Path(__file__).resolve().parents[1]
POOL_512 = ROOT / "etc" / "simulate" / "pool-512.yaml"


def pool_192():
    raw = yaml.safe_load(POOL_512.read_text())
    raw["nodesets"] = {"dgx": {"nodes": "dgx[001-024]", "machine": "dgx-a100"}}
    for lay in raw["layouts"].values():
        lay.pop("hgx")
    return parse_config(raw, str(POOL_512), POOL_512.parent)


def week(fraction: float, seed: int = 0):
    epoch, jobs = st.philly_jobs(curve=st.helios_curve(), days=7, start="2017-10-02")
    jobs = st.openb_mix(jobs, st.openb_milli(), seed)
    rnd = random.Random(seed)
    return epoch.replace(tzinfo=UTC), [j for j in jobs if rnd.random() < fraction]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="processes of the parallel rows")
    a = ap.parse_args()
    epoch, jobs = week(0.45)
    rows: list[list[object]] = []
    for name, cfg in (("pool-512 (512 GPUs)", load_config(POOL_512)), ("192 GPUs", pool_192())):
        for workers in (1, a.workers):
            out: dict = {}

            def run(c=cfg, w=workers, out=out) -> None:
                out.update(advise(c, epoch, jobs, parallel=process_map(w) if w > 1 else None))

            med, _ = median_seconds(run, a.repeats)
            rec = out["recommendation"]["name"] if out["recommendation"] else "no change"
            cur = out["current"]["point"]
            rows.append(
                [
                    name,
                    f"{len(jobs):,}",
                    workers,
                    len(out["candidates"]),
                    out["replays"],
                    f"{med:.1f} s",
                    f"{cur['p90_wait_s'] / 3600:.1f} h, {100 * cur['utilisation']:.0f} %",
                    rec,
                ]
            )
    # the whole command on saved accounting (loading included): the tests' history, scaled up
    sys.path.insert(0, str(ROOT))
    from tests.unit.test_report_advice_sim import WHOLE_ONLY, history

    with tempfile.TemporaryDirectory() as tmp:
        raw = {**WHOLE_ONLY, "nodesets": {"a30": {"nodes": "n[1-16]", "machine": "pcie-a30"}}}
        (Path(tmp) / "gpupool.yaml").write_text(yaml.safe_dump(raw))
        text = history(7, 600, 110)
        (Path(tmp) / "sacct.txt").write_text(text)
        cmd = [sys.executable, "-m", "slurm_gpupool.cli.main", "report", "advice"]
        cmd += ["--from", str(Path(tmp) / "sacct.txt"), "--tz", "UTC", "--workers", str(a.workers)]
        env = {**os.environ, "SLURM_GPUPOOL_CONFIG": str(Path(tmp) / "gpupool.yaml")}
        t = time.perf_counter()
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=1800)
        secs = time.perf_counter() - t
        n = text.count("\n") - 1
        rec = next((ln.split(": ", 1)[1] for ln in res.stdout.splitlines() if ln.startswith("recommended")), "none")
        rows.append(["report advice --from, 64 A30", f"{n:,}", a.workers, "", "", f"{secs:.1f} s", "", rec])
    print(f"# bench_advice {datetime.date.today()} {platform.node()} python {platform.python_version()}")
    heads = ["pool", "jobs", "workers", "candidates", "replays", "median", "now: p90 wait, util", "recommended"]
    print(table(rows, heads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
