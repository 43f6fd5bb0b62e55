"""The config's value types, parsed and checked once: GPU targets, hostlists, node parameters, durations.

Each parser takes the raw YAML value and its :class:`Where` (file and key path), and
raises the error that names both (exit 78), or 65 for a MIG target that cannot fit.
"""

from __future__ import annotations

import re
from typing import Any

from slurm_gpupool.core.mig.catalog import GpuModel
from slurm_gpupool.core.mig.layouts import MIG, GpuTarget
from slurm_gpupool.core.mig.planner import plan_gpu
from slurm_gpupool.core.policy.durations import parse_duration_s
from slurm_gpupool.errors import InfeasibleError
from slurm_gpupool.util.validate import Where


def check_target(t: GpuTarget, model: GpuModel, where: Where) -> None:
    """A MIG target must name this model's profiles and fit (planner); else 78/65."""
    if t.mode != MIG:
        return
    if model.mig is None:
        raise where.key("mig").error(f"{model.key} does not support MIG", hint="use whole or shared: N")
    for name, _ in t.mig:
        if model.mig.by_name(name) is None:
            raise (
                where.key("mig")
                .key(name)
                .error(
                    f"unknown MIG profile for {model.key}",
                    hint="profiles: " + ", ".join(p.name for p in model.mig.profiles),
                )
            )
    try:
        plan_gpu(model, t.counts)
    except InfeasibleError as e:
        raise InfeasibleError(f"{where.source}: {where.key('mig').path}", f"{model.key}: {e.why}", e.hint) from None


MAX_MIG_COUNT = 64  # instances of one profile on one GPU: no GPU has more than 7


def parse_target(raw: Any, where: Where) -> GpuTarget:
    """``whole`` | ``{whole: true}`` | ``{mig: {profile: count}}`` | ``{shared: N}``."""
    if raw == "whole":
        return GpuTarget.whole()
    if not isinstance(raw, dict) or len(raw) != 1:
        raise where.error(
            "expected exactly one of: whole, {mig: {profile: count}}, {shared: N}",
            hint="e.g. `all: {mig: {1g.10gb: 7}}` or `0-3: whole` or `4: {shared: 4}`",
        )
    ((kind, val),) = raw.items()
    if kind == "whole":
        if val is not True:
            raise where.key("whole").error("expected true")
        return GpuTarget.whole()
    if kind == "mig":
        wm = where.key("mig")
        wm.check_type(val, dict)
        counts = {}
        for name, n in val.items():
            wm.key(name).check_type(n, int)
            if not 0 <= n <= MAX_MIG_COUNT:
                raise wm.key(name).error(f"count must be 0..{MAX_MIG_COUNT}, not {n}")
            counts[str(name)] = n
        return GpuTarget.mig_counts(counts)
    if kind == "shared":
        ws = where.key("shared")
        ws.check_type(val, int)
        if not 2 <= val <= 128:
            raise ws.error(f"shares must be 2..128, not {val}", hint="one share is a whole GPU: use whole")
        return GpuTarget.shared(val)
    raise where.key(kind).error("unknown key", hint="one of: whole, mig, shared")


_HOSTLIST = re.compile(r"[A-Za-z0-9._\-\[\],]{1,4096}")
MAX_NODES = 100_000  # per hostlist: more is a typo (a[1-20000000] took 17 s, then the memory)
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def _names_at_most(hostlist: str) -> int:
    """An upper bound of the names a hostlist expands to, counted without expanding it
    (ClusterShell builds every name first: 30 s for a[1-20000000])."""
    total = 0
    for element in re.split(r",(?![^\[]*\])", hostlist):  # commas outside brackets
        count = 1
        for group in re.findall(r"\[([^\]]*)\]", element):
            count *= sum(int(b or a) - int(a) + 1 if int(b or a) >= int(a) else 1 for a, b in _RANGE.findall(group))
        total += count
    return total


def expand_hostlist(hostlist: str, where: Where) -> tuple[str, ...]:
    """A Slurm hostlist's node names, each a valid node name; refused if it names none."""
    from ClusterShell.NodeSet import NodeSet as CSNodeSet
    from ClusterShell.NodeSet import NodeSetException

    if not isinstance(hostlist, str) or not hostlist.strip():
        raise where.error("an empty hostlist names no node")
    if not _HOSTLIST.fullmatch(hostlist):  # ClusterShell also reads @groups and !^& operators: Slurm does not
        raise where.error(
            f"not a Slurm hostlist: {hostlist[:70]!r}",
            hint="node names, [ranges] and commas only, e.g. gpu[01-08],dgx1 (not a name: no space, '=' or newline)",
        )
    if (bound := _names_at_most(hostlist)) > MAX_NODES:
        raise where.error(f"hostlist {hostlist[:60]!r} names {bound} nodes (at most {MAX_NODES})")
    try:
        ns = CSNodeSet(hostlist)
        if len(ns) > MAX_NODES:
            raise where.error(f"hostlist {hostlist[:60]!r} names {len(ns)} nodes (at most {MAX_NODES})")
        nodes = tuple(sorted(ns))
    except (NodeSetException, ValueError, KeyError) as e:  # also an unknown @group
        raise where.error(f"not a Slurm hostlist: {hostlist[:70]!r} ({e})") from None
    if not nodes:
        raise where.error(f"hostlist {hostlist!r} names no node")
    for n in nodes:
        where.check_name(n, "node name")
    return nodes


_PARAM_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]{0,39}")
_PARAM_VALUE = re.compile(r"[A-Za-z0-9_.,:/@%+\-\[\]()]{1,512}")
OWN_PARAMS = ("nodename", "gres")  # gpupool writes these


def parse_node_params(text: str, where: Where) -> tuple[tuple[str, str], ...]:
    """``"CPUs=256 RealMemory=1000000 Features=ib"`` as (key, value) pairs, each checked:
    a word key, a value without spaces, '=' or newlines (which would add a Slurm key
    or line), no key twice, none that gpupool writes itself (NodeName, Gres)."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for token in text.split(" "):
        if not token:
            continue
        key, eq, value = token.partition("=")
        if not eq or not _PARAM_KEY.fullmatch(key) or not _PARAM_VALUE.fullmatch(value):
            raise where.error(
                f"not a NodeName parameter: {token[:60]!r}",
                hint='space-separated Key=Value pairs, e.g. "CPUs=256 RealMemory=1000000 Features=ib"',
            )
        if key.lower() in OWN_PARAMS:
            raise where.error(f"{key}= is written by gpupool (from the GPUs and the layout)", hint="remove it")
        if key.lower() in seen:
            raise where.error(f"{key}= is given twice")
        seen.add(key.lower())
        out.append((key, value))
    return tuple(out)


def duration_s(w: Where, raw: dict, key: str) -> int:
    """``raw[key]`` as seconds (``30m``, ``2h``, 90), or an error naming the key."""

    try:
        return parse_duration_s(w.key(key).check_type(raw[key], (str, int)))
    except ValueError as e:
        raise w.key(key).error(str(e)) from None
