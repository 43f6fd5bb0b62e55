"""Everything a report reads, loaded once: jobs, grants, capacity, periods, usage spool."""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from slurm_gpupool.config.model import PoolConfig, ReportSettings
from slurm_gpupool.errors import UsageError
from slurm_gpupool.reports.compute import Data
from slurm_gpupool.reports.gpu_frame import enrich
from slurm_gpupool.reports.layout_history import LayoutHistory, assumed_layout, pool_segments, read_journal_log
from slurm_gpupool.reports.pool_capacity import capacity_intervals
from slurm_gpupool.reports.sacct_load import LoadStats, Progress, finish, load_files, read_stream
from slurm_gpupool.reports.usage_spool import read_records, spool_dirs
from slurm_gpupool.slurm.accounting import sacct_windows, utc_runner


@dataclass
class Source:
    """Where jobs come from: saved files, or sacct on this cluster."""

    files: tuple[Path, ...] = ()
    tz: str = "local"
    fields: list[str] | None = None
    delimiter: str | None = None
    window: timedelta = timedelta(days=1)
    use_json: bool | None = None  # None: by Slurm version


def load_jobs(source: Source, since: datetime, until: datetime, progress: Progress | None = None):
    """(jobs, stats) from files, or from sacct in windows."""
    if source.files:
        return load_files(source.files, source.tz, source.fields, source.delimiter, progress)

    stats = LoadStats()
    progress = progress or Progress()
    frames: list[Any] = []
    for label, text in sacct_windows(utc_runner(), since, until, source.window, source.use_json):
        stats.sources.append(label)
        frames.extend(read_stream(io.StringIO(text), label, stats, "UTC", None, None, progress))
    progress(stats.lines, done=True)
    return finish(frames, stats), stats


def in_window(jobs: pd.DataFrame, since: datetime, until: datetime) -> pd.DataFrame:
    """Jobs that were pending or running at some point of [since, until)."""
    lo, hi = pd.Timestamp(since), pd.Timestamp(until)
    ended_before = jobs["end"].notna() & (jobs["end"] <= lo)
    submitted_after = jobs["submit"] >= hi
    return jobs[~ended_before & ~submitted_after].reset_index(drop=True)


def horizon(jobs: pd.DataFrame) -> datetime | None:
    """The last moment a saved file knows of: its latest submit, start or end time.

    A job running when the file was saved is counted up to here, not up to today
    (one such job had become half of a report)."""
    times = [jobs[c].max() for c in ("submit", "start", "end") if c in jobs and jobs[c].notna().any()]
    return max(times).to_pydatetime() if times else None


def file_span(jobs: pd.DataFrame) -> tuple[datetime, datetime] | None:
    """The window a saved file covers: its first submit to its horizon (None: no job)."""
    last = horizon(jobs)
    if last is None or not jobs["submit"].notna().any():
        return None
    return jobs["submit"].min().to_pydatetime(), last + timedelta(seconds=1)


def first_record(jobs: pd.DataFrame, history: LayoutHistory) -> datetime | None:
    """When this cluster is first seen: its first job or journal record (capacity starts there)."""
    seen = [t for t, _ in (ch[0] for ch in history.changes.values() if ch)]
    if jobs["submit"].notna().any():
        seen.append(jobs["submit"].min().timestamp())
    return datetime.fromtimestamp(min(seen), UTC) if seen else None


def build(
    cfg: PoolConfig | None,
    source: Source,
    since: datetime | None,
    until: datetime | None,
    journal: Path | None = None,
    spools: tuple[str, ...] = (),
    now: datetime | None = None,
    progress: Progress | None = None,
) -> tuple[Data, LoadStats, pd.DataFrame]:
    """Load and enrich: (report data, load statistics, usage spool records).

    ``since``/``until`` None: saved files' own span (their first job to their horizon),
    else the last 7 days up to now."""
    now = now or datetime.now(UTC)
    if not source.files:
        until = until or now
        since = since or until - timedelta(days=7)
    jobs, stats = load_jobs(source, since or now, until or now, progress)
    text: list[str] = []
    if source.files:
        last = horizon(jobs)
        if last is not None and last < now:
            now = last  # running jobs end where the file does
            text.append(f"saved data ends at {last:%Y-%m-%d %H:%M} UTC: running jobs are counted up to then")
        span = file_span(jobs)
        # the end given, named if the files' other end leaves the period empty (the CLI refuses
        # an empty pair of its own before reading anything)
        given = ("until", until) if until else ("since", since)
        if span is not None:
            since = since or span[0]
            until = until or span[1]
        until = until or now
        since = since or until - timedelta(days=7)
        if since >= until and given[1] is not None:
            spanned = f"run from {span[0]:%Y-%m-%d %H:%M} to {span[1]:%Y-%m-%d %H:%M} UTC" if span else "have no dates"
            raise UsageError(
                f"--{given[0]} {given[1]:%Y-%m-%d %H:%M} UTC", f"the period is empty: the saved files' jobs {spanned}"
            )
    assert since is not None and until is not None
    loaded = jobs
    jobs = in_window(jobs, since, until)
    if journal is None and cfg is not None:
        journal = Path(cfg.paths.controller_dir) / "journal.log"
    history = read_journal_log(journal) if journal else LayoutHistory()
    jobs, grants, notes = enrich(jobs, cfg, history, since, until, now)
    spool, bad_spool = read_records(spool_dirs(cfg, spools))
    # capacity only from when this cluster is first seen (a one-hour-old cluster has no 7 days of it)
    born = first_record(loaded, history)
    offered_from = max(since, born) if born is not None and since < born < until else since
    capacity = capacity_intervals(cfg, history, offered_from, until)
    if offered_from > since:
        text.append(
            f"capacity counted from {offered_from:%Y-%m-%d %H:%M} UTC, this cluster's first job or journal record"
        )
    if cfg is not None and len(jobs):
        known = set(cfg.all_nodes())
        elsewhere = ~jobs["node"].astype(str).isin(known) & jobs["node"].astype(str).ne("")
        if elsewhere.any():
            text.append(
                f"{int(elsewhere.sum())} of {len(jobs)} jobs ran on nodes the pool config does not name "
                f"(e.g. {jobs.loc[elsewhere, 'node'].astype(str).iloc[0]}): another cluster's data? "
                "their GPUs are counted by type, and no capacity of theirs"
            )
    layouts = pool_segments(history, cfg.schedule if cfg else None, since, until, cfg.all_nodes() if cfg else ())
    text += [f"{v:,} {k}" for k, v in sorted(notes.items()) if v]
    text += [f"{v:,} {k}" for k, v in sorted(stats.notes.items()) if v]  # what the load noted
    if bad_spool:
        text.append(f"{bad_spool} unreadable usage spool records")
    text.append(f"capacity history: {history.source}")
    assumed = assumed_layout(cfg)
    if assumed is not None:
        text.append(f"no schedule in the config: nodes without journal entries taken to be in layout {assumed}")
    data = Data(jobs, grants, capacity, layouts, since, until, cfg.reports if cfg else ReportSettings(), text, cfg)
    return data, stats, spool
