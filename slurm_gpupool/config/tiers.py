"""``tiers:`` and ``quotas:`` of the pool config: service tiers and per-account GPU quotas.

A tier becomes a Slurm QOS named ``gpupool_<tier>`` (``gpupool qos apply``): its
priority orders the queue, it preempts every preemptible tier of lower priority,
its jobs get a grace time (GraceTime) and a checkpoint signal before preemption or
a repartition requeue, and it may be limited to some GRES kinds or types.  A quota
caps what an account's jobs hold at once, per GRES type, in devices/shards or in
GPU-equivalents (association GrpTRES).  docs/tiers.md is the reference.

Only the syntax is checked here; that the named GRES types exist in the layouts,
and the conversion of GPU-equivalents to counts, are checked when the QOS plan or
the submit catalog is built (``controller/qos.py``), still as config errors (exit 78).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from slurm_gpupool.core.policy.durations import parse_duration_s
from slurm_gpupool.util.validate import Where

QOS_PREFIX = "gpupool_"
PREEMPT_MODES = ("off", "requeue", "cancel")
KINDS = ("whole", "mig", "shard")  # GRES kinds a tier may name instead of types
LIMIT_KEYS = ("per_user", "per_account", "total")  # QOS MaxTRESPerUser, MaxTRESPerAccount, GrpTRES
_NAME = re.compile(r"[a-z][a-z0-9_]{0,40}")  # Slurm lower-cases QOS and account names
_ACCOUNT = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_SIGNAL = re.compile(r"(?:B:)?(?:SIG)?([A-Z0-9]{1,8}?)(?:@(\d{1,6}))?")


@dataclass(frozen=True)
class Amount:
    """A quota or limit for one GRES type: a count of devices (shards), or GPU-equivalents."""

    count: int | None = None
    gpu_eq: float | None = None

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{self.gpu_eq:g} GPU-eq"


Limits = tuple[tuple[str, Amount], ...]  # (GRES type or "shard", amount), sorted


@dataclass(frozen=True)
class Tier:
    name: str
    priority: int
    preempt_mode: str = "off"  # how this tier's own jobs are preempted: off (never), requeue, cancel
    grace_s: int = 0  # GraceTime: after preemption (or a repartition requeue's signal), before the kill
    min_run_s: int = 0  # PreemptExemptTime: never preempted before running this long
    gres: tuple[str, ...] = ()  # kinds (whole, mig, shard) or GRES types it may use; () = any
    checkpoint_signal: str | None = None  # signal name (USR1) given to its jobs as --signal
    checkpoint_time_s: int | None = None  # --signal's @TIME; None: the grace time
    default: bool = False  # the tier of GPU jobs that name none
    accounts: tuple[str, ...] = ()  # accounts that may use it; () = every account
    limits: tuple[tuple[str, Limits], ...] = ()  # per_user / per_account / total → limits

    @property
    def qos(self) -> str:
        return QOS_PREFIX + self.name

    @property
    def preemptible(self) -> bool:
        return self.preempt_mode != "off"

    def signal_option(self, signal: str | None = None, time_s: int | None = None) -> str | None:
        """The ``--signal`` value for a job of this tier (B: the batch script, where a job
        traps it; the repartitioner's requeue signals the batch script too)."""
        sig = signal or self.checkpoint_signal
        if sig is None:
            return None
        when = time_s if time_s is not None else self.checkpoint_time_s
        if when is None:
            when = self.grace_s
        return f"B:{sig}@{when}" if when else f"B:{sig}"


def parse_signal(text: str) -> tuple[str, int | None]:
    """``USR1``, ``SIGUSR1@120``, ``B:USR1@120``, ``10@60`` → (``USR1``, 120); ValueError if not."""
    m = _SIGNAL.fullmatch(str(text).strip().upper())
    if not m or not m.group(1):
        raise ValueError(f"{text!r} is not SIGNAL[@SECONDS] (e.g. USR1@120)")
    return m.group(1), int(m.group(2)) if m.group(2) is not None else None


def _amount(raw: Any, w: Where) -> Amount:
    if isinstance(raw, dict):
        w.only_keys(raw, {"gpu_eq"})
        v = w.require(raw, "gpu_eq", (int, float))
        if not 0 < v < 1e6:
            raise w.key("gpu_eq").error("must be a number of GPU-equivalents above 0")
        return Amount(gpu_eq=float(v))
    n = w.check_type(raw, int)
    if not 0 <= n < 10**7:
        raise w.error("must be a count of devices (or shards), 0 or more", hint="or {gpu_eq: N}")
    return Amount(count=n)


def _limits(raw: Any, w: Where) -> Limits:
    w.check_type(raw, dict)
    out = []
    for typ, amount in raw.items():
        wt = w.key(str(typ))
        wt.check_name(str(typ), "GRES type")
        out.append((str(typ), _amount(amount, wt)))
    return tuple(sorted(out))


def _duration(w: Where, raw: dict, key: str) -> int:

    if key not in raw or raw[key] is None:
        return 0
    try:
        return parse_duration_s(w.key(key).check_type(raw[key], (str, int)))
    except ValueError as e:
        raise w.key(key).error(str(e)) from None


def parse_tiers(raw: Any, top: Where) -> tuple[Tier, ...]:
    if raw is None:
        return ()
    w = top.key("tiers")
    w.check_type(raw, dict)
    out = []
    for name, spec in raw.items():
        wn = w.key(str(name))
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise wn.error("a tier name is lower-case letters, digits and _ (it names the QOS gpupool_<tier>)")
        wn.check_type(spec, dict)
        wn.only_keys(
            spec,
            {"priority", "preempt_mode", "grace", "min_run", "gres", "checkpoint_signal", "default", "accounts"}
            | {"limits"},
        )
        priority = wn.require(spec, "priority", int)
        if not 0 <= priority < 2**31:
            raise wn.key("priority").error("must be 0 or more")
        mode = wn.optional(spec, "preempt_mode", (str, bool), "off")
        mode = "off" if mode is False else mode  # YAML reads a bare off as false
        if mode not in PREEMPT_MODES:
            raise wn.key("preempt_mode").error("must be off, requeue or cancel")
        gres = wn.optional(spec, "gres", list, [])
        for i, g in enumerate(gres):
            wn.key("gres").index(i).check_name(g, "GRES kind or type")
        sig, sig_time = None, None
        if spec.get("checkpoint_signal") is not None:
            try:
                sig, sig_time = parse_signal(wn.key("checkpoint_signal").check_type(spec["checkpoint_signal"], str))
            except ValueError as e:
                raise wn.key("checkpoint_signal").error(str(e)) from None
        accounts = wn.optional(spec, "accounts", list, [])
        for i, a in enumerate(accounts):
            if not isinstance(a, str) or not _ACCOUNT.fullmatch(a):
                raise wn.key("accounts").index(i).error("not a Slurm account name (lower case)")
        limits_raw = wn.optional(spec, "limits", dict, {})
        wn.key("limits").only_keys(limits_raw, set(LIMIT_KEYS))
        limits = tuple((k, _limits(limits_raw[k], wn.key("limits").key(k))) for k in LIMIT_KEYS if k in limits_raw)
        out.append(
            Tier(
                name=name,
                priority=priority,
                preempt_mode=mode,
                grace_s=_duration(wn, spec, "grace"),
                min_run_s=_duration(wn, spec, "min_run"),
                gres=tuple(gres),
                checkpoint_signal=sig,
                checkpoint_time_s=sig_time,
                default=wn.optional(spec, "default", bool, False),
                accounts=tuple(accounts),
                limits=limits,
            )
        )
    defaults = [t.name for t in out if t.default]
    if len(defaults) > 1:
        raise w.error(f"only one tier can be the default, not {', '.join(defaults)}")
    return tuple(out)


def parse_quotas(raw: Any, top: Where) -> dict[str, Limits]:
    """``quotas: {account: {type: count | {gpu_eq: N}}}``."""
    if raw is None:
        return {}
    w = top.key("quotas")
    w.check_type(raw, dict)
    out = {}
    for account, spec in raw.items():
        wa = w.key(str(account))
        if not isinstance(account, str) or not _ACCOUNT.fullmatch(account):
            raise wa.error("not a Slurm account name (lower case)")
        out[account] = _limits(spec, wa)
    return out
