"""``gpupool-sbatch``: passes everything to the real sbatch (exec, no shell)."""

from __future__ import annotations

import os
import sys

USAGE = """
usage: gpupool-sbatch [sbatch options] [script [args...]]

A drop-in for sbatch: every option and the script go to the real sbatch
unchanged (it is exec'd, so its output and exit code are yours).  The real
sbatch is $SLURM_GPUPOOL_SBATCH, or `sbatch` on PATH.
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE.strip() + "\n")
        return 0
    sbatch = os.environ.get("SLURM_GPUPOOL_SBATCH", "sbatch")
    try:
        os.execvp(sbatch, [sbatch, *args])
    except OSError as e:
        sys.stderr.write(f"gpupool-sbatch: cannot run {sbatch}: {e.strerror}\n")
        return 69
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
