"""Integer lists folded into ranges: ``(0, 1, 2, 5)`` → ``0-2,5`` (gres.conf ``Cores=``,
nvidia-smi CPU affinity, GPU and memory-slice indices in messages)."""

from __future__ import annotations

from collections.abc import Iterable


def index_ranges(xs: Iterable[int]) -> str:
    """Sorted, duplicates dropped, consecutive runs as ``a-b``; "" for none."""
    out: list[str] = []
    run: list[int] = []
    for x in sorted(set(xs)):
        if run and x == run[-1] + 1:
            run.append(x)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [x]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)
