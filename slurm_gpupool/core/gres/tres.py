"""Slurm TRES strings → the GPU resources a job held.  Pure.

``sacct`` prints ``AllocTRES`` as ``billing=2,cpu=2,gres/gpu:1g.5gb=2,gres/gpu=2,mem=2G,node=1``:
the untyped ``gres/gpu`` count is always there, the typed one only for types in
``AccountingStorageTRES`` (and, before Slurm 23, only when the job asked for the
type).  Shards appear as ``gres/shard=N`` (``gres/shard:<type>=N`` when typed).
Accounting plugins add usage keys such as ``gres/gpumem`` and ``gres/gpuutil``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_COUNT = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGTP]?)$")
_HEX = re.compile(r"^0[xX]([0-9a-fA-F]{1,16})$")
_SCALE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
GPU_KEYS = ("gres/gpu", "gres/shard")
USAGE_KEYS = ("gres/gpumem", "gres/gpuutil")
# Slurm's "no value" and "infinite" (slurm.h NO_VAL, INFINITE, NO_VAL64, INFINITE64): a
# count Slurm never set, printed as a number; it is unknown, never a count
NO_VAL_SENTINELS = frozenset({0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF})
MAX_GPU_COUNT = 1 << 20  # GPUs or shards one job holds: more is damage (2**62 made 1.28e18 GPU-hours)


class TresError(ValueError):
    """A TRES string that is not ``name=count[,name=count...]``."""


class CountError(TresError):
    """A GPU or shard count no job can hold: the record is damaged."""


@dataclass(frozen=True)
class GpuTres:
    """GPU resources in one TRES string."""

    gpus: int = 0  # untyped gres/gpu: Slurm's GPU count (a MIG slice counts 1)
    typed: tuple[tuple[str, int], ...] = ()  # (type, count) of gres/gpu:<type>
    shards: int = 0
    shard_types: tuple[tuple[str, int], ...] = ()
    unknown: tuple[str, ...] = ()  # other gres/* keys that are not usage figures
    unset: tuple[str, ...] = ()  # GPU keys whose count is Slurm's NO_VAL: unknown, not counted

    @property
    def untyped_rest(self) -> int:
        """GPUs whose type the record does not say (untyped request on a pre-23.02 Slurm)."""
        return max(0, self.gpus - sum(c for _, c in self.typed))


def parse_count(text: str) -> float | None:
    """``2``, ``10G``, ``20500736K`` → a number (suffixes are powers of 1024); None for
    Slurm's NO_VAL sentinels (``4294967294``, ``18446744073709551615``, ``0xfffffffe``...)."""
    t = text.strip()
    h = _HEX.match(t)
    if h:
        if int(h.group(1), 16) in NO_VAL_SENTINELS:
            return None
        raise TresError(f"not a TRES count: {text[:40]!r}")
    m = _COUNT.match(t)
    if not m:
        raise TresError(f"not a TRES count: {text[:40]!r}")
    if not m.group(2) and "." not in m.group(1) and len(m.group(1)) <= 20 and int(m.group(1)) in NO_VAL_SENTINELS:
        return None
    return float(m.group(1)) * _SCALE[m.group(2)]


def parse_tres(text: str) -> dict[str, float | None]:
    """``a=1,b=2G`` → ``{"a": 1.0, "b": 2147483648.0}``; empty text → {}; None: unset (NO_VAL)."""
    out: dict[str, float | None] = {}
    text = text.strip()
    if not text:
        return out
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise TresError(f"not name=count: {item[:40]!r}")
        out[name.strip()] = parse_count(value)
    return out


def gpu_tres(text: str) -> GpuTres:
    """The GPU part of a TRES string (``TresError`` if it does not parse; ``CountError`` for
    a GPU or shard count beyond MAX_GPU_COUNT).  A count that is Slurm's NO_VAL is left out
    and named in ``unset``."""
    gpus = shards = 0
    typed: list[tuple[str, int]] = []
    shard_types: list[tuple[str, int]] = []
    unknown: list[str] = []
    unset: list[str] = []
    for name, value in parse_tres(text).items():
        if not name.startswith("gres/"):
            continue
        base, _, typ = name.partition(":")
        if base in GPU_KEYS:
            if value is None:
                unset.append(name)
                continue
            if value > MAX_GPU_COUNT:
                raise CountError(f"{name}={value:.0f}: more than {MAX_GPU_COUNT:,} in one job")
        if base == "gres/gpu" and value is not None:
            if typ:
                typed.append((typ, int(value)))
            else:
                gpus = int(value)
        elif base == "gres/shard" and value is not None:
            if typ:
                shard_types.append((typ, int(value)))
            else:
                shards = int(value)
        elif base not in USAGE_KEYS:
            unknown.append(name)
    if not gpus and typed:  # a record with only typed counts: their sum is the count
        gpus = sum(c for _, c in typed)
    if not shards and shard_types:
        shards = sum(c for _, c in shard_types)
    return GpuTres(
        gpus, tuple(sorted(typed)), shards, tuple(sorted(shard_types)), tuple(sorted(unknown)), tuple(sorted(unset))
    )


def usage_tres(text: str) -> tuple[float | None, float | None]:
    """``gres/gpumem`` (MiB) and ``gres/gpuutil`` (%) from a step's ``TRESUsageInMax``."""
    found: dict[str, float] = {}
    for item in text.split(","):  # other keys hold times (cpu=15:33:58): read only ours
        name, _, value = item.partition("=")
        if name in USAGE_KEYS:
            try:
                count = parse_count(value)
            except TresError:
                continue
            if count is not None:
                found[name] = count
    mem = found.get("gres/gpumem")
    return (mem / (1 << 20) if mem is not None else None), found.get("gres/gpuutil")
