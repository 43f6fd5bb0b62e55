"""Slurm accounting → one pandas row per job, streaming, counting what it cannot use.

Sources, detected from the first line of each file:

* ``sacct --parsable2`` / ``--parsable`` output with a header (any delimiter
  sacct accepts; ``--delimiter=☃`` too).  Headerless output needs ``fields``.
* ``sacct --json`` (data parser v0.0.38 on 22.05, later ones alike).
* Sonar's ``v=0.1.0,Key=Value,...`` re-encoding of sacct (Jobanalyzer).
* this tool's own export (``gpupool report export``): CSV or JSON.

Lines are validated in Python (field count) and parsed in chunks by pandas'
C reader, so a year of history streams in bounded memory.  Malformed lines,
unparseable times, negative durations and unknown TRES are counted in
:class:`LoadStats` with the first few examples, never dropped silently.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from slurm_gpupool.core.gres.tres import NO_VAL_SENTINELS, CountError, TresError, gpu_tres, usage_tres
from slurm_gpupool.errors import DataError
from slurm_gpupool.reports.csv_cells import unmark
from slurm_gpupool.reports.sacct_json import job_rows

# What `gpupool report` asks sacct for, in this order (also the export's columns).
SACCT_FIELDS = (
    "JobID",
    "JobIDRaw",
    "JobName",
    "User",
    "Account",
    "Partition",
    "NodeList",
    "State",
    "Submit",
    "Start",
    "End",
    "TimelimitRaw",
    "ReqTRES",
    "AllocTRES",
    "TRESUsageInMax",
    "QOS",
)
# normalized column ← sacct field
COLUMNS = {
    "job_id": "JobIDRaw",
    "name": "JobName",
    "user": "User",
    "account": "Account",
    "partition": "Partition",
    "nodes": "NodeList",
    "state": "State",
    "submit": "Submit",
    "start": "Start",
    "end": "End",
    "timelimit_min": "TimelimitRaw",
    "req_tres": "ReqTRES",
    "alloc_tres": "AllocTRES",
    "usage_tres": "TRESUsageInMax",
    "qos": "QOS",
}
REQUIRED = ("JobID", "State", "Submit", "Start", "End", "AllocTRES")
CATEGORIES = ("user", "account", "partition", "nodes", "state", "req_tres", "alloc_tres")
CHUNK_LINES = 200_000
EXAMPLES = 10
NO_TIME = ("", "Unknown", "None", "N/A")
SACCT_TIME = "%Y-%m-%dT%H:%M:%S"
_OFFSET = re.compile(r"(?:[+-]\d\d:?\d\d|Z)$")
EXPORT_MARK = "gpupool-jobs"


@dataclass
class LoadStats:
    """What a load read, and what it could not use (by reason, with examples)."""

    lines: int = 0
    jobs: int = 0
    steps: int = 0
    malformed: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    notes: Counter[str] = field(default_factory=Counter)  # usable but worth saying: running, pending...
    sources: list[str] = field(default_factory=list)

    def bad(self, reason: str, where: str, n: int = 1) -> None:
        self.malformed[reason] += n
        if len(self.examples) < EXAMPLES:
            self.examples.append(f"{where}: {reason}")

    @property
    def malformed_total(self) -> int:
        return sum(self.malformed.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": self.sources,
            "lines": self.lines,
            "jobs": self.jobs,
            "steps": self.steps,
            "malformed": dict(sorted(self.malformed.items())),
            "malformed_total": self.malformed_total,
            "examples": self.examples,
            "notes": dict(sorted(self.notes.items())),
        }


class Progress:
    """``loaded 1,200,000 lines`` on stderr, at most twice a second, only on a terminal."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._last = 0.0

    def __call__(self, lines: int, done: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not done and now - self._last < 0.5):
            return
        self._last = now
        sys.stderr.write(f"\rloaded {lines:,} lines" + ("\n" if done else ""))
        sys.stderr.flush()


# -- one chunk of rows → the normalized frame ---------------------------------------


