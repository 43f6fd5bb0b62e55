"""Benchmark: ``report advice``'s simulator part on a week of a busy site.

A week of Philly (from 2017-10-02, re-timed to Helios Earth's daily curve) with openb's
one-GPU fractions (``gpupool simulate --trace openb``'s jobs), thinned to about 5,000
jobs, taken as the site's accounting jobs; replayed by ``simulate.advise.advise`` (the
current policy and every candidate at the point, the promising ones over slowdown 1-2 and
3 resamples; in one process, then in forked workers) on two pools:
etc/simulate/pool-512.yaml (512 GPUs, ~30 % busy) and a 192-GPU pool of the same DGX
day/night layouts (~85 % busy).  Then the whole command on saved
accounting: ``gpupool report advice --from`` a 5,000-job sacct file of the tests' kind.
Baseline, measured in the same run: one replay of the current policy on the same jobs and
pool at the point estimate, exactly as the advice makes it; the ratio is the advice's cost in
such replays (its own count is the replays column).
Each result is checked (replays made, the current policy's figures there, a recommendation
line from the command).  Reads the traces shipped in the package (or ``$SLURM_GPUPOOL_TRACES``).
``--smoke``: one day at 10 %, the 512-GPU pool only, a 2-day sacct file: seconds.

    python -m benchmarks.bench_advice [--repeats 1] [--workers 2] [--smoke]
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

from benchmarks.common import BenchError, check, cpu_seconds, median_times, run_main, table
from slurm_gpupool.config.load import load_config, parse_config
from slurm_gpupool.reports.advice import process_map
from slurm_gpupool.reports.traces import philly as st
from slurm_gpupool.simulate.advise import advise

ROOT = Path(__file__).resolve().parents[1]
POOL_512 = ROOT / "etc" / "simulate" / "pool-512.yaml"


def pool_192():
    raw = yaml.safe_load(POOL_512.read_text())
    raw["nodesets"] = {"dgx": {"nodes": "dgx[001-024]", "machine": "dgx-a100"}}
    for lay in raw["layouts"].values():
        lay.pop("hgx")
    return parse_config(raw, str(POOL_512), POOL_512.parent)


def week(fraction: float, seed: int = 0, days: float = 7):
    epoch, jobs = st.philly_jobs(curve=st.helios_curve(), days=days, start="2017-10-02")
    jobs = st.openb_mix(jobs, st.openb_milli(), seed)
    rnd = random.Random(seed)
    return epoch.replace(tzinfo=UTC), [j for j in jobs if rnd.random() < fraction]


def one_replay(cfg, epoch, jobs) -> dict:
    """The advice's unit of work: its replay of the current policy on ``jobs`` at the point
    estimate, set up as ``advise`` sets it up (advise's ``_Run``); its figures."""
    from slurm_gpupool.simulate import advise as adv

    s = adv.Settings()
    nodes = [n for n in cfg.all_nodes() if cfg.nodeset_of(n).machine is not None]
    gpus = sum(len(cfg.nodeset_of(n).machine.gpus) for n in nodes)
    span = max(j.submit_s + j.limit_s for j in jobs) + adv.DAY_S
    run = adv._Run(epoch, [list(jobs)], nodes, gpus, span, s, max(j.limit_s for j in jobs))
    return run.metrics(adv.current_policy(cfg), 0, adv.scenarios(s)[0].slowdown)


def advice_verdict(stdout: str) -> str:
    """The simulator's verdict in ``report advice``'s text: the recommended policy, or no change."""
    for ln in stdout.splitlines():
        if ln.startswith("recommended by the simulator"):
            return ln.split("): ", 1)[1]
        if ln.startswith("simulation (") and ": no change recommended" in ln:
            return "no change"
    raise BenchError(f"report advice printed no simulator verdict: {stdout[-500:]!r}")


def timed_advice(cfg, epoch, jobs, workers: int, repeats: int):
    """(median s, advise's answer) over ``repeats``; checked: replays made, the current figures."""
    out: dict = {}

    def run() -> None:
        out.update(advise(cfg, epoch, jobs, parallel=process_map(workers) if workers > 1 else None))

    med, cpu, _ = median_times(run, repeats)
    check(out["replays"] >= 1 and out["jobs"] == len(jobs), f"advise: {out['replays']} replays of {out['jobs']}")
    check(out["current"]["point"]["utilisation"] > 0, f"advise: current policy {out['current']['point']}")
    return med, cpu, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="processes of the parallel rows")
    ap.add_argument("--smoke", action="store_true", help="a day at 10 %%, one pool, a small sacct file")
    a = ap.parse_args(argv)
    fraction, days, pools = 0.45, 7.0, [("pool-512 (512 GPUs)", load_config(POOL_512)), ("192 GPUs", pool_192())]
    sacct_days, small_per_day, whole_per_day = 7, 600, 110
    if a.smoke:
        fraction, days, pools = 0.1, 1.0, pools[:1]
        sacct_days, small_per_day, whole_per_day = 2, 60, 12
    epoch, jobs = week(fraction, days=days)
    rows: list[list[object]] = []
    heads = ["pool", "jobs", "workers", "candidates", "replays", "median", "CPU", "/ one replay"]
    heads += ["now: p90 wait, util", "recommended"]
    for name, cfg in pools:
        base: dict = {}

        def baseline(c=cfg, b=base) -> None:
            b.update(one_replay(c, epoch, jobs))

        one, one_cpu, _ = median_times(baseline, a.repeats)
        check(base["utilisation"] > 0, f"the baseline replay: {base}")
        now = f"{base['p90_wait_s'] / 3600:.1f} h, {100 * base['utilisation']:.0f} %"
        row = [name, f"{len(jobs):,}", 1, "", 1, f"{one:.1f} s", f"{one_cpu:.1f} s", "1.00x"]
        rows.append([*row, now, "(baseline: one replay)"])
        for workers in (1, a.workers):
            med, cpu, out = timed_advice(cfg, epoch, jobs, workers, a.repeats)
            rec = out["recommendation"]["name"] if out["recommendation"] else "no change"
            c = out["current"]["point"]
            check(c == base, f"the advice's current replay {c} is not the baseline's {base}")
            now = f"{c['p90_wait_s'] / 3600:.1f} h, {100 * c['utilisation']:.0f} %"
            row = [
                name,
                f"{len(jobs):,}",
                workers,
                len(out["candidates"]),
                out["replays"],
                f"{med:.1f} s",
                f"{cpu:.1f} s",
            ]
            rows.append([*row, f"{med / one:.1f}x", now, rec])
    # the whole command on saved accounting (loading included): the tests' history, scaled up
    sys.path.insert(0, str(ROOT))
    from tests.unit.test_report_advice_sim import WHOLE_ONLY, history

    with tempfile.TemporaryDirectory() as tmp:
        raw = {**WHOLE_ONLY, "nodesets": {"a30": {"nodes": "n[1-16]", "machine": "pcie-a30"}}}
        (Path(tmp) / "gpupool.yaml").write_text(yaml.safe_dump(raw))
        text = history(sacct_days, small_per_day, whole_per_day)
        (Path(tmp) / "sacct.txt").write_text(text)
        cmd = [sys.executable, "-m", "slurm_gpupool.cli.main", "report", "advice"]
        cmd += ["--from", str(Path(tmp) / "sacct.txt"), "--tz", "UTC", "--workers", str(a.workers)]
        env = {**os.environ, "SLURM_GPUPOOL_CONFIG": str(Path(tmp) / "gpupool.yaml")}
        t, c = time.perf_counter(), cpu_seconds()
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        secs, cmd_cpu = time.perf_counter() - t, cpu_seconds() - c
        check(res.returncode == 0, f"report advice exited {res.returncode}: {res.stderr.strip()[-2000:]}")
        n = text.count("\n") - 1
        rec = advice_verdict(res.stdout)
        row = ["report advice --from, 64 A30", f"{n:,}", a.workers, "", "", f"{secs:.1f} s", f"{cmd_cpu:.1f} s"]
        rows.append([*row, "", "", rec])
    print(f"# bench_advice {datetime.date.today()} {platform.node()} python {platform.python_version()}")
    print(table(rows, heads))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
