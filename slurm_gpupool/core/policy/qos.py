"""The Slurm QOS and association limits of the service tiers and quotas, and the diff
between what Slurm has and what the config wants (pure).

Ours are recognisable: a QOS is ours when its name starts with ``gpupool_`` *and* its
Description is :data:`MARKER`; an association's GRES limit is ours when an earlier
``qos apply`` recorded setting it, with the limit it replaced (an admin's own, or none),
which comes back when the quota goes; a QOS in an association's QOS list is ours when the
QOS is.  A diff never removes or changes anything else (a ``gpupool_`` QOS without our
Description is reported as a conflict, not touched).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MARKER = "managed by slurm_gpupool"
PREFIX = "gpupool_"
Tres = tuple[tuple[str, int], ...]  # (TRES name, count), sorted: (("gres/gpu:a100", 4),)


def tres_text(tres: Tres) -> str:
    return ",".join(f"{k}={v}" for k, v in tres)


def parse_tres_limits(text: str) -> Tres:
    """``gres/gpu:a100=4,gres/shard=8`` (sacctmgr's GrpTRES column) → sorted pairs."""
    out = []
    for item in (text or "").split(","):
        k, sep, v = item.strip().partition("=")
        if sep and k and v.lstrip("-").isdigit():
            out.append((k, int(v)))
    return tuple(sorted(out))


@dataclass(frozen=True)
class QosSpec:
    """One QOS, as the config wants it or as sacctmgr shows it."""

    name: str
    priority: int = 0
    preempt: tuple[str, ...] = ()  # QOS it may preempt, sorted
    preempt_mode: str = "cluster"  # cluster | requeue | cancel (sacctmgr's spelling, lower case)
    grace_s: int = 0
    exempt_s: int | None = None  # PreemptExemptTime; None: not set
    grp_tres: Tres = ()
    max_tres_per_user: Tres = ()
    max_tres_per_account: Tres = ()
    description: str = MARKER

    @property
    def ours(self) -> bool:
        return self.name.startswith(PREFIX) and self.description == MARKER

    def fields(self) -> dict[str, str]:
        """Field → the value as sacctmgr takes it (``set Field=value``)."""
        return {
            "Priority": str(self.priority),
            "Preempt": ",".join(self.preempt),
            "PreemptMode": self.preempt_mode,
            "GraceTime": str(self.grace_s),
            "PreemptExemptTime": slurm_duration(self.exempt_s),
            "GrpTRES": tres_text(self.grp_tres),
            "MaxTRESPerUser": tres_text(self.max_tres_per_user),
            "MaxTRESPerAccount": tres_text(self.max_tres_per_account),
        }


def slurm_duration(seconds: int | None) -> str:
    """Seconds as sacctmgr's time format (``-1``: unset)."""
    if seconds is None:
        return "-1"
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


@dataclass(frozen=True)
class Desired:
    """What the config asks of Slurm."""

    qos: tuple[QosSpec, ...]
    assoc_tres: Mapping[str, Tres]  # account → GrpTRES of its account association (our keys only)
    access: Mapping[str, tuple[str, ...]]  # account → our QOS its associations may use
    all_accounts: tuple[str, ...] = ()  # QOS every account may use (given to each account association)


@dataclass(frozen=True)
class Current:
    """What Slurm has (``sacctmgr show qos`` / ``show assoc``) and what we recorded as ours."""

    qos: Mapping[str, QosSpec]
    assoc_tres: Mapping[str, Tres]  # account → GrpTRES of its account association (all keys)
    access: Mapping[str, tuple[str, ...]]  # account → QOS list of its account association
    user_access: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)  # (account, user) → QOS
    # account → TRES key we set → the limit it replaced (None: there was none)
    recorded_tres: Mapping[str, Mapping[str, int | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Change:
    """One difference, with the sacctmgr arguments that make it."""

    sign: str  # + add, ~ change, - remove, ! conflict (not ours: left alone)
    target: str  # "qos gpupool_shared", "account phys"
    what: str  # human text: "Priority 100 -> 200"
    commands: tuple[tuple[str, ...], ...] = ()  # sacctmgr arguments (after -i); none for a conflict

    def __str__(self) -> str:
        return f"{self.sign} {self.target}: {self.what}"


def _qos_changes(want: QosSpec, have: QosSpec | None) -> list[Change]:
    target = f"qos {want.name}"
    new = want.fields()
    if have is None:
        sets = [f"{k}={v}" for k, v in new.items() if v not in ("", "-1", "0", "cluster") or k == "Priority"]
        add = ("add", "qos", want.name, f"Description={MARKER}")
        return [
            Change(
                "+",
                target,
                "new QOS " + " ".join(sets),
                (add, ("modify", "qos", "where", f"name={want.name}", "set", *sets)),
            )
        ]
    if not have.ours:
        return [Change("!", target, f"exists and is not ours (Description {have.description!r}): left alone")]
    old = have.fields()
    out = []
    for k, v in new.items():
        if old[k] == v:
            continue
        value = v
        if k in ("GrpTRES", "MaxTRESPerUser", "MaxTRESPerAccount"):  # drop keys no longer wanted with -1
            wanted = dict(getattr(want, _TRES_ATTR[k]))
            gone = [f"{t}=-1" for t, _ in getattr(have, _TRES_ATTR[k]) if t not in wanted]
            value = ",".join([*gone, *(f"{t}={n}" for t, n in sorted(wanted.items()))])
        elif k == "Preempt" and not v:
            value = "''"  # sacctmgr clears a list with ''
        out.append(
            Change(
                "~",
                target,
                f"{k} {old[k] or '(none)'} -> {v or '(none)'}",
                (("modify", "qos", "where", f"name={want.name}", "set", f"{k}={value}"),),
            )
        )
    return out


_TRES_ATTR = {"GrpTRES": "grp_tres", "MaxTRESPerUser": "max_tres_per_user", "MaxTRESPerAccount": "max_tres_per_account"}


def diff(desired: Desired, current: Current, cluster: str) -> list[Change]:
    """The changes that take Slurm from ``current`` to ``desired``, touching only ours."""
    out: list[Change] = []
    wanted = {q.name for q in desired.qos}
    for spec in sorted(desired.qos, key=lambda q: q.priority):  # a QOS preempts lower ones: they come first
        out += _qos_changes(spec, current.qos.get(spec.name))
    stale = sorted(n for n, q in current.qos.items() if q.ours and n not in wanted)
    where = ("where", f"cluster={cluster}")
    # association QOS lists: our QOS granted where the config says, revoked elsewhere.  sacctmgr
    # passes an account's qos+= / qos-= on to its users (and sub-accounts), so the account
    # association is changed whenever it or one of its users differs.  Every account is granted
    # its own, even where root's grant already shows through: slurmdbd 24.11 tells slurmctld
    # about the changed account and its direct children only, so the users of an account
    # below root kept their old QOS list in slurmctld ("does not have access to qos") until
    # it restarted (docs/slurm-versions.md).
    for acct in sorted(set(current.access) | set(desired.access)):
        if acct not in current.access:
            out.append(Change("!", f"account {acct}", "no such account in Slurm: its tiers wait for it"))
            continue
        lists = [current.access[acct], *(q for (a, _u), q in current.user_access.items() if a == acct)]
        want = set(desired.access.get(acct, ())) | set(desired.all_accounts)
        mine = {q for q, spec in current.qos.items() if spec.ours}
        add = sorted({q for q in want for have in lists if q not in have})
        drop = sorted({q for have in lists for q in have if q in mine and q not in want})
        for sign, qs, verb, op in (("-", drop, "may no longer use", "-="), ("+", add, "may use", "+=")):
            for name in qs:
                grant = ("modify", "account", "where", f"name={acct}", *where[1:], "set", f"qos{op}{name}")
                out.append(Change(sign, f"account {acct}", f"{verb} QOS {name}", (grant,)))
    # association GRES limits: ours are the keys we set before (recorded) or set now
    for acct in sorted(set(desired.assoc_tres) | set(current.recorded_tres)):
        if acct not in current.assoc_tres:
            if acct in desired.assoc_tres:
                out.append(Change("!", f"account {acct}", "no such account in Slurm: its quota waits for it"))
            continue
        have_t = dict(current.assoc_tres[acct])
        want_t = dict(desired.assoc_tres.get(acct, ()))
        sets = []
        for k in sorted(want_t):
            if have_t.get(k) != want_t[k]:
                sets.append((k, want_t[k], have_t.get(k)))
        ours = current.recorded_tres.get(acct, {})
        for k in sorted(set(ours) - set(want_t)):
            before = ours[k]
            if k in have_t and have_t[k] != before:  # the quota goes: the limit it replaced comes back
                sets.append((k, -1 if before is None else before, have_t[k]))
        for k, n, old in sets:
            back = " (the limit before gpupool's quota)" if n >= 0 and ours.get(k) == n and k not in want_t else ""
            what = f"GrpTRES {k} {'(none)' if old is None else old} -> {'(none)' if n < 0 else n}{back}"
            limit = ("modify", "account", "where", f"name={acct}", *where[1:], "set", f"GrpTRES={k}={n}")
            out.append(Change("-" if n < 0 else ("+" if old is None else "~"), f"account {acct}", what, (limit,)))
    for name in stale:  # last: after no association lists it
        out.append(
            Change("-", f"qos {name}", "ours, no longer in the config", (("delete", "qos", "where", f"name={name}"),))
        )
    return out


def preempt_lists(tiers: Iterable[tuple[str, int, bool]]) -> dict[str, tuple[str, ...]]:
    """QOS name → the QOS it preempts: every preemptible one of lower priority.
    ``tiers``: (QOS name, priority, preemptible)."""
    items = list(tiers)
    return {
        name: tuple(sorted(other for other, p2, pre in items if pre and p2 < prio and other != name))
        for name, prio, _ in items
    }
