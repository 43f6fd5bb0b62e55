"""From an sbatch command line (and its script's #SBATCH lines) to the one gpupool-sbatch runs (pure).

Our own options (``--gpu-mem``, ``--gpu-share``, ``--gpus-nvlink``, ``--explain``,
``--dry-run``, ``--submit-anyway``) are removed; every other token is passed on
as typed.  Options we add go first; options we change are edited where the user
wrote them, so sbatch's "last one wins" cannot undo them.  Each change carries the
rule that made it, for ``--explain``.
"""

from __future__ import annotations

import re
import shlex

from slurm_gpupool.core.submit.request import (
    NVLINK_SIZES,
    Decision,
    Request,
    RequestError,
    decide,
    merge_constraint,
    parse_fraction,
    parse_size_mib,
    typed_later,
)
from slurm_gpupool.core.submit.sbatch_args import (
    ENV_OPTIONS,
    ArgError,
    OptionTable,
    SbatchArgs,
    env_args,
    parse,
    scan,
    table_for,
)
from slurm_gpupool.core.submit.sbatch_script import components_with_ours, directive_args

TYPE_CHECKING = False  # typing costs gpupool-sbatch ~5 ms to import; mypy knows this idiom

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime
    from typing import Any

OUR_VALUED = ("gpu-mem", "gpu-share", "gpus-nvlink")
OUR_TIER = ("tier", "checkpoint-signal")  # service tiers (docs/tiers.md)
OUR_FLAGS = ("explain", "dry-run", "submit-anyway")
# our options for the getopt walk: name -> has_arg (a value in the next word or after '=')
OURS = {**{k: 1 for k in (*OUR_VALUED, *OUR_TIER)}, **{k: 0 for k in OUR_FLAGS}}


class Change:
    __slots__ = ("option", "rule", "value")

    def __init__(self, option: str, value: str, rule: str) -> None:
        self.option, self.value, self.rule = option, value, rule

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Change) and (self.option, self.value, self.rule) == (
            other.option,
            other.value,
            other.rule,
        )

    def __repr__(self) -> str:
        return f"Change({self.option!r}, {self.value!r}, {self.rule!r})"


class Effective:
    """The value sbatch will take for an option, from its three sources in sbatch's order:
    the command line, the ``SBATCH_*`` input variables, the script's ``#SBATCH`` lines.
    ``said`` names an option as the user gave it, so that a refusal points at the variable
    or line that made it, not at a command-line option the user never typed."""

    __slots__ = ("args", "directives", "from_env")

    def __init__(self, args: Callable[[], SbatchArgs], from_env: SbatchArgs, directives: SbatchArgs) -> None:
        self.args = args  # the command line as the rules have rewritten it so far
        self.from_env, self.directives = from_env, directives

    def _source(self, name: str) -> tuple[int, str] | None:
        """(0 command line, 1 variable, 2 script; the value) of the first layer that sets it."""
        for k, layer in enumerate((self.args(), self.from_env, self.directives)):
            if (v := layer.value(name)) is not None:
                return k, v
        return None

    def __call__(self, name: str) -> str | None:
        found = self._source(name)
        return None if found is None else found[1]

    def said(self, name: str) -> str:
        """``--qos=x``, ``SBATCH_QOS=x`` or ``#SBATCH --qos=x``: where the value came from."""
        found = self._source(name)
        if found is None:
            return f"--{name}"
        k, v = found
        if k == 1:
            return f"{next(var for var, option in ENV_OPTIONS.items() if option == name)}={v}"
        return f"{'#SBATCH ' if k == 2 else ''}--{name}={v}"


