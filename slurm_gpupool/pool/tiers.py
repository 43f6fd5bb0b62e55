"""The pool's service tiers and quotas as Slurm would hold them:
QOS specs and GRES limits per type, from the config alone.

GPU-equivalents become counts per GRES type with the capacity model of the reports
(a MIG slice counts its share of the GPU's compute slices, a shard 1/N of a GPU
time-sliced N ways).  Pure: controller/qos.py compares and applies them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.config.tiers import KINDS, Amount, Limits, Tier
from slurm_gpupool.core.policy.qos import Current, Desired, QosSpec, preempt_lists
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.pool.capacity import node_offers


@dataclass(frozen=True)
class GresKind:
    kind: str  # whole | mig | shared (a time-sliced GPU's own gpu type) | shard
    eq_each: float  # GPU-equivalents of one device (or shard)


def pool_types(cfg: PoolConfig) -> dict[str, GresKind]:
    """Every GRES type the layouts offer (``shard`` for shards), with its GPU-equivalents.
    A shard's share needs one share of a GPU per shard across the pool (else it has none: 0)."""

    out: dict[str, GresKind] = {}
    per_shard: set[float] = set()  # a shard of a time-sliced MIG device holds its slice's share
    for layout in cfg.layout_names():
        for node in cfg.all_nodes():
            for o in node_offers(cfg, layout, node):
                out.setdefault(o.type, GresKind(o.kind, o.eq_each))
                if o.shares:
                    per_shard.add(o.eq_each / o.shares)
    if per_shard:
        out["shard"] = GresKind("shard", per_shard.pop() if len(per_shard) == 1 else 0.0)
    return out


def tres_of(typ: str) -> str:
    return "gres/shard" if typ == "shard" else f"gres/gpu:{typ}"


def resolve(cfg: PoolConfig, limits: Limits, key: str, types: dict[str, GresKind] | None = None) -> dict[str, int]:
    """Limits as TRES counts (``gres/gpu:1g.5gb`` → 14); ConfigError naming ``key`` if a type is
    unknown or GPU-equivalents cannot be converted."""
    types = pool_types(cfg) if types is None else types
    out = {}
    for typ, amount in limits:
        where = f"{key}.[{typ}]" if "." in typ else f"{key}.{typ}"
        k = types.get(typ)
        if k is None:
            raise ConfigError(
                cfg.source, where, "no layout offers this GRES type", hint="types: " + ", ".join(sorted(types))
            )
        out[tres_of(typ)] = count_of(cfg, amount, k, where)
    return out


def count_of(cfg: PoolConfig, amount: Amount, k: GresKind, where: str) -> int:
    if amount.count is not None:
        return amount.count
    assert amount.gpu_eq is not None
    if k.eq_each <= 0:
        raise ConfigError(
            cfg.source,
            where,
            "GPU-equivalents of shards need one share count: the layouts time-slice GPUs into different counts",
            hint="give a number of shards",
        )
    n = math.floor(amount.gpu_eq / k.eq_each + 1e-9)
    if n < 1:
        raise ConfigError(cfg.source, where, f"{amount} is less than one device ({k.eq_each:g} GPU-eq each)")
    return n


def check_tier_gres(cfg: PoolConfig, types: dict[str, GresKind]) -> None:
    for t in cfg.tiers:
        for i, g in enumerate(t.gres):
            if g not in KINDS and g not in types:
                raise ConfigError(
                    cfg.source,
                    f"tiers.{t.name}.gres[{i}]",
                    f"{g!r} is neither a GRES kind nor a type the layouts offer",
                    hint="kinds: whole, mig, shard; types: " + ", ".join(sorted(types)),
                )
    for acct, limits in cfg.quotas.items():
        resolve(cfg, limits, f"quotas.{acct}", types)


def tier_qos(cfg: PoolConfig, types: dict[str, GresKind] | None = None) -> list[QosSpec]:
    types = pool_types(cfg) if types is None else types
    preempts = preempt_lists((t.qos, t.priority, t.preemptible) for t in cfg.tiers)
    out = []
    for t in cfg.tiers:
        limits = {k: resolve(cfg, lim, f"tiers.{t.name}.limits.{k}", types) for k, lim in t.limits}
        out.append(
            QosSpec(
                name=t.qos,
                priority=t.priority,
                preempt=preempts[t.qos],
                preempt_mode=t.preempt_mode if t.preemptible else "cluster",
                grace_s=t.grace_s if t.preemptible else 0,
                exempt_s=t.min_run_s if t.preemptible and t.min_run_s else None,
                grp_tres=tuple(sorted(limits.get("total", {}).items())),
                max_tres_per_user=tuple(sorted(limits.get("per_user", {}).items())),
                max_tres_per_account=tuple(sorted(limits.get("per_account", {}).items())),
            )
        )
    return out


def desired(cfg: PoolConfig) -> Desired:
    types = pool_types(cfg)
    check_tier_gres(cfg, types)
    access: dict[str, list[str]] = {}
    for t in cfg.tiers:
        for a in t.accounts:
            access.setdefault(a, []).append(t.qos)
    return Desired(
        qos=tuple(tier_qos(cfg, types)),
        assoc_tres={a: tuple(sorted(resolve(cfg, q, f"quotas.{a}", types).items())) for a, q in cfg.quotas.items()},
        access={a: tuple(sorted(q)) for a, q in access.items()},
        all_accounts=tuple(sorted(t.qos for t in cfg.tiers if not t.accounts)),
    )


def replaced_limits(want: Desired, before: Current) -> dict[str, dict[str, int | None]]:
    """Account → each quota key we set → the limit it replaced: as recorded by an earlier
    apply, else what Slurm had before this one (None: no limit)."""
    out: dict[str, dict[str, int | None]] = {}
    for acct, tres in want.assoc_tres.items():
        if not tres:
            continue
        ours, had = before.recorded_tres.get(acct, {}), dict(before.assoc_tres.get(acct, ()))
        out[acct] = {k: ours[k] if k in ours else had.get(k) for k, _ in tres}
    return out


def tier_of_qos(cfg: PoolConfig, qos: str | None) -> Tier | None:
    return next((t for t in cfg.tiers if t.qos == (qos or "").lower()), None)
