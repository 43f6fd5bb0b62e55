"""Where the workplace's shared data is (``../shared``: NVIDIA's mig-parted files, traces).

``$SLURM_GPUPOOL_SHARED``, else ``shared`` beside the checkout, else ``/work/shared`` (a
clone elsewhere, as CI may make one). Tests that need it skip with the path they looked
at when it is absent (DESIGN §5): the data is never copied into the project.
"""

from __future__ import annotations

import os
from pathlib import Path

TOP = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    env = os.environ.get("SLURM_GPUPOOL_SHARED")
    if env:
        return Path(env)
    beside = TOP.parent / "shared"
    return next((p for p in (beside, Path("/work/shared")) if p.is_dir()), beside)
