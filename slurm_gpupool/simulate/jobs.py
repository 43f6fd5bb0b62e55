"""The jobs a simulation replays (pure).

A job is what a trace or an accounting record says a user asked for and how long it
ran, not yet a GRES request: the GRES it becomes depends on the layout it meets
(``mapping``), so the same job list can be replayed against every policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurm_gpupool.simulate.mapping import TraceRequest


@dataclass(slots=True)
class SimJob:
    """One job of a replay.

    ``duration_s`` is its run time on dedicated hardware (whole GPU or a MIG slice that
    covers its request); a time-shared job runs ``slowdown`` times longer (a parameter of
    the replay, never a hidden constant).  ``limit_s`` is the time limit Slurm plans
    with (backfill, reservations) and kills at."""

    job_id: int
    submit_s: float  # seconds from the start of the replay
    duration_s: float
    limit_s: float
    request: TraceRequest
    account: str = ""
    model: str | None = None  # a catalog model the job insists on (a typed whole-GPU request); None: any
    requeue: bool = True  # Slurm's --requeue (the repartitioner's --requeue may requeue it)
    qos: str = "normal"  # its QOS (--qos): its priority orders the queue (``priority``)
    partition: str = ""  # its partition (-p): its PriorityJobFactor and PriorityTier (``priority``); "": none named
    user: str = ""  # who submitted it: with ``account``, its association (``fairshare``)
    billing: float = 1.0  # what a second of its run adds to its association's usage (sacct's billing=)
    nodes: tuple[str, ...] = ()  # the only nodes it may run on (a running job replayed where it runs); (): any
    # when its user cancelled it (``scancel``), s from the start of the replay: it leaves the
    # queue then if still pending (and ends then if running); None: never
    cancel_s: float | None = None
    # the jobs (their ``job_id``) it waits for (``--dependency=afterok:…``; ``after_any``:
    # ``afterany``): it queues once they have ended, and with ``afterok`` never runs if one
    # of them did not complete (Slurm: DependencyNeverSatisfied); a job not in the replay
    # has ended long ago
    after: tuple[int, ...] = ()
    after_any: bool = False
    # how long after it ends its GPUs come free (its epilog, its completion): measured, in a
    # replay of a recorded run, where a loaded node's epilogs vary by seconds; None:
    # ``Params.release_s``, every job's
    release_s: float | None = None


def time_limit_s(duration_s: float, factor: float, minimum_s: float = 60.0, maximum_s: float | None = None) -> float:
    """A time limit for a trace that has none: ``factor`` × the run time, in whole
    minutes (Slurm's ``--time`` resolution), at least ``minimum_s``, at most the
    partition's MaxTime (``maximum_s``; a longer job is then killed at it, as Slurm does)."""
    minutes = -(-max(duration_s * factor, minimum_s) // 60)
    limit = float(minutes * 60)
    return min(limit, maximum_s) if maximum_s else limit


def dependencies(jobs: Sequence[SimJob]) -> tuple[dict[int, set[int]], dict[int, list[int]]]:
    """Each job's dependencies in the replay (by index), and the jobs depending on each: a
    dependency on a job that is not in the replay (or on itself) is one that ended long ago."""
    index = {j.job_id: i for i, j in enumerate(jobs)}
    waits_on: dict[int, set[int]] = {}
    dependents: dict[int, list[int]] = {}
    for i, j in enumerate(jobs):
        deps = {index[d] for d in j.after if d in index and index[d] != i}
        if deps:
            waits_on[i] = deps
            for d in sorted(deps):
                dependents.setdefault(d, []).append(i)
    return waits_on, dependents


CIRCULAR = "a circular dependency (sbatch refuses it)"


def circular(waits_on: dict[int, set[int]]) -> set[int]:
    """The jobs on a circular dependency (each waits, through others, on itself), which
    sbatch refuses (``Circular dependency``): the replay never runs them.  They are the
    strongly connected components of more than one job, or of one that waits on itself
    (Tarjan's, iterative: linear in jobs and dependencies; ``dependencies`` drops a job's
    dependency on itself before)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    out: set[int] = set()
    for root in waits_on:
        if root in index:
            continue
        work = [(root, iter(sorted(waits_on.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, deps = work[-1]
            w = next(deps, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(waits_on.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:  # v roots a component: pop it
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in waits_on.get(v, ()):
                    out.update(comp)
    return out
