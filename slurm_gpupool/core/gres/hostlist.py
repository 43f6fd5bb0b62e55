"""Node names folded into a hostlist every Slurm version parses (``scontrol show hostlist``).

ClusterShell folds every numeric axis of a name: ``a30n1,a100n1`` becomes
``a[30,100]n1`` and ``n1-ib,n2-ib`` becomes ``n[1-2]-ib``.  Slurm (22.05, and the
``Nodes=`` of a reservation) accepts brackets only at the end of a name and answers
"Invalid node name specified"; slurmctld refuses a slurm.conf with such a NodeName.
So names are grouped by what precedes their trailing number, and only that number is
folded: ``a100n[1-2],a30n1,n1-ib,n2-ib``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_TRAILING_NUMBER = re.compile(r"^(.*\D)?(\d+)$")


def slurm_hostlist(names: Iterable[str]) -> str:
    """``names`` as a comma-separated Slurm hostlist, folded only where Slurm can read it."""
    from ClusterShell.RangeSet import RangeSet  # here: ClusterShell loads subprocess, threads and fcntl

    groups: dict[str, list[str]] = {}
    alone: list[str] = []
    for name in set(names):
        m = _TRAILING_NUMBER.match(name)
        if m and m.group(1):
            groups.setdefault(m.group(1), []).append(m.group(2))
        else:  # a name without a prefix and a trailing number stands alone
            alone.append(name)
    # only the numbers are folded (a RangeSet, zero padding kept): folding the whole names
    # (NodeSet.fromlist) parsed each name again, about 0.1 ms a name (10,000 nodes: a second)
    parts = [
        f"{prefix}[{RangeSet.fromlist(numbers)}]" if len(numbers) > 1 else prefix + numbers[0]
        for prefix, numbers in groups.items()
    ]
    return ",".join(sorted(parts + alone))
