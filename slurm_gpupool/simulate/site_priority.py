"""The site's job priority setup, read from its slurm.conf or ``scontrol show config`` (pure).

The replay orders its queue as ``priority/multifactor`` does with only the QOS factor weighed
(``priority.py``), which is how the sandbox is configured and what the validation families
measured.  A site's own slurm.conf may say otherwise, and the replay must not hide it:

* ``PriorityType=priority/basic`` orders the queue by submission alone: QOS priorities do not
  reorder it.  It is the default up to Slurm 23.02; from 23.11 the default is
  ``priority/multifactor`` (``DEFAULT_PRIORITY_TYPE``, ``read_config.h``).
* ``PriorityWeightQOS`` scales the QOS factor; 0 leaves it out, as basic does.
* The age factor (``PriorityWeightAge``, over ``PriorityMaxAge``, recomputed each
  ``PriorityCalcPeriod``) is replayed (``aging``): ``QueueSetup`` carries the three.
* The partition factor (``PriorityWeightPartition`` times a partition's ``PriorityJobFactor``
  over the highest) and the partitions' ``PriorityTier`` (which order the queue before any
  priority, ``sort_job_queue2``) are replayed (``priority``): ``partitions`` carries each
  partition's two, from its ``PartitionName`` line (after ``PartitionName=DEFAULT``'s, and
  ``Priority=``, which sets both) or from ``scontrol -o show partition``.
* The fair-share, job size, association and TRES factors and a site factor plugin reorder
  the queue as users consume (``priority_multifactor.c``, ``_get_priority_internal``).  The
  replay does not model them: ``unreplayed`` names each one the site sets, so a report can
  say so beside its figures (docs/simulate.md, "What the other priority factors would take").

The lines are read as slurmctld reads them (``parse_config.c``): ``Key=Value`` pairs, several
to a line, keys case-insensitive, spaces allowed around ``=`` (``scontrol show config``'s
``Key = Value``), a value quoted or up to the next space, ``#`` starting a comment unless
escaped; numbers as ``s_p_handle_uint32`` takes them (decimal, ``0x`` hex, octal, a ``k``
suffix for 1024, ``UNLIMITED``/``INFINITE``), times as ``time_str2mins`` takes them; a later
setting wins, an ``Include`` read in
its place.  Reading the files is the caller's (``entries`` returns the ``Include`` names).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from slurm_gpupool.core.policy.durations import format_duration, parse_slurm_time_s
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
SITE_KEY = "PrioritySiteFactorPlugin"
TYPE_KEY = "PriorityType"
AGE_KEY, MAX_AGE_KEY, CALC_KEY = "PriorityWeightAge", "PriorityMaxAge", "PriorityCalcPeriod"
FS_KEY, HALF_LIFE_KEY = "PriorityWeightFairshare", "PriorityDecayHalfLife"
# `scontrol show config` only: when slurmctld started, which its decay thread's rounds follow
BOOT_KEY = "BOOT_TIME"
PART_KEY = "PriorityWeightPartition"
MODELLED = {AGE_KEY, PART_KEY}  # the factors the replay weighs besides the QOS factor (``aging``, ``priority``)
# a PartitionName line's keys the replay reads (``read_config.c``: uint16; ``Priority`` sets both)
PART_FIELDS = {k.lower(): k for k in ("PriorityJobFactor", "PriorityTier", "Priority")}
UINT16 = 0xFFFF
WEIGHTS = (QOS_KEY, *(k for k, _ in FACTORS))
KEYS = {k.lower(): k for k in (TYPE_KEY, TRES_KEY, SITE_KEY, MAX_AGE_KEY, CALC_KEY, HALF_LIFE_KEY, BOOT_KEY, *WEIGHTS)}
MAX_AGE_S, CALC_PERIOD_S = 604800, 300  # their defaults (DEFAULT_PRIORITY_DECAY, ..._CALC_PERIOD)
MULTIFACTOR, BASIC = "priority/multifactor", "priority/basic"
INFINITE = 0xFFFFFFFF  # slurm.conf reads the weights as uint32_t; UNLIMITED is this
UNSET = {"", "(null)", "none"}  # how `scontrol show config` shows a string not set
# parse_config.c's keyvalue_pattern: a key, an optional operator, '=', a quoted or a bare value
_PAIR = re.compile(r'\s*([A-Za-z0-9_.]+)\s*([-*+/]?)=\s*(?:"([^"]*)"|(\S+))(?=\s|$)')
_NUMBER = re.compile(r"\s*\+?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)([kK]?)")
_TIME = re.compile(r"[0-9:-]+")  # parse_time.c's _is_valid_timespec: digits, ':' and '-'


@dataclass(frozen=True)
class Entry:
    """One setting (``key`` as slurm.conf spells it) or ``Include`` of a file, where it was."""

    key: str
    value: str
    source: str
    line: int


@dataclass(frozen=True)
class SitePriority:
    """What orders the site's queue: the keys the files set (``None`` for one not set)."""

    source: str
    type: str | None = None
    weights: tuple[tuple[str, int], ...] = ()  # slurm.conf key -> weight, the keys set
    tres: str | None = None  # PriorityWeightTRES, e.g. "GRES/gpu=1000"
    site_factor: str | None = None  # PrioritySiteFactorPlugin
    # each partition's (name, PriorityJobFactor, PriorityTier), in the order defined
    partitions: tuple[tuple[str, int, int], ...] = ()
    max_age_s: int = MAX_AGE_S  # PriorityMaxAge, in seconds as slurmctld keeps it
    calc_period_s: int = CALC_PERIOD_S  # PriorityCalcPeriod, likewise
    boot_time: str | None = None  # BOOT_TIME as `scontrol show config` shows it (local time)
    half_life_s: int = MAX_AGE_S  # PriorityDecayHalfLife (7 days by default, as PriorityMaxAge)
    # the associations' shares and usage were given (``--fairshare-from``): the fair-share
    # factor is replayed (``fairshare``), else it is named among the factors left out
    shares_known: bool = False

    @property
    def found(self) -> bool:
        """Any priority setting at all (a file without one is likely the wrong file)."""
        return bool(self.type or self.weights or self.tres or self.site_factor)

    def type_for(self, release: str) -> str:
        """``PriorityType``, or the release's default (basic up to 23.02, multifactor from 23.11)."""
        if self.type is not None:
            return self.type
        major, minor = (int(x) for x in release.split(".")[:2])
        return MULTIFACTOR if (major, minor) >= (23, 11) else BASIC

    def weight(self, key: str) -> int:
        return dict(self.weights).get(key, 0)

    @property
    def tiers(self) -> tuple[int, ...]:
        """The partitions' PriorityTier values, each once."""
        return tuple(sorted({t for _, _, t in self.partitions}))

    def partition_weight(self, release: str) -> int:
        """``PriorityWeightPartition`` as the queue feels it (0 under basic)."""
        return self.weight(PART_KEY) if self.type_for(release) == MULTIFACTOR else 0

    def qos_weight(self, release: str) -> int:
        """``PriorityWeightQOS`` as the queue feels it: 0 under basic, which ignores every factor."""
        return self.weight(QOS_KEY) if self.type_for(release) == MULTIFACTOR else 0

    def age_weight(self, release: str) -> int:
        """``PriorityWeightAge`` as the queue feels it (0 under basic)."""
        return self.weight(AGE_KEY) if self.type_for(release) == MULTIFACTOR else 0

    def fairshare_weight(self, release: str) -> int:
        """``PriorityWeightFairshare`` as the replay weighs it: 0 under basic, or where the
        associations' shares and usage are not known."""
        return self.weight(FS_KEY) if self.type_for(release) == MULTIFACTOR and self.shares_known else 0

    def unreplayed(self, release: str) -> list[str]:
        """Each thing the site sets that reorders its queue and the replay leaves out, as
        ``fair-share (PriorityWeightFairshare=1000)``."""
        out: list[str] = []
        if self.type_for(release) != MULTIFACTOR:
            return out
        out += [
            f"{name} ({key}={self.weight(key)})"
            for key, name in FACTORS
            if self.weight(key) > 0 and key not in MODELLED and not (key == FS_KEY and self.shares_known)
        ]
        if self.tres and _tres_weighs(self.tres):
            out.append(f"TRES ({TRES_KEY}={self.tres})")
        if self.site_factor:
            out.append(f"a site factor ({SITE_KEY}={self.site_factor})")
        return out

    def describe(self, release: str) -> str:
        """One line for a report's parameters."""
        kind = self.type_for(release)
        given = "" if self.type is not None else f" (Slurm {release}'s default)"
        nothing = "" if self.found else "; no priority setting in it"
        if kind != MULTIFACTOR:
            return (
                f"{kind}{given}: submission order{self._tiered()}, QOS priorities not weighed ({self.source}{nothing})"
            )
        left = self.unreplayed(release)
        unmodelled = f"; not replayed: {', '.join(left)}" if left else ""
        age = ""
        if self.age_weight(release):
            age = (
                f", age weight {self.age_weight(release)} (full at {format_duration(self.max_age_s)}, "
                f"recomputed every {format_duration(self.calc_period_s)})"
            )
        if self.fairshare_weight(release):
            half = format_duration(self.half_life_s)
            age += f", fair-share weight {self.fairshare_weight(release)} (Fair Tree, half-life {half})"
        part = ""
        if self.partition_weight(release):
            factors = ", ".join(f"{n} {f}" for n, f, _ in self.partitions) or "none defined"
            part = f", partition weight {self.partition_weight(release)} (PriorityJobFactor: {factors})"
        weights = f"QOS weight {self.weight(QOS_KEY)}{age}{part}{self._tiered()}"
        return f"{kind}{given}, {weights}{unmodelled} ({self.source}{nothing})"

    def _tiered(self) -> str:
        """The partitions' tiers where they differ (they order the queue, any PriorityType)."""
        if len(self.tiers) < 2:
            return ""
        return ", partition tiers " + ", ".join(f"{n} {t}" for n, _, t in self.partitions)


