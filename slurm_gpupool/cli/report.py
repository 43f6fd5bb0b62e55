"""``gpupool report``: GPU-hours, utilization, waits, cost, efficiency and advice.

From ``sacct`` on this cluster (in windows, ``--json`` where Slurm has it) or
from saved files (``--from``), joined with the repartition journal (which
layout each node had when) and the hooks' usage spool.  pandas is imported
only here, under ``slurm_gpupool.reports``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.errors import UsageError

REPORTS = ("usage", "utilization", "waits", "cost", "efficiency", "quota", "advice")
BY = ("account", "user", "partition", "gres-type", "layout", "day-night", "tier")
FORMATS = ("table", "csv", "json", "html")


def parse_when(text: str, now: datetime, option: str, future: bool = False, tz: str = "local") -> datetime:
    """``2026-11-01``, ``2026-11-01T08:00`` (in ``tz`` unless it has an offset; ``local``:
    this machine's zone), ``now``, or a duration before now (``7d``, ``36h``; after now with
    ``future``)."""
    from slurm_gpupool.core.policy.durations import parse_duration_s

    t = text.strip()
    if t == "now":
        return now
    try:
        when = datetime.fromisoformat(t)
    except ValueError:
        try:
            return now + (1 if future else -1) * timedelta(seconds=parse_duration_s(t))
        except ValueError:
            raise UsageError(
                f"{option} {text[:60]}", "not a date, date-time, 'now' or a duration", hint="e.g. 2026-11-01, 7d, 36h"
            ) from None
    if not YEARS[0] <= when.year <= YEARS[1]:  # pandas' times end in 2262; 0001 has no local offset
        raise UsageError(f"{option} {text[:60]}", f"a date from {YEARS[0]} to {YEARS[1]} (accounting has no other)")
    if when.tzinfo is None:
        from zoneinfo import ZoneInfo

        when = when.astimezone() if tz == "local" else when.replace(tzinfo=ZoneInfo(tz))
    return when.astimezone(UTC)


YEARS = (1970, 2200)


def _common(f: Any) -> Any:
    options = [
        click.option(
            "--since",
            help="Start: date, date-time, or a duration ago (default: 7d; with --from, the files' first job).",
        ),
        click.option(
            "--until", help="End: date, date-time, 'now' (default: now; with --from, the files' last record)."
        ),
        click.option(
            "--from",
            "files",
            multiple=True,
            type=click.Path(dir_okay=False, path_type=Path, allow_dash=True),
            help="Saved sacct output (--parsable2/--parsable/--json), Sonar CSV, or this tool's export, "
            "instead of sacct. Repeatable; '-' is stdin.",
        ),
        click.option("--fields", help="Comma-separated sacct --format of a headerless file."),
        click.option("--delimiter", help="Field delimiter of a --parsable file (default: detected)."),
        click.option("--tz", default="local", show_default=True, help="Time zone of times without an offset."),
        click.option(
            "--journal",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Repartition journal.log for the layout history (default: paths.controller_dir).",
        ),
        click.option("--spool-dir", "spools", multiple=True, help="A collected usage spool (repeatable)."),
        click.option("--window", default="1d", show_default=True, help="sacct is asked one window at a time."),
        click.option(
            "--sacct",
            "sacct_format",
            type=click.Choice(("auto", "json", "parsable2")),
            default="auto",
            show_default=True,
            help="How sacct is read: --json where Slurm has it (auto), or force one.",
        ),
    ]
    for o in reversed(options):
        f = o(f)
    return f


def _load(
    app: AppContext, since: str | None, until: str | None, files, fields, delimiter, tz, journal, spools, window,
    sacct_format,
):  # fmt: skip
    from slurm_gpupool.core.policy.durations import parse_duration_s
    from slurm_gpupool.errors import ConfigError
    from slurm_gpupool.reports.dataset import Source, build
    from slurm_gpupool.util.quoting import breaking_char

    now = datetime.now(UTC)
    t0 = parse_when(since, now, "--since") if since else None
    t1 = parse_when(until, now, "--until") if until else None
    if t0 is not None and t0 >= (t1 or now):
        raise UsageError(f"--since {since} --until {until or 'now'}", "the period is empty (until is not after since)")
    try:
        cfg = app.config()
    except ConfigError:
        if not files:
            raise
        cfg = None  # saved files from elsewhere: the catalog's names, no capacity or schedule
    try:
        win = timedelta(seconds=parse_duration_s(window))
    except ValueError as e:
        raise UsageError(f"--window {window[:60]}", str(e)) from None
    if win < timedelta(minutes=1):  # sacct is asked once per window: 0 would never end
        raise UsageError(f"--window {window[:60]}", "at least a minute", hint="e.g. 1d (the default) or 6h")
    if tz != "local":
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise UsageError(
                f"--tz {tz[:60]}", "not a time zone", hint="an IANA name such as Europe/Paris, or local"
            ) from None
    if delimiter is not None and (not delimiter or breaking_char(delimiter) or len(delimiter) > 8):
        raise UsageError(
            f"--delimiter {delimiter[:20]!r}", "one to 8 characters, not a newline: what sacct --delimiter printed"
        )
    source = Source(
        files=tuple(files),
        tz=tz,
        fields=[x.strip() for x in fields.split(",")] if fields else None,
        delimiter=delimiter,
        window=win,
        use_json={"auto": None, "json": True, "parsable2": False}[sacct_format],
    )
    return build(cfg, source, t0, t1, journal, tuple(spools), now)


@click.group()
def report() -> None:
    """Reports from Slurm accounting: usage, utilization, waits, cost, efficiency, quota, advice,
    and a summary per user (printed or mailed).

    GPU-equivalents count a MIG slice as its compute share (1g = 1/7) and a
    shard as its share of the GPU; capacity follows the layout each node had.
    """


def _write(text: str, output: Path | None, what: str, atomic: bool = True) -> None:
    """To ``output`` (saying so on stderr), else to stdout.  ``atomic``: by a rename beside
    it; else through the path as given (``-o >(gzip > x)``, a symlink: a rename would not)."""
    if output is None:
        click.echo(text, nl=False)
        return
    from slurm_gpupool.util.atomic import write_text_atomic

    try:
        write_text_atomic(output, text) if atomic else output.write_text(text)
    except OSError as e:  # no such directory, a directory, read-only: the user's path, said so
        raise UsageError(f"-o {output}", f"cannot write it: {e.strerror or e}") from None
    click.echo(f"wrote {what}", err=True)


def _emit(reports, stats, data, fmt: str, output: Path | None, table: str | None) -> None:
    from slurm_gpupool.reports import output as out

    load = stats.to_dict()
    if fmt == "json":
        text = out.to_json(reports, load, data.notes)
    elif fmt == "csv":
        if table and table not in reports[0].tables:
            raise UsageError(f"--table {table}", "no such table", hint="tables: " + ", ".join(reports[0].tables))
        text = out.to_csv(reports[0], table)
    elif fmt == "html":
        from slurm_gpupool.reports.html import render_html

        text = render_html(
            reports,
            {
                "title": "slurm_gpupool report",
                "since": data.since.isoformat(),
                "until": data.until.isoformat(),
                "load": load,
                "notes": data.notes,
            },
        )
    else:
        text = out.to_table(reports, load, data.notes)
    _write(text, output, str(output))
    if fmt != "table" and stats.malformed_total:
        click.echo("gpupool: " + out.load_summary(load), err=True)


# utilization splits by the layout in force (not the schedule's due period: #26 item 20)
BY_OF = {"utilization": ("layout",), "efficiency": (), "quota": (), "advice": ()}  # the rest: all of BY


def slurm_release_option(f: Any) -> Any:
    """``--slurm-release``: the Slurm release whose backfill a replay follows (``simulate``,
    ``report advice``)."""
    return click.option(
        "--slurm-release",
        metavar="RELEASE",
        help="The site's Slurm release (as sinfo --version gives it): its backfill's will-run batches, how it "
        "rounds a planned job's window and its default PriorityType (docs/simulate.md). Default: the pool "
        "config's slurm.version; else, with live accounting, the site's own (sinfo --version); else 22.05.",
    )(f)


DEFAULT_RELEASE = "22.05"  # the replay's rules without a release given or found


def release_for(given: str | None, live: bool, config_version: str | None) -> str:
    """``--slurm-release``, checked; not given: the pool config's ``slurm.version`` (which wins
    over ``sinfo -V`` everywhere, ``controller/versions.py``), else the live Slurm's (``sinfo
    --version``, when the accounting is read live and Slurm answers), else 22.05.  The whole
    release, patch level too: the will-run rule changes at 25.05.1 (``willrun.rule_for``)."""
    from slurm_gpupool.slurm.versions import parse_version

    if given is not None:
        return slurm_release(given)
    version = parse_version(config_version) if config_version else None
    if version is None and live:
        from slurm_gpupool.errors import SlurmUnavailableError
        from slurm_gpupool.slurm.runner import SlurmRunner, slurm_version

        try:
            version = slurm_version(SlurmRunner())
        except SlurmUnavailableError:
            pass
    return DEFAULT_RELEASE if version is None else "{:02d}.{:02d}.{}".format(*version)


def _file_option(flag: str, dest: str, text: str) -> Any:
    """A replay's option naming a file of the site's (``simulate``, ``report advice``)."""
    return click.option(flag, dest, type=click.Path(dir_okay=False, path_type=Path), metavar="FILE", help=text)


def slurm_config_option(f: Any) -> Any:
    """``--slurm-config``: the site's priority setup for a replay (``simulate``, ``report advice``)."""
    return _file_option(
        "--slurm-config",
        "slurm_config",
        "The site's slurm.conf, or `scontrol show config` saved to a file (default with live accounting: "
        "`scontrol show config`): its PriorityType and QOS weight order the replay's queue, and the priority "
        "factors it does not replay are named beside the figures.",
    )(f)


