"""How far the simulator's figures were from Slurm's own, on the kept validation runs (#27).

Every figure ``gpupool simulate`` and ``report advice`` give a site is a replay; a site
should read it with the error the replay showed where Slurm's answer is known: the runs
recorded on the sandbox of each release and replayed offline in the unit tests
(docs/simulate.md, "Validation against Slurm").  This module is the arithmetic (pure):

* per wait figure (median, mean, p90), the largest relative error of a kept run, counted
  only where the error exceeds ``floor_s``, the comparison's own resolution (sacct's whole
  seconds and one backfill interval); a site's waits are minutes to hours, where the floor
  vanishes and the percentage is what remains;
* utilisation: the largest difference, in points;
* order: the smallest share of job pairs started in Slurm's order.

The shipped figures (``slurm_gpupool/data/simulator-accuracy.json``) are written by
``scripts/measure-sim-accuracy`` from the replays themselves, and each kept run's replay
asserts that it stays within them (``tests/integration/simulate_support.py``), so a change
to the engine or a new kept run that errs more cannot leave them stale.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

WAITS = ("median", "mean", "p90")


@dataclass(frozen=True)
class RunError:
    """One kept run's replay against Slurm: each measure as (Slurm's, the simulator's)."""

    run: str  # family@release, e.g. "burst@22.05"; another seed of the family: "burst-s5151@22.05"
    waits: Mapping[str, tuple[float, float]]  # WAITS -> (real s, simulated s)
    utilisation: tuple[float, float]  # percent
    order: float  # share of pairs in Slurm's order


@dataclass(frozen=True)
class Accuracy:
    runs: tuple[str, ...]  # family@release of every kept run measured
    floor_s: float
    wait_rel: Mapping[str, float]  # WAITS -> largest relative error above the floor
    utilisation_points: float
    order: float

    @property
    def families(self) -> list[str]:
        """The workload families: a family's runs with other seeds (``burst-s5151@…``) count once."""
        return sorted({re.sub(r"-s\d+$", "", r.split("@")[0]) for r in self.runs})

    @property
    def releases(self) -> list[str]:
        return sorted({r.split("@")[-1] for r in self.runs})

    def wait(self, measure: str) -> str:
        """``±9 %`` beside a wait figure; ``±5 s`` where no kept run erred beyond the floor."""
        rel = self.wait_rel[measure]
        return f"±{100 * rel:.0f} %" if rel > 0 else f"±{self.floor_s:g} s"

    def util(self) -> str:
        return f"±{self.utilisation_points:.1f} points"

    def summary(self) -> str:
        """One line for a report's header."""
        return (
            f"measured error against Slurm on {len(self.runs)} kept validation runs "
            f"({len(self.families)} families; Slurm {', '.join(self.releases)}): wait median "
            f"{self.wait('median')}, mean {self.wait('mean')}, p90 {self.wait('p90')}; utilisation "
            f"{self.util()}; {100 * self.order:.0f} % of start pairs in Slurm's order; a wait within "
            f"{self.floor_s:g} s always agrees (the comparison's resolution); other figures not validated "
            "(docs/simulate.md)"
        )

    def exceeded(self, err: RunError) -> list[str]:
        """The measures on which ``err`` errs more than this accuracy says (none: within)."""
        out = [m for m in WAITS if _wait_error(err.waits[m]) > self.wait_bound_s(m, err.waits[m][0]) + 1e-9]
        if abs(err.utilisation[1] - err.utilisation[0]) > self.utilisation_points + 1e-9:
            out.append("utilisation")
        if err.order < self.order - 1e-9:
            out.append("order")
        return out

    def wait_bound_s(self, measure: str, real_s: float) -> float:
        """How far a replayed wait of that measure may be from a real one of ``real_s``."""
        return max(self.wait_rel[measure] * max(real_s, self.floor_s), self.floor_s)


def _wait_error(pair: tuple[float, float]) -> float:
    real, sim = pair
    return abs(sim - real)


def _up(x: float, places: int) -> float:
    """Rounded up, so that a rounded bound still holds for the run that set it."""
    k = 10**places
    return math.ceil(x * k - 1e-9) / k


def measured(errors: Iterable[RunError], floor_s: float) -> Accuracy:
    """The largest errors over ``errors`` (a run replayed several ways counts by its worst)."""
    errs = list(errors)
    if not errs:
        raise ValueError("no kept run to measure")
    rel = {}
    for m in WAITS:
        above = [
            _wait_error(e.waits[m]) / max(e.waits[m][0], floor_s) for e in errs if _wait_error(e.waits[m]) > floor_s
        ]
        rel[m] = _up(max(above, default=0.0), 3)
    return Accuracy(
        runs=tuple(sorted({e.run for e in errs})),
        floor_s=floor_s,
        wait_rel=rel,
        utilisation_points=_up(max(abs(e.utilisation[1] - e.utilisation[0]) for e in errs), 1),
        order=math.floor(min(e.order for e in errs) * 1000) / 1000,
    )


def to_json(acc: Accuracy) -> str:
    d = asdict(acc)
    d["runs"] = list(acc.runs)
    return json.dumps(d, indent=2, sort_keys=True) + "\n"


def from_json(text: str, where: str) -> Accuracy:
    """The shipped figures; a damaged file is the package's defect, said with its name."""
    try:
        d = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{where}: not the simulator's accuracy figures ({e})") from None
    return from_dict(d, where)


def from_dict(d: Any, where: str) -> Accuracy:
    """:func:`to_dict`'s (or the file's) mapping back as figures."""
    try:
        acc = Accuracy(
            runs=tuple(str(r) for r in d["runs"]),
            floor_s=float(d["floor_s"]),
            wait_rel={m: float(d["wait_rel"][m]) for m in WAITS},
            utilisation_points=float(d["utilisation_points"]),
            order=float(d["order"]),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{where}: not the simulator's accuracy figures ({e})") from None
    return acc


def margins(wait_margin: float, mean_margin: float, util_margin: float, acc: Accuracy) -> tuple[float, float, float]:
    """The margins a gain must clear (p90 and mean wait relative, utilisation as a fraction),
    raised to the measured error: a change is recommended only where its gain is larger than
    the simulator's own error, and not where the mean wait grows by more than its error."""
    return (
        max(wait_margin, acc.wait_rel["p90"]),
        max(mean_margin, acc.wait_rel["mean"]),
        max(util_margin, acc.utilisation_points / 100),
    )


def to_dict(acc: Accuracy) -> dict[str, Any]:
    """JSON-ready, for the reports' JSON output."""
    return {**json.loads(to_json(acc)), "summary": acc.summary()}