def _localize(t: pd.Series, tz: Any) -> pd.Series:
    """Naive local times → UTC.  The hour repeated when DST ends is taken as standard time
    and the hour skipped when it starts is shifted forward: a job is never lost to a clock
    change (sacct prints local time without an offset; run it with TZ=UTC to avoid both)."""
    ambiguous = np.zeros(len(t), dtype=bool)
    return t.dt.tz_localize(tz, ambiguous=ambiguous, nonexistent="shift_forward").dt.tz_convert("UTC")


SANE_YEARS = (1971, 2200)  # accounting times outside these are damage (and 1677 overflows the ns range)


def _sane(t: pd.Series) -> pd.Series:
    """Naive times outside SANE_YEARS as NaT, so they are counted as unreadable, not localized."""
    years = t.dt.year
    return t.where((years >= SANE_YEARS[0]) & (years <= SANE_YEARS[1]))


def _times(col: pd.Series, tz: Any, stats: LoadStats, name: str, where: str, ids: pd.Series) -> pd.Series:
    """sacct times → UTC timestamps.  sacct prints the cluster's local time without an
    offset; saved files may carry offsets (``+02:00``).  Unknown/None → NaT."""
    col = col.fillna("").astype(str).str.strip()
    missing = col.isin(NO_TIME)
    out = pd.Series(pd.NaT, index=col.index, dtype="datetime64[ns, UTC]")
    # sacct's own format (no offset, so naive) in one vectorized pass; the rest as below
    plain = _sane(pd.to_datetime(col, format=SACCT_TIME, errors="coerce"))
    done = plain.notna()
    if done.any():
        out[done] = _localize(plain[done], tz)
    rest = ~missing & ~done
    has_offset = pd.Series(False, index=col.index)
    if rest.any():
        has_offset[rest] = col[rest].str.contains(_OFFSET)
    if has_offset.any():
        out[has_offset] = pd.to_datetime(col[has_offset], format="ISO8601", utc=True, errors="coerce")
    naive = rest & ~has_offset
    if naive.any():
        parsed = pd.to_datetime(col[naive], format="ISO8601", errors="coerce")
        if getattr(parsed.dt, "tz", None) is None:
            parsed = _sane(parsed)
            ok = parsed.notna()
            out[naive & ok.reindex(col.index, fill_value=False)] = _localize(parsed[ok], tz)
        else:
            out[naive] = parsed.dt.tz_convert("UTC")
    bad = ~missing & out.isna()
    if bad.any():
        stats.bad(f"unreadable {name} time", f"{where} job {ids[bad].iloc[0]}: {col[bad].iloc[0]!r}", int(bad.sum()))
    return out


def _per_value(col: pd.Series, fn: Callable[[pd.Series], pd.Series]) -> pd.Series:
    """``fn(col)`` for an elementwise ``fn``, computed once per distinct value (states and
    time limits repeat a few values over a million rows)."""
    codes, uniques = pd.factorize(col, use_na_sentinel=False)
    done = fn(pd.Series(uniques, dtype=col.dtype))
    return pd.Series(done.to_numpy()[codes], index=col.index, name=col.name, dtype=done.dtype)


def _minutes(s: pd.Series) -> pd.Series:
    """TimelimitRaw in minutes; Slurm's NO_VAL/INFINITE (and anything unreadable) as NaN."""
    n = pd.to_numeric(s, errors="coerce")
    return n.where(n < min(NO_VAL_SENTINELS))


