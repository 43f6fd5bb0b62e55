"""``gpupool gres``: render, diff and install gres.conf and the slurm.conf includes."""

from __future__ import annotations

from pathlib import Path

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.cli.output import emit_json

_source = [
    click.option(
        "--planned", "planned", metavar="LAYOUT", help="Render LAYOUT from the config and machine descriptions."
    ),
    click.option("--live", is_flag=True, help="Render from the node state written by `node apply` (default)."),
    click.option("--nodes", metavar="HOSTLIST", help="Only these nodes (default: every node in the config)."),
    click.option(
        "--simulated-ids",
        is_flag=True,
        help="With --planned on simulated nodes: name MIG device files with the simulator's instance ids "
        "(real drivers choose their own: a real planned render takes them from nodes that have the instances).",
    ),
    click.option("--templates", metavar="DIR", help="Site template directory, searched before the built-in one."),
]


def source_options(f):
    for opt in reversed(_source):
        f = opt(f)
    return f


def _render(
    app: AppContext,
    planned: str | None,
    live: bool,
    nodes: str | None,
    templates: str | None,
    as_installed: str | None = None,
    simulated_ids: bool = False,
    preview: bool = False,
):
    """The config and its rendering; ``as_installed``: as if the config were at that path
    (the files name it), to preview a config before it is installed; ``preview``: a planned
    layout's files on a host without its nodes (the simulator's MIG ids, marked as such)."""
    import dataclasses

    from slurm_gpupool.controller.gres_install import render
    from slurm_gpupool.errors import UsageError
    from slurm_gpupool.pool.planned import select_nodes

    if planned and live:
        raise UsageError("gres", "--planned and --live exclude each other")
    if (simulated_ids or preview) and not planned:
        raise UsageError("gres", f"{'--preview' if preview else '--simulated-ids'} goes with --planned LAYOUT")
    if preview and simulated_ids:
        raise UsageError("gres", "--preview and --simulated-ids exclude each other")
    cfg = app.config()
    if preview:
        from slurm_gpupool.pool.planned import IDS_SIMULATED

        click.echo(
            "gpupool: a preview: MIG device files name the simulator's instance ids, which a real driver may "
            "not choose; install a layout's files after `node apply`, with --live (or let the repartitioner)",
            err=True,
        )
        return cfg, render(cfg, select_nodes(cfg, nodes), planned, templates, IDS_SIMULATED, preview=True)
    if simulated_ids and not (app.sim_dir or cfg.sim_dir):
        raise UsageError(
            "gres --simulated-ids",
            "only for simulated GPUs (--sim-dir or simulation.sim_dir): a real driver chooses its own instance ids",
            hint=f"apply the layout first (`gpupool node apply {planned}`), then render --live",
        )
    if as_installed:
        cfg = dataclasses.replace(cfg, source=as_installed)
    from slurm_gpupool.pool.planned import IDS_LIVE, IDS_SIMULATED

    ids = IDS_SIMULATED if simulated_ids else IDS_LIVE
    return cfg, render(cfg, select_nodes(cfg, nodes), planned, templates, ids)


@click.group()
def gres() -> None:
    """Slurm GRES for the pool: gres.conf, NodeName lines, GresTypes and TRES."""


@gres.command("render")
@source_options
@click.option(
    "--preview",
    is_flag=True,
    help="With --planned on a host without the nodes (an admin host): name MIG device files with the "
    "simulator's instance ids, the files marked as a preview (not for install: a real driver chooses its own).",
)
@click.option("--out", metavar="DIR", help="Write the files into DIR instead of printing them.")
@pass_app
def render_cmd(app: AppContext, planned, live, nodes, simulated_ids, templates, preview: bool, out: str | None) -> None:
    """Render gres.conf, the NodeName include and the GresTypes/TRES include."""
    cfg, r = _render(app, planned, live, nodes, templates, simulated_ids=simulated_ids, preview=preview)
    from slurm_gpupool.controller.gres_install import ROLES

    if out:
        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        for role, attr in ROLES.items():
            (d / getattr(cfg.slurm, attr)).write_text(r.files[role])
            click.echo(f"wrote {d / getattr(cfg.slurm, attr)}")
        return
    for role, attr in ROLES.items():
        click.echo(f"==> {getattr(cfg.slurm, attr)} <==")
        click.echo(r.files[role], nl=False)
        click.echo()


@gres.command("diff")
@source_options
@click.option(
    "--as-installed",
    metavar="PATH",
    help="Render as if the config were installed at PATH (the path the files name): "
    "previews what a new config, given with --config, would change.",
)
@pass_app
def diff_cmd(app: AppContext, planned, live, nodes, simulated_ids, templates, as_installed: str | None) -> int:
    """Show how the installed files differ from a fresh rendering (exit 1 if they do)."""
    from slurm_gpupool.controller.gres_install import diff

    cfg, r = _render(app, planned, live, nodes, templates, as_installed, simulated_ids)
    text = diff(cfg, r)
    if text:
        click.echo(text, nl=False)
        return 1
    click.echo("installed files are up to date")
    return 0


@gres.command("install")
@source_options
@click.option("--no-backup", is_flag=True, help="Do not keep the previous files as *.bak.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def install_cmd(
    app: AppContext, planned, live, nodes, simulated_ids, templates, no_backup: bool, as_json: bool
) -> None:
    """Validate, then write the files atomically and say which daemons must restart."""
    from slurm_gpupool.controller.gres_install import install, installed_paths
    from slurm_gpupool.slurm.runner import SlurmRunner, slurm_version
    from slurm_gpupool.slurm.versions import reconfigure_applies_gres

    cfg, r = _render(app, planned, live, nodes, templates, simulated_ids=simulated_ids)
    from slurm_gpupool.errors import SlurmUnavailableError

    try:
        reconf = reconfigure_applies_gres(slurm_version(SlurmRunner()))
    except SlurmUnavailableError:  # no Slurm client here: assume the conservative 22.05 rule
        reconf = False
    plan = install(cfg, r, backup=not no_backup, reconfigure_ok=reconf)
    from slurm_gpupool.controller.support_files import install_support_files

    support = install_support_files(cfg, r.installed_layout())
    if as_json:
        emit_json(
            {
                "files": {**{k: str(v) for k, v in installed_paths(cfg).items()}, **{p.name: str(p) for p in support}},
                "gres_changed": plan.gres_changed,
                "features_changed": plan.features_changed,
                "controller_wide": plan.controller_wide,
                "advice": plan.describe(),
            }
        )
        return
    for path in [*installed_paths(cfg).values(), *support]:
        click.echo(f"installed {path}")
    click.echo(plan.describe())
