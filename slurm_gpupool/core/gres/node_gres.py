"""A node's GRES as ``sinfo`` prints them (``Gres``, ``GresUsed``): counts by type, and
what is idle now.  Pure, standard library only (``gpupool-sbatch`` imports it)."""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing costs gpupool-sbatch ~5 ms to import; mypy knows this idiom

if TYPE_CHECKING:
    from collections.abc import Mapping

_GRES_ITEM = re.compile(r"([^,(]+)(?:\(([^)]*)\))?")
_PER_GPU_USE = re.compile(r"\d+/\d+(?:,\d+/\d+)*")
# sinfo -N -O: node name, state with its flags, configured GRES, GRES in use (no spaces inside)
SINFO_IDLE_FORMAT = "NodeList:100,StateComplete:100,Gres:4000,GresUsed:4000"
TAKES_JOBS = frozenset({"idle", "mixed"})


def gres_by_type(text: str) -> dict[tuple[str, str], int]:
    """A node's GRES (``sinfo`` Gres or GresUsed) by (name, type), type "" when untyped.

    ``gpu:1g.5gb:28(S:0-1),gpu:a100:1(IDX:36),shard:a30_shared:3(3/4,0/4)`` →
    {("gpu", "1g.5gb"): 28, ("gpu", "a100"): 1, ("shard", "a30_shared"): 3}: a
    ``(used/total,...)`` detail (shards per GPU, 23.11+) is summed."""
    return {k: n for k, (n, _) in _items(text).items()}


def _items(text: str) -> dict[tuple[str, str], tuple[int, list[tuple[int, int]]]]:
    """(name, type) -> (count, each GPU's (used, total) where a ``used/total`` detail gives them)."""
    out: dict[tuple[str, str], tuple[int, list[tuple[int, int]]]] = {}
    for m in _GRES_ITEM.finditer(text or ""):
        item, detail = m.group(1).strip(), m.group(2)
        if not item or item in ("(null)", "N/A"):
            continue
        parts = item.split(":")
        count, per_gpu = 1, []
        if len(parts) > 1 and parts[-1].isdigit():
            count, parts = int(parts[-1]), parts[:-1]
        if detail and _PER_GPU_USE.fullmatch(detail):
            per_gpu = [(int(u), int(t)) for u, t in (pair.split("/") for pair in detail.split(","))]
            count = sum(u for u, _ in per_gpu)
        key = (parts[0], ":".join(parts[1:]))
        n, gpus = out.get(key, (0, []))
        out[key] = (n + count, gpus + per_gpu)
    return out


def idle_records(sinfo_text: str, shares: Mapping[str, int]) -> dict[str, int]:
    """What is idle now on the nodes that take jobs (idle or mixed, no drain, reservation or
    other flag), from ``sinfo -h -N -O`` :data:`SINFO_IDLE_FORMAT`, by GRES type: idle
    devices of a MIG or whole type (summed over nodes); for a time-sliced type the most
    free shards on one GPU (a job's shards on a node come from one GPU), ``shares`` being
    the type's shards per GPU.

    Slurm 22.05 prints a shard type's use as the number of GPUs its shards are on
    (``shard:v100_shared:1(IDX:0)`` for 3 shards of one GPU), so there a GPU counts as free
    only when none of its shards is in use and it is not given whole either; 23.11+ print
    each GPU's ``used/total``.  A node listed once per partition counts once."""
    out: dict[str, int] = {}
    seen: set[str] = set()
    for line in sinfo_text.splitlines():
        fields = line.split()
        if len(fields) != 4 or fields[0] in seen:
            continue
        seen.add(fields[0])
        if not set(fields[1].lower().split("+")) <= TAKES_JOBS:
            continue
        total, used = _items(fields[2]), _items(fields[3])
        for (name, typ), (n, _) in total.items():
            if not typ or (name != "shard" and (name != "gpu" or ("shard", typ) in total)):
                continue  # a time-sliced GPU is also a gpu:<type> record: its shards count here
            u, per_gpu = used.get((name, typ), (0, []))
            if name == "gpu":
                out[typ] = out.get(typ, 0) + max(0, n - u)
                continue
            if per_gpu:
                free = max(t - x for x, t in per_gpu)
            else:
                each = shares.get(typ, 0)
                gpus = n // each if each else 0
                busy = u + used.get(("gpu", typ), (0, []))[0]  # GPUs with shards in use, or given whole
                free = each if gpus - busy > 0 else 0
            out[typ] = max(out.get(typ, 0), free)
    return out
