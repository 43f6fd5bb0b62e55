"""The simulator's measured error, as shipped (``slurm_gpupool/data/simulator-accuracy.json``,
written by ``scripts/measure-sim-accuracy``; the arithmetic is ``simulate.accuracy``)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from slurm_gpupool.simulate.accuracy import Accuracy, from_json

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "simulator-accuracy.json"


@cache
def shipped() -> Accuracy:
    return from_json(SHIPPED.read_text(), str(SHIPPED))
