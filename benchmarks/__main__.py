"""Run every benchmark in its smoke mode: ``python -m benchmarks --smoke``.

A benchmark is any module here that runs as a program (``python -m benchmarks.NAME``); each
must take ``--smoke``: a tiny size that runs in seconds through the same code and checks its
results.  Each runs in a process of its own, two at a time by default (this is a 2-core
machine); one line per benchmark says ok or FAILED with its wall and CPU time (user + sys of
the process and what it waited for), and a failure's error follows.  The exit code is 1 if
any failed, so none can break unnoticed.

    python -m benchmarks --smoke [--jobs 2] [--verbose] [NAME ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from benchmarks.common import SHARED_INSTALL

HERE = Path(__file__).resolve().parent
TOP = HERE.parent
MAIN_GUARD = 'if __name__ == "__main__":'
TIMEOUT_S = 600.0


def benchmark_modules() -> list[str]:
    """The modules that run as programs (every one must have a smoke mode)."""
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem != "__main__" and MAIN_GUARD in p.read_text())


@dataclass
class Outcome:
    name: str
    code: int
    wall_s: float
    cpu_s: float
    stdout: str
    stderr: str


def run_all(names: list[str], jobs: int, tmp: Path) -> list[Outcome]:
    """Each ``python -m benchmarks.NAME --smoke`` in its own process, ``jobs`` at a time; each
    child is reaped by wait4, which gives its own CPU time even when two run together."""
    todo, done = list(names), []
    env = {**os.environ, SHARED_INSTALL: str(tmp / "installed")}  # one wheel install for all
    running: dict[int, tuple[str, subprocess.Popen[bytes], IO[str], IO[str], float]] = {}
    while todo or running:
        while todo and len(running) < jobs:
            name = todo.pop(0)
            out: IO[str] = (tmp / f"{name}.out").open("w+")
            err: IO[str] = (tmp / f"{name}.err").open("w+")
            p = subprocess.Popen(
                [sys.executable, "-m", f"benchmarks.{name}", "--smoke"],
                cwd=TOP,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
            running[p.pid] = (name, p, out, err, time.perf_counter())
        pid, status, ru = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            for _, p, _, _, t0 in running.values():
                if time.perf_counter() - t0 > TIMEOUT_S:
                    p.kill()  # reaped by the next wait4, as a failure
            time.sleep(0.05)
            continue
        if pid not in running:
            continue
        name, p, out, err, t0 = running.pop(pid)
        p.returncode = os.waitstatus_to_exitcode(status)
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read())
            f.close()
        done.append(Outcome(name, p.returncode, time.perf_counter() - t0, ru.ru_utime + ru.ru_stime, *texts))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n", 1)[0])
    ap.add_argument("--smoke", action="store_true", help="run every benchmark in its smoke mode")
    ap.add_argument("--jobs", type=int, default=2, help="benchmarks run at once (default 2)")
    ap.add_argument("--verbose", action="store_true", help="print each benchmark's output too")
    ap.add_argument("names", nargs="*", help="only these benchmarks")
    a = ap.parse_args(argv)
    names = benchmark_modules()
    if not a.smoke:
        print("benchmarks: " + ", ".join(names))
        print("run one: python -m benchmarks.NAME [--smoke]; smoke-test all: python -m benchmarks --smoke")
        return 2
    unknown = sorted(set(a.names) - set(names))
    if unknown:
        ap.error(f"no benchmark {', '.join(unknown)} (there are: {', '.join(names)})")
    names = a.names or names
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpupool-smoke-") as tmp:
        outcomes = {o.name: o for o in run_all(names, max(1, a.jobs), Path(tmp))}
    failed = 0
    for name in names:  # in name order, whatever order they finished in
        o = outcomes[name]
        ok = o.code == 0
        failed += not ok
        print(f"{'ok    ' if ok else 'FAILED'}  {name:<20} {o.wall_s:6.1f} s wall  {o.cpu_s:6.1f} s CPU", flush=True)
        if a.verbose:
            print(o.stdout.rstrip())
        if not ok:
            lines = o.stderr.rstrip().splitlines()[-25:] or [f"exit {o.code}, no error output"]
            print("\n".join(f"    {ln}" for ln in lines))
    total = time.perf_counter() - t0
    cpu = sum(o.cpu_s for o in outcomes.values())
    print(f"{len(names) - failed} of {len(names)} benchmarks ok in {total:.1f} s ({cpu:.1f} s CPU, {a.jobs} at a time)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
