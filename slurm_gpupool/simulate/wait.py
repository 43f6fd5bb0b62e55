"""How long a request waits for a layout the pool switches to later: the current queue
replayed through the switch (pure; ``gpupool avail``, docs/avail.md).

Slurm's own estimate (``sbatch --test-only``) knows nothing of a layout that is not
installed yet: it refuses the request.  Here the queue as ``squeue --json`` shows it is
replayed by the simulator's engine, as ``gpupool simulate`` replays a trace: the running
jobs first (each on the GRES it holds, for what is left of its time limit), then the
pending ones in Slurm's priority order (each for its whole time limit), then the request;
the schedule's switches come as the repartitioner makes them (nodes reserved ahead,
switched once idle, the deadline).  The answer is an estimate: jobs may end earlier than
their limits, new jobs of higher priority may come, and the replay models GPUs only (not
CPUs or memory).  Running jobs stay on the nodes they hold.

No clock and no I/O: ``now`` and the queue come in as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.simulate import policies as pol
from slurm_gpupool.simulate.engine import Engine, Params
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest
from slurm_gpupool.simulate.switcher import Switcher
from slurm_gpupool.simulate.willrun import release_params
from slurm_gpupool.slurm.types import JobInfo, requested_gres

UNLIMITED_S = 7 * 86400.0  # a job without a time limit: assumed to run this long (said in the answer)
MAX_PENDING = 1000  # pending jobs replayed ahead of the request, highest priority first (speed)
# the replay's first second: running jobs at 0, the switch's reservation (if due by now) at
# RESERVED_AT_S, the pending jobs at PENDING_AT_S, so each sees what Slurm sees now
RESERVED_AT_S, PENDING_AT_S = 0.5, 1.0
DEFAULT_LIMIT_S = 3600.0  # the request's limit when it gives none (its start does not depend on it)


class Replayed(NamedTuple):
    """When the replay started the request (None: it did not), and what it assumed."""

    start: datetime | None
    why: str


def trace_request(
    want: Mapping[tuple[str, str], int], nodes: int, offers: Sequence[Mapping[str, Any]]
) -> TraceRequest | None:
    """A GRES request (per node, as ``requested_gres`` reads it) as the replay's request,
    by the offer of its type in ``offers`` (a layout's, the submit catalog's form): a MIG
    slice by its compute share and memory, shards by their share of the GPU, whole GPUs by
    count and model.  None: more than one GRES, or one the replay cannot model (several
    slices in one job, a time-sliced GPU taken whole, a type no offer names)."""
    if len(want) != 1:
        return None
    (((name, typ), count),) = want.items()
    if count < 1:
        return None
    by_type = {o["type"]: o for o in offers}
    if name == "shard":
        o = by_type.get(typ) if typ else next((x for x in offers if x["kind"] == "shared"), None)
        if o is None or o["kind"] != "shared" or not o.get("shares") or nodes != 1:
            return None
        return TraceRequest.fraction(count / o["shares"])
    if not typ:
        return TraceRequest(count * nodes)
    o = by_type.get(typ)
    if o is None:
        return None
    if o["kind"] == "mig":
        if count != 1 or nodes != 1:
            return None
        return TraceRequest.fraction(float(o["compute_share"]), int(o["memory_mib"]))
    if o["kind"] == "whole":
        return TraceRequest(count * nodes, 1000, 0, o["model"])
    return None


def _remaining_s(job: JobInfo, now: datetime) -> float:
    """What is left of a running job's time limit (at least a second: it is ending)."""
    if job.time_limit_s is None:
        return UNLIMITED_S
    return max(1.0, job.start_time + job.time_limit_s - now.timestamp())


def _queue_order(job: JobInfo) -> tuple[int, int, int]:
    """Slurm's order of pending jobs: priority (highest first), then submission, then id."""
    return (-(job.priority or 0), job.submit_time, job.job_id)


def _held(job: JobInfo) -> bool:
    """A pending job that starts only when released (priority 0, a hold reason)."""
    return job.priority == 0 or "Held" in job.state_reason