def _checked_tres(out: pd.DataFrame, stats: LoadStats, where: str) -> pd.DataFrame:
    """Jobs whose ReqTRES or AllocTRES holds a GPU count no job can hold (CountError) are
    refused as unreadable, with the reason and the job; counts that are Slurm's NO_VAL are
    unknown (noted, not counted).  Each distinct TRES string is read once."""
    bad = pd.Series(False, index=out.index)
    for col, name in (("alloc_tres", "AllocTRES"), ("req_tres", "ReqTRES")):
        codes, uniques = pd.factorize(out[col])
        absurd: dict[int, str] = {}
        unset: set[int] = set()
        for i, text in enumerate(uniques):
            if "gres/" not in text:
                continue
            try:
                if gpu_tres(text).unset:
                    unset.add(i)
            except CountError as e:
                absurd[i] = str(e)
            except TresError:
                continue  # noted per job where GPUs are counted (gpu_frame)
        for i, why in absurd.items():
            rows = (codes == i) & ~bad.to_numpy()  # a job refused once, for its first reason
            if rows.any():
                stats.bad(f"unreadable {name} ({why})", f"{where} job {out['job_id'][rows].iloc[0]}", int(rows.sum()))
                bad |= rows
        if unset:
            n = int((pd.Series(codes, index=out.index).isin(list(unset)) & ~bad).sum())
            if n:
                stats.notes[f"jobs whose {name} has a GPU count that is Slurm's NO_VAL (unknown: not counted)"] += n
    return out[~bad] if bad.any() else out


def normalize(raw: pd.DataFrame, tz: Any, stats: LoadStats, where: str) -> pd.DataFrame:
    """sacct-named string columns → job rows (steps folded into their job's usage)."""
    for f in SACCT_FIELDS:
        if f not in raw.columns:
            raw[f] = ""
    raw = raw.fillna("")
    jobid = raw["JobIDRaw"].where(raw["JobIDRaw"] != "", raw["JobID"]).astype(str)
    is_step = jobid.str.contains(".", regex=False)
    steps = raw[is_step]
    stats.steps += len(steps)
    jobs = raw[~is_step].copy()
    jobs["JobIDRaw"] = jobid[~is_step]
    # a job's GPU memory/utilization peaks, from its steps' TRESUsageInMax (NVML acct_gather)
    usage = steps[steps["TRESUsageInMax"].str.contains("gres/gpu", regex=False)]
    peaks = pd.DataFrame(columns=["job_id", "gpumem_mib", "gpuutil_pct"])
    if len(usage):
        vals = [usage_tres(t) for t in usage["TRESUsageInMax"]]
        peaks = pd.DataFrame(
            {
                "job_id": jobid[is_step][usage.index].str.split(".", n=1).str[0].to_numpy(),
                "gpumem_mib": [v[0] for v in vals],
                "gpuutil_pct": [v[1] for v in vals],
            }
        )
        peaks = peaks.groupby("job_id", as_index=False).max()
    out = pd.DataFrame({col: jobs[src].astype(str) for col, src in COLUMNS.items()}, index=jobs.index)
    out["state"] = _per_value(out["state"], lambda s: s.str.split(" ", n=1).str[0])  # "CANCELLED by 123" → CANCELLED
    for col in ("submit", "start", "end"):
        out[col] = _times(out[col], tz, stats, col, where, out["job_id"])
    out["timelimit_min"] = _per_value(out["timelimit_min"], _minutes)
    out = _checked_tres(out, stats, where)
    out = out.merge(peaks, on="job_id", how="left") if len(peaks) else out.assign(gpumem_mib=None, gpuutil_pct=None)
    out = out.drop(columns=["usage_tres"])
    no_submit = out["submit"].isna()
    if no_submit.any():
        stats.bad("no submit time", f"{where} job {out['job_id'][no_submit].iloc[0]}", int(no_submit.sum()))
        out = out[~no_submit]
    backwards = out["end"].notna() & out["start"].notna() & (out["end"] < out["start"])
    backwards |= out["start"].notna() & (out["start"] < out["submit"])
    if backwards.any():
        stats.bad("negative duration or wait", f"{where} job {out['job_id'][backwards].iloc[0]}", int(backwards.sum()))
        out = out[~backwards]
    stats.jobs += len(out)
    return out.reset_index(drop=True)


# -- formats ------------------------------------------------------------------------


