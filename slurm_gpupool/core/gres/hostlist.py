"""Node names folded into a hostlist every Slurm version parses (``scontrol show hostlist``).

ClusterShell folds every numeric axis of a name: ``a30n1,a100n1`` becomes
``a[30,100]n1`` and ``n1-ib,n2-ib`` becomes ``n[1-2]-ib``.  Slurm (22.05, and the
``Nodes=`` of a reservation) accepts brackets only at the end of a name and answers
"Invalid node name specified"; slurmctld refuses a slurm.conf with such a NodeName.
So names are grouped by what precedes their trailing number, and only that number is
folded: ``a100n[1-2],a30n1,n1-ib,n2-ib``.

Plain hostlists are expanded and folded here without ClusterShell, the way it does (the
unit tests compare both on thousands of lists): config loading and every parse of Slurm's
output expand hostlists, and importing ClusterShell (logging, configparser, subprocess)
costs each ``gpupool`` command ~8 ms (#29).  Anything less plain goes to ClusterShell.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_TRAILING_NUMBER = re.compile(r"^(.*\D)?(\d+)$")
# names and [ranges]; no "][" and no digit beside a bracket (ClusterShell reads "7[0-10]" as 70-710)
_ELEMENT = re.compile(r"(?:[A-Za-z0-9._\-]+(?<![0-9])(?=\[)|[A-Za-z0-9._\-]+(?!\[)|\[[0-9,\-]+\](?![\[0-9]))+")
_PART = re.compile(r"\[([^\]]*)\]|[^\[]+")
_ITEM = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def _mixed_padding(numbers: list[str]) -> bool:
    """Zero-padded numbers of different widths: ClusterShell's own rules (or refusal) apply."""
    return any(len(n) > 1 and n[0] == "0" for n in numbers) and len({len(n) for n in numbers}) > 1


def expand_plain(hostlist: str) -> list[str] | None:
    """The sorted names of a plain hostlist (``gpu[1-8],dgx[01-02]``) as ClusterShell expands
    it, or None for anything less plain (mixed zero padding, empty parts, ...)."""
    names: set[str] = set()
    for element in re.split(r",(?![^\[]*\])", hostlist):  # commas outside brackets
        if not _ELEMENT.fullmatch(element):
            return None
        expanded = [""]
        for part in _PART.finditer(element):
            group = part.group(1)
            if group is None:
                expanded = [e + part.group(0) for e in expanded]
                continue
            items = [_ITEM.fullmatch(item) for item in group.split(",")]
            if not all(items) or _mixed_padding([n for m in items if m for n in m.groups() if n is not None]):
                return None
            values: list[str] = []
            for m in items:
                assert m is not None
                first, last = m.group(1), m.group(2) or m.group(1)
                if int(first) > int(last):
                    return None
                width = len(first) if first[0] == "0" else 0
                values.extend(str(v).zfill(width) for v in range(int(first), int(last) + 1))
            expanded = [e + v for e in expanded for v in values]
        names.update(expanded)
    return sorted(names)


def expand(hostlist: str) -> list[str]:
    """A Slurm hostlist's sorted names (``scontrol show hostnames``); ClusterShell's
    ``NodeSetParseError`` for one it refuses."""
    plain = expand_plain(hostlist)
    if plain is not None:
        return plain
    from ClusterShell.NodeSet import NodeSet

    return sorted(NodeSet(hostlist))


def _fold(prefix: str, numbers: list[str]) -> str | None:
    """``prefix[1-3,7]`` for names that differ only in their trailing number, as ClusterShell
    folds them; None for mixed zero padding."""
    if _mixed_padding(numbers):
        return None
    padded = [n for n in numbers if len(n) > 1 and n[0] == "0"]  # all of one width (checked above)
    width = len(padded[0]) if padded else 0
    runs: list[list[int]] = []  # [first, last] of each run of consecutive numbers
    for v in sorted({int(n) for n in numbers}):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    ranges = [str(a).zfill(width) if a == b else f"{str(a).zfill(width)}-{str(b).zfill(width)}" for a, b in runs]
    return f"{prefix}[{','.join(ranges)}]"


def slurm_hostlist(names: Iterable[str]) -> str:
    """``names`` as a comma-separated Slurm hostlist, folded only where Slurm can read it."""
    groups: dict[str, list[str]] = {}
    for name in sorted(set(names)):
        m = _TRAILING_NUMBER.match(name)
        # a name without a prefix and a trailing number stands alone ("\0": never a prefix)
        groups.setdefault(m.group(1) if m and m.group(1) else "\0" + name, []).append(name)
    parts = []
    for prefix, group in groups.items():
        if len(group) == 1:
            parts.append(group[0])
            continue
        folded = _fold(prefix, [name[len(prefix) :] for name in group])
        if folded is None:
            from ClusterShell.NodeSet import NodeSet  # here: ClusterShell loads subprocess, threads and fcntl

            folded = str(NodeSet.fromlist(group))
        parts.append(folded)
    return ",".join(sorted(parts))


_RUNS = re.compile(r"(\d+)")


def node_order_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Slurm's order of nodes (``_sort_node_record_table_ptr``: ``strnatcmp`` of the names, with
    no topology ranking): runs of digits by value, so ``a100n2`` comes before ``a100n10``.
    Text against digits compares by character, as strnatcmp does: ``n-1`` < ``n1`` < ``nx``.
    (strnatcmp compares runs with a leading zero left-aligned; names numbered with a fixed
    width, ``dgx01``, order the same either way.)"""
    key: list[tuple[int, int | str]] = []
    for p in _RUNS.split(name):
        key += [(1, int(p))] if p.isdigit() else [(0 if c < "0" else 2, c) for c in p]
    return tuple(key)