def replay_wait(
    cfg: PoolConfig,
    jobs: Sequence[JobInfo],
    want: Mapping[tuple[str, str], int],
    nodes: int,
    limit_s: float | None,
    current: str,
    switch: tuple[datetime, str],
    now: datetime,
    release: str = "22.05",
) -> Replayed:
    """When the request (``want`` per node on ``nodes`` nodes) starts if the pool, now in
    ``current``, switches to ``switch[1]`` at ``switch[0]`` and the queue (``squeue``'s
    ``jobs``) runs to its time limits.  ``now``: aware.  ``release``: the Slurm release
    whose backfill the replay follows (``willrun.release_params``)."""
    at, layout = switch
    names = [n for n in cfg.all_nodes() if cfg.nodeset_of(n).machine is not None]
    offset_s = max(2.0, (at - now).total_seconds())
    later = pol.schedule_boundaries(cfg, at, 8 * 86400.0) if cfg.schedule is not None else [(0.0, layout)]
    bounds = [(0.0, current), (offset_s, layout), *((offset_s + t, lay) for t, lay in later[1:])]
    spec = pol.PolicySpec(pol.SCHEDULE, tuple(sorted({lay for _, lay in bounds})))
    pool = pol.pool_for(cfg, spec, names, current)
    ask = trace_request(want, nodes, pool.offers.get(layout, []))
    if ask is None:
        return Replayed(None, f"the simulator cannot model this request ({_gres_text(want)})")
    sim: list[SimJob] = []
    left_out = replayed_running = 0
    known = set(names)
    running = [j for j in jobs if j.state == "RUNNING" and j.nodes & known]
    pending = sorted((j for j in jobs if j.state == "PENDING" and not _held(j)), key=_queue_order)[:MAX_PENDING]
    for j, is_running in [*((j, True) for j in running), *((j, False) for j in pending)]:
        gres = requested_gres(j.gres or j.tres_per_job)
        if not gres:
            continue  # no GPU: the replay models GPUs only
        # Slurm holds it to the installed GRES; a pending job may ask for the coming layout's
        req = trace_request(gres, max(1, j.node_count), pool.offers.get(current, []))
        if req is None and not is_running:
            req = trace_request(gres, max(1, j.node_count), pool.offers.get(layout, []))
        if req is None:
            left_out += 1
            continue
        if is_running:  # at 0, on its nodes, for what is left of its limit
            run_s = _remaining_s(j, now)
            sim.append(SimJob(len(sim) + 1, 0.0, run_s, run_s, req, requeue=j.requeue, nodes=tuple(sorted(j.nodes))))
            replayed_running += 1
            continue
        run_s = float(j.time_limit_s) if j.time_limit_s is not None else UNLIMITED_S
        sim.append(SimJob(len(sim) + 1, PENDING_AT_S, run_s, run_s, req, requeue=j.requeue))
    request_limit_s = float(limit_s) if limit_s else DEFAULT_LIMIT_S
    # Slurm refuses it until then: gpupool-sbatch's user submits it when the layout comes
    sim.append(SimJob(len(sim) + 1, offset_s, request_limit_s, request_limit_s, ask))
    sw = Switcher(pol.SCHEDULE, bounds)
    r = cfg.repartition
    params = Params(
        **release_params(release),
        switch_s=pol.switch_seconds(cfg, len(names)),
        # nodes reserved for the switch after the running jobs are placed, before the queue is
        lead_time_s=min(pol.lead_time_s(cfg, bounds, None), offset_s - RESERVED_AT_S),
        deadline_s=r.deadline_s,
        requeue=r.requeue,
        grace_s=r.checkpoint_grace_s,
        any_model=False,  # a job's GRES in Slurm names its type
        clock_origin_s=now.timestamp(),
        sample_s=0.0,
        window_s=offset_s,
    )
    rec = Engine(pool, sw, params).run(sim).jobs[-1]
    replayed_pending = len(sim) - 1 - replayed_running
    assumed = (
        f"replayed: {replayed_running} running and {replayed_pending} pending GPU jobs ahead of it"
        + (f" ({left_out} with GRES the replay cannot model left out)" if left_out else "")
        + f", each to its time limit; the switch to layout {layout} at {at.isoformat(timespec='minutes')}"
        + " as the repartitioner makes it; no job submitted after now"
    )
    if rec.start_s < 0:
        why = rec.rejected or "it did not start within the replay"
        return Replayed(None, f"{why}; {assumed}")
    return Replayed(now + timedelta(seconds=rec.start_s), assumed)


def _gres_text(want: Mapping[tuple[str, str], int]) -> str:
    return ",".join(f"{g}:{t}:{n}" if t else f"{g}:{n}" for (g, t), n in sorted(want.items())) or "no GPU"
