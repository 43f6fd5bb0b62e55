"""The site's own accounting as simulator jobs: report data (pandas) to ``SimJob``s with their GRES."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pandas as pd

from slurm_gpupool.errors import DataError
from slurm_gpupool.reports.compute import Data
from slurm_gpupool.simulate.jobs import SimJob, time_limit_s
from slurm_gpupool.simulate.mapping import TraceRequest


def accounting_jobs(
    data: Data, limit_factor: float = 2.0, max_time_s: float | None = None
) -> tuple[datetime, list[SimJob], dict[str, int]]:
    """A site's jobs (``gpupool report``'s loaded accounting) as requests, and what was
    left out and why.  A job's grants (``gpu_frame``) say what it held: one MIG device ->
    its compute share and memory; shards -> their share of the GPU; whole GPUs -> their
    count and model; its time limit is its own (``TimelimitRaw``), else ``limit_factor``
    x its run time, never below its run time (it did run that long), at most
    ``max_time_s`` (a partition MaxTime to try: a longer job is then cut there, as Slurm
    would kill it)."""
    jobs, grants = data.jobs, data.grants
    skipped: dict[str, int] = {}
    started = jobs["start"].notna() & jobs["end"].notna()
    skipped["never started or still running"] = int((~started).sum())
    if not started.any():
        raise DataError("accounting", "no finished job with a GPU in the window", hint="widen --since/--until")
    epoch = jobs.loc[started, "submit"].min().normalize()
    by_job = grants.groupby("job")
    out: list[SimJob] = []
    reqs: dict[tuple[int, int, int, str | None, str | None], TraceRequest] = {}
    for k, row in enumerate(jobs.itertuples()):
        if not started.iloc[k] or row.Index not in by_job.groups:
            continue
        g = by_job.get_group(row.Index)
        req = _request(g)
        if req is None:
            why = "GRES we cannot map (several types in one job)"
            skipped[why] = skipped.get(why, 0) + 1
            continue
        req = reqs.setdefault((req.gpus, req.milli, req.memory_mib, req.model, req.gres), req)
        run = (row.end - row.start).total_seconds()
        lim = getattr(row, "timelimit_min", float("nan"))
        limit = float(lim) * 60 if lim == lim and lim and lim > 0 else time_limit_s(run, limit_factor)
        out.append(
            SimJob(
                int(getattr(row, "job_id", k + 1)) if str(getattr(row, "job_id", "")).isdigit() else k + 1,
                (row.submit - epoch).total_seconds(),
                run,
                min(max(limit, run), max_time_s) if max_time_s else max(limit, run),
                req,
                str(getattr(row, "account", "")),
                qos=_qos(getattr(row, "qos", "")),
                partition=_text(getattr(row, "partition", "")),
                user=_text(getattr(row, "user", "")),
                billing=_billing(getattr(row, "alloc_tres", "")),
            )
        )
    out.sort(key=lambda j: (j.submit_s, j.job_id))
    return epoch.to_pydatetime(), out, skipped


def accounting_passes(data: Data, epoch: datetime, bf_interval_s: float) -> tuple[float, ...]:
    """When Slurm's backfill passes began, s from ``epoch``, as the accounting dates them
    (``cadence.passes_from_starts``: the starts neither a submission nor an end explains).
    A replay's passes then fall where the site's did, instead of on a grid from the first
    submission whose phase no accounting keeps."""
    from slurm_gpupool.simulate.cadence import passes_from_starts

    jobs = data.jobs
    done = jobs[jobs["start"].notna() & jobs["end"].notna()]
    if done.empty:
        return ()
    origin = pd.Timestamp(epoch)

    def since(col: str) -> list[float]:
        return [float(x) for x in (done[col] - origin).dt.total_seconds()]

    submit, start, end = since("submit"), since("start"), since("end")
    return passes_from_starts(list(zip(submit, start, strict=True)), end, bf_interval_s)


def _qos(value: object) -> str:
    """A job's QOS as sacct printed it; none recorded: Slurm's default QOS, normal."""
    return _text(value) or "normal"


def _billing(value: object) -> float:
    """What a second of the job's run adds to its association's usage: its ``AllocTRES``
    ``billing=`` (its CPUs where the TRES has none; 1 where it has neither)."""
    import re

    text = _text(value)
    for key in ("billing", "cpu"):
        if (m := re.search(rf"(?:^|,){key}=([0-9.]+)", text)) is not None:
            return float(m.group(1))
    return 1.0


def _text(value: object) -> str:
    """A text field as sacct printed it ("" for none: a missing value is NaN here)."""
    return "" if value is None or value != value else str(value).strip()


def _request(g: pd.DataFrame) -> TraceRequest | None:
    kinds = set(g["kind"].astype(str))
    if len(g) != 1 and not kinds <= {"whole", "untyped"}:
        return None
    r = g.iloc[0]
    mem = int(r["memory_mib"]) if r["memory_mib"] == r["memory_mib"] and r["memory_mib"] else 0
    if r["kind"] in ("mig", "shard", "shared") and float(r["eq"]) < 1:
        # MIG devices: their compute share and memory together (two 1g.5gb ask for 2/7 and 2 x 5 GB);
        # and the GRES itself, asked for again where a layout offers it (simulate.mapping._as_held)
        mem = mem * max(1, int(r["gpus"])) if r["kind"] == "mig" else 0
        held = {"mig": f"gpu:{r['type']}:{int(r['gpus'])}", "shard": f"shard:{r['type']}:{int(r['count'])}"}
        req = TraceRequest.fraction(float(r["eq"]), mem)
        return dataclasses.replace(req, gres=held.get(str(r["kind"])))
    gpus = int(g["gpus"].sum()) or max(1, round(float(g["eq"].sum())))
    model = str(r["model"]) if r["kind"] == "whole" and r["model"] == r["model"] and len(g) == 1 else None
    return TraceRequest(gpus, 1000, 0, model)
