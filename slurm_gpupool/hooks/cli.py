"""Argument handling shared by the hook entry points, without argparse or click."""

from __future__ import annotations

import sys


def wants_help(argv: list[str], usage: str) -> bool:
    """Print ``usage`` for -h/--help; Slurm itself never passes arguments to hooks."""
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(usage.strip() + "\n")
        return True
    return False
