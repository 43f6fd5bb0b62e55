"""From an sbatch command line (and its script's #SBATCH lines) to the one gpupool-sbatch runs (pure).

Our own options (``--gpu-mem``, ``--gpu-share``, ``--gpus-nvlink``, ``--explain``,
``--dry-run``, ``--submit-anyway``) are removed; every other token is passed on
as typed.  Options we add go first; options we change are edited where the user
wrote them, so sbatch's "last one wins" cannot undo them.  Each change carries the
rule that made it, for ``--explain``.
"""

from __future__ import annotations

import shlex

from slurm_gpupool.core.sbatch_args import SbatchArgs, parse, parse_directives
from slurm_gpupool.core.submit import (
    Decision,
    Request,
    RequestError,
    decide,
    merge_constraint,
    parse_fraction,
    parse_size_mib,
)

TYPE_CHECKING = False  # typing costs gpupool-sbatch ~5 ms to import; mypy knows this idiom

if TYPE_CHECKING:
    from datetime import datetime
    from typing import Any

OUR_VALUED = ("gpu-mem", "gpu-share", "gpus-nvlink")
OUR_FLAGS = ("explain", "dry-run", "submit-anyway")


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


class Plan:
    __slots__ = ("argv", "changes", "dry_run", "explain", "later", "notes", "submit_anyway")

    def __init__(self, argv: list[str], explain: bool = False, dry_run: bool = False, submit_anyway: bool = False):
        self.argv = argv
        self.changes: list[Change] = []
        self.notes: list[str] = []
        self.later: tuple[str, datetime | None] | None = None  # the request waits for this layout
        self.explain, self.dry_run, self.submit_anyway = explain, dry_run, submit_anyway

    def describe(self, sbatch: str = "sbatch") -> str:
        lines = [shlex.join([sbatch, *self.argv])]
        for c in self.changes:
            lines.append(f"  --{c.option}={c.value}: {c.rule}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def split_ours(argv: list[str]) -> tuple[list[str], dict[str, str], set[str]]:
    """Remove our options (before the script) from argv."""
    rest: list[str] = []
    values: dict[str, str] = {}
    flags: set[str] = set()
    i = 0
    while i < len(argv):
        tok = argv[i]
        name = tok[2:].split("=", 1)[0] if tok.startswith("--") else ""
        if name in OUR_VALUED:
            if "=" in tok:
                values[name] = tok.split("=", 1)[1]
                i += 1
            elif i + 1 < len(argv):
                values[name] = argv[i + 1]
                i += 2
            else:
                raise RequestError(f"--{name} needs a value")
            continue
        if name in OUR_FLAGS and "=" not in tok:
            flags.add(name)
            i += 1
            continue
        if not tok.startswith("-") or tok in (":", "--"):
            # a positional: the script (or a het separator); let sbatch's parser decide
            sub = parse(rest + argv[i:])
            if sub.script_index is not None and sub.script_index <= len(rest):
                rest.extend(argv[i:])
                break
        rest.append(tok)
        i += 1
    return rest, values, flags


def _set_option(argv: list[str], args: SbatchArgs, name: str, value: str) -> list[str]:
    """Set ``--name=value`` for component 0: edit the user's own option, else add one first."""
    opt = args.last(name)
    if opt is not None:
        return [*argv[: opt.start], f"--{name}={value}", *argv[opt.end :]]
    return [f"--{name}={value}", *argv]


def _gpu_request(gres: str | None, gpus: str | None) -> tuple[str | None, int]:
    """(type or None, count) of a job's GPU request per node, from --gres or --gpus."""
    for item in (gres or "").split(","):
        parts = item.split(":")
        if parts[0] == "gpu":
            if len(parts) == 1:
                return None, 1
            if len(parts) == 2:
                return (None, int(parts[1])) if parts[1].isdigit() else (parts[1], 1)
            return parts[1], int(parts[2]) if parts[2].isdigit() else 1
    if gpus:
        parts = gpus.split(":")
        if len(parts) == 1 and parts[0].isdigit():
            return None, int(parts[0])
        if len(parts) == 2 and parts[1].isdigit():
            return parts[0], int(parts[1])
    return None, 0


def _int(text: str | None, default: int) -> int:
    try:
        return int(str(text).split("-")[0]) if text else default
    except ValueError:
        return default


def plan(argv: list[str], script_text: str | None, catalog: dict[str, Any] | None, now: datetime) -> Plan:
    """The sbatch command line to run, with every change explained (RequestError: exit 2)."""
    rest, ours, flags = split_ours(argv)
    args = parse(rest)
    directives = parse(parse_directives(script_text)) if script_text else parse([])
    p = Plan(rest, explain="explain" in flags, dry_run="dry-run" in flags, submit_anyway="submit-anyway" in flags)

    def eff(name: str) -> str | None:
        v = args.value(name)
        return v if v is not None else directives.value(name)

    requests = [k for k in OUR_VALUED if k in ours]
    if len(requests) > 1:
        raise RequestError(f"use one of --{', --'.join(OUR_VALUED)}, not {len(requests)}")
    if catalog is None:
        if requests:
            raise RequestError(
                f"--{requests[0]}: this cluster has no gpupool submit catalog",
                "ask your admins to run `gpupool gres install`",
            )
        return p
    rules = catalog.get("rules", {})
    gres, gpus = eff("gres"), eff("gpus")
    if requests:
        key = requests[0]
        if _gpu_request(gres, gpus)[1] or any(i.split(":")[0] == "shard" for i in (gres or "").split(",")):
            raise RequestError(f"--{key} replaces --gres=gpu/shard and --gpus; give only one of them")
        text = ours[key]
        if key == "gpu-mem":
            req = Request("mem", parse_size_mib(text), text)
        elif key == "gpu-share":
            req = Request("share", parse_fraction(text), text)
        else:
            if not text.isdigit() or int(text) < 2:
                raise RequestError(f"--gpus-nvlink={text}: expected a number of GPUs, 2 or more")
            req = Request("nvlink", int(text), text)
        d: Decision = decide(catalog, req, now)
        p.notes.extend(d.notes)
        p.later = d.later
        if d.choice is None:
            return p
        c = d.choice
        others = [i for i in (gres or "").split(",") if i]
        new_gres = ",".join([*others, c.gres])
        p.argv = _set_option(p.argv, args, "gres", new_gres)
        p.changes.append(Change("gres", new_gres, c.why))
        args = parse(p.argv)
        if c.constraint:
            merged, note = merge_constraint(eff("constraint"), c.constraint)
            if note:
                p.notes.append(note)
            elif merged != eff("constraint"):
                p.argv = _set_option(p.argv, args, "constraint", merged)
                why = f"only nodes that can give {int(req.amount)} NVLink-connected GPUs"
                p.changes.append(Change("constraint", merged, why))
                args = parse(p.argv)
        gres, gpus = eff("gres"), eff("gpus")
    elif rules.get("untyped_gpus") == "reject":
        typ, n = _gpu_request(gres, gpus)
        if n and typ is None:
            raise RequestError(
                "this site asks for typed GPU requests", "use --gres=gpu:<type>:N, or --gpu-mem / --gpus-nvlink"
            )
    _topology(p, catalog, rules, args, eff)
    return p


def _topology(p: Plan, catalog: dict[str, Any], rules: dict[str, Any], args: SbatchArgs, eff: Any) -> None:
    """Multi-GPU jobs: NVLink features, GRES binding, switches; a warning for MIG per task."""
    from slurm_gpupool.core.submit import NVLINK_SIZES

    typ, n = _gpu_request(eff("gres"), eff("gpus"))
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
                args = parse(p.argv)
        elif not any(c.option == "constraint" for c in p.changes):
            p.notes.append(f"no node can give {n} NVLink-connected {typ} GPUs; the job gets PCIe-connected ones")
    if n >= 2 and rules.get("enforce_binding") and eff("gres-flags") is None:
        p.argv = _set_option(p.argv, args, "gres-flags", "enforce-binding")
        p.changes.append(Change("gres-flags", "enforce-binding", "site rule: GPUs on the sockets of the job's cores"))
        args = parse(p.argv)
    if nodes > 1 and rules.get("switches") and eff("switches") is None:
        p.argv = _set_option(p.argv, args, "switches", str(rules["switches"]))
        why = "site rule: multi-node jobs stay under few leaf switches"
        p.changes.append(Change("switches", str(rules["switches"]), why))
        args = parse(p.argv)
    if typ is not None and kinds.get(typ) == "mig" and n >= 2:
        per_node = _int(eff("ntasks-per-node"), 0) or (_int(eff("ntasks"), 1) if nodes == 1 else 0)
        if per_node < n:
            p.notes.append(
                f"{n} MIG devices but {per_node or 1} task(s) per node: a CUDA process sees only one MIG device; "
                f"use --ntasks-per-node={n}"
            )
