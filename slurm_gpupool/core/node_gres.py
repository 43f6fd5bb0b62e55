"""A node's GRES as ``sinfo`` prints them (``Gres``, ``GresUsed``): counts by type, and
what is idle now.  Pure, standard library only (``gpupool-sbatch`` imports it)."""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing costs gpupool-sbatch ~5 ms to import; mypy knows this idiom

if TYPE_CHECKING:
    from collections.abc import Mapping

_GRES_ITEM = re.compile(r"([^,(]+)(?:\(([^)]*)\))?")
_PER_GPU_USE = re.compile(r"\d+/\d+(?:,\d+/\d+)*")
# sinfo -N -O: node, state with its flags, configured GRES, GRES in use (no spaces inside)
SINFO_IDLE_FORMAT = "NodeHost:100,StateComplete:100,Gres:4000,GresUsed:4000"
TAKES_JOBS = frozenset({"idle", "mixed"})


def gres_by_type(text: str) -> dict[tuple[str, str], int]:
    """A node's GRES (``sinfo`` Gres or GresUsed) by (name, type), type "" when untyped.

    ``gpu:1g.5gb:28(S:0-1),gpu:a100:1(IDX:36),shard:a30_shared:3(3/4,0/4)`` →
    {("gpu", "1g.5gb"): 28, ("gpu", "a100"): 1, ("shard", "a30_shared"): 3}: a
    ``(used/total,...)`` detail (shards per GPU, 23.11+) is summed."""
    return {k: n for k, (n, _) in _items(text).items()}


def _items(text: str) -> dict[tuple[str, str], tuple[int, bool]]:
    """(name, type) -> (count, whether the count came from a per-GPU ``used/total`` detail)."""
    out: dict[tuple[str, str], tuple[int, bool]] = {}
    for m in _GRES_ITEM.finditer(text or ""):
        item, detail = m.group(1).strip(), m.group(2)
        if not item or item in ("(null)", "N/A"):
            continue
        parts = item.split(":")
        count, per_gpu = 1, False
        if len(parts) > 1 and parts[-1].isdigit():
            count, parts = int(parts[-1]), parts[:-1]
        if detail and _PER_GPU_USE.fullmatch(detail):
            count, per_gpu = sum(int(pair.split("/")[0]) for pair in detail.split(",")), True
        key = (parts[0], ":".join(parts[1:]))
        n, seen = out.get(key, (0, False))
        out[key] = (n + count, seen or per_gpu)
    return out


def idle_records(sinfo_text: str, shares: Mapping[str, int]) -> dict[str, int]:
    """Idle GPU records by type on the nodes that take jobs now (idle or mixed, no drain,
    reservation or other flag), from ``sinfo -h -N -O`` :data:`SINFO_IDLE_FORMAT`: MIG and
    whole types in devices, time-sliced types in shards (a time-sliced GPU is also a
    ``gpu:<type>`` record, for a job taking it whole: its shards are what counts here).

    Slurm 22.05 prints a shard type's use as the number of GPUs its shards are on
    (``shard:v100_shared:1(IDX:0)`` for 3 shards of one GPU): each such GPU counts as
    all its ``shares`` in use, so idle shards are never overstated.  Later releases print
    each GPU's ``used/total``.  A node listed once per partition counts once."""
    out: dict[str, int] = {}
    seen: set[str] = set()
    for line in sinfo_text.splitlines():
        fields = line.split()
        if len(fields) != 4 or fields[0] in seen:
            continue
        seen.add(fields[0])
        if not set(fields[1].lower().rstrip("*~#!%$@^-").split("+")) <= TAKES_JOBS:
            continue
        total, used = _items(fields[2]), _items(fields[3])
        sliced = {typ for name, typ in total if name == "shard"}
        for (name, typ), (n, _) in total.items():
            if name not in ("gpu", "shard") or not typ or (name == "gpu" and typ in sliced):
                continue
            u, per_gpu = used.get((name, typ), (0, False))
            if name == "shard" and not per_gpu:
                u *= shares.get(typ, 1)
            out[typ] = out.get(typ, 0) + max(0, n - u)
    return out
