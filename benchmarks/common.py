"""Small helpers for benchmarks: medians over repeats, peak memory in a child process."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeats: int = 5) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times


def child_peak_rss_mib(code: str) -> tuple[float, dict]:
    """Run ``code`` in a fresh interpreter; it must print one JSON object. Returns (peak MiB, object)."""
    # VmHWM, not ru_maxrss: a child keeps its parent's ru_maxrss across fork+exec (measured:
    # a 10 MiB child reported the 811 MiB of the benchmark that started it)
    wrapper = (
        "import json, sys\n"
        f"{code}\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "out['peak_rss_mib'] = int(hwm.split()[1]) / 1024\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, check=True, timeout=1800)
    data = json.loads(res.stdout.strip().splitlines()[-1])
    return data["peak_rss_mib"], data


def table(rows: list[list[object]], headers: list[str]) -> str:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(x) for c, x in zip(r, w)).rstrip() for r in cells)
