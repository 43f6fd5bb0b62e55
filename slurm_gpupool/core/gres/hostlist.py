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
    from ClusterShell.NodeSet import NodeSet  # here: ClusterShell loads subprocess, threads and fcntl

    groups: dict[str, list[str]] = {}
    for name in sorted(set(names)):
        m = _TRAILING_NUMBER.match(name)
        # a name without a prefix and a trailing number stands alone ("\0": never a prefix)
        groups.setdefault(m.group(1) if m and m.group(1) else "\0" + name, []).append(name)
    parts = [str(NodeSet.fromlist(group)) if len(group) > 1 else group[0] for group in groups.values()]
    return ",".join(sorted(parts))
