"""``gpupool qos plan|diff|apply``: the tiers' QOS and the accounts' quotas in Slurm.

From the pool config's ``tiers:`` and ``quotas:`` (docs/tiers.md) to the QOS and
association limits they mean (:func:`desired`), compared with what ``sacctmgr``
shows (:func:`current`) and changed one ``sacctmgr -i`` command at a time
(:func:`apply`).  GPU-equivalents become counts per GRES type here, with the
capacity model of the reports (``pool/capacity.py``): a MIG slice counts its share of
the GPU's compute slices, a shard 1/N of a GPU time-sliced N ways.  The association
GRES limits gpupool set are recorded in ``<controller_dir>/qos-applied.json`` with the
limit each replaced, so a limit an admin set by hand is never removed: it comes back
when the quota that replaced it leaves the config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.policy.qos import Change, Current, diff
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.pool.tiers import desired, replaced_limits
from slurm_gpupool.util.atomic import write_text_atomic

STATE_FILE = "qos-applied.json"


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
