"""Where the files shipped with the package live (templates, example etc/).

In a wheel they are the packages ``slurm_gpupool.templates`` and
``slurm_gpupool.etc`` (mapped from the top-level ``templates/`` and ``etc/`` by
setup.cfg).  In a source checkout without an install they are the top-level
directories themselves.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

_TOP = Path(__file__).resolve().parents[2]  # the checkout: slurm_gpupool/util/ is two below


@cache
def shipped_dir(name: str) -> Path:
    """Directory of a shipped resource tree: ``templates`` or ``etc``."""
    spec = importlib.util.find_spec(f"slurm_gpupool.{name}")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            if Path(loc).is_dir():
                return Path(loc)
    return _TOP / name


def templates_dir() -> Path:
    return shipped_dir("templates")


def etc_dir() -> Path:
    return shipped_dir("etc")


def machines_dir() -> Path:
    return etc_dir() / "machines"
