"""Data shipped inside the package: the Grafana dashboard and the public traces the
simulator replays (``traces/<source>/``, each with its SOURCE.md and licence).

One resolver for every reader, so a clone or a wheel needs nothing outside itself:
``$SLURM_GPUPOOL_TRACES`` may point at another folder laid out the same way (the
unpacked originals, say), and a file is found there as it is or gzip-compressed.
Standard library only: the hooks' import budget must not grow through this module.
"""

from __future__ import annotations

import os
from pathlib import Path

TRACES_ENV = "SLURM_GPUPOOL_TRACES"
PACKAGE_DIR = Path(__file__).resolve().parent


def data_path(*parts: str) -> Path:
    """A file or folder shipped in the package (``slurm_gpupool/data/<parts>``)."""
    return PACKAGE_DIR.joinpath(*parts)


def traces_dir() -> Path:
    """``$SLURM_GPUPOOL_TRACES`` if set, else the packed copies shipped in the package."""
    env = os.environ.get(TRACES_ENV)
    return Path(env) if env else data_path("traces")


def trace_file(*names: str, traces: Path | None = None) -> Path:
    """The first of ``names`` (paths relative to the traces folder, most wanted first)
    present under ``traces`` (default :func:`traces_dir`), as named or with ``.gz``
    appended; none present: the first name's path, so the reader's error names it."""
    if not names:
        raise ValueError("trace_file needs at least one name")
    base = traces if traces is not None else traces_dir()
    for name in names:
        for candidate in (base / name, base / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    return base / names[0]
