"""``sacct`` over a period, in windows: the live source of the reports.

Each window (a day by default) is one ``sacct`` call whose output is parsed
before the next, so memory follows the window, not the year.  ``--json`` where
the Slurm version has it (21.08+: data parser v0.0.37 and later), else
``--parsable2``.  A job running across windows is listed in each; the loader
keeps its latest row.  sacct runs with ``TZ=UTC`` so its times are unambiguous.
Measured on 22.05: a held job has no eligible time and is not listed in a
``-S``/``-E`` window until it is released.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from slurm_gpupool.slurm.runner import SlurmRunner, slurm_version

FIELDS = (
    "JobID,JobIDRaw,JobName,User,Account,Partition,NodeList,State,Submit,Start,End,"
    "TimelimitRaw,ReqTRES,AllocTRES,TRESUsageInMax,QOS"
)
JSON_SINCE = (21, 8, 0)


def _stamp(t: datetime) -> str:
    """sacct takes times without an offset, in its TZ: we run it with TZ=UTC."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def utc_runner() -> SlurmRunner:
    """sacct in UTC: its output then has no local-time gaps or repeats at DST changes."""
    return SlurmRunner(env={**os.environ, "TZ": "UTC"})


def sacct_argv(since: datetime, until: datetime, as_json: bool) -> list[str]:
    """``sacct -a -S .. -E ..`` (every user; steps too, for their GPU usage peaks)."""
    argv = ["sacct", "--allusers", "-S", _stamp(since), "-E", _stamp(until)]
    return argv + (["--json"] if as_json else ["--parsable2", "--format", FIELDS])


def sacct_windows(
    runner: SlurmRunner,
    since: datetime,
    until: datetime,
    window: timedelta = timedelta(days=1),
    as_json: bool | None = None,
) -> Iterator[tuple[str, str]]:
    """(label, sacct output) per window, oldest first."""
    if as_json is None:
        as_json = slurm_version(runner) >= JSON_SINCE
    t = since
    while t < until:
        u = min(t + window, until)
        argv = sacct_argv(t, u, as_json)
        out = runner.run(argv, timeout_s=600).check("sacct").stdout
        yield f"sacct {t:%Y-%m-%dT%H:%M}..{u:%Y-%m-%dT%H:%M}", out
        t = u
