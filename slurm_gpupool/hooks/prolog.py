"""``gpupool-prolog``: Slurm Prolog (root, on the node, before the job starts)."""

from __future__ import annotations

import sys

from slurm_gpupool.hooks.cli import wants_help

USAGE = """
usage: gpupool-prolog

Slurm Prolog for slurm_gpupool (slurm.conf: Prolog=/usr/bin/gpupool-prolog,
PrologFlags=Alloc).  Slurm runs it as root with the job's environment
(SLURM_JOB_ID, SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES, ...); it takes no arguments.
It checks the health of the job's GPUs and records which GPUs the job got.
A non-zero exit drains the node, so it fails open on its own errors.
"""


def main(argv: list[str] | None = None) -> int:
    if wants_help(sys.argv[1:] if argv is None else argv, USAGE):
        return 0
    return 0  # the health check and job record arrive with the job-hooks issue


if __name__ == "__main__":
    sys.exit(main())
