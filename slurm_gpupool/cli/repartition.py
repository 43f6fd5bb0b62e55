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

    from slurm_gpupool.errors import UsageError

    try:
        return list(NodeSet(text))
    except NodeSetParseError as e:
        raise UsageError(f"--nodes {text}", f"not a hostlist ({e})") from None


def _duration(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    from slurm_gpupool.core.durations import parse_duration_s
    from slurm_gpupool.errors import UsageError

    try:
        return parse_duration_s(text)
    except ValueError as e:
        raise UsageError(what, str(e)) from None


@click.command()
@click.option("--to", "target", metavar="LAYOUT", help="Switch to this layout.")
@click.option("--scheduled", is_flag=True, help="Switch to the layout the schedule says is due; reserve ahead.")
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
    from slurm_gpupool.ops.repartition import Repartitioner

    if bool(target) == scheduled:
        raise UsageError("repartition", "give exactly one of --to LAYOUT and --scheduled")
    cfg = app.config()
    say = (lambda m: None) if quiet or as_json else (lambda m: click.echo(m, err=True))
    rp = Repartitioner(cfg, progress=say)
    deadline_s = _duration(deadline, f"--deadline {deadline}")
    nodes = _nodes(nodes_text)
    messages = []
    nxt = None
    if scheduled:
        if cfg.schedule is None:
            raise UsageError("repartition --scheduled", "the pool config has no schedule")
        now = datetime.now(cfg.schedule.tz) if cfg.schedule.tz else datetime.now().astimezone()
        target = cfg.schedule.due(now)
        nxt = cfg.schedule.next_change(now)
        if nxt and (nxt[0] - now).total_seconds() > rp.lead_time_s():
            nxt = None  # not yet time to reserve for it
    assert target is not None
    if dry_run:
        plan = rp.plan(target, nodes, force)
        desc = rp.describe(plan, deadline_s or cfg.repartition.deadline_s, bool(requeue))
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
            click.echo(f"\nnothing to do: every node is in layout {target} or skipped")
        return 0
    report = rp.run(target, nodes, deadline_s, requeue, force)
    if nxt:  # after the due switch: reserve the nodes the next one changes, from its start
        when, layout = nxt
        name = rp.prepare(layout, when, nodes)
        if name:
            messages.append(f"reserved the nodes that switch to {layout} at {when:%H:%M} ({name})")
    report.messages = [m for m in report.messages if m] + messages
    if as_json:
        emit_json(report.to_dict())
        return report.exit_code
    for m in report.messages:
        if not quiet:
            click.echo(m)
    if report.nodes:
        rows = [
            [n, v["outcome"], _secs(v["drained_s"]), _secs(v["out_of_service_s"]), v["reason"]]
            for n, v in sorted(report.nodes.items())
        ]
        problems = [r for r in rows if r[1] not in ("done",)]
        if not quiet or problems:
            click.echo(
                table(["NODE", "OUTCOME", "DRAINED", "OUT OF SERVICE", "REASON"], rows if not quiet else problems)
            )
    for node, why in sorted(report.skipped_plan.items()):
        click.echo(f"{node}: not switched: {why}", err=quiet)
    if not quiet:
        click.echo(
            f"layout {target}: {len(report.nodes)} switched or tried, {len(report.kept)} already there"
            f" ({report.seconds:.1f} s)"
        )
    return report.exit_code


def _jobs(jobs: list[dict]) -> str:
    from slurm_gpupool.core.durations import format_duration

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

    from slurm_gpupool.ops.journal import Journal
    from slurm_gpupool.ops.pool_status import pool_status
    from slurm_gpupool.slurm.cluster import SlurmCluster

    cfg = app.config()
    cluster = SlurmCluster()
    now = datetime.now(cfg.schedule.tz) if cfg.schedule and cfg.schedule.tz else datetime.now().astimezone()
    st = pool_status(
        cfg, cluster.nodes(), Journal(Path(cfg.paths.controller_dir)).load().data, cluster.reservations(), now
    )
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
    from slurm_gpupool.ops.schedule_install import parse_env, render_schedule

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

    from slurm_gpupool.ops.schedule_install import install_schedule, parse_env, render_schedule

    files = render_schedule(app.config(), systemd, env_vars=parse_env(env_items))
    for p in install_schedule(files, Path(dest) if dest else None):
        click.echo(f"installed {p}")
    if systemd and not dest:
        click.echo("enable it: systemctl daemon-reload && systemctl enable --now gpupool-repartition.timer")