def _split_lines(
    lines: Iterable[str], delim: str, fields: list[str], stats: LoadStats, where: str, first_line: int
) -> Iterator[list[str]]:
    """Chunks of well-formed lines, re-delimited with \\x1f (pandas' C reader takes one byte)
    unless the delimiter is one the C reader takes as is (see :func:`_chunk_sep`)."""
    n = len(fields)
    chunk: list[str] = []
    as_is = _chunk_sep(delim) == delim
    for k, line in enumerate(lines, first_line):
        stats.lines += 1
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        if as_is:  # the same checks as below, without splitting and re-joining each line
            count = line.count(delim) + 1
            if count == n + 1 and line.endswith(delim):  # --parsable: a trailing delimiter
                line, count = line[:-1], n
            if count != n:
                stats.bad(f"{count} fields, expected {n}", f"{where}:{k}")
                continue
            chunk.append(line)
            if len(chunk) >= CHUNK_LINES:
                yield chunk
                chunk = []
            continue
        parts = line.split(delim)
        if len(parts) == n + 1 and parts[-1] == "":  # --parsable: a trailing delimiter
            parts.pop()
        if len(parts) != n:
            stats.bad(f"{len(parts)} fields, expected {n}", f"{where}:{k}")
            continue
        chunk.append("\x1f".join(parts))
        if len(chunk) >= CHUNK_LINES:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _chunk_sep(delim: str) -> str:
    """The separator of the chunks :func:`_split_lines` yields: sacct's own ``|`` and the other
    single-byte delimiters the C reader takes literally, else \\x1f."""
    return delim if delim in ("|", "\t", ";", ",") else "\x1f"


def _read_chunk(chunk: list[str], fields: list[str], sep: str = "\x1f") -> pd.DataFrame:
    return pd.read_csv(
        io.StringIO("\n".join(chunk)),
        sep=sep,
        header=None,
        names=fields,
        dtype=str,
        quoting=csv.QUOTE_NONE,
        keep_default_na=False,
        na_filter=False,  # no NA strings anyway (keep_default_na=False): skip looking for them
        engine="c",
    )


def _parsable(
    f: IO[str],
    first: str,
    where: str,
    tz: str,
    stats: LoadStats,
    fields: list[str] | None,
    delim: str | None,
    progress: Callable[[int], None],
) -> Iterator[pd.DataFrame]:
    if delim is None:
        delim = next((d for d in ("|", "\u2603", "\t", ";", ",") if d in first), "|")
    head = first.rstrip("\r\n").split(delim)
    if head and head[-1] == "":
        head.pop()
    first_line = 1
    lines: Iterable[str] = f
    if "JobID" in head or "JobIDRaw" in head:
        fields = head
        first_line = 2
    elif fields is None:
        raise DataError(
            where,
            "the first line is not a sacct header (no JobID column)",
            hint="pass --fields with sacct's --format list, e.g. --fields JobID,User,...,AllocTRES",
        )
    else:
        lines = itertools.chain([first], f)
    missing = [x for x in REQUIRED if x not in fields and not (x == "JobID" and "JobIDRaw" in fields)]
    if missing:
        raise DataError(where, f"sacct fields missing: {', '.join(missing)}", hint="sacct -o " + ",".join(SACCT_FIELDS))
    for chunk in _split_lines(lines, delim, fields, stats, where, first_line):
        yield normalize(_read_chunk(chunk, fields, _chunk_sep(delim)), tz, stats, where)
        progress(stats.lines)


def _sonar(f: IO[str], first: str, where: str, tz: str, stats: LoadStats, progress: Callable[[int], None]):
    """``v=0.1.0,JobID=...,"AllocTRES=a=1,b=2",...``: csv-quoted key=value pairs."""
    rows: list[dict[str, str]] = []
    for k, line in enumerate(itertools.chain([first], f), 1):
        stats.lines += 1
        if not line.strip():
            continue
        try:
            items = next(csv.reader([line]))
            rec = dict(item.split("=", 1) for item in items)
        except (ValueError, csv.Error, StopIteration):
            stats.bad("not Key=Value pairs", f"{where}:{k}")
            continue
        if "JobID" not in rec or "Submit" not in rec:
            stats.bad("no JobID or Submit", f"{where}:{k}")
            continue
        rows.append(rec)
        if len(rows) >= CHUNK_LINES:
            yield normalize(pd.DataFrame(rows, dtype=str), tz, stats, where)
            progress(stats.lines)
            rows = []
    if rows:
        yield normalize(pd.DataFrame(rows, dtype=str), tz, stats, where)


