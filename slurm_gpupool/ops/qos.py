"""``gpupool qos plan|diff|apply``: the tiers' QOS and the accounts' quotas in Slurm.

From the pool config's ``tiers:`` and ``quotas:`` (docs/tiers.md) to the QOS and
association limits they mean (:func:`desired`), compared with what ``sacctmgr``
shows (:func:`current`) and changed one ``sacctmgr -i`` command at a time
(:func:`apply`).  GPU-equivalents become counts per GRES type here, with the
capacity model of the reports (``ops/capacity``): a MIG slice counts its share of
the GPU's compute slices, a shard 1/N of a GPU time-sliced N ways.  The association
GRES limits gpupool set are recorded in ``<controller_dir>/qos-applied.json`` with the
limit each replaced, so a limit an admin set by hand is never removed: it comes back
when the quota that replaced it leaves the config.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_gpupool.config import PoolConfig
from slurm_gpupool.core.qos import Change, Current, Desired, QosSpec, diff, preempt_lists
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.tiers_config import KINDS, Amount, Limits, Tier

STATE_FILE = "qos-applied.json"


@dataclass(frozen=True)
class GresKind:
    kind: str  # whole | mig | shared (a time-sliced GPU's own gpu type) | shard
    eq_each: float  # GPU-equivalents of one device (or shard)


def pool_types(cfg: PoolConfig) -> dict[str, GresKind]:
    """Every GRES type the layouts offer (``shard`` for shards), with its GPU-equivalents.
    A shard's share needs one share count across the pool (else it has none: 0)."""
    from slurm_gpupool.ops.capacity import node_offers

    out: dict[str, GresKind] = {}
    shares: set[int] = set()
    for layout in cfg.layout_names():
        for node in cfg.all_nodes():
            for o in node_offers(cfg, layout, node):
                out.setdefault(o.type, GresKind(o.kind, o.eq_each))
                if o.shares:
                    shares.add(o.shares)
    if shares:
        out["shard"] = GresKind("shard", 1 / shares.pop() if len(shares) == 1 else 0.0)
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


def state_path(cfg: PoolConfig) -> Path:
    return Path(cfg.paths.controller_dir) / STATE_FILE


def recorded(cfg: PoolConfig) -> dict[str, dict[str, int | None]]:
    """Account → the association TRES limits an earlier apply set → the limit each replaced
    (a list of keys, as the first releases wrote it: they replaced none)."""
    try:
        data = json.loads(state_path(cfg).read_text())
        out: dict[str, dict[str, int | None]] = {}
        for a, keys in data.get("assoc_tres", {}).items():
            items = keys.items() if isinstance(keys, dict) else ((k, None) for k in keys)
            out[str(a)] = {str(k): None if v is None else int(v) for k, v in items}
        return out
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, AttributeError) as e:
        raise ConfigError(str(state_path(cfg)), "", f"unreadable record of applied quotas: {e}") from None


def current(cfg: PoolConfig, sacctmgr: Any, cluster: str) -> Current:
    qos = sacctmgr.qos()
    tres, access, users = sacctmgr.assoc(cluster)
    return Current(qos=qos, assoc_tres=tres, access=access, user_access=users, recorded_tres=recorded(cfg))


def plan_changes(cfg: PoolConfig, sacctmgr: Any, cluster: str) -> list[Change]:
    return diff(desired(cfg), current(cfg, sacctmgr, cluster), cluster)


def apply(cfg: PoolConfig, sacctmgr: Any, cluster: str, changes: list[Change]) -> list[Change]:
    """Run every change's sacctmgr command (conflicts are skipped), then record which
    association limits are ours; returns the changes made."""
    from slurm_gpupool.atomic import write_text_atomic

    before = current(cfg, sacctmgr, cluster)
    record = replaced_limits(desired(cfg), before)
    path = state_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    # recorded before any command: a run that fails half-way must not leave a quota of ours
    # that the next run would take for the admin's own limit (and later "restore")
    write_text_atomic(path, json.dumps({"assoc_tres": _merge(recorded(cfg), record)}, indent=1, sort_keys=True) + "\n")
    done = []
    for _round in range(3):  # a qos-= on an account reaches its users too: look again after
        todo = [c for c in changes if c.commands]
        if not todo:
            break
        for c in todo:
            for argv in c.commands:
                sacctmgr.run(argv)
            done.append(c)
        changes = plan_changes(cfg, sacctmgr, cluster)
    write_text_atomic(path, json.dumps({"assoc_tres": record}, indent=1, sort_keys=True) + "\n")
    return done


def _merge(old: dict[str, dict[str, int | None]], new: dict[str, dict[str, int | None]]) -> dict:
    """The record while a run is under way: every key of the earlier record (a quota
    leaving the config is still ours until its limit is restored) and the new ones."""
    out = {a: dict(keys) for a, keys in old.items()}
    for a, keys in new.items():
        out.setdefault(a, {}).update(keys)
    return out


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