def fairshare_option(f: Any) -> Any:
    """``--fairshare-from``: the associations' shares and usage for a replay's fair-share
    factor (``simulate``, ``report advice``)."""
    return _file_option(
        "--fairshare-from",
        "shares_file",
        "`sshare -a -l -P` taken at the window's start: the associations, their shares and usage, from which "
        "the fair-share factor is replayed as Fair Tree ranks it (with --slurm-config's PriorityWeightFairshare).",
    )(f)


def fairshare_shares(path: Path | None) -> Any:
    """``--fairshare-from``: the associations, shares and usage of an ``sshare -a -l -P``
    (``fairshare.read_sshare``); None without it.  Unreadable or not sshare's: a UsageError."""
    if path is None:
        return None
    from slurm_gpupool.simulate.fairshare import read_sshare

    where = f"--fairshare-from {path}"
    return read_sshare(_site_text(path, where, "sshare's output"), where)


def fairshare_notes(shares: Any, queue: Any, site: Any) -> list[str]:
    """What the report says when ``--fairshare-from`` was given but the site weighs no
    fair-share (or no slurm.conf says whether it does): the shares then change nothing."""
    if shares is None or queue.fairshare_weight:
        return []
    why = "no --slurm-config says PriorityWeightFairshare" if site is None else f"{site.source} weighs no fair-share"
    return [f"--fairshare-from is not weighed: {why}"]


