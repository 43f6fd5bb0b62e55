"""Readable tables for people and JSON for machines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> str:
    """Left-aligned columns separated by two spaces; no trailing blanks."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(indent + line for line in lines)


def cpu_ranges(cpus: Sequence[int]) -> str:
    """(0,1,2,5) → ``0-2,5`` as nvidia-smi topo -m prints CPU affinity."""
    from slurm_gpupool.core.ranges import index_ranges

    return index_ranges(cpus) or "N/A"


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))
