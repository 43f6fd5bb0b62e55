"""``gpupool repartition``, ``gpupool status`` and ``gpupool schedule``: the controller side.

Run as root on the Slurm controller, from cron (``gpupool schedule install``).
"""

from __future__ import annotations

from datetime import datetime

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.cli.output import emit_json, table


def _nodes(text: str | None) -> list[str] | None:
    if not text:
        return None
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    from slurm_gpupool.config.schema import refuse_hostlist_bomb
    from slurm_gpupool.errors import UsageError

    refuse_hostlist_bomb(text)
    try:
        return list(NodeSet(text))
    except NodeSetParseError as e:
        raise UsageError(f"--nodes {text}", f"not a hostlist ({e})") from None


def _duration(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    from slurm_gpupool.core.policy.durations import parse_duration_s
    from slurm_gpupool.errors import UsageError

    try:
        return parse_duration_s(text)
    except ValueError as e:
        raise UsageError(what, str(e)) from None


@click.command()
@click.option("--to", "target", metavar="LAYOUT", help="Switch to this layout.")
@click.option(
    "--scheduled",
    is_flag=True,
    help="Switch to the layout the schedule says is due; reserve ahead (an elastic step in elastic periods).",
)
@click.option("--elastic", is_flag=True, help="One elastic step: switch idle nodes to what waiting jobs need.")
@click.option("--nodes", "nodes_text", metavar="HOSTLIST", help="Only these nodes (default: all the layout covers).")
@click.option("--dry-run", is_flag=True, help="Print the full plan; change nothing.")
@click.option("--deadline", metavar="DURATION", help="How long to wait for running jobs (e.g. 30m).")
@click.option("--requeue", is_flag=True, default=None, help="At the deadline, checkpoint-signal and requeue.")
@click.option("--force", is_flag=True, help="Also re-apply and verify nodes Slurm shows in the layout already.")
@click.option("--quiet", is_flag=True, help="No progress; print only problems (for cron).")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def repartition(
    app: AppContext,
    target: str | None,
    scheduled: bool,
    elastic: bool,
    nodes_text: str | None,
    dry_run: bool,
    deadline: str | None,
    requeue: bool | None,
    force: bool,
    quiet: bool,
    as_json: bool,
) -> int:
    """Switch nodes to a layout without killing a job (controller, as root).

    Exit 0 when every node is switched (or already was), 75 when nodes were
    skipped (busy past the deadline, or another run holds the lock), 1 when a
    node failed (rolled back and drained with the reason).
    """
    from slurm_gpupool.errors import UsageError
    from slurm_gpupool.repartition import journal as jr
    from slurm_gpupool.repartition.executor import Repartitioner

    if sum((bool(target), scheduled, elastic)) != 1:
        raise UsageError("repartition", "give exactly one of --to LAYOUT, --scheduled and --elastic")
    cfg = app.config()
    log = _syslog()
    shown = (lambda m: None) if quiet or as_json else (lambda m: click.echo(m, err=True))

    def say(message: str) -> None:
        shown(message)
        log(message)

    rp = Repartitioner(cfg, progress=say)
    deadline_s = _duration(deadline, f"--deadline {deadline}")
    nodes = _nodes(nodes_text)
    messages = []
    nxt = None
    trigger = jr.TRIGGER_BY_HAND
    if scheduled:
        due, hold = _scheduled(cfg, rp)
        if due.said:
            say(due.said)
        if due.target is None:  # paused
            if as_json:
                emit_json({"target": None, "held": hold.to_dict() if hold else None, "exit_code": 0})
            return 0
        target, elastic, nxt = due.target, due.elastic, due.ahead
        trigger = jr.TRIGGER_PINNED if due.pinned else jr.TRIGGER_SCHEDULED
    if elastic:
        if nodes:
            raise UsageError("repartition --elastic --nodes", "the elastic step chooses the nodes itself")
        return _elastic_step(cfg, rp, dry_run, as_json, quiet, deadline_s, requeue, log)
    assert target is not None
    if dry_run:
        plan = rp.plan(target, nodes, force)
        desc = rp.describe(plan, deadline_s or cfg.repartition.deadline_s, bool(requeue))
        from slurm_gpupool.slurm.types import hostlist

        ahead = rp.prepare(nxt[1], nxt[0], nodes, after=plan) if nxt else None
        desc["ahead"] = (
            {"reservation": ahead[0], "layout": nxt[1], "start": nxt[0].isoformat(), "nodes": ahead[1]}
            if ahead and nxt
            else None
        )
        if as_json:
            emit_json(desc)
            return 0
        rows = [
            [n["node"], n["action"], n["current"] or "-", n["target"], n["why"], _jobs(n["jobs"])]
            for n in desc["nodes"]
        ]
        click.echo(table(["NODE", "ACTION", "NOW", "TARGET", "WHY", "RUNNING JOBS"], rows))
        if desc["steps"]:
            click.echo("\nsteps:")
            for i, s in enumerate(desc["steps"], 1):
                click.echo(f"  {i}. {s}")
        else:
            click.echo(f"\nnothing to switch: every node is in layout {target} or skipped")
        if ahead and nxt:  # what --scheduled does after the switch (the real run does it too)
            click.echo(
                f"then: scontrol create reservation ReservationName={ahead[0]} StartTime={nxt[0]:%Y-%m-%dT%H:%M} "
                f"Nodes={hostlist(ahead[1])} (they switch to {nxt[1]} then: from now on only jobs that end "
                "before it start there)"
            )
        return 0
    report = rp.run(target, nodes, deadline_s, requeue, force, trigger)
    if nxt:  # after the due switch: reserve the nodes the next one changes, from its start
        when, layout = nxt
        made = rp.prepare(layout, when, nodes)
        if made:
            messages.append(f"reserved the nodes that switch to {layout} at {when:%H:%M} ({made[0]})")
    report.messages = [m for m in report.messages if m] + messages
    for node, v in report.every_node().items():
        log(f"{node}: {v['outcome']} (layout {target}){': ' + v['reason'] if v.get('reason') else ''}")
    if as_json:
        emit_json(report.to_dict())
        return report.exit_code
    for m in report.messages:
        if not quiet:
            click.echo(m)
    rows = [
        [
            n,
            v["outcome"],
            _secs(v.get("reserved_s")),
            _secs(v.get("out_of_service_s")),
            _secs(v.get("drained_s")),
            v["reason"] if v["outcome"] != "kept" else "",
        ]
        for n, v in report.every_node().items()
    ]
    problems = [r for r in rows if r[1] not in ("done", "kept")]
    if rows and (not quiet or problems):
        heads = ["NODE", "OUTCOME", "RESERVED", "OUT OF SERVICE", "DRAINED", "REASON"]
        click.echo(table(heads, rows if not quiet else problems))
    if not quiet:
        click.echo(
            f"layout {target}: {len(report.nodes)} switched or tried, {len(report.kept)} already there"
            f" ({report.seconds:.1f} s{f', {report.waves} waves' if report.waves > 1 else ''})"
        )
    return report.exit_code


def _scheduled(cfg, rp):
    """Gather what a scheduled run depends on (the clock, the hold, the lead time) and ask
    :func:`~slurm_gpupool.repartition.scheduled.scheduled_action`: (its answer, the hold)."""
    from pathlib import Path

    from slurm_gpupool.errors import SlurmUnavailableError, UsageError
    from slurm_gpupool.repartition.hold import read_hold
    from slurm_gpupool.repartition.scheduled import scheduled_action

    if cfg.schedule is None:
        raise UsageError("repartition --scheduled", "the pool config has no schedule")
    now = rp.clock.now(cfg.schedule.tz) if cfg.schedule.tz else rp.clock.now().astimezone()
    hold = read_hold(Path(cfg.paths.controller_dir))
    try:
        lead = rp.lead_time_s()
    except SlurmUnavailableError:  # the partition's MaxTime: known only with Slurm (a paused schedule needs none)
        lead = None
    return scheduled_action(cfg.schedule, hold, now, lead, cfg.elastic.active if cfg.elastic else None), hold


def _elastic_step(cfg, rp, dry_run: bool, as_json: bool, quiet: bool, deadline_s, requeue, log) -> int:
    """Decide, show why, and (not --dry-run) switch the chosen nodes: one run per target layout."""
    from slurm_gpupool.repartition import journal as jr
    from slurm_gpupool.repartition.elastic import step
    from slurm_gpupool.repartition.rules import run_exit_code

    codes: list[int] = []

    def run_switch(target: str, nodes: list[str], may_skip: set[str]) -> dict[str, str]:
        # with drains: reserve now and skip the busy ones at once (their jobs run to their
        # end; a later step switches them), never wait or requeue
        report = (
            rp.run(target, nodes, 0, False, trigger=jr.TRIGGER_ELASTIC)
            if may_skip
            else rp.run(target, nodes, deadline_s, requeue, trigger=jr.TRIGGER_ELASTIC)
        )
        every = report.every_node()
        outcomes = {n: every[n]["outcome"] for n in nodes if n in every}
        # a drained node skipped while its jobs run is the plan, not a node left to switch
        planned = {n: o for n, o in outcomes.items() if not (o == "skipped" and n in may_skip)}
        codes.append(run_exit_code(planned) if may_skip else report.exit_code)
        return outcomes

    decision, outcomes = step(cfg, rp.cluster, None if dry_run else run_switch, clock=rp.clock)
    acted = {a.node for a in decision.actions}
    for node in sorted(set(outcomes) - acted):
        log(f"elastic: {node}: drained node switched once its jobs ended ({outcomes[node]})")
        if not as_json:
            click.echo(f"drain finished: {node} ({outcomes[node]})")
    for a in decision.actions:
        log(
            f"elastic: {a.node} {a.current} -> {a.target}: {a.why}"
            + (f" ({outcomes[a.node]})" if a.node in outcomes else "")
        )
    if as_json:
        emit_json({**decision.to_dict(), "dry_run": dry_run, "outcomes": outcomes})
    elif not quiet or decision.actions:
        rows = [
            [
                a.node,
                a.current,
                a.target,
                a.reason,
                f"{a.gain_eq:.2f}",
                outcomes.get(a.node, "planned" if dry_run else ""),
                a.why,
            ]
            for a in decision.actions
        ]
        if rows:
            click.echo(table(["NODE", "FROM", "TO", "REASON", "GAIN (GPU-EQ)", "OUTCOME", "WHY"], rows))
        else:
            click.echo("no switch")
        for u in decision.unmet:
            click.echo(
                f"waiting: {u.jobs} job(s) {u.label} ({u.eq:.2f} GPU-eq, longest {u.longest_wait_s / 60:.0f} min)"
            )
        for node, why in decision.held:
            click.echo(f"held: {why}" if node == "-" else f"held: {node}: {why}")
    return 1 if 1 in codes else max(codes, default=0)


def _syslog():
    """The repartitioner's progress and outcomes in syslog, as the hooks log theirs
    (``journalctl -t gpupool-repartition``); a host without syslog loses nothing else."""
    import syslog

    def log(message: str) -> None:
        try:
            syslog.openlog("gpupool-repartition", syslog.LOG_PID, syslog.LOG_DAEMON)
            syslog.syslog(syslog.LOG_INFO, message)
        except OSError:
            pass

    return log


def _jobs(jobs: list[dict]) -> str:
    from slurm_gpupool.core.policy.durations import format_duration

    def left(j: dict) -> str:
        return f"{format_duration(j['ends_in_s'])} left" if j["ends_in_s"] is not None else "no limit"

    return ", ".join(f"{j['job_id']} ({j['user']}, {left(j)})" for j in jobs)


def _secs(v: float | None) -> str:
    return f"{v:.1f} s" if v is not None else ""


@click.command()
@click.option("--json", "as_json", is_flag=True)
@pass_app
def status(app: AppContext, as_json: bool) -> None:
    """Per node: active and desired layout, switch state, since when and why; the next switch."""
    from pathlib import Path

    from slurm_gpupool.observe.status import pool_status
    from slurm_gpupool.repartition.hold import read_hold
    from slurm_gpupool.repartition.journal import Journal
    from slurm_gpupool.slurm.cluster import SlurmCluster

    cfg = app.config()
    cluster = SlurmCluster()
    now = datetime.now(cfg.schedule.tz) if cfg.schedule and cfg.schedule.tz else datetime.now().astimezone()
    ctl = Path(cfg.paths.controller_dir)
    last = None
    if cfg.elastic is not None:
        from slurm_gpupool.repartition.elastic import State

        last = State.load(ctl).last
    st = pool_status(cfg, cluster.nodes(), Journal(ctl).load().data, cluster.reservations(), now, read_hold(ctl), last)
    if as_json:
        emit_json(st)
        return
    rows = [
        [
            n["node"],
            n["active"] or "-",
            n["desired"] or "-",
            n["state"],
            n["slurm_state"],
            n["since"] or "",
            n["reason"],
        ]
        for n in st["nodes"]
    ]
    click.echo(table(["NODE", "ACTIVE", "DESIRED", "STATE", "SLURM", "SINCE", "REASON"], rows))
    if st["due"] or st["schedule_due"]:
        due = f"layout {st['due']}" if st["due"] else "no layout"
        click.echo(f"\ndue now: {due} ({st['due_why']})")
    if st["hold"]:
        click.echo(f"\n{st['hold']['text']}")
    if st["mode"] == "elastic":
        click.echo("\nelastic: demand decides now (schedule.elastic)")
    if st["elastic"]:
        e = st["elastic"]
        click.echo(f"last elastic decision at {e.get('at')}:")
        for a in e.get("actions", []):
            outcome = e.get("outcomes", {}).get(a["node"], "planned")
            click.echo(f"  {a['node']}: {a['from']} -> {a['to']} ({outcome}): {a['why']}")
        for u in e.get("unmet", []):
            click.echo(f"  waiting: {u['jobs']} job(s) {u['request']} ({u['gpu_eq']} GPU-eq)")
        for h in e.get("held", []):
            click.echo(f"  held: {h['why']}" if h["node"] == "-" else f"  held: {h['node']}: {h['why']}")
    if st["next_switch"]:
        click.echo(f"\nnext switch: layout {st['next_switch']['layout']} at {st['next_switch']['at']}")
    for r in st["reservations"]:
        click.echo(f"reservation {r['name']}: {','.join(r['nodes'])} from {r['start']} to {r['end']}")
    if st["run"] and not st["run"]["finished"]:
        click.echo(
            f"run {st['run']['id']} to layout {st['run']['target']} is unfinished (started {st['run']['started_at']})"
        )


@click.group()
def schedule() -> None:
    """The cron entry (or systemd timer) that runs `gpupool repartition --scheduled`."""


def env_option(f):
    return click.option(
        "--env",
        "env_items",
        multiple=True,
        metavar="NAME=VALUE",
        help="An environment variable for the repartitioner (repeatable), e.g. SLURM_CONF=/etc/slurm-b/slurm.conf.",
    )(f)


@schedule.command("show")
@click.option("--systemd", is_flag=True, help="A systemd service and timer instead of a cron entry.")
@env_option
@pass_app
def show(app: AppContext, systemd: bool, env_items: tuple[str, ...]) -> None:
    """Print what `schedule install` would write."""
    from slurm_gpupool.controller.schedule_install import parse_env, render_schedule

    for name, text in render_schedule(app.config(), systemd, env_vars=parse_env(env_items)).items():
        click.echo(f"==> {name} <==")
        click.echo(text, nl=False)


@schedule.command("install")
@click.option("--systemd", is_flag=True, help="A systemd service and timer instead of a cron entry.")
@click.option("--dest", metavar="DIR", help="Write under DIR instead of / (packaging, tests).")
@env_option
@pass_app
def install(app: AppContext, systemd: bool, dest: str | None, env_items: tuple[str, ...]) -> None:
    """Write /etc/cron.d/slurm-gpupool, or the systemd service and timer (--systemd)."""
    from pathlib import Path

    from slurm_gpupool.controller.schedule_install import install_schedule, parse_env, render_schedule

    files = render_schedule(app.config(), systemd, env_vars=parse_env(env_items))
    for p in install_schedule(files, Path(dest) if dest else None):
        click.echo(f"installed {p}")
    if systemd and not dest:
        click.echo("enable it: systemctl daemon-reload && systemctl enable --now gpupool-repartition.timer")


@schedule.command("uninstall")
@click.option("--systemd", is_flag=True, help="The systemd service and timer instead of the cron entry.")
@click.option("--dest", metavar="DIR", help="Under DIR instead of / (as install --dest).")
@pass_app
def uninstall(app: AppContext, systemd: bool, dest: str | None) -> None:
    """Remove what `schedule install` wrote: scheduled switches stop (reservations made
    ahead of a switch are deleted too; switches by hand still work)."""
    from pathlib import Path

    from slurm_gpupool.controller.schedule_install import uninstall_schedule

    cfg = app.config()
    for p in uninstall_schedule(cfg, systemd, Path(dest) if dest else None):
        click.echo(f"removed {p}")
    if systemd and not dest:
        click.echo("then: systemctl disable --now gpupool-repartition.timer && systemctl daemon-reload")
    _delete_ahead_reservations(cfg)


def _delete_ahead_reservations(cfg) -> None:
    from slurm_gpupool.errors import SlurmUnavailableError
    from slurm_gpupool.slurm.cluster import SlurmCluster

    cluster = SlurmCluster()
    prefix = cfg.repartition.reservation_prefix + "_"
    try:
        for name in cluster.reservations():
            if name.startswith(prefix) and name.endswith("_ahead"):
                cluster.delete_reservation(name)
                click.echo(f"deleted reservation {name}")
    except SlurmUnavailableError as e:
        click.echo(f"could not look at the reservations ({e}): delete any {prefix}*_ahead by hand", err=True)


def _until(text: str | None) -> datetime | None:
    if not text:
        return None
    from datetime import UTC

    from slurm_gpupool.cli.report import parse_when
    from slurm_gpupool.errors import UsageError

    when = parse_when(text, datetime.now(UTC), "--until", future=True)
    if when <= datetime.now(UTC):
        raise UsageError(f"--until {text}", "is not in the future")
    return when.astimezone()


@schedule.command("pause")
@click.option(
    "--until", "until_text", metavar="TIME", help="Until then (a date-time, or a duration: 2h); else until resumed."
)
@click.option("--why", default="", help="A note for `gpupool status` and the log.")
@pass_app
def pause(app: AppContext, until_text: str | None, why: str) -> None:
    """Scheduled runs do nothing (a switch by hand is not undone by cron); reservations
    made ahead of a switch are deleted."""
    from pathlib import Path

    from slurm_gpupool.repartition.hold import write_hold

    cfg = app.config()
    hold = write_hold(Path(cfg.paths.controller_dir), None, _until(until_text), why)
    click.echo(hold.describe())
    _delete_ahead_reservations(cfg)


@schedule.command("pin")
@click.argument("layout")
@click.option(
    "--until", "until_text", metavar="TIME", help="Until then (a date-time, or a duration: 2h); else until resumed."
)
@click.option("--why", default="", help="A note for `gpupool status` and the log.")
@pass_app
def pin(app: AppContext, layout: str, until_text: str | None, why: str) -> None:
    """Scheduled runs switch to LAYOUT (and keep it) whatever the schedule says."""
    from pathlib import Path

    from slurm_gpupool.errors import UsageError
    from slurm_gpupool.repartition.hold import write_hold

    cfg = app.config()
    if layout not in cfg.layout_names():
        raise UsageError(f"schedule pin {layout}", "no such layout", hint="layouts: " + ", ".join(cfg.layout_names()))
    hold = write_hold(Path(cfg.paths.controller_dir), layout, _until(until_text), why)
    click.echo(hold.describe())
    _delete_ahead_reservations(cfg)


@schedule.command("resume")
@pass_app
def resume(app: AppContext) -> None:
    """Scheduled runs follow the schedule again (from the next run)."""
    from pathlib import Path

    from slurm_gpupool.repartition.hold import clear_hold

    cfg = app.config()
    gone = clear_hold(Path(cfg.paths.controller_dir))
    click.echo("schedule resumed" if gone else "the schedule was not paused or pinned")
