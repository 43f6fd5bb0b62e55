"""``gpupool simulate``: replay jobs against the pool's policies, side by side (#16).

Jobs come from a public trace (``--trace philly|openb``) or from this site's accounting
(``--trace accounting``: sacct, or ``--from`` files in any format ``gpupool report``
reads).  Each policy (``--policy``: ``static:LAYOUT``, ``static:whole``, ``schedule``;
default: all of them) is replayed by ``simulate.engine`` with the config's own catalog,
planner, GRES and repartition rules; the report says what each buys.
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.cli.report import (
    _common,
    _load,
    _write,
    fairshare_notes,
    fairshare_option,
    fairshare_shares,
    parse_when,
    release_for,
    site_priority,
    slurm_config_option,
    slurm_release_option,
)
from slurm_gpupool.errors import UsageError

if TYPE_CHECKING:  # the simulator's modules load only when a replay runs
    from slurm_gpupool.simulate.site_priority import QueueSetup

# simulate.willrun.RULES, spelled out: the CLI imports no simulator module until it runs one
WILL_RUN_RULES = ("exact", "batch", "batch-nodes")

TRACES = ("philly", "openb", "accounting")


def _floats(text: str, option: str, low: float = 0.0) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{option} {text}", "expected numbers separated by commas") from None
    if not vals or any(not v > low for v in vals) or any(v != v or v == float("inf") for v in vals):
        raise UsageError(f"{option} {text}", f"every value must be a finite number above {low:g}")
    return vals


def _qos_priorities(text: str | None, tiers: Collection[str]) -> dict[str, int]:
    """``--qos-priority high=100,low=10``: QOS the tiers do not define, with the Priority
    Slurm gives them (``sacctmgr show qos format=Name,Priority``: 0 to 2^32-1)."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = (x.strip() for x in item.partition("="))
        number = int(value) if value.isascii() and value.isdigit() else -1  # ("²".isdigit(); int() refuses it)
        if not sep or not name or any(c.isspace() for c in name) or not 0 <= number <= 2**32 - 1:
            raise UsageError(
                f"--qos-priority {item.strip()}", "expected NAME=PRIORITY (a whole number, 0 to 4294967295)"
            )
        if name in out:
            raise UsageError(f"--qos-priority {item.strip()}", f"{name} is given twice")
        if name in tiers:
            raise UsageError(f"--qos-priority {item.strip()}", f"{name} is a tier's QOS: its priority is the config's")
        out[name] = number
    return out


def _live_qos_priorities(tiers: Collection[str]) -> dict[str, int]:
    """The Priority of each QOS that is not a tier, as the site's Slurm has it (``sacctmgr
    show qos``), for a replay of live accounting without ``--qos-priority``; empty when
    sacctmgr does not answer (the report then shows only the tiers')."""
    from slurm_gpupool.errors import SlurmUnavailableError
    from slurm_gpupool.slurm.qos import Sacctmgr

    try:
        return {name: q.priority for name, q in Sacctmgr().qos().items() if name not in tiers}
    except SlurmUnavailableError:
        return {}


def _seconds(text: str | None, option: str) -> float | None:
    from slurm_gpupool.core.policy.durations import parse_duration_s

    if text is None:
        return None
    try:
        return float(parse_duration_s(text))
    except ValueError as e:
        raise UsageError(f"{option} {text}", str(e)) from None


class Progress:
    """``policy: day 12 of 30`` on a terminal's stderr, nothing otherwise."""

    def __init__(self, label: str, span_s: float, enabled: bool) -> None:
        self.label, self.span_s, self.enabled = label, max(span_s, 1.0), enabled

    def __call__(self, t: float) -> None:
        if self.enabled:
            sys.stderr.write(f"\r{self.label}: day {t / 86400:,.1f} of {self.span_s / 86400:,.1f}   ")
            sys.stderr.flush()

    def done(self, seconds: float) -> None:
        if self.enabled:
            sys.stderr.write(f"\r{self.label}: done in {seconds:.1f} s{' ' * 20}\n")


