"""Which node a one-node job starts on, as cons_tres chooses it (pure).

Slurm does not take the first node that fits.  ``_eval_nodes`` (``select/cons_tres``
job_test.c in 22.05, ``topology/common/eval_nodes.c`` from 23.11 on, the same rule) splits the
nodes that can run the job into runs of consecutive nodes (node order, equal weight), takes
the run with the fewest available CPUs, and in it the node with the fewest ("best fit",
ties to the first).  A node's available CPUs for a GPU job are those of the sockets that hold
its free GRES (``gres_select_filter_sock_core``'s first pass: sockets by most idle cores, those
with free records until the request is met; ``Cores=`` in gres.conf binds each device to a
socket), so a job goes to the node whose GPU socket is already the busiest.  A replay that
took the first node put a 3g.20gb job on a100n1 where Slurm put it on a100n2, and the
reservations that followed kept two jobs 40 s from their start in Slurm but not in the
replay (the partition family's seed 1d4f379c on 22.05); with this rule that run replays
exactly.

Each job takes one core per node (the sandbox's jobs: one task, ``#CPUs=2`` on two threads
per core; a trace does not say more), on the socket of its records.  A node without a
machine description has no sockets here: every candidate ties, and the first node wins.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_gpupool.simulate.records import Part, SimNode
from slurm_gpupool.simulate.state import GPU


def _req_sockets(n: SimNode, typ: str, count: int) -> list[int]:
    """The sockets the job's records come from: by most idle cores (ties: the lower), those
    with free records of ``typ`` and an idle core, until ``count`` records."""
    per = n.sock_free.get(typ)
    if per is None:
        return []
    out, got = [], 0
    for s in sorted(range(len(per)), key=lambda s: -n.cores_free[s]):
        if per[s] <= 0 or n.cores_free[s] <= 0:
            continue
        out.append(s)
        got += per[s]
        if got >= count:
            break
    return out


def fit_cpus(n: SimNode, parts: Sequence[Part]) -> int:
    """The CPUs cons_tres counts available on ``n`` for a job taking ``parts`` there (0: no
    sockets known)."""
    if not n.cores_free:
        return 0
    kind, typ, count, g = parts[0]
    if kind == GPU and g < 0:
        sockets = _req_sockets(n, typ, count)
    else:  # a time-sliced GPU (whole, or its shards): its own socket
        sockets = sorted({n.gpu_sock[t][gpu] for _, t, _, gpu in parts})
    return n.tpc * sum(n.cores_free[s] for s in sockets)


def best_fit(cands: Sequence[tuple[int, int]]) -> int:
    """Of ``cands`` (node index, available CPUs; in node order), the position cons_tres picks:
    the run of consecutive nodes with the fewest CPUs, in it the node with the fewest (ties:
    the first)."""
    runs: list[list[int]] = []
    for pos, (idx, _) in enumerate(cands):
        if runs and idx == cands[runs[-1][-1]][0] + 1:
            runs[-1].append(pos)
        else:
            runs.append([pos])
    run = min(runs, key=lambda r: sum(cands[p][1] for p in r))
    return min(run, key=lambda p: cands[p][1])


def bind(n: SimNode, job: int, parts: Sequence[Part]) -> None:
    """The job's records and its core on ``n``'s sockets (its core: on the busiest socket of
    its records, as task distribution fits it)."""
    if not n.cores_free:
        return
    kind, typ, count, g = parts[0]
    taken: list[tuple[int, int]] = []
    if kind == GPU and g < 0:
        sockets = _req_sockets(n, typ, count)
        left = count
        for s in sockets:
            k = min(left, n.sock_free[typ][s])
            n.sock_free[typ][s] -= k
            taken.append((s, k))
            left -= k
    else:
        sockets = sorted({n.gpu_sock[t][gpu] for _, t, _, gpu in parts})
    core = min(sockets, key=lambda s: n.cores_free[s], default=-1)
    if core >= 0 and n.cores_free[core] > 0:
        n.cores_free[core] -= 1
    else:
        core = -1
    n.bound[job] = (typ, taken, core)


def unbind(n: SimNode, job: int) -> None:
    """Give back what :func:`bind` took (nothing if the node was reshaped since)."""
    got = n.bound.pop(job, None)
    if got is None:
        return
    typ, taken, core = got
    for s, k in taken:
        n.sock_free[typ][s] += k
    if core >= 0:
        n.cores_free[core] += 1