def json_rows(doc: Any, where: str, stats: LoadStats) -> list[dict[str, str]]:
    """``sacct --json`` → sacct-named string fields (steps as ``<id>.<step>`` rows)."""

    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise DataError(where, 'not sacct --json output (no top-level "jobs" list)')
    rows: list[dict[str, str]] = []
    for k, job in enumerate(doc["jobs"]):
        stats.lines += 1
        try:
            rows.extend(job_rows(job))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError, OSError) as e:
            # a record of the wrong shape (a list for tres, a string for time ...): counted, not used
            what = f"no {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {str(e)[:80]}"
            stats.bad(f"unreadable job record ({what})", f"{where} jobs[{k}]")
    if doc["jobs"] and not rows:  # e.g. squeue --json: jobs, but not accounting records
        raise DataError(
            where,
            f"not sacct --json output: none of its {len(doc['jobs'])} job records has sacct's fields",
            hint="squeue --json lists jobs too; the reports read sacct --json",
        )
    return rows


def _export(f: IO[str], first: str, where: str, stats: LoadStats) -> Iterator[pd.DataFrame]:
    """This tool's own CSV export: already normalized, times in UTC ISO 8601."""
    # the mark line is skipped as a line: comment="#" also cut every job name at a '#'
    stream = f if first.startswith("#") else _ChainIO(first, f)
    reader = pd.read_csv(stream, dtype=str, keep_default_na=False, chunksize=CHUNK_LINES)
    for chunk in reader:
        stats.lines += len(chunk)
        for col in chunk.columns:
            if col not in ("gpumem_mib", "gpuutil_pct"):
                chunk[col] = unmark(chunk[col])  # the quote export_jobs put before a formula
        raw = chunk.rename(columns=COLUMNS)
        raw["JobID"] = raw["JobIDRaw"]
        if "gpumem_mib" in chunk.columns:
            raw["TRESUsageInMax"] = ""
        yield _with_peaks(normalize(raw, "UTC", stats, where), chunk)


def _with_peaks(out: pd.DataFrame, src: pd.DataFrame) -> pd.DataFrame:
    """An export's peak columns joined back by job id (normalize may drop rows)."""
    cols = [c for c in ("gpumem_mib", "gpuutil_pct") if c in src.columns]
    if not cols:
        return out
    peaks = src[["job_id", *cols]].drop_duplicates("job_id", keep="last")
    peaks[cols] = peaks[cols].apply(pd.to_numeric, errors="coerce")
    return out.drop(columns=cols).merge(peaks, on="job_id", how="left")