@click.command()
@click.option(
    "--trace",
    type=click.Choice(TRACES),
    default=None,
    help="Jobs: a public trace, or this site's accounting (default: accounting, or philly without --from).",
)
@click.option(
    "--policy",
    "policy_names",
    multiple=True,
    metavar="P",
    help="static:LAYOUT, static:whole, schedule or elastic (repeatable; default: every layout static, the schedule,"
    " and elastic if the schedule's mode is).",
)
@click.option(
    "--layouts",
    "layouts_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A YAML file whose `layouts:` are compared too (as static:NAME).",
)
@click.option("--days", type=float, help="Replay this many days of the trace.")
@click.option("--start", help="Trace date to start from (philly/openb), e.g. 2017-10-02.")
@click.option(
    "--retime/--no-retime",
    default=True,
    show_default=True,
    help="philly/openb: move submissions to Helios's day/night curve.",
)
@click.option(
    "--openb-list",
    default="openb_pod_list_default",
    show_default=True,
    help="openb: the pod list whose one-GPU requests are drawn.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="openb's draw and --thin's seed.")
@click.option(
    "--thin",
    type=float,
    help="Keep this fraction of the trace's jobs (drawn with --seed): a big trace's load on a small pool.",
)
@click.option(
    "--slowdown",
    default="1.0",
    show_default=True,
    help="A time-shared job runs this many times longer; a comma list sweeps it.",
)
@click.option(
    "--limit-factor",
    type=float,
    default=2.0,
    show_default=True,
    help="Time limit of a job without one: this x its run time.",
)
@click.option("--max-time", help="The partition's MaxTime (e.g. 7d): longer jobs are cut there (default: none).")
@click.option(
    "--switch-time", help="A node out of service per switch (default: the repartition timing model for this pool)."
)
@click.option(
    "--qos-priority",
    "qos_priority",
    metavar="Q=N,...",
    help="The Priority of QOS that are not tiers, as sacctmgr shows them (e.g. high=100,low=10): the queue's order "
    "(default with live accounting: `sacctmgr show qos`).",
)
@slurm_config_option
@click.option(
    "--slurmctld-started",
    "started",
    metavar="WHEN",
    help="When slurmctld last started (`scontrol show config`'s BOOT_TIME, e.g. 2026-12-03T06:45:59; in --tz "
    "without an offset): the age factor's rounds fall every PriorityCalcPeriod from it (default: BOOT_TIME from "
    "`scontrol show config`, live or saved as --slurm-config; else on the clock's whole periods).",
)
@fairshare_option
@click.option("--bf-interval", type=float, default=30.0, show_default=True, help="Backfill interval (s).")
@click.option(
    "--passes",
    "passes_from",
    type=click.Choice(("dated", "grid")),
    default="dated",
    show_default=True,
    help="Where a site's backfill passes fall: dated by its accounting's backfill starts (its own "
    "bf_interval), or every --bf-interval from the first submission (a what-if interval).",
)
@click.option(
    "--exact-backfill", is_flag=True, help="Place every tested job's backfill reservation (slow on deep queues)."
)
@slurm_release_option
@click.option(
    "--will-run",
    type=click.Choice(WILL_RUN_RULES),
    help="How backfill plans a waiting job's start, instead of the release's: Slurm's will-run batches as "
    "22.05-25.05.0 (batch) or 25.05.1 on (batch-nodes), or the exact earliest start (docs/simulate.md).",
)
@click.option(
    "--prefer",
    type=click.Choice(("mig", "shard")),
    default="mig",
    show_default=True,
    help="A fraction of a GPU goes to a MIG slice or to shards first.",
)
@click.option(
    "--typed",
    is_flag=True,
    help="Requests keep the one GRES type they map to (as if users named it) instead of any model that holds them.",
)
@click.option("--format", "fmt", type=click.Choice(("table", "json", "html")), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here instead of stdout.")
@_common
@pass_app
def simulate(app: AppContext, trace, policy_names, layouts_file, days, start, retime, openb_list, seed, thin, slowdown,
             limit_factor, max_time, switch_time, qos_priority, slurm_config, started, shares_file, bf_interval,
             passes_from,
             exact_backfill,
             slurm_release, will_run,
             prefer, typed, fmt, output, since, until, files, fields, delimiter, tz, journal, spools, window,
             sacct_format):  # fmt: skip
    """Replay jobs against the pool's layouts and schedule, side by side.

    \b
    gpupool simulate --trace philly --days 14            # every layout static vs the schedule
    gpupool simulate --from sacct.txt --policy schedule --policy static:night
    gpupool simulate --trace openb --slowdown 1,1.5,2 --format html -o sim.html
    """
    import dataclasses
    import time

    from slurm_gpupool.core.policy.qos import preempt_lists
    from slurm_gpupool.reports import sim_report
    from slurm_gpupool.reports.sim_accuracy import shipped
    from slurm_gpupool.simulate import policies as pol
    from slurm_gpupool.simulate.accuracy import to_dict
    from slurm_gpupool.simulate.engine import Engine, Params
    from slurm_gpupool.simulate.mapping import PREFER_MIG, PREFER_SHARD
    from slurm_gpupool.simulate.metrics import summarise
    from slurm_gpupool.simulate.pool import pool_spec
    from slurm_gpupool.simulate.site_priority import queue_setup
    from slurm_gpupool.simulate.willrun import release_params
    from slurm_gpupool.util.validate import load_yaml

    # --from or --since/--until name the site's accounting (files, or sacct); alone, the public
    # Philly trace (--since without --trace replayed Philly, its window silently ignored)
    trace = trace or ("accounting" if files or since or until else "philly")
    slowdowns = _floats(slowdown, "--slowdown")
    if limit_factor is None or not limit_factor >= 1 or limit_factor == float("inf"):
        raise UsageError(f"--limit-factor {limit_factor}", "must be at least 1 (a job ends within its limit)")
    if days is not None and not 0 < days < 1e5:
        raise UsageError(f"--days {days}", "must be more than 0")
    if not 0 < bf_interval < 1e6:  # nan, inf and 0 too: the passes' grid is built from it
        raise UsageError(f"--bf-interval {bf_interval}", "must be a number of seconds more than 0")
    if start is not None:
        _check_date(start, "--start")
    max_time_s = _seconds(max_time, "--max-time")
    cfg = app.config()
    live = trace == "accounting" and not files  # the site's own Slurm answers: ask it what is not given
    slurm_release = release_for(slurm_release, live, cfg.slurm.version)
    rules = release_params(slurm_release)  # its backfill's will-run rule, window rounding, ...
    rules["will_run"] = will_run = will_run or rules["will_run"]
    tiers = pol.tier_priorities(cfg)
    # the tiers' QOS order the queue as `gpupool qos apply` sets them in Slurm, others as given
    others = _qos_priorities(qos_priority, tiers)
    qos_from = ""
    if qos_priority is None and live and (found := _live_qos_priorities(tiers)):
        others, qos_from = found, " (sacctmgr show qos)"
    queue_qos = tuple({**tiers, **others}.items())
    preempting = any(t.preemptible for t in cfg.tiers)
    site = site_priority(slurm_config, live=live)
    shares = fairshare_shares(shares_file)
    if site is not None and shares is not None:
        site = dataclasses.replace(site, shares_known=True)
    queue = queue_setup(site, slurm_release, preempting, Params.priority_weight_qos)
    if layouts_file is not None:
        extra = load_yaml(layouts_file)
        if not isinstance(extra, dict) or not isinstance(extra.get("layouts"), dict):
            raise UsageError(f"--layouts {layouts_file}", "expected a YAML file with a `layouts:` mapping")
        cfg = pol.with_layouts(cfg, extra["layouts"], str(layouts_file))
    cfg, whole = pol.with_whole_layout(cfg)
    specs = pol.policies(cfg, list(policy_names) or None, whole)
    notes = list(queue.notes)
    notes += fairshare_notes(shares, queue, site)
    accounting = (since, until, files, fields, delimiter, tz, journal, spools, window, sacct_format)
    dating = bf_interval if passes_from == "dated" else None
    epoch, jobs, source, passes = _jobs(
        app, trace, accounting, days, start, retime, openb_list, seed, limit_factor, max_time_s, notes, dating
    )
    if thin is not None:
        if not 0 < thin <= 1:
            raise UsageError(f"--thin {thin}", "must be more than 0 and at most 1")
        import random

        rnd = random.Random(seed)
        jobs = [j for j in jobs if rnd.random() < thin]
        source += f"; {thin:g} of its jobs (seed {seed})"
    if not jobs:
        raise UsageError(f"--trace {trace}", "no job to replay", hint="widen --days/--since")
    tzinfo = cfg.schedule.tz if cfg.schedule is not None and cfg.schedule.tz is not None else UTC
    epoch = epoch.replace(tzinfo=tzinfo) if epoch.tzinfo is None else epoch
    last_submit_s = epoch.timestamp() + max(j.submit_s for j in jobs)
    calc_phase_s, rounds = _decay_rounds(started, queue, tz, last_submit_s)
    span = max(j.submit_s for j in jobs) + max(j.limit_s for j in jobs) + 86400
    nodes = [n for n in cfg.all_nodes() if cfg.nodeset_of(n).machine is not None]
    fallback = cfg.schedule.default if cfg.schedule is not None else whole  # where uncovered nodes stay
    switch_s = _seconds(switch_time, "--switch-time")
    if switch_s is None:
        switch_s = pol.switch_seconds(cfg, len(nodes))
    runs: list[dict[str, Any]] = []
    series: dict[str, list[tuple[float, float]]] = {}
    tty = sys.stderr.isatty()
    for spec in specs:
        pool = pol.pool_for(cfg, spec, nodes, fallback)
        sw = pol.switcher(cfg, spec, epoch, span)
        clock = spec.name in (pol.SCHEDULE, pol.ELASTIC)  # elastic: the clock's switches outside its periods
        lead = pol.lead_time_s(cfg, list(zip(sw.times, sw.layouts)), max_time_s) if clock else 0.0
        for sd in slowdowns:
            sw = pol.switcher(cfg, spec, epoch, span)  # each replay its own: an elastic one keeps state
            params = Params(
                bf_interval_s=bf_interval,
                bf_passes_s=passes,
                bf_exact=exact_backfill,
                **rules,
                switch_s=pol.elastic_switch_s(cfg, spec, switch_s, switch_time is None),
                lead_time_s=lead,
                deadline_s=cfg.repartition.deadline_s,
                requeue=cfg.repartition.requeue,
                grace_s=cfg.repartition.checkpoint_grace_s,
                shard_slowdown=sd,
                prefer=PREFER_MIG if prefer == "mig" else PREFER_SHARD,
                any_model=not typed,
                qos_priority=queue_qos,
                priority_weight_qos=queue.qos_weight,
                priority_weight_age=queue.age_weight,
                priority_max_age_s=queue.max_age_s,
                priority_calc_period_s=queue.calc_period_s,
                partition_priority=queue.partitions,
                priority_weight_partition=queue.partition_weight,
                priority_weight_fairshare=queue.fairshare_weight,
                priority_decay_half_life_s=queue.half_life_s,
                fairshare_accounts=tuple(shares[0]) if shares else (),
                fairshare_users=tuple(shares[1]) if shares else (),
                fairshare_usage=tuple(shares[2]) if shares else (),
                priority_calc_phase_s=calc_phase_s,
                # ... and preempt as preempt/qos does: each tier the preemptible ones below it
                qos_preempt=tuple(preempt_lists((t.qos, t.priority, t.preemptible) for t in cfg.tiers).items()),
                qos_preempt_mode=tuple((t.qos, t.preempt_mode) for t in cfg.tiers if t.preemptible),
                qos_grace_s=tuple((t.qos, float(t.grace_s)) for t in cfg.tiers),
                clock_origin_s=epoch.timestamp(),
            )
            variant = f"slowdown {sd:g}" if len(slowdowns) > 1 else ""
            label = spec.name + (f" ({variant})" if variant else "")
            progress = Progress(label, span, tty)
            t0 = time.monotonic()
            res = Engine(pool, sw, params).run(jobs, progress)
            progress.done(time.monotonic() - t0)
            summary = summarise(res)
            summary["variant"] = variant
            summary["seconds"] = round(time.monotonic() - t0, 2)
            runs.append(summary)
            series[label] = [(t / 86400, 1 - idle / cap) for t, cap, idle, _ in res.samples if cap > 0]
    context = {
        "title": f"gpupool simulate: {trace}",
        "source": source,
        "jobs": len(jobs),
        "pool": f"{len(nodes)} nodes, {pool_spec(cfg, [whole], nodes, whole).gpu_eq(whole):g} GPUs ({cfg.source})",
        "since": epoch.isoformat(),
        "until": (epoch + timedelta(seconds=max(j.submit_s for j in jobs))).isoformat(),
        "parameters": {
            "time limits": f"{limit_factor:g} x run time where the trace has none"
            + (f", at most {max_time}" if max_time else ""),
            "switch": f"{switch_s:.0f} s out of service per node; deadline {cfg.repartition.deadline_s} s; "
            + ("requeue" if cfg.repartition.requeue else "no requeue"),
            "scheduler": f"priority order, backfill every {bf_interval:g} s (bf_max_job_test 500, bf_window 1 day, "
            + f"bf_resolution 60 s, whole-node reservations{', every one placed' if exact_backfill else ''}, "
            + (f"{len(passes):,} passes dated by the accounting's backfill starts, " if passes else "")
            + f"as Slurm {slurm_release}, will-run {will_run})",
            "requests": ("typed" if typed else "any model that holds them")
            + f"; fractions to {prefer} first; shard slowdown {', '.join(f'{s:g}' for s in slowdowns)}",
            "qos priority": (", ".join(f"{q} {p}" for q, p in queue_qos) + qos_from)
            or "none (one queue, by submission)",
            "priority": queue.described + rounds,
        },
        "notes": notes,
        "accuracy": to_dict(shipped()),
    }
    if fmt == "json":
        text = sim_report.to_json(runs, context)
    elif fmt == "html":
        text = sim_report.to_html(runs, context, series)
    else:
        text = sim_report.to_table(runs, context)
    ended = text if output is not None or text.endswith("\n") else text + "\n"
    _write(ended, output, str(output), atomic=False)


def _decay_rounds(started: str | None, queue: QueueSetup, tz: str, window_end_s: float) -> tuple[float, str]:
    """(``Params.priority_calc_phase_s``, what the report says of it) for the age and
    fair-share factors: slurmctld's decay thread recomputes priorities every PriorityCalcPeriod from its start
    (``_decay_thread``), so that start sets the rounds' phase: ``--slurmctld-started`` (a
    usage error if it is not a time), else BOOT_TIME from ``scontrol show config`` (not used
    if unreadable, or if slurmctld started after the replayed window's last submission
    ``window_end_s``: the window's rounds were another start's); unknown, the clock's whole
    periods.  A time without an offset is read in ``--tz``, as sacct's are."""
    now = datetime.now(UTC)
    given = parse_when(started, now, "--slurmctld-started", tz=tz).timestamp() if started else None
    if not queue.age_weight and not queue.fairshare_weight:
        return 0.0, ""
    if given is not None:
        return given % queue.calc_period_s, f"; its rounds from slurmctld's start at {started} (--slurmctld-started)"
    whole = "; its rounds on the clock's whole periods"
    if not queue.boot_time:
        return 0.0, f"{whole} (slurmctld's start unknown: --slurmctld-started)"
    try:
        boot = parse_when(queue.boot_time, now, "BOOT_TIME", tz=tz).timestamp()
    except UsageError:
        return 0.0, f"{whole} (BOOT_TIME {queue.boot_time[:40]!r} unreadable)"
    if boot > window_end_s:
        return 0.0, f"{whole} (slurmctld's start after the window: BOOT_TIME {queue.boot_time}: --slurmctld-started)"
    return boot % queue.calc_period_s, f"; its rounds from slurmctld's start at {queue.boot_time} (BOOT_TIME)"


def _check_date(text: str, option: str) -> None:
    """A trace date (``2017-10-02``, ``2017-10-02T08:00``): a clear usage error, not pandas'."""
    try:
        datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option} {text}", "not a date (e.g. 2017-10-02 or 2017-10-02T08:00)") from None


def _jobs(app, trace, accounting, days, start, retime, openb_list, seed, limit_factor, max_time_s, notes,
          dating):  # fmt: skip
    """(epoch, jobs, where they come from, when the site's backfill passes began as its
    accounting dates them, ``dating`` being its bf_interval: none for a public trace, or
    with ``dating`` None); ``accounting``: the report options, in ``_load``'s order."""
    from slurm_gpupool.reports.traces import philly as st

    files = accounting[2]
    if trace == "accounting":
        data, _, _ = _load(app, *accounting)
        from slurm_gpupool.reports.sim_accounting import accounting_jobs, accounting_passes

        epoch, jobs, skipped = accounting_jobs(data, limit_factor, max_time_s)
        notes += [f"{v:,} jobs left out: {k}" for k, v in skipped.items() if v]
        notes += list(data.notes)
        if days is not None:
            jobs = [j for j in jobs if j.submit_s < days * 86400]
        label = ", ".join(str(f) for f in files) if files else "sacct"
        return epoch, jobs, label, accounting_passes(data, epoch, dating) if dating else ()
    for given, option in ((files, "--from"), (accounting[0], "--since"), (accounting[1], "--until")):
        if given:
            raise UsageError(f"--trace {trace} {option}", f"{option} is for --trace accounting (this site's jobs)")
    curve = st.helios_curve() if retime else None
    epoch, jobs = st.philly_jobs(curve=curve, days=days, start=start, limit_factor=limit_factor, max_time_s=max_time_s)
    label = "Philly 2017" + (", re-timed to Helios Earth's daily curve" if retime else "")
    if trace == "openb":
        jobs = st.openb_mix(jobs, st.openb_milli(openb_list), seed)
        label += f"; one-GPU requests from openb {openb_list} (seed {seed})"
    return epoch, jobs, label, ()