MAX_INCLUDE_DEPTH = 16  # Include files within Include files; one that includes itself is refused
MAX_CONF_BYTES = 16 << 20


def _config_or_none(app: AppContext) -> Any:
    """The pool config, or None (reports read files from elsewhere without one)."""
    from slurm_gpupool.errors import ConfigError

    try:
        return app.config()
    except ConfigError:
        return None


def site_priority(path: Path | None, live: bool = False) -> Any:
    """``--slurm-config``: the site's priority setup (``simulate.site_priority``), its
    ``Include`` files read in their place, relative names from the main file's directory, as
    slurmctld reads slurm.conf (``get_extra_conf_path``).  Not given: with live accounting
    (``--since``, sacct), the controller's own (``scontrol show config``), else None (as also
    when Slurm does not answer: the report then says what it assumed), its partitions'
    priority settings from ``scontrol -o show partition``."""
    from slurm_gpupool.simulate import site_priority as sp

    if path is None:
        if not live:
            return None
        from slurm_gpupool.errors import SlurmUnavailableError
        from slurm_gpupool.slurm.runner import SlurmRunner, show_config, show_partitions

        try:
            runner = SlurmRunner()
            shown, parts = show_config(runner), show_partitions(runner)
        except SlurmUnavailableError:
            return None
        found = [*sp.entries(shown, "scontrol show config"), *sp.entries(parts, "scontrol show partition")]
        return sp.site_priority(found, "scontrol show config")
    return sp.site_priority(_conf_entries(path, path.parent, ()), str(path))