class _ChainIO(io.TextIOBase):
    """A text stream: ``first`` then the rest of ``f`` (pandas reads it in chunks)."""

    def __init__(self, first: str, f: IO[str]) -> None:
        self._buf = first
        self._f = f

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        if size is None or size < 0:
            data, self._buf = self._buf + self._f.read(), ""
            return data
        while len(self._buf) < size:
            more = self._f.read(size)
            if not more:
                break
            self._buf += more
        data, self._buf = self._buf[:size], self._buf[size:]
        return data

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]  # typeshed: TextIOBase is bytes-typed
        if self._buf:
            line, sep, rest = self._buf.partition("\n")
            if sep:
                self._buf = rest
                return line + sep
            self._buf = ""
            return line + self._f.readline()
        return self._f.readline()

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return self

    def __next__(self) -> str:  # type: ignore[override]
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def read_stream(
    f: IO[str],
    where: str,
    stats: LoadStats,
    tz: str = "local",
    fields: list[str] | None = None,
    delim: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[pd.DataFrame]:
    """Frames of normalized jobs from one open text stream, whatever its format."""
    tz = _tz(tz)
    progress = progress or (lambda n: None)
    first = f.readline()
    while first and not first.strip():
        first = f.readline()
    if not first:
        raise DataError(where, "empty: not accounting (sacct prints a header line at least)")
    text = first.lstrip("\ufeff")
    if text.lstrip().startswith("{") or text.lstrip().startswith("["):
        try:
            doc = json.loads(text + f.read())
        except json.JSONDecodeError as e:
            raise DataError(where, f"not valid JSON ({e.msg} at line {e.lineno})") from None
        except RecursionError:
            raise DataError(where, "not sacct --json output: nested too deeply") from None
        if isinstance(doc, dict) and doc.get("format") == EXPORT_MARK:
            yield _export_json(doc, where, stats)
            return
        rows = json_rows(doc, where, stats)
        if rows:
            yield normalize(pd.DataFrame(rows, dtype=str), "UTC", stats, where)
        return
    if text.startswith("v=") and "JobID=" in text:
        yield from _sonar(f, text, where, tz, stats, progress)
        return
    if text.startswith(f"# {EXPORT_MARK}") or text.startswith("job_id,"):
        yield from _export(f, text, where, stats)
        return
    yield from _parsable(f, text, where, tz, stats, fields, delim, progress)


def _export_json(doc: dict[str, Any], where: str, stats: LoadStats) -> pd.DataFrame:
    df = pd.DataFrame(doc.get("jobs", []), dtype=str)
    stats.lines += len(df)
    raw = df.rename(columns=COLUMNS)
    raw["JobID"] = raw["JobIDRaw"] if "JobIDRaw" in raw.columns else ""
    return _with_peaks(normalize(raw, "UTC", stats, where), df)


def _tz(tz: Any) -> Any:
    """``local``: the machine's zone with its DST rules (sacct prints local time)."""
    if tz != "local":
        return tz
    from dateutil.tz import tzlocal

    return tzlocal()


def finish(frames: Iterable[pd.DataFrame], stats: LoadStats) -> pd.DataFrame:
    """Concatenate chunks into one frame of jobs, one row per job."""
    parts = [f for f in frames if len(f)]
    if not parts:
        return empty_jobs()
    df = pd.concat(parts, ignore_index=True)
    before = len(df)
    # a job listed twice (sacct windows, several files) keeps its latest row: the one with
    # an end if any (a stale RUNNING row never wins over the finished job), else the last read
    df = df.sort_values("end", na_position="first", kind="stable")
    df = df.drop_duplicates("job_id", keep="last").sort_index().reset_index(drop=True)
    if before != len(df):
        stats.notes["duplicate job rows merged"] += before - len(df)
        stats.jobs -= before - len(df)
    for col in CATEGORIES:
        df[col] = df[col].astype("category")
    return df


def empty_jobs() -> pd.DataFrame:
    cols: dict[str, Any] = {c: pd.Series(dtype=str) for c in COLUMNS if c != "usage_tres"}
    for c in ("submit", "start", "end"):
        cols[c] = pd.Series(dtype="datetime64[ns, UTC]")
    cols["timelimit_min"] = pd.Series(dtype=float)
    cols["gpumem_mib"] = pd.Series(dtype=float)
    cols["gpuutil_pct"] = pd.Series(dtype=float)
    return pd.DataFrame(cols)


def load_files(
    paths: Iterable[Path],
    tz: str = "local",
    fields: list[str] | None = None,
    delim: str | None = None,
    progress: Progress | None = None,
) -> tuple[pd.DataFrame, LoadStats]:
    """Jobs from saved files (``-`` is stdin)."""
    stats = LoadStats()
    progress = progress or Progress()
    frames: list[pd.DataFrame] = []
    for p in paths:
        where = str(p)
        stats.sources.append(where)
        if where == "-":
            frames.extend(read_stream(sys.stdin, "stdin", stats, tz, fields, delim, progress))
            continue
        try:
            with open(p, encoding="utf-8", errors="replace", newline="") as f:
                frames.extend(read_stream(f, where, stats, tz, fields, delim, progress))
        except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
            raise DataError(where, e.strerror or str(e)) from None
    progress(stats.lines, done=True)
    return finish(frames, stats), stats
