"""The site's job priority setup, read from its slurm.conf or ``scontrol show config`` (pure).

The replay orders its queue as ``priority/multifactor`` does with only the QOS factor weighed
(``priority.py``), which is how the sandbox is configured and what the validation families
measured.  A site's own slurm.conf may say otherwise, and the replay must not hide it:

* ``PriorityType=priority/basic`` orders the queue by submission alone: QOS priorities do not
  reorder it (preemption by QOS still works).  It is the default up to Slurm 23.02; from 23.11
  the default is ``priority/multifactor`` (``DEFAULT_PRIORITY_TYPE``, ``read_config.h``).
* ``PriorityWeightQOS`` scales the QOS factor; 0 leaves it out, as basic does.
* The age, fair-share, job size, partition, association and TRES factors reorder the queue
  as jobs wait and users consume (``priority_multifactor.c``, ``_get_priority_internal``).
  The replay does not model them: ``unreplayed`` names each one the site weighs, so a report
  can say so beside its figures (docs/simulate.md, "What the other priority factors would take").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_gpupool.errors import UsageError

# the weights ``_get_priority_internal`` multiplies, by slurm.conf key, with the factor's name
FACTORS = (
    ("PriorityWeightAge", "age"),
    ("PriorityWeightFairshare", "fair-share"),
    ("PriorityWeightJobSize", "job size"),
    ("PriorityWeightPartition", "partition"),
    ("PriorityWeightAssoc", "association"),
)
QOS_KEY = "PriorityWeightQOS"
TRES_KEY = "PriorityWeightTRES"
KEYS = {k.lower(): k for k in ("PriorityType", QOS_KEY, TRES_KEY, *(k for k, _ in FACTORS))}
MULTIFACTOR, BASIC = "priority/multifactor", "priority/basic"
MAX_WEIGHT = 0xFFFFFFFF  # slurm.conf reads the weights as uint32_t
# ``scontrol show config``: "PriorityWeightAge       = 1000"; slurm.conf: "PriorityWeightAge=1000",
# several on a line, comments after '#'
_SHOW = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\s+=\s+(.*?)\s*$")
_PAIR = re.compile(r"([A-Za-z][A-Za-z0-9]*)=(\S*)")


@dataclass(frozen=True)
class SitePriority:
    """What orders the site's queue (``None`` for a key the file does not set)."""

    source: str
    type: str | None = None
    weights: tuple[tuple[str, int], ...] = ()  # slurm.conf key -> weight, the keys set
    tres: str | None = None  # PriorityWeightTRES, e.g. "GRES/gpu=1000"

    def type_for(self, release: str) -> str:
        """``PriorityType``, or the release's default (basic up to 23.02, multifactor from 23.11)."""
        if self.type is not None:
            return self.type
        major, minor = (int(x) for x in release.split(".")[:2])
        return MULTIFACTOR if (major, minor) >= (23, 11) else BASIC

    def weight(self, key: str) -> int:
        return dict(self.weights).get(key, 0)

    def qos_weight(self, release: str) -> int:
        """``PriorityWeightQOS`` as the queue feels it: 0 under basic, which ignores every factor."""
        return self.weight(QOS_KEY) if self.type_for(release) == MULTIFACTOR else 0

    def unreplayed(self, release: str) -> list[str]:
        """Each factor the site weighs that the replay leaves out, as ``age (PriorityWeightAge=1000)``."""
        if self.type_for(release) != MULTIFACTOR:
            return []
        out = [f"{name} ({key}={self.weight(key)})" for key, name in FACTORS if self.weight(key) > 0]
        if self.tres and _tres_weighs(self.tres):
            out.append(f"TRES ({TRES_KEY}={self.tres})")
        return out

    def describe(self, release: str) -> str:
        """One line for a report's parameters."""
        kind = self.type_for(release)
        given = "" if self.type is not None else f" (Slurm {release}'s default)"
        if kind != MULTIFACTOR:
            return f"{kind}{given}: submission order, QOS priorities not weighed ({self.source})"
        left = self.unreplayed(release)
        unmodelled = f"; not replayed: {', '.join(left)}" if left else ""
        return f"{kind}{given}, QOS weight {self.weight(QOS_KEY)}{unmodelled} ({self.source})"


def _tres_weighs(text: str) -> bool:
    """A ``PriorityWeightTRES`` list with a weight above 0 (``CPU=1000,Mem=2000,GRES/gpu=3000``)."""
    for item in text.split(","):
        _, _, value = item.partition("=")
        try:
            if float(value) > 0:
                return True
        except ValueError:
            continue
    return False


def parse(text: str, source: str) -> tuple[SitePriority, list[str]]:
    """The priority keys of a slurm.conf or of ``scontrol show config`` output, and the files its
    ``Include`` lines name (read by the caller, relative to the file's directory).  Keys are
    case-insensitive, as slurm.conf's are; a later setting wins; a weight that is not a whole
    number from 0 to 4294967295 is a UsageError naming the line, as slurmctld would refuse it."""
    values: dict[str, tuple[str, int]] = {}
    includes: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        shown = _SHOW.match(line)
        if shown is not None:
            pairs = [(shown.group(1), shown.group(2))]
        elif line.split(None, 1)[0].lower() == "include" and len(line.split(None, 1)) == 2:
            includes.append(line.split(None, 1)[1].strip())
            continue
        else:
            pairs = [(m.group(1), m.group(2)) for m in _PAIR.finditer(line)]
        for key, value in pairs:
            if key.lower() in KEYS:
                values[KEYS[key.lower()]] = (value, number)
    weights = []
    for key, (value, number) in values.items():
        if key in ("PriorityType", TRES_KEY):
            continue
        if not value.isdigit() or int(value) > MAX_WEIGHT:
            raise UsageError(f"{source}, line {number}", f"{key}={value}: not a weight (0 to {MAX_WEIGHT})")
        weights.append((key, int(value)))
    kind = values.get("PriorityType", (None, 0))[0]
    tres = values.get(TRES_KEY, (None, 0))[0]
    return SitePriority(source, kind or None, tuple(sorted(weights)), tres or None), includes


def merged(first: SitePriority, later: SitePriority) -> SitePriority:
    """``first`` with what an included file (read after it) sets."""
    weights = {**dict(first.weights), **dict(later.weights)}
    return SitePriority(
        first.source, later.type or first.type, tuple(sorted(weights.items())), later.tres or first.tres
    )
