"""What a GPU should look like: whole, MIG with profile counts, or time-sliced.

Pure value types plus the selector logic that spreads a node set's per-GPU
entries (``all``, ``3``, ``0-3``, ``0,2,4-5``) over its GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_gpupool.util.validate import Where

WHOLE, MIG, SHARED = "whole", "mig", "shared"


@dataclass(frozen=True)
class GpuTarget:
    """The desired state of one GPU."""

    mode: str  # WHOLE, MIG or SHARED
    mig: tuple[tuple[str, int], ...] = ()  # sorted (profile, count), MIG only
    shares: int = 0  # SHARED: Slurm shards on this GPU; MIG: on each MIG device (0: none)

    @staticmethod
    def whole() -> GpuTarget:
        return GpuTarget(WHOLE)

    @staticmethod
    def mig_counts(counts: Mapping[str, int], shares: int = 0) -> GpuTarget:
        """``shares``: every MIG device time-sliced into that many Slurm shards (0: none)."""
        return GpuTarget(MIG, tuple(sorted((k, v) for k, v in counts.items() if v)), shares)

    @staticmethod
    def shared(n: int) -> GpuTarget:
        return GpuTarget(SHARED, shares=n)

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.mig)

    @property
    def wants_mig_mode(self) -> bool:
        return self.mode == MIG

    def to_config(self) -> object:
        """The config-file form (what ``gpupool node export`` writes)."""
        if self.mode == MIG:
            return {"mig": dict(self.mig), "shared": self.shares} if self.shares else {"mig": dict(self.mig)}
        if self.mode == SHARED:
            return {"shared": self.shares}
        return WHOLE

    def __str__(self) -> str:
        if self.mode == MIG:
            text = "mig {" + ", ".join(f"{k}: {v}" for k, v in self.mig) + "}"
            return f"{text} shared x{self.shares}" if self.shares else text
        if self.mode == SHARED:
            return f"shared x{self.shares}"
        return WHOLE


@dataclass(frozen=True)
class Selector:
    """Which GPUs of a node an entry covers: all of them, or listed indices."""

    text: str
    indices: frozenset[int] | None  # None = all

    def resolve(self, gpu_count: int) -> frozenset[int]:
        return frozenset(range(gpu_count)) if self.indices is None else self.indices


MAX_GPU_INDEX = 255  # no machine has more GPUs


def parse_selector(key: object, where: Where) -> Selector:
    """``all``, ``3``, ``"0-3"`` or ``"0,2,4-5"``."""
    text = str(key).strip()
    if text == "all":
        return Selector(text, None)
    out: set[int] = set()
    hint = "use all, an index (3), or ranges (0-3, 0,2,4-5)"
    try:
        for part in text.split(","):
            part = part.strip()
            a_text, dash, b_text = part.partition("-")
            if not a_text.isascii() or not a_text.isdigit() or (dash and not (b_text.isascii() and b_text.isdigit())):
                raise ValueError
            a = int(a_text)
            b = int(b_text) if dash else a
            if b < a:
                raise ValueError
            if b > MAX_GPU_INDEX:  # before building the range: "0-99999999999" is a typo
                raise where.error(f"GPU indices are 0..{MAX_GPU_INDEX}: {text[:40]!r}", hint=hint)
            out.update(range(a, b + 1))
    except ValueError:
        raise where.error(f"not a GPU selector: {text[:40]!r}", hint=hint) from None
    return Selector(text, frozenset(out))


def spread(
    entries: Sequence[tuple[Selector, GpuTarget]], gpu_count: int, where: Where, model_note: str = ""
) -> tuple[GpuTarget, ...]:
    """One target per GPU: every GPU covered exactly once, no index out of range."""
    owner: dict[int, Selector] = {}
    for sel, _ in entries:
        for i in sorted(sel.resolve(gpu_count)):
            if i >= gpu_count:
                raise where.key(sel.text).error(f"GPU {i} does not exist: the node has {gpu_count} GPUs{model_note}")
            if i in owner:
                raise where.key(sel.text).error(f"GPU {i} is also selected by {owner[i].text!r}: selectors overlap")
            owner[i] = sel
    missing = [i for i in range(gpu_count) if i not in owner]
    if missing:
        raise where.error(
            f"GPUs {','.join(map(str, missing))} have no entry (the node has {gpu_count} GPUs{model_note})",
            hint="cover every GPU, e.g. with `all: whole` or a range",
        )
    by_sel = {sel.text: t for sel, t in entries}
    return tuple(by_sel[owner[i].text] for i in range(gpu_count))