def _conf_entries(file: Path, base: Path, chain: tuple[Path, ...], via: str = "") -> Any:
    """The entries of a slurm.conf, each ``Include`` replaced by its file's (a glob's files in
    order, as slurmctld reads them); a missing, unreadable, oversized or self-including file
    is a UsageError naming it (and the ``Include`` line that named it: ``via``)."""
    import glob

    from slurm_gpupool.simulate.site_priority import entries

    where = f"--slurm-config {file}{via}"
    resolved = file.resolve()
    if resolved in chain:
        raise UsageError(where, "includes itself: " + " -> ".join(str(p) for p in (*chain, resolved)))
    if len(chain) > MAX_INCLUDE_DEPTH:
        raise UsageError(where, f"Include files nested more than {MAX_INCLUDE_DEPTH} deep")
    for entry in entries(_site_text(file, where, "a slurm.conf"), str(file)):
        if entry.key != "Include":
            yield entry
            continue
        name = entry.value
        target = Path(name) if Path(name).is_absolute() else base / name
        line = f" (Include at {file}, line {entry.line})"
        for one in sorted(glob.glob(str(target))) if "*" in name else [str(target)]:
            yield from _conf_entries(Path(one), base, (*chain, resolved), line)


def _site_text(path: Path, where: str, what: str) -> str:
    """A site file a replay reads (``--slurm-config`` and its Include files, ``--fairshare-from``):
    unreadable or larger than ``MAX_CONF_BYTES`` (not ``what``), a UsageError naming ``where``."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONF_BYTES + 1)
    except OSError as e:
        raise UsageError(where, f"cannot read: {e.strerror}") from None
    if len(data) > MAX_CONF_BYTES:
        raise UsageError(where, f"larger than {MAX_CONF_BYTES >> 20} MiB: not {what}")
    return data.decode("utf-8", "replace")


def slurm_release(text: str) -> str:
    """``--slurm-release``'s value, checked: 24.11 or 24.11.5."""
    import re

    if re.fullmatch(r"\d{1,3}\.\d{1,2}(\.\d{1,3})?", text) is None:
        raise UsageError(f"--slurm-release {text}", "expected a release as 24.11 or 24.11.5")
    return text


def _sim_options(f: Any) -> Any:
    """``report advice``/``all``: the simulator's part of the advice (#16)."""
    options = [
        slurm_release_option,
        slurm_config_option,
        fairshare_option,
        click.option(
            "--simulate/--no-simulate",
            default=True,
            show_default=True,
            help="Replay the window's jobs under the current policy and candidate layouts and schedules "
            "(skipped, with a note, under --min-jobs finished GPU jobs).",
        ),
        click.option(
            "--slowdown",
            default="1,2",
            show_default=True,
            help="The range of a time-shared job's slowdown (comma-separated; its ends are replayed).",
        ),
        click.option(
            "--resamples",
            type=click.IntRange(0, 20),
            default=3,
            show_default=True,
            help="Bootstraps of the jobs by day.",
        ),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstraps."),
        click.option("--min-jobs", type=click.IntRange(1), default=50, show_default=True, help="Fewer: no replay."),
        click.option(
            "--workers",
            type=click.IntRange(1, 64),
            help="Processes replaying at once (default: the CPUs, at most 4).",
        ),
    ]
    for o in reversed(options):
        f = o(f)
    return f


