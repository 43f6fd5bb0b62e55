"""Which nodes a job starts on, as cons_tres chooses them (pure).

Slurm does not take the first node that fits.  ``_eval_nodes`` (``select/cons_tres``
job_test.c in 22.05, ``topology/common/eval_nodes.c`` from 23.11 on, the same rule) splits the
nodes that can run the job into runs of consecutive nodes (node order, equal weight), takes
the run with the fewest available CPUs, and in it the node with the fewest ("best fit",
ties to the first).  A node's available CPUs for a GPU job are those of the sockets that hold
its free GRES (``gres_select_filter_sock_core``'s first pass: sockets by most idle cores, those
with free records until the request is met; ``Cores=`` in gres.conf binds each device to a
socket, and records bound to every socket or none, ``cnt_any_sock``, make every socket count),
and a node where they have no idle core is no candidate.  So a job goes to the node whose GPU
socket is already the busiest.  A replay that took the first node put a 3g.20gb job on a100n1
where Slurm put it on a100n2, and the reservations that followed held two jobs back in Slurm
but not in the replay (the partition family's seed 1d4f379c on 22.05, docs/simulate.md); with
this rule that run replays exactly.  A job on several nodes takes the run with nodes enough
and the fewest CPUs from its start (:func:`eval_nodes`).

Records are counted per socket as ``gres_sched``'s ``_build_sock_gres_by_topo`` does: free
records of a plain type; of a time-sliced type, its idle GPUs for a GPU request and the free
shards of GPUs not given whole for a shard request.  Each job takes one core per node (the
sandbox's jobs: one task, ``#CPUs=2`` on two threads per core; a trace does not say more), on
the busiest socket of its records.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_gpupool.simulate.records import Part, SimNode
from slurm_gpupool.simulate.state import GPU

Binding = tuple[str, list[tuple[int, int]], int]  # (plain type, records taken per socket, the core's socket)


def _counts(n: SimNode, kind: str, typ: str) -> list[int]:
    """Free records of ``typ`` per socket, and last those bound to no socket."""
    if typ in n.sock_free:
        return n.sock_free[typ]
    per = [0] * (len(n.cores_free) + 1)
    s_each = n.shares.get(typ, 0)
    for s, u in zip(n.gpu_sock.get(typ, ()), n.shared.get(typ, ())):
        per[s] += (u == 0) if kind == GPU else max(s_each - u, 0) * (u >= 0)
    return per


def _req_sockets(n: SimNode, per: list[int], count: int) -> list[int]:
    """The sockets whose cores count for a request of ``count`` records counted ``per``
    socket: all with an idle core when records bound to no socket are free, else by most
    idle cores (ties: the lower) those with free records and an idle core, until ``count``."""
    order = sorted(range(len(n.cores_free)), key=lambda s: -n.cores_free[s])
    if per[-1] > 0:
        return [s for s in order if n.cores_free[s] > 0]
    out, got = [], 0
    for s in order:
        if per[s] <= 0 or n.cores_free[s] <= 0:
            continue
        out.append(s)
        got += per[s]
        if got >= count:
            break
    return out


def _request(parts: Sequence[Part]) -> tuple[str, str, int]:
    """(kind, type, records) of the job's parts on one node."""
    kind, typ, count, g = parts[0]
    return kind, typ, (len(parts) if kind == GPU and g >= 0 else count)


def fit_cpus(n: SimNode, parts: Sequence[Part]) -> int | None:
    """The CPUs cons_tres counts available on ``n`` for a job taking ``parts`` there (0: it
    is no candidate, its records' sockets have no idle core; None: no sockets known)."""
    if not n.cores_free:
        return None
    kind, typ, count = _request(parts)
    return n.tpc * sum(n.cores_free[s] for s in _req_sockets(n, _counts(n, kind, typ), count))


