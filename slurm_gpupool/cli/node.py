"""``gpupool node``: apply, assert or export this node's GPU layout (run on the node, as root)."""

from __future__ import annotations

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.cli.output import emit_json


@click.group()
def node() -> None:
    """Make this node's GPUs match a layout (mig-parted style, done incrementally)."""


@node.command("apply")
@click.argument("layout_name", metavar="LAYOUT", required=False)
@click.option(
    "--recorded",
    is_flag=True,
    help="Apply the layout of the last apply (node status), as at boot: MIG instances do not survive a reboot.",
)
@click.option("--fallback", metavar="LAYOUT", help="With --recorded: the layout for a node with none recorded.")
@click.option("--dry-run", is_flag=True, help="Print the exact NVML operations; change nothing.")
@click.option("--force", is_flag=True, help="Change GPUs even if processes run on them.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def apply(
    app: AppContext,
    layout_name: str | None,
    recorded: bool,
    fallback: str | None,
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> int:
    """Apply LAYOUT (or --recorded): leave matching GPUs alone, change the others, roll back on failure.

    Exit 0 when done (or nothing to do), 1 if a GPU failed and was rolled back,
    75 if GPUs are busy, 65 if the layout cannot fit, 78 for a bad config, 2 for
    bad arguments. --recorded with no recorded layout and no --fallback leaves the
    GPUs alone (exit 0).
    """
    from slurm_gpupool.errors import UsageError

    if bool(layout_name) == recorded:
        raise UsageError("node apply", "give exactly one of LAYOUT and --recorded")
    if fallback and not recorded:
        raise UsageError("node apply --fallback", "only with --recorded")
    if recorded:
        layout_name, why = _recorded_layout(app, fallback)
        if layout_name is None:
            if as_json:
                emit_json({"node": app.node_name(), "layout": None, "gpus": [], "message": why})
            else:
                click.echo(why)
            return 0
        click.echo(why, err=True)
    assert layout_name is not None  # one of LAYOUT and --recorded (checked above)
    from slurm_gpupool.node.apply import apply_node

    report = apply_node(app.gpu_backend(), app.config(), layout_name, app.state_dir(), dry_run=dry_run, force=force)
    if as_json:
        from slurm_gpupool.node.state import read_node_state

        # the node state too: the repartitioner runs this through srun and keeps a copy on the controller
        emit_json({**report.to_dict(), "state": None if dry_run else read_node_state(app.state_dir())})
    else:
        for g in report.gpus:
            head = f"GPU {g.index}: {g.status}"
            if g.status != "unchanged":
                head += f" ({g.before} -> {g.target})"
            click.echo(head)
            for op in g.ops:
                click.echo(f"    {op}")
            if g.error:
                click.echo(f"    error: {g.error}")
        verb = "would change" if dry_run else "changed"
        n = sum(1 for g in report.gpus if g.ops)
        click.echo(f"node {report.node}: layout {layout_name}: {verb} {n} of {len(report.gpus)} GPUs")
    if report.failed:
        click.echo(f"gpupool: node apply {layout_name} failed on {report.node}; see the errors above", err=True)
        return 1
    return 0


def _recorded_layout(app: AppContext, fallback: str | None) -> tuple[str | None, str]:
    """The layout ``--recorded`` applies, and what to say about it.

    At boot a node must not stay stripped of its MIG instances because its state file
    is corrupt or names a layout the config has since dropped: with ``--fallback``
    those fall back (with a warning); without, they are errors naming the file."""
    from slurm_gpupool.errors import ConfigError, StateError
    from slurm_gpupool.node.state import read_node_state, state_file

    path = state_file(app.state_dir())
    try:
        state = read_node_state(app.state_dir()) or {}
    except StateError as e:
        if not fallback:
            raise
        click.echo(f"gpupool: warning: {e.message()}; applying the fallback instead", err=True)
        state = {}
    layout = state.get("layout")
    if layout and layout not in app.config().layout_names():
        if not fallback:
            raise ConfigError(
                f"node state {path}",
                "layout",
                f"the recorded layout {layout!r} is not in the pool config",
                hint="give --fallback LAYOUT, or apply a layout by name",
            )
        click.echo(f"gpupool: warning: the recorded layout {layout!r} is not in the pool config", err=True)
        layout = None
    if layout:
        return layout, f"applying the recorded layout {layout}"
    if fallback:
        return fallback, f"applying the fallback layout {fallback}"
    return None, f"no layout recorded at {path} and no --fallback: GPUs left as they are"


@node.command("assert")
@click.argument("layout_name", metavar="LAYOUT")
@pass_app
def assert_(app: AppContext, layout_name: str) -> int:
    """Exit 0 if the node matches LAYOUT, 1 (printing the differences) if not."""
    from slurm_gpupool.node.apply import assert_node

    diffs = assert_node(app.config(), layout_name, app.gpu_backend().inventory())
    for line in diffs:
        click.echo(line)
    if diffs:
        return 1
    click.echo(f"node {app.node_name()} matches layout {layout_name}")
    return 0


@node.command("export")
@click.option("--name", "layout_name", default=None, help="Layout name to write (default: the recorded one).")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def export(app: AppContext, layout_name: str | None, as_json: bool) -> None:
    """Print the node's current GPUs as a pool config; applying it back is a no-op."""
    from slurm_gpupool.node.apply import export_node
    from slurm_gpupool.node.state import read_node_state

    previous = read_node_state(app.state_dir())
    name = layout_name or (previous or {}).get("layout") or "exported"
    data = export_node(app.gpu_backend().inventory(), previous, name)
    if as_json:
        emit_json(data)
    else:
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())


@node.command("status")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def status(app: AppContext, as_json: bool) -> int:
    """Show the node state recorded by the last apply."""
    from slurm_gpupool.node.state import read_node_state, state_file

    st = read_node_state(app.state_dir())
    if st is None:
        click.echo(f"no node state at {state_file(app.state_dir())} (never applied)")
        return 1
    if as_json:
        emit_json(st)
        return 0
    click.echo(f"node {st['node']}: layout {st['layout']} ({st['status']}) since {st['applied_at']}")
    if st.get("message"):
        click.echo(f"  {st['message']}")
    for g in st["gpus"]:
        what = g["mode"] + (f" x{g['shares']}" if g["mode"] == "shared" else "")
        insts = ", ".join(f"{i['profile']}@{i['placement']['start']}" for i in g["instances"])
        click.echo(f"  GPU {g['index']}: {what}" + (f" [{insts}]" if insts else ""))
    return 0