def _sim_settings(kw: dict[str, Any]) -> Any:
    """The simulator's settings from (and out of) the command's options, checked, with the
    release and priority options still to resolve (``_site_settings``, once the accounting's
    options are checked too); None with --no-simulate."""
    import os

    from slurm_gpupool.simulate.advise import Settings

    keys = ("simulate", "slowdown", "resamples", "seed", "min_jobs", "workers", "slurm_release", "slurm_config")
    on, slowdown, resamples, seed, min_jobs, workers, release, config = (kw.pop(k) for k in keys)
    shares_file = kw.pop("shares_file")
    if not on:
        return None
    try:
        sds = tuple(float(x) for x in slowdown.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--slowdown {slowdown}", "expected numbers separated by commas") from None
    if not sds or any(not 1 <= v < float("inf") for v in sds):
        raise UsageError(f"--slowdown {slowdown}", "every value must be a finite number of at least 1")
    if release is not None:
        slurm_release(release)
    workers = workers or min(4, os.cpu_count() or 1)
    settings = Settings(slowdowns=sds, resamples=resamples, seed=seed, min_jobs=min_jobs, workers=workers)
    return settings, release, config, not kw.get("files"), fairshare_shares(shares_file)


def _site_settings(pending: Any, app: AppContext) -> Any:
    """``_sim_settings``' settings with the site's release and priority setup (asked of Slurm
    with live accounting: ``release_for``, ``site_priority``); None with --no-simulate."""
    from dataclasses import replace

    from slurm_gpupool.simulate.site_priority import queue_setup

    if pending is None:
        return None
    settings, release, config, live, shares = pending
    cfg = _config_or_none(app)
    release = release_for(release, live, cfg.slurm.version if cfg is not None else None)
    preempting = cfg is not None and any(t.preemptible for t in cfg.tiers)
    site = site_priority(config, live=live)
    if site is not None and shares is not None:
        site = replace(site, shares_known=True)
    queue = queue_setup(site, release, preempting, settings.priority_weight_qos)
    return replace(
        settings,
        slurm_release=release,
        priority_weight_qos=queue.qos_weight,
        priority_weight_age=queue.age_weight,
        priority_max_age_s=queue.max_age_s,
        priority_calc_period_s=queue.calc_period_s,
        partition_priority=queue.partitions,
        priority_weight_partition=queue.partition_weight,
        priority_weight_fairshare=queue.fairshare_weight,
        priority_decay_half_life_s=queue.half_life_s,
        fairshare=tuple(tuple(x) for x in shares) if shares else ((), (), ()),
        priority_notes=(f"priority: {queue.described}", *queue.notes, *fairshare_notes(shares, queue, site)),
    )


def _progress():
    """``advice: replaying ...`` on a terminal's stderr, nothing otherwise."""
    import sys

    if not sys.stderr.isatty():
        return None
    state = {"n": 0}

    def show(label: str) -> None:
        state["n"] += 1
        sys.stderr.write(f"\radvice: replay {state['n']}: {label[:90]:<90}")
        sys.stderr.flush()

    return show


def _run(name: str, data, spool, by: str | None, done: dict | None = None, sim=None):
    from slurm_gpupool.reports import compute

    allowed = BY_OF.get(name, BY)
    if by is not None and by not in allowed:
        raise UsageError(
            f"report {name} --by {by}",
            f"{name} is not grouped that way",
            hint=f"--by {' or '.join(allowed)}" if allowed else f"{name} takes no --by",
        )

    if name == "usage":
        return compute.usage(data, by or "account")
    if name == "utilization":
        return compute.utilization(data)
    if name == "waits":
        return compute.waits(data, by or "gres-type")
    if name == "cost":
        return compute.cost(data, by or "account")
    if name == "efficiency":
        return compute.efficiency(data, spool)
    if name == "quota":
        return compute.quota(data)
    from slurm_gpupool.reports.advice import advice

    progress = _progress() if sim is not None else None
    out = advice(data, spool, done, sim, progress)
    if progress is not None:
        import sys

        sys.stderr.write("\r" + " " * 110 + "\r")
    return out


def _make(name: str) -> click.Command:
    @click.command(name=name, help=f"The {name} report.")
    @_common
    @click.option("--by", type=click.Choice(BY), help="Group by (default: the report's natural grouping).")
    @click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to a file.")
    @click.option("--table", help="With --format csv: which table (default: the main one).")
    @(_sim_options if name == "advice" else (lambda f: f))
    @pass_app
    def cmd(app: AppContext, by: str | None, fmt: str, output: Path | None, table: str | None, **kw: Any) -> None:
        pending = _sim_settings(kw) if name == "advice" else None
        data, stats, spool = _load(app, **kw)
        sim = _site_settings(pending, app)
        _emit([_run(name, data, spool, by, sim=sim)], stats, data, fmt, output, table)

    return cmd


for _name in REPORTS:
    report.add_command(_make(_name))


@report.command(name="all")
@_common
@click.option("--format", "fmt", type=click.Choice(("table", "json", "html")), default="html", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to a file.")
@_sim_options
@pass_app
def all_reports(app: AppContext, fmt: str, output: Path | None, **kw: Any) -> None:
    """Every report in one document (HTML by default: charts included)."""
    pending = _sim_settings(kw)
    data, stats, spool = _load(app, **kw)
    sim = _site_settings(pending, app)
    done: dict = {}
    for n in REPORTS:  # advice comes last and reuses what the others computed
        done[n] = _run(n, data, spool, None, done, sim if n == "advice" else None)
    _emit(list(done.values()), stats, data, fmt, output, None)


@report.command()
@_common
@click.option("--format", "fmt", type=click.Choice(("csv", "json")), default="csv", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to a file.")
@pass_app
def export(app: AppContext, fmt: str, output: Path | None, **kw: Any) -> None:
    """The loaded jobs, normalized, for reports away from the cluster (`--from FILE`)."""
    from slurm_gpupool.reports.export import export_jobs

    data, stats, _ = _load(app, **kw)
    _write(export_jobs(data.jobs, fmt), output, f"{len(data.jobs):,} jobs to {output}")


@report.command(name="user-summary")
@_common
@click.option("--user", "users", multiple=True, help="Only this user (repeatable; default: every user with GPU jobs).")
@click.option("--format", "fmt", type=click.Choice(("text", "json")), default="text", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to a file.")
@click.option("--mail", is_flag=True, help="Mail each user their section instead of printing it.")
@click.option("--domain", help="--mail: each user's address is USER@DOMAIN.")
@click.option("--address", "pattern", help="--mail: an address with %u for the user, e.g. %u@example.org.")
@click.option("--sender", help="--mail: the From: address (default: the MTA's, the user running this).")
@click.option(
    "--sendmail",
    "sendmail",
    envvar="SLURM_GPUPOOL_SENDMAIL",
    default="/usr/sbin/sendmail -t",
    show_default=True,
    help="--mail: the command that takes a message on stdin, split like a shell would (never run by one).",
)
@pass_app
def user_summary(
    app: AppContext, users: tuple[str, ...], fmt: str, as_json: bool, output: Path | None, mail: bool,
    domain: str | None, pattern: str | None, sender: str | None, sendmail: str, **kw: Any,
) -> None:  # fmt: skip
    """Per user: their GPU jobs and hours by GRES type, measured peak memory and activity against
    what the slice or share offered, what smaller offer would have fit, and their median wait."""
    from slurm_gpupool.reports import user_text

    if mail:
        if as_json or fmt != "text" or output is not None:
            raise UsageError("--mail", "mails text: it takes no --json, --format or --output")
        why = user_text.check_address_pattern(domain, pattern)
        if why:
            raise UsageError("--mail", why, hint="--domain example.org, or --address %u@example.org")
        if sender and ("\n" in sender or "\r" in sender or not sender.strip()):
            raise UsageError("--sender", "one line: an address, or a name and <address>")
    elif domain or pattern or sender:
        raise UsageError("--domain/--address/--sender", "only with --mail")
    from slurm_gpupool.reports.user_summary import user_summaries

    data, _, spool = _load(app, **kw)
    summaries = user_summaries(data, spool, users)
    if mail:
        _mail_summaries(summaries, data.since, data.until, sendmail, domain, pattern, sender)
        return
    if as_json or fmt == "json":
        import json

        doc = user_text.summaries_json(summaries, data.since, data.until)
        text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    else:
        text = user_text.summaries_text(summaries, data.since, data.until)
    _write(text, output, str(output))


def _mail_summaries(summaries, since, until, sendmail: str, domain, pattern, sender) -> None:
    """Each user with GPU jobs gets their section; a user name that is no login name is skipped
    (said on stderr); the MTA's refusals are counted and end in an error after the others."""
    from slurm_gpupool.errors import OperationFailedError
    from slurm_gpupool.reports import user_text
    from slurm_gpupool.util.mail import mail_command, send

    argv = mail_command(sendmail)
    subject = f"Your GPU use, {since:%Y-%m-%d} to {until:%Y-%m-%d}"
    failed: list[str] = []
    sent = 0
    for s in summaries:
        if not s.gpu_jobs and not s.pending_now:
            continue
        to = user_text.address_for(s.user, domain, pattern)
        if to is None:
            click.echo(f"gpupool: user {s.user[:60]!r}: not a plain login name, not mailed", err=True)
            continue
        text = user_text.summary_text(s, since, until)
        try:
            send(argv, user_text.mail_message(text, to, subject, sender), to)
        except OperationFailedError as e:
            click.echo(f"gpupool: {e.message()}", err=True)
            failed.append(to)
            continue
        sent += 1
    click.echo(f"mailed {sent} user summaries", err=True)
    if failed:
        raise OperationFailedError(f"mail to {len(failed)} of {len(failed) + sent} users", "the MTA refused them")