def best_fit(cands: Sequence[tuple[int, int | None]]) -> int:
    """Of ``cands`` (node index, available CPUs; in node order), the position cons_tres picks
    for a one-node job (:func:`eval_nodes`)."""
    got = eval_nodes(cands, 1)
    return got[0] if got else 0


def eval_nodes(cands: Sequence[tuple[int, int | None]], count: int) -> list[int]:
    """Of ``cands`` (node index, available CPUs; in node order), the positions of the
    ``count`` nodes ``_eval_nodes`` picks.  Nodes with none available drop out (fewer than
    the job's CPUs), unless all do (no sockets known: the first nodes); the rest form runs
    of consecutive nodes.  Repeatedly it takes the best run (runs with nodes enough: the
    fewest CPUs; without: the most; ties: the first) and from it, of one node, the node
    with the fewest CPUs (ties: the first), of more, the run's nodes from its start, until
    ``count`` are taken."""
    keep = [p for p, (_, c) in enumerate(cands) if c]
    if not keep:
        return list(range(min(count, len(cands))))
    runs: list[list[int]] = []
    for pos in keep:
        if runs and cands[pos][0] == cands[runs[-1][-1]][0] + 1:
            runs[-1].append(pos)
        else:
            runs.append([pos])
    cpus = [c or 0 for _, c in cands]
    out: list[int] = []
    while runs and len(out) < count:
        left = count - len(out)
        run, run_cpus, run_enough = runs[0], -1, False
        for r in runs:  # as ``_eval_nodes`` walks them (a run without nodes enough, with more
            # CPUs than the best so far, displaces it even when that one had enough)
            c, enough = sum(cpus[p] for p in r), len(r) >= left
            if run_cpus < 0 or (enough and (not run_enough or c < run_cpus)) or (not enough and c > run_cpus):
                run, run_cpus, run_enough = r, c, enough
        runs.remove(run)
        if left == 1:
            out.append(min(run, key=lambda p: cpus[p]))
        else:
            out += run[:left]
    return out


def bind(n: SimNode, job: int, parts: Sequence[Part]) -> None:
    """The job's records and its core on ``n``'s sockets: a plain type's records from the
    sockets cons_tres counted (by most idle cores, then those bound to no socket), a
    time-sliced GPU's on its own socket; the core on the busiest socket of its records."""
    if not n.cores_free:
        return
    kind, typ, count = _request(parts)
    taken: list[tuple[int, int]] = []
    if typ in n.sock_free:
        per = n.sock_free[typ]
        sockets = _req_sockets(n, per, count)
        left = count
        # (then, should those fall short, any socket with free records: the counts stay whole)
        for s in [*sockets, -1, *range(len(per) - 1)]:
            k = min(left, per[s])
            if k > 0:
                per[s] -= k
                taken.append((s, k))
                left -= k
    else:
        own = {n.gpu_sock[t][gpu] for _, t, _, gpu in parts}
        sockets = sorted(range(len(n.cores_free))) if -1 in own else sorted(own)
    busy = [s for s in sockets if s >= 0 and n.cores_free[s] > 0]
    core = min(busy, key=lambda s: n.cores_free[s], default=-1)
    if core >= 0:
        n.cores_free[core] -= 1
    n.bound[job] = (typ, taken, core)


def unbind(n: SimNode, job: int) -> Binding | None:
    """Give back what :func:`bind` took (nothing if the node was reshaped since); what it
    gave back, for :func:`rebind`."""
    got = n.bound.pop(job, None)
    if got is None:
        return None
    typ, taken, core = got
    for s, k in taken:
        n.sock_free[typ][s] += k
    if core >= 0:
        n.cores_free[core] += 1
    return got


def rebind(n: SimNode, job: int, got: Binding | None) -> None:
    """Take again what :func:`unbind` gave back (a what-if that removed the job is over)."""
    if got is None:
        return
    typ, taken, core = got
    for s, k in taken:
        n.sock_free[typ][s] -= k
    if core >= 0:
        n.cores_free[core] -= 1
    n.bound[job] = got