def _tres_weighs(text: str) -> bool:
    """A ``PriorityWeightTRES`` list with a weight above 0 (``CPU=1000,Mem=0.25G,GRES/gpu=3000``:
    a number, perhaps with a unit)."""
    for item in text.split(","):
        _, _, value = item.partition("=")
        number = re.match(r"\s*([0-9]*\.?[0-9]+)", value)
        if number is not None and float(number.group(1)) > 0:
            return True
    return False


def _uncommented(line: str) -> str:
    """The line before its first ``#`` that is not escaped (``\\#`` stands for ``#``)."""
    at = re.search(r"(?<!\\)#", line)
    return (line if at is None else line[: at.start()]).replace("\\#", "#")


def entries(text: str, source: str) -> list[Entry]:
    """The priority settings, partitions and ``Include`` lines of a slurm.conf, of ``scontrol
    show config`` or of ``scontrol -o show partition`` output, in order (``key`` ``Include``:
    a file to read in its place; a ``PartitionName`` line gives its name's entry, then its
    ``PriorityJobFactor``, ``PriorityTier`` and ``Priority``)."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = _uncommented(raw).strip()
        if not line:
            continue
        head = line.split(None, 1)
        if head[0].lower() == "include" and len(head) == 2:
            out.append(Entry("Include", head[1].split()[0], source, number))
            continue
        pairs = []
        while line and (m := _PAIR.match(line)) is not None:
            pairs.append((m.group(1), m.group(3) if m.group(3) is not None else m.group(4)))
            line = line[m.end() :]
        partition = bool(pairs) and pairs[0][0].lower() == "partitionname"
        if partition:
            out.append(Entry("PartitionName", pairs[0][1], source, number))
        for key, value in pairs:
            if partition and key.lower() in PART_FIELDS:
                out.append(Entry(PART_FIELDS[key.lower()], value, source, number))
            elif not partition and key.lower() in KEYS:
                out.append(Entry(KEYS[key.lower()], value, source, number))
    return out


def slurm_uint32(value: str) -> int | None:
    """A number as slurmctld reads a uint32 setting (``s_p_handle_uint32``), None if it would
    refuse it."""
    if value.strip().upper() in ("UNLIMITED", "INFINITE"):
        return INFINITE
    m = _NUMBER.fullmatch(value)
    if m is None:
        return None
    digits = m.group(1)  # strtoul base 0: 0x... hex, 0... octal (Python's int(.., 0) refuses "010")
    number = int(digits, 8 if digits[:1] == "0" and digits[1:2].isdigit() else 0)
    number *= 1024 if m.group(2) else 1
    return number if number <= INFINITE else None


def slurm_minutes(value: str) -> int | None:
    """A time as slurmctld reads ``PriorityMaxAge`` and ``PriorityCalcPeriod`` (``time_str2mins``:
    ``parse_slurm_time_s``'s forms, rounded up to whole minutes); ``INFINITE``/``UNLIMITED``/``-1``
    is INFINITE; None if it would refuse it (anything but digits, ':' and '-')."""
    text = value.strip()
    if text.upper() in ("INFINITE", "UNLIMITED", "-1"):
        return INFINITE
    if not _TIME.fullmatch(text):
        return None
    try:
        secs = parse_slurm_time_s(text)
    except ValueError:  # a second '-'
        return None
    return None if secs is None else (secs + 59) // 60


def site_priority(found: Iterable[Entry], source: str) -> SitePriority:
    """The setup the entries (read in order, includes in their place) leave: the last setting
    of each key wins; a weight slurmctld would refuse is a UsageError naming its file and line."""
    last: dict[str, Entry] = {}
    parts = _Partitions()
    for e in found:
        if e.key == "PartitionName" or e.key in PART_FIELDS.values():
            parts.take(e)
        elif e.key != "Include":
            last[e.key] = e
    weights = []
    for key in WEIGHTS:
        if key in last:
            e = last[key]
            number = slurm_uint32(e.value)
            if number is None:
                raise UsageError(f"{e.source}, line {e.line}", f"{key}={e.value}: not a weight (0 to {INFINITE})")
            weights.append((key, number))

    def text(key: str) -> str | None:
        value = last[key].value.strip() if key in last else ""
        return None if value.lower() in UNSET else value

    def seconds(key: str, default: int, least: int) -> int:
        """A time setting in seconds (``read_config.c``: minutes times 60, as a uint32_t)."""
        if key not in last:
            return default
        e = last[key]
        minutes = slurm_minutes(e.value)
        if minutes is None or (minutes < least and minutes != INFINITE):
            raise UsageError(f"{e.source}, line {e.line}", f"{key}={e.value}: not a time slurmctld takes")
        return (minutes * 60) & INFINITE

    return SitePriority(
        source,
        text(TYPE_KEY),
        tuple(sorted(weights)),
        text(TRES_KEY),
        text(SITE_KEY),
        parts.settings(),
        seconds(MAX_AGE_KEY, MAX_AGE_S, 0),
        seconds(CALC_KEY, CALC_PERIOD_S, 1),
        text(BOOT_KEY),
        seconds(HALF_LIFE_KEY, MAX_AGE_S, 0),
    )


class _Partitions:
    """The partitions' ``PriorityJobFactor`` and ``PriorityTier`` as ``read_config.c`` leaves
    them: a line's own value, else the ``PartitionName=DEFAULT`` lines' before it, else 1
    (``_init_conf_part``); ``Priority`` (its own, else the defaults') sets both over them."""

    def __init__(self) -> None:
        self.defaults: dict[str, int] = {}
        self.lines: dict[str, tuple[dict[str, int], dict[str, int]]] = {}  # name -> (its values, defaults then)
        self.current: dict[str, int] = {}

    def take(self, e: Entry) -> None:
        if e.key == "PartitionName":
            if e.value.upper() == "DEFAULT":
                self.current = self.defaults
            else:
                self.current = {}
                self.lines.pop(e.value, None)  # a later line of the same name replaces it
                self.lines[e.value] = (self.current, dict(self.defaults))
            return
        value = slurm_uint32(e.value)
        if value is None or value > UINT16:
            raise UsageError(f"{e.source}, line {e.line}", f"{e.key}={e.value}: not a number (0 to {UINT16})")
        self.current[e.key] = value

    def settings(self) -> tuple[tuple[str, int, int], ...]:
        out = []
        for name, (own, dflt) in self.lines.items():
            factor, tier = (own.get(k, dflt.get(k, 1)) for k in ("PriorityJobFactor", "PriorityTier"))
            both = own.get("Priority", dflt.get("Priority"))
            out.append((name, factor, tier) if both is None else (name, both, both))
        return tuple(out)


ASSUMED = "priority/multifactor, QOS weight 10000, no other factor (assumed: no --slurm-config)"


@dataclass(frozen=True)
class QueueSetup:
    """How a replay orders its queue, and what its report says about it."""

    qos_weight: int  # Params.priority_weight_qos
    described: str  # the report's "priority" parameter
    notes: tuple[str, ...]  # beside the figures
    age_weight: int = 0  # Params.priority_weight_age
    max_age_s: float = float(MAX_AGE_S)  # Params.priority_max_age_s
    calc_period_s: float = float(CALC_PERIOD_S)  # Params.priority_calc_period_s
    boot_time: str | None = None  # slurmctld's start, as `scontrol show config` showed it
    partitions: tuple[tuple[str, int, int], ...] = ()  # Params.partition_priority
    partition_weight: int = 0  # Params.priority_weight_partition
    fairshare_weight: int = 0  # Params.priority_weight_fairshare (0 unless the shares are known)
    half_life_s: float = float(MAX_AGE_S)  # Params.priority_decay_half_life_s


def queue_setup(site: SitePriority | None, release: str, preempting: bool, assumed_weight: int) -> QueueSetup:
    """The replay's queue for the site's setup (``preempting``: the config's tiers preempt);
    without one, the validated setup (multifactor, only the QOS factor at ``assumed_weight``)."""
    if site is None:
        return QueueSetup(assumed_weight, ASSUMED, tuple(notes(None, release, preempting)))
    return QueueSetup(
        site.qos_weight(release),
        site.describe(release),
        tuple(notes(site, release, preempting)),
        site.age_weight(release),
        float(site.max_age_s),
        float(site.calc_period_s),
        site.boot_time,
        site.partitions,
        site.partition_weight(release),
        site.fairshare_weight(release),
        float(site.half_life_s),
    )


def notes(site: SitePriority | None, release: str, preempting: bool) -> list[str]:
    """What a report says beside its figures about the queue's order it replayed."""
    if site is None:
        return [
            "The queue is ordered as priority/multifactor with only the QOS factor weighed (the validated "
            "setup): give the site's slurm.conf with --slurm-config to replay its own PriorityType and weights."
        ]
    out = []
    if not site.found:
        out.append(
            f"{site.source} sets no priority key: the release's defaults apply ({site.describe(release)}); "
            "is it the slurm.conf?"
        )
    if left := site.unreplayed(release):
        out.append(
            f"The site's queue is also ordered by {', '.join(left)}, which the replay does not model: its "
            "waits are those of submission order within each QOS priority, and the measured error does not "
            "cover that difference (docs/simulate.md)."
        )
    if preempting and len(site.tiers) > 1:
        out.append(
            "With QOS preemption Slurm queues a job whose QOS preempts another's before comparing the partitions' "
            "PriorityTier (sort_job_queue2); the replay compares the tiers first: not modelled."
        )
    if preempting and site.qos_weight(release) == 0:
        out.append(
            "With QOS preemption Slurm queues a job whose QOS preempts another's first whatever their priority "
            "(sort_job_queue2); the replay, with no QOS weight, queues them by submission: not modelled."
        )
    return out
