"""Everything a report reads, loaded once: jobs, grants, capacity, periods, usage spool."""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd

from slurm_gpupool.config import PoolConfig, ReportSettings
from slurm_gpupool.reports.compute import Data
from slurm_gpupool.reports.gpu_frame import enrich
from slurm_gpupool.reports.layout_history import LayoutHistory, assumed_layout, read_journal_log, schedule_segments
from slurm_gpupool.reports.pool_capacity import capacity_intervals
from slurm_gpupool.reports.sacct_load import LoadStats, Progress, finish, load_files, read_stream
from slurm_gpupool.reports.usage_spool import read_records, spool_dirs


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
    from slurm_gpupool.slurm.accounting import sacct_windows, utc_runner

    stats = LoadStats()
    progress = progress or Progress()
    frames = []
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


def build(
    cfg: PoolConfig | None,
    source: Source,
    since: datetime,
    until: datetime,
    journal: Path | None = None,
    spools: tuple[str, ...] = (),
    now: datetime | None = None,
    progress: Progress | None = None,
) -> tuple[Data, LoadStats, pd.DataFrame]:
    """Load and enrich: (report data, load statistics, usage spool records)."""
    now = now or datetime.now(UTC)
    jobs, stats = load_jobs(source, since, until, progress)
    jobs = in_window(jobs, since, until)
    if journal is None and cfg is not None:
        journal = Path(cfg.paths.controller_dir) / "journal.log"
    history = read_journal_log(journal) if journal else LayoutHistory()
    jobs, grants, notes = enrich(jobs, cfg, history, since, until, now)
    spool, bad_spool = read_records(spool_dirs(cfg, spools))
    capacity = capacity_intervals(cfg, history, since, until)
    periods = schedule_segments(cfg.schedule if cfg else None, since, until)
    text = [f"{v:,} {k}" for k, v in sorted(notes.items()) if v]
    if bad_spool:
        text.append(f"{bad_spool} unreadable usage spool records")
    text.append(f"capacity history: {history.source}")
    assumed = assumed_layout(cfg)
    if assumed is not None:
        text.append(f"no schedule in the config: nodes without journal entries taken to be in layout {assumed}")
    data = Data(jobs, grants, capacity, periods, since, until, cfg.reports if cfg else ReportSettings(), text, cfg)
    return data, stats, spool
