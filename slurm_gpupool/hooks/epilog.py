"""``gpupool-epilog``: Slurm Epilog (root, on the node, after the job ends)."""

from __future__ import annotations

import sys

from slurm_gpupool.hooks.cli import wants_help

USAGE = """
usage: gpupool-epilog

Slurm Epilog for slurm_gpupool (slurm.conf: Epilog=/usr/bin/gpupool-epilog).
Slurm runs it as root after the job; it takes no arguments.  It ends leftover
processes of this job on its GPUs, records GPU usage and re-checks health.
"""


def main(argv: list[str] | None = None) -> int:
    if wants_help(sys.argv[1:] if argv is None else argv, USAGE):
        return 0
    return 0  # cleanup and usage recording arrive with the job-hooks issue


if __name__ == "__main__":
    sys.exit(main())