class Plan:
    __slots__ = (
        "argv",
        "changes",
        "dry_run",
        "explain",
        "later",
        "notes",
        "script_has_ours",
        "submit_anyway",
        "table",
    )

    def __init__(
        self,
        argv: list[str],
        explain: bool = False,
        dry_run: bool = False,
        submit_anyway: bool = False,
        table: OptionTable | None = None,
    ):
        self.argv = argv
        self.table = table or table_for()  # the sbatch release's options: every parse uses it
        self.changes: list[Change] = []
        self.notes: list[str] = []
        self.later: tuple[str, datetime | None] | None = None  # the request waits for this layout
        self.explain, self.dry_run, self.submit_anyway = explain, dry_run, submit_anyway
        self.script_has_ours = False  # the script's #SBATCH lines hold our options: strip them

    def describe(self, sbatch: str = "sbatch") -> str:
        lines = [shlex.join([sbatch, *self.argv])]
        for c in self.changes:
            lines.append(f"  --{c.option}={c.value}: {c.rule}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def sbatch_table(catalog: dict[str, Any] | None) -> OptionTable:
    """The option table of the sbatch the catalog was written for (``gres install`` records
    the cluster's release); the oldest supported release's without one."""
    return table_for((catalog or {}).get("sbatch"))


def split_ours(argv: list[str], table: OptionTable | None = None) -> tuple[list[str], dict[str, str], set[str]]:
    """Remove our options from argv, which is read exactly as sbatch's getopt reads it:
    the value of an option that takes one is never taken for an option (``-J --gpu-mem=18G``
    names the job "--gpu-mem=18G", so does ``--job --gpu-mem=18G``), and nothing after the
    script or ``--`` is ours.  Ours are known by their whole names only.  ArgError: sbatch
    would refuse the command line (or ours lacks its value); RequestError: ours in a later
    component of a heterogeneous job."""
    args = scan(argv, table, OURS)
    if args.errors and not args.exits:
        raise ArgError(args.errors[0])
    mine = args.ours()
    later = [o for o in mine if o.component > 0]
    if later:
        raise RequestError(
            f"--{later[0].name}: in a later component of a heterogeneous job",
            "friendly options apply to the first component: put it before the first ':'",
        )
    values = {o.name: o.value or "" for o in mine if OURS.get(o.name)}
    flags = {o.name for o in mine if not OURS[o.name]}
    drop = {k for o in mine for k in range(o.start, o.end)}
    return [tok for k, tok in enumerate(argv) if k not in drop], values, flags


def _set_option(argv: list[str], args: SbatchArgs, name: str, value: str) -> list[str]:
    """Set ``--name=value`` for component 0: edit the user's own option (the short options
    typed before it in the same word stay), else add one first."""
    opt = args.last(name)
    if opt is not None:
        head = [opt.cluster] if opt.cluster else []
        return [*argv[: opt.start], *head, f"--{name}={value}", *argv[opt.end :]]
    return [f"--{name}={value}", *argv]


def _gpu_request(gres: str | None, per_node: str | None, gpus: str | None) -> tuple[str | None, int]:
    """(type or None, count) of a job's first GPU request per node, in the order of the
    job's tres_per_node (sbatch puts --gpus-per-node before --gres), else of --gpus."""
    items = [f"gpu:{x}" for x in (per_node or "").split(",") if x] + (gres or "").split(",")
    for item in items:
        parts = item.split(":")
        if parts[0] == "gpu":
            if len(parts) == 1:
                return None, 1
            if len(parts) == 2:
                return (None, int(parts[1])) if _digits(parts[1]) else (parts[1], 1)
            return parts[1], int(parts[2]) if _digits(parts[2]) else 1
    if gpus:
        parts = gpus.split(",")[0].split(":")
        if len(parts) == 1 and _digits(parts[0]):
            return None, int(parts[0])
        if len(parts) == 2 and _digits(parts[1]):
            return parts[0], int(parts[1])
    return None, 0


def _digits(text: str) -> bool:
    """ASCII digits only: ``"²".isdigit()`` is True, and int("²") fails."""
    return text.isascii() and text.isdigit() and len(text) <= 9


def _int(text: str | None, default: int) -> int:
    try:
        return int(str(text).split("-")[0]) if text else default
    except ValueError:
        return default


def plan(
    argv: list[str],
    script: str | bytes | None,
    catalog: dict[str, Any] | None,
    now: datetime,
    idle: Callable[[], dict[str, int] | None] | None = None,
    env: Mapping[str, str] | None = None,
) -> Plan:
    """The sbatch command line to run, with every change explained (RequestError: exit 2;
    ArgError: sbatch would refuse the command line or the script's #SBATCH lines).
    ``script``: the batch script's bytes (a str is taken as UTF-8); ``idle``: what is idle
    now by GRES type (asked only in an elastic period, ``decide``); ``env``: the environment
    sbatch will read its ``SBATCH_*`` input variables from (:data:`ENV_OPTIONS`), which
    rank between the command line and the #SBATCH lines: a rule reads them, and an option
    the wrapper sets on the command line keeps their value in it (it would hide them)."""
    table = sbatch_table(catalog)
    rest, ours, flags = split_ours(argv, table)
    args = parse(rest, table)
    raw = script.encode("utf-8", "surrogateescape") if isinstance(script, str) else script
    directives = directive_args(raw, table, 0, OURS) if raw else SbatchArgs([], table)
    if directives.errors:
        raise ArgError(directives.errors[0])
    # Our options in #SBATCH lines count too (the command line wins); sbatch must then get
    # the script without them (sbatch_script.strip_ours), or it stops at an unknown option.
    in_script = {o.name: o.value or "" for o in directives.ours() if OURS[o.name]}
    for k, text in in_script.items():
        ours.setdefault(k, text)
    flags |= {o.name for o in directives.ours() if not OURS[o.name]}
    p = Plan(
        rest,
        explain="explain" in flags,
        dry_run="dry-run" in flags,
        submit_anyway="submit-anyway" in flags,
        table=table,
    )
    with_ours = components_with_ours(raw, table, OURS) if raw else set()
    p.script_has_ours = bool(with_ours)
    if with_ours - {0}:
        raise RequestError(
            "a friendly option in a later component's #SBATCH lines (after #SBATCH hetjob)",
            "friendly options apply to the first component: put it before the first hetjob line",
        )

    from_env = env_args(env or {}, table)

    eff = Effective(lambda: args, from_env, directives)  # (args: as the rules rewrite it)

    requests = [k for k in OUR_VALUED if k in ours]
    if len(requests) > 1:
        raise RequestError(f"use one of --{', --'.join(OUR_VALUED)}, not {len(requests)}")
    if catalog is None:
        asked = requests or [k for k in OUR_TIER if k in ours]
        if asked:
            raise RequestError(
                f"--{asked[0]}: this cluster has no gpupool submit catalog",
                "ask your admins to run `gpupool gres install`",
            )
        return p
    rules = catalog.get("rules", {})
    gres = eff("gres")
    if requests:
        key = requests[0]
        if asks_for_gpus(gres, {n: v for n in GPU_OPTIONS[1:] if (v := eff(n))}):
            gave = next((eff.said(n) for n in GPU_OPTIONS[1:] if eff(n)), eff.said("gres"))
            raise RequestError(f"--{key} replaces --gres=gpu/shard and --gpus*, and {gave} asks for GPUs: give one")
        text = ours[key]
        if key == "gpu-mem":
            req = Request("mem", parse_size_mib(text), text)
        elif key == "gpu-share":
            req = Request("share", parse_fraction(text), text)
        else:
            if not _digits(text) or int(text) < 2:
                raise RequestError(f"--gpus-nvlink={text}: expected a number of GPUs, 2 or more")
            req = Request("nvlink", int(text), text)
        allowed = _tier_gres(catalog, ours, eff)
        d: Decision = decide(
            catalog,
            req,
            now,
            idle,
            lambda o: allowed is None or o["type"] in allowed or _TIER_KIND[o["kind"]] in allowed,
        )
        p.notes.extend(d.notes)
        p.later = d.later
        if d.choice is None:
            return p
        c = d.choice
        others = [i for i in (gres or "").split(",") if i]
        new_gres = ",".join([*others, c.gres])
        p.argv = _set_option(p.argv, args, "gres", new_gres)
        p.changes.append(Change("gres", new_gres, c.why))
        args = parse(p.argv, table)
        if c.constraint:
            merged, note = merge_constraint(eff("constraint"), c.constraint)
            if note:
                p.notes.append(note)
            elif merged != eff("constraint"):
                p.argv = _set_option(p.argv, args, "constraint", merged)
                why = f"only nodes that can give {int(req.amount)} NVLink-connected GPUs"
                p.changes.append(Change("constraint", merged, why))
                args = parse(p.argv, table)
    else:
        args = _type_untyped(p, catalog, rules.get("untyped_gpus", "auto"), args, eff, now)
        typ, _ = _gpu_request(eff("gres"), eff("gpus-per-node"), eff("gpus"))
        if typ is not None:
            p.later = typed_later(catalog, typ, now)
    _topology(p, catalog, rules, args, eff)
    _tier(p, catalog, ours, eff)
    return p


def job_gres_kinds(catalog: dict[str, Any], gres: str | None, gpus: dict[str, str]) -> dict[str, str]:
    """What a job asks for, name → kind: each GPU type (mig, whole, shared; unknown types
    are not ours to judge and are left out) and ``shard`` → ``shard``."""
    kinds = {o["type"]: o["kind"] for lay in catalog["layouts"].values() for o in lay["offers"]}
    out: dict[str, str] = {}
    for item in (gres or "").split(","):
        if item.split(":")[0] == "shard":
            out["shard"] = "shard"
    for name, value in [*gpus.items(), *([("gres", gres)] if gres else [])]:
        for t in _gpu_types(name, value):
            if t in kinds:
                out[t] = kinds[t]
    return out


def asks_for_gpus(gres: str | None, gpus: dict[str, str]) -> bool:
    return any(i.split(":")[0] in ("gpu", "shard") for i in (gres or "").split(",")) or bool(gpus)


def tier_refusal(tier: str, allowed: list[str], asked: dict[str, str]) -> str | None:
    """Why a tier may not use what the job asks for (None: it may)."""
    if not allowed:
        return None
    for name, kind in sorted(asked.items()):
        if name not in allowed and ("whole" if kind == "whole" else kind) not in allowed:
            return f"tier {tier} may not use {name} ({kind}); it may use {', '.join(allowed)}"
    return None


def signal_value(text: str, grace_s: int) -> str:
    """``--checkpoint-signal=USR1@120`` → ``B:USR1@120`` (``@TIME`` defaults to the tier's grace)."""
    m = re.fullmatch(r"(?:B:)?(?:SIG)?([A-Z0-9]{1,8}?)(?:@(\d{1,6}))?", text.strip().upper())
    if not m or not m.group(1):
        raise RequestError(f"--checkpoint-signal={text}: expected SIGNAL[@SECONDS], e.g. USR1@120")
    when = m.group(2) if m.group(2) is not None else (str(grace_s) if grace_s else None)
    return f"B:{m.group(1)}" + (f"@{when}" if when else "")


_TIER_KIND = {"mig": "mig", "whole": "whole", "shared": "shard"}  # an offer's kind as tiers name it


def _tier_gres(catalog: dict[str, Any], ours: dict[str, str], eff: Effective) -> list[str] | None:
    """What the job's tier may use (kinds or GRES types), the tier found as :func:`_tier`
    finds it; None: anything (no tiers, no tier, or a QOS that is no tier's)."""
    tiers: dict[str, Any] = catalog.get("tiers") or {}
    name, qos = ours.get("tier"), eff("qos")
    if name is None and qos:
        name = next((t for t, v in tiers.items() if v["qos"] == qos.lower()), None)
    elif name is None:
        name = next((t for t, v in sorted(tiers.items()) if v["default"]), None)
    tier = tiers.get(name) if name else None
    return list(tier["gres"]) if tier and tier["gres"] else None


def _tier(p: Plan, catalog: dict[str, Any], ours: dict[str, str], eff: Effective) -> None:
    """The job's service tier: ``--tier``, else the tier whose QOS ``--qos`` names, else the
    default tier for a GPU job; its QOS (``--qos=gpupool_<tier>``), the GRES it may use, and
    its checkpoint signal (``--signal=B:SIG@TIME``; the user's own ``--signal`` wins).
    A GPU job's ``--qos`` must be a tier's (or one of ``submit.other_gpu_qos``): the tiers'
    priority, preemption and limits are not escaped by naming ``normal``; a job without
    GPUs keeps its QOS."""
    tiers: dict[str, Any] = catalog.get("tiers") or {}
    name, sig, qos = ours.get("tier"), ours.get("checkpoint-signal"), eff("qos")
    if not tiers:
        if name is not None:
            raise RequestError(f"--tier={name}: this cluster has no service tiers")
        if sig is not None:
            _set_signal(p, eff, signal_value(sig, 0), "--checkpoint-signal")
        return
    gpus = {n: v for n in GPU_OPTIONS[1:] if (v := eff(n))}
    if name is not None:
        if name not in tiers:
            raise RequestError(f"--tier={name}: no such tier", "tiers: " + ", ".join(sorted(tiers)))
        if qos and qos.lower() != tiers[name]["qos"]:
            raise RequestError(f"--tier={name} and {eff.said('qos')}: give one of them")
        why = f"--tier={name}"
    elif qos:
        name = next((t for t, v in tiers.items() if v["qos"] == qos.lower()), None)
        other = (catalog.get("rules") or {}).get("other_gpu_qos") or ()
        if name is None and asks_for_gpus(eff("gres"), gpus) and qos.lower() not in other:
            raise RequestError(
                f"{eff.said('qos')}: not a service tier's QOS, and GPU jobs run in a tier",
                "use --tier=" + " or --tier=".join(sorted(tiers)) + " (the site may allow it: submit.other_gpu_qos)",
            )
        why = eff.said("qos")
    else:
        name = next((t for t, v in sorted(tiers.items()) if v["default"]), None)
        if name is not None and not asks_for_gpus(eff("gres"), gpus):
            name = None  # the default tier is for GPU jobs
        why = f"a GPU job without a tier: the default tier {name}"
    if name is None:
        if sig is not None:
            _set_signal(p, eff, signal_value(sig, 0), "--checkpoint-signal")
        return
    t = tiers[name]
    refusal = tier_refusal(name, t["gres"], job_gres_kinds(catalog, eff("gres"), gpus))
    if refusal:
        others = [
            n
            for n, v in sorted(tiers.items())
            if not tier_refusal(n, v["gres"], job_gres_kinds(catalog, eff("gres"), gpus))
        ]
        raise RequestError(refusal, ("use --tier=" + " or --tier=".join(others)) if others else None)
    if not qos:
        p.argv = _set_option(p.argv, parse(p.argv, p.table), "qos", t["qos"])
        p.changes.append(Change("qos", t["qos"], why))
    if sig is not None:
        _set_signal(p, eff, signal_value(sig, t["grace_s"]), "--checkpoint-signal")
    elif t["signal"] and eff("signal") is None:
        _set_signal(
            p, eff, t["signal"], f"tier {name}: its checkpoint signal, {t['grace_s']} s before preemption ends it"
        )


def _set_signal(p: Plan, eff: Effective, value: str, why: str) -> None:
    if eff("signal") is not None and why == "--checkpoint-signal":
        raise RequestError(f"--checkpoint-signal and {eff.said('signal')}: give one of them")
    p.argv = _set_option(p.argv, parse(p.argv, p.table), "signal", value)
    p.changes.append(Change("signal", value, why))


GPU_OPTIONS = ("gres", "gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket")


def whole_types(catalog: dict[str, Any], constraint: str | None = None) -> list[str]:
    """The whole-GPU types of every layout; those the constraint names, if it names any."""
    types = sorted(
        {o["type"] for layout in catalog["layouts"].values() for o in layout["offers"] if o["kind"] == "whole"}
    )
    named = set(re.split(r"[&|,\[\]*()!:\s]+", constraint or ""))
    return [t for t in types if t in named] or types


def _untyped_value(name: str, value: str, typ: str) -> str | None:
    """The value with ``typ`` put into its untyped GPU request; None if it has none."""
    if name == "gres":
        items = value.split(",")
        for i, item in enumerate(items):
            parts = item.split(":")
            if parts[0] == "gpu" and (len(parts) == 1 or (len(parts) == 2 and _digits(parts[1]))):
                items[i] = f"gpu:{typ}:{parts[1] if len(parts) == 2 else 1}"
                return ",".join(items)
        return None
    return f"{typ}:{value}" if _digits(value) else None


def _gpu_types(name: str, value: str) -> set[str]:
    """GPU types a ``--gres`` or ``--gpus*`` value names."""
    if name == "gres":
        return {p[1] for p in (i.split(":") for i in value.split(",")) if p[0] == "gpu" and len(p) >= 2}
    head = value.split(":")
    return {head[0]} if len(head) == 2 else set()


def untyped_type(catalog: dict[str, Any], constraint: str | None, now: datetime) -> tuple[str | None, str]:
    """The whole-GPU type ``untyped_gpus: auto`` gives an untyped request, and why; None: none.

    The one whole-GPU type the cluster has, or the one the job's constraint names; else,
    among those, the site's ``untyped_gpu_types`` in its order: the first one offered now
    (by the layout Slurm's GRES are in, as :func:`decide` sees it), else the first (and the
    request then waits for its layout, as a typed one does).  None: several types and no
    preference among them (refused)."""
    types = whole_types(catalog, constraint)
    if len(types) == 1:
        return types[0], f"the cluster's whole-GPU type {types[0]}"
    prefer = [t for t in (catalog.get("rules") or {}).get("untyped_gpu_types") or () if t in types]
    for t in prefer:
        try:
            d = decide(catalog, Request("type", 0, t), now)
            if d.choice is not None and d.later is None:
                return t, f"the site's preferred whole-GPU type offered now, {t} (submit.untyped_gpu_types)"
        except RequestError:
            continue
    if prefer:
        return prefer[0], f"the site's preferred whole-GPU type {prefer[0]} (submit.untyped_gpu_types)"
    return None, ""


def _type_untyped(
    p: Plan, catalog: dict[str, Any], policy: str, args: SbatchArgs, eff: Effective, now: datetime
) -> SbatchArgs:
    """An untyped GPU request (``--gres=gpu:N``, ``--gpus=N``, ``--gpus-per-*=N``) may take a
    GPU that carries shards or a MIG slice (Slurm 24.11 and later start it on a shared GPU
    that runs shard jobs).  ``auto``: the type :func:`untyped_type` picks, else refused;
    ``reject``: always refused; ``leave``: as typed.  Unless ``leave``, the time-sliced
    GPUs' own type is refused too: they are for shards."""
    if policy == "leave":
        return args
    found = [(name, v) for name in GPU_OPTIONS if (v := eff(name))]
    shared = {o["type"] for layout in catalog["layouts"].values() for o in layout["offers"] if o["kind"] == "shared"}
    for name, value in found:
        for t in _gpu_types(name, value) & shared:
            raise RequestError(
                f"{eff.said(name)}: {t} GPUs are time-sliced, for shard jobs",
                "ask for shares: --gres=shard:N or --gpu-share=FRACTION",
            )
    untyped = [(name, v) for name, v in found if _untyped_value(name, v, "T") is not None]
    if not untyped:
        return args
    types = whole_types(catalog, eff("constraint"))
    shown = ", ".join(eff.said(n) for n, _ in untyped)
    typ, why_type = untyped_type(catalog, eff("constraint"), now) if policy == "auto" else (None, "")
    if typ is None:
        why = (
            "this site asks for typed GPU requests"
            if policy == "reject"
            else f"untyped GPU request ({shown}) on a cluster with "
            + (f"several whole-GPU types ({', '.join(types)})" if types else "no whole GPUs")
            + ", shared GPUs and MIG slices: it could land on any of them"
        )
        hint = "name one: --gres=gpu:<type>:N" + (f" with <type> one of {', '.join(types)}" if types else "")
        raise RequestError(why, hint + "; or --gpu-mem / --gpus-nvlink")
    for name, value in untyped:
        new = _untyped_value(name, value, typ)
        assert new is not None
        p.argv = _set_option(p.argv, args, name, new)
        p.changes.append(Change(name, new, f"untyped GPU request: {why_type}"))
        args = parse(p.argv, p.table)
    return args


def _topology(p: Plan, catalog: dict[str, Any], rules: dict[str, Any], args: SbatchArgs, eff: Effective) -> None:
    """Multi-GPU jobs: NVLink features, GRES binding, switches; a warning for MIG per task."""

    typ, n = _gpu_request(eff("gres"), eff("gpus-per-node"), eff("gpus"))
    offers = [o for layout in catalog["layouts"].values() for o in layout["offers"]]
    kinds = {o["type"]: o["kind"] for o in offers}
    nodes = _int(eff("nodes"), 1)
    if typ is not None and kinds.get(typ) == "whole" and n >= 2 and nodes == 1 and rules.get("nvlink_constraint", True):
        best = max((o.get("nvlink_clique", 0) for o in offers if o["type"] == typ), default=0)
        feature = next((f"nvlink{s}" for s in NVLINK_SIZES if s >= n), None)
        if feature and best >= n:
            merged, note = merge_constraint(eff("constraint"), feature)
            if note:
                p.notes.append(note)
            elif merged != eff("constraint"):
                p.argv = _set_option(p.argv, args, "constraint", merged)
                p.changes.append(Change("constraint", merged, f"{n} {typ} GPUs on one node: NVLink-connected ones"))
                args = parse(p.argv, p.table)
        elif not any(c.option == "constraint" for c in p.changes):
            p.notes.append(f"no node can give {n} NVLink-connected {typ} GPUs; the job gets PCIe-connected ones")
    if n >= 2 and rules.get("enforce_binding") and eff("gres-flags") is None:
        p.argv = _set_option(p.argv, args, "gres-flags", "enforce-binding")
        p.changes.append(Change("gres-flags", "enforce-binding", "site rule: GPUs on the sockets of the job's cores"))
        args = parse(p.argv, p.table)
    if nodes > 1 and rules.get("switches") and eff("switches") is None:
        p.argv = _set_option(p.argv, args, "switches", str(rules["switches"]))
        why = "site rule: multi-node jobs stay under few leaf switches"
        p.changes.append(Change("switches", str(rules["switches"]), why))
        args = parse(p.argv, p.table)
    if typ is not None and kinds.get(typ) == "mig" and n >= 2:
        per_node = _int(eff("ntasks-per-node"), 0) or (_int(eff("ntasks"), 1) if nodes == 1 else 0)
        if per_node < n:
            p.notes.append(
                f"{n} MIG devices but {per_node or 1} task(s) per node: a CUDA process sees only one MIG device; "
                f"use --ntasks-per-node={n}"
            )
