"""A node as the replay keeps it, and how jobs take and give back its GRES records (pure).

A node holds plain records by type (whole GPUs, MIG slices: a count each) and time-sliced
GPUs (per GPU, the shards in use, or -1 when the GPU is given whole).  The rules are those of
``select/cons_tres`` for our GRES: a request takes records of one type per node, GPUs first
fit (Slurm's default); a time-sliced GPU is given whole (``gpu:<model>_shared``) or as
shards, never both; a shard request fits on one GPU (no ``MULTIPLE_SHARING_GRES_PJ``).

Apart from the scheduler so that the earliest-start search, the measurements and the tests
read one definition of what a node has free and what a job holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from slurm_gpupool.simulate.state import GPU, INF, SHARD, Need

Part = tuple[str, str, int, int]  # (kind, type, count, GPU index of a shared GPU or -1)


@dataclass
class SimNode:
    """One node of the replay: its records free and held, its running jobs, and where it
    stands in a switch (reserved ahead, reserved, out of service)."""

    name: str
    index: int
    layout: str
    free: dict[str, int]  # plain type -> free records
    cap: dict[str, int]
    shared: dict[str, list[int]]  # shared type -> per GPU shards in use (-1: given whole)
    shares: dict[str, int]
    eq: dict[str, float]
    running: dict[int, tuple[float, list[Part]]] = field(default_factory=dict)  # job -> (start + limit, parts)
    # the jobs whose run ended here and whose Epilogs have not (COMPLETING): with
    # ``Params.completing_blocks_node`` their records are free, and no job starts on the node
    completing: set[int] = field(default_factory=set)
    usable: bool = True  # False: reserved for a switch, or out of service
    ahead_at: float = INF  # a reservation ahead starts then: it takes only jobs that end before
    target: str | None = None  # switching to this layout
    switch_at: float = INF  # when the run that switches it began (its deadline counts from here)
    idle_since: float = INF  # reserved and idle since
    skipped: bool = False  # busy at the deadline: switched by the first cron run after its jobs
    requeued: bool = False  # its jobs were requeued at the deadline: switch as soon as they are gone
    drain: bool = False  # a drain for demand: no deadline wait, no requeue (``Switcher.drains``)
    out_until: float = -INF  # out of service (switching) until
    since: float = -INF  # back from its last switch at
    lines: dict[str, list[tuple[float, list[Part]]]] = field(default_factory=dict)  # type -> timeline
    # its entries in the engine's bound lists (``NodeIndex``): (types, count, its type) -> lower bound
    bounds: dict[tuple[tuple[str, ...], int, str], float] = field(default_factory=dict)
    bounds_epoch: int = 0  # the bound lists its entries are in (``NodeIndex.bounds_epoch``)
    # its sockets, for cons_tres's choice of node (``simulate.cores``; empty: none known):
    # free records of each plain type per socket, idle cores per socket, threads per core,
    # each time-sliced GPU's socket, and what each running job took (type, per socket, core)
    sock_free: dict[str, list[int]] = field(default_factory=dict)
    cores_free: list[int] = field(default_factory=list)
    tpc: int = 1
    gpu_sock: dict[str, tuple[int, ...]] = field(default_factory=dict)
    bound: dict[int, tuple[str, list[tuple[int, int]], int]] = field(default_factory=dict)

    def free_eq(self) -> float:
        f = sum(self.eq[t] * n for t, n in self.free.items())
        for t, gpus in self.shared.items():
            s = self.shares[t]
            f += sum(self.eq[t] * (s - u) / s for u in gpus if u >= 0)
        return f


def take(
    free: dict[str, int], shared: dict[str, list[int]], shares: dict[str, int], need: Need, typ: str
) -> list[Part] | None:
    """The records of ``typ`` that ``need`` gets from these free records (first fit), or None."""
    if need.kind == GPU:
        if typ in free:
            return [(GPU, typ, need.count, -1)] if free[typ] >= need.count else None
        gpus = shared.get(typ)
        if gpus is None:
            return None
        idle = [g for g, u in enumerate(gpus) if u == 0][: need.count]
        return [(GPU, typ, 1, g) for g in idle] if len(idle) == need.count else None
    gpus = shared.get(typ)
    if gpus is None:
        return None
    s = shares[typ]
    for g, u in enumerate(gpus):
        if u >= 0 and s - u >= need.count:
            return [(SHARD, typ, need.count, g)]
    return None


def apply(free: dict[str, int], shared: dict[str, list[int]], parts: Iterable[Part], sign: int) -> None:
    """Take (``sign`` +1) or give back (-1) records: a shared GPU given whole is -1."""
    for kind, typ, count, g in parts:
        if kind == GPU and g < 0:
            free[typ] -= sign * count
        elif kind == GPU:
            shared[typ][g] = -1 if sign > 0 else 0
        elif shared[typ][g] >= 0 or sign < 0:
            shared[typ][g] += sign * count


def idle(n: SimNode) -> bool:
    """No job runs on the node, nor is it completing one (``sinfo``: idle, not ``comp``)."""
    return not n.running and not n.completing


def timeline(n: SimNode, typ: str) -> list[tuple[float, list[Part]]]:
    """The node's running jobs that hold ``typ``, by expected end (start + limit: the scheduler
    does not know run times), with the parts of that type they hold."""
    out = []
    for end, parts in n.running.values():
        mine = [part for part in parts if part[1] == typ]
        if mine:
            out.append((end, mine))
    out.sort(key=lambda e: e[0])
    return out


def free_records(n: SimNode) -> tuple[tuple[str, int], ...]:
    """Idle records by type (time-sliced types: idle shards of GPUs not given whole)."""
    out = [(t, c) for t, c in n.free.items() if c > 0]
    out += [(t, sum(n.shares[t] - u for u in gpus if u >= 0)) for t, gpus in n.shared.items()]
    return tuple(out)


def usable_eq(n: SimNode, need: Need, typ: str) -> float:
    """Idle GPU-equivalents of ``typ`` on ``n`` that ``need`` could take (0 if it does not fit)."""
    if need.kind == GPU and typ in n.free:
        free = n.free[typ]
        return free * n.eq[typ] if free >= need.count else 0.0
    gpus = n.shared.get(typ)
    if gpus is None:
        return 0.0
    s = n.shares[typ]
    if need.kind == GPU:
        whole = sum(1 for u in gpus if u == 0)
        return whole * n.eq[typ] if whole >= need.count else 0.0
    return sum(n.eq[typ] * (s - u) / s for u in gpus if u >= 0 and s - u >= need.count)
