"""``gpupool sandbox``: a real local Slurm cluster with emulated GPU nodes.

Thin commands over :class:`slurm_gpupool.sandbox.cluster.Sandbox`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from slurm_gpupool.cli.output import emit_json, table
from slurm_gpupool.errors import EXIT_FAILED

_ROOT_HELP = "Sandbox directory (env SLURM_GPUPOOL_SANDBOX; default /var/tmp/slurm-gpupool-sandbox)."


def _root_option(f: Any) -> Any:
    return click.option(
        "--root",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="SLURM_GPUPOOL_SANDBOX",
        default=None,
        help=_ROOT_HELP,
    )(f)


def _slurm_option(f: Any) -> Any:
    return click.option(
        "--slurm",
        "slurm_series",
        metavar="SERIES",
        help="Slurm release: 22.05, 24.11 or 26.05 (default: the host's). One the host does not have "
        "runs in a container of its own (built once from Debian's archive and cached).",
    )(f)


def _foreign(series: str | None) -> Any:
    from slurm_gpupool.sandbox.tools import foreign_release

    return foreign_release(series)


def _forwarded_args(ctx: click.Context) -> list[str]:
    """This command's options as given, for the same command inside the container."""
    args: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in ("slurm_series", "help") or param.name is None:
            continue
        value = ctx.params.get(param.name)
        if value is None or value is False or value == param.default:
            continue
        args += [param.opts[0]] if param.is_flag else [param.opts[0], str(value)]
    return args


def _in_container(ctx: click.Context, release: Any, start: bool = False, binds: tuple[Path, ...] = ()) -> None:
    """Run this very ``gpupool sandbox`` command in the release's container; exit with its code."""
    from slurm_gpupool.sandbox.container import Container, ensure_running

    container = ensure_running(release, _progress) if start else Container(release)
    if not container.running():
        click.echo(
            f"no container for Slurm {release.series} is running (start it: gpupool sandbox up --slurm "
            f"{release.series})"
        )
        ctx.exit(EXIT_FAILED if ctx.info_name == "status" else 0)
    for path in binds:
        container.bind(path)
    argv = ["gpupool", "sandbox", str(ctx.info_name), *_forwarded_args(ctx)]
    ctx.exit(container.run(argv, cwd=os.getcwd()).returncode)


def _json_option(f: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(f)


def _progress(msg: str) -> None:
    click.echo(f"  {msg}", err=True)


def _sandbox(root: Path | None, **kwargs: Any) -> Any:
    from slurm_gpupool.sandbox.cluster import Sandbox

    return Sandbox(root, **kwargs)


@click.group()
def sandbox() -> None:
    """A real Slurm cluster on this machine: emulated GPU nodes, simulated GPUs.

    munged, MariaDB, slurmdbd, slurmctld and one `slurmd -N NODE` per node all
    run under one directory; nothing of the system's own Slurm, munge or database
    is touched.  Needs root.  Use it from a shell with
    `eval "$(gpupool sandbox env)"`.
    """


@sandbox.command()
@_root_option
@_slurm_option
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Pool config whose nodes the sandbox plays (default: the last one used, else the shipped "
    "etc/gpupool.yaml). Every node set needs a machine description.",
)
@click.option(
    "--nodes",
    "n_nodes",
    type=click.IntRange(1, 200),  # sandbox.plan.MAX_NODES (not imported: the CLI starts light)
    metavar="N",
    help="Play N DGX/HGX-like nodes (half dgx-a100, half hgx-h100) instead of a config's: writes "
    "<root>/scale-pool.yaml with the example's day and night layouts and plays it (docs/scale-sandbox.md).",
)
@click.option("--layout", help="Layout applied to nodes with new GPUs (default: the schedule's default).")
@click.option("--port-base", type=click.IntRange(1024, 65000), help="First of the sandbox's ports (default 16800).")
@click.option("--no-install", is_flag=True, help="Do not apt-get install missing packages.")
@click.option(
    "--fresh",
    is_flag=True,
    help="Start from empty state: stop and delete what a previous sandbox at this root left "
    "(saved jobs, drained nodes, reservations, accounting, repartition journal).",
)
@_json_option
@click.pass_context
def up(
    ctx: click.Context,
    root: Path | None,
    slurm_series: str | None,
    config_path: Path | None,
    n_nodes: int | None,
    layout: str | None,
    port_base: int | None,
    no_install: bool,
    fresh: bool,
    as_json: bool,
) -> None:
    """Start (or repair) the cluster; a fast no-op when it is already up.

    With --slurm naming a release the host does not run, the cluster runs in that
    release's container; use it through `gpupool sandbox exec --slurm SERIES -- CMD`.
    """
    release = _foreign(slurm_series)
    if release is not None:
        binds = (config_path.resolve().parent,) if config_path else ()
        if config_path:
            ctx.params["config_path"] = config_path.resolve()
        _in_container(ctx, release, start=True, binds=binds)
    if n_nodes is not None and config_path is not None:
        from slurm_gpupool.errors import UsageError

        raise UsageError("sandbox up", "--config and --nodes exclude each other")
    if fresh:
        _sandbox(root, progress=None if as_json else _progress).down(purge=True)
    if n_nodes is not None:
        config_path = _sandbox(root).write_scale_config(n_nodes)
    sb = _sandbox(root, config=config_path, base_port=port_base, layout=layout, progress=None if as_json else _progress)
    report = sb.up(install=not no_install)
    if as_json:
        emit_json(report.to_dict())
        return
    done = "already up" if not (report.started or report.restarted or report.stopped) else "up"
    click.echo(f"sandbox {done} at {sb.root} ({report.seconds:.1f} s)")
    for label, names in (
        ("installed", report.installed_packages),
        ("started", report.started),
        ("restarted", report.restarted),
        ("stopped", report.stopped),
    ):
        if names:
            click.echo(f"  {label}: {', '.join(names)}")
    series = os.environ.get("SLURM_GPUPOOL_CONTAINER")
    if series:  # we run inside the container of that release
        root_opt = "" if root is None else f" --root {sb.root}"
        click.echo(f"use it: gpupool sandbox exec --slurm {series}{root_opt} -- COMMAND (sinfo, sbatch, gpupool ...)")
    else:
        click.echo(f'use it: eval "$(gpupool sandbox env --root {sb.root})"')


def render_status(st: dict[str, Any]) -> str:
    if not st["exists"]:
        return f"no sandbox at {st['root']} (start one with `gpupool sandbox up`)"
    out = [f"sandbox at {st['root']}: {'up' if st['up'] else 'NOT fully up'}", ""]
    out.append(
        table(
            ["DAEMON", "PID", "RUNNING", "LOG"],
            [[d["name"], d["pid"] or "-", "yes" if d["running"] else "NO", d["log"]] for d in st["daemons"]],
        )
    )
    out.append("")
    out.append(
        table(
            ["NODE", "MACHINE", "ADDR", "SLURMD", "PID", "STATE", "GRES", "REASON"],
            [
                [
                    n["name"],
                    n["machine"],
                    f"{n['addr']}:{n['port']}",
                    "running" if n["slurmd_running"] else "STOPPED",
                    n["slurmd_pid"] or "-",
                    n["state"],
                    n["gres"],
                    n["reason"] if n["reason"] not in ("none", "") else "",
                ]
                for n in st["nodes"]
            ],
        )
    )
    return "\n".join(out)


@sandbox.command()
@_root_option
@_slurm_option
@_json_option
@click.pass_context
def status(ctx: click.Context, root: Path | None, slurm_series: str | None, as_json: bool) -> None:
    """Each daemon and node: running or not, and Slurm's node states (sinfo).

    Exits 1 when something is not running.
    """
    release = _foreign(slurm_series)
    if release is not None:
        _in_container(ctx, release)
    st = _sandbox(root).status()
    if as_json:
        emit_json(st)
    else:
        click.echo(render_status(st))
    if not st["up"]:
        ctx.exit(EXIT_FAILED)


def _hostlist(text: str) -> list[str]:
    """``--nodes``' names.  A plain hostlist (``a100n[1-2],h100n1``: what the repartitioner
    passes to each `sandbox stop|start`) is expanded without importing ClusterShell, as the
    config's are (core/gres/hostlist.py; ~8 ms a command, #29)."""
    from slurm_gpupool.core.gres.hostlist import expand_plain

    plain = expand_plain(text)
    if plain is not None:
        return plain
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    from slurm_gpupool.errors import UsageError

    try:
        return list(NodeSet(text))
    except NodeSetParseError as e:
        raise UsageError(f"--nodes {text}", f"not a hostlist ({e})") from None


@sandbox.command()
@_root_option
@_slurm_option
@click.option("--nodes", "nodes_text", metavar="HOSTLIST", required=True, help="The nodes whose slurmd to stop.")
@click.pass_context
def stop(ctx: click.Context, root: Path | None, slurm_series: str | None, nodes_text: str) -> None:
    """Stop nodes' slurmd, as `systemctl stop slurmd` would (start them with `sandbox start`)."""
    release = _foreign(slurm_series)
    if release is not None:
        _in_container(ctx, release)
    stopped = _sandbox(root, progress=_progress).stop_nodes(_hostlist(nodes_text))
    click.echo(f"stopped slurmd on {', '.join(stopped) or 'no node (none was running)'}")


@sandbox.command()
@_root_option
@_slurm_option
@click.option("--nodes", "nodes_text", metavar="HOSTLIST", required=True, help="The nodes whose slurmd to start.")
@click.pass_context
def start(ctx: click.Context, root: Path | None, slurm_series: str | None, nodes_text: str) -> None:
    """Start nodes' slurmd if they are not running, as `systemctl start slurmd` would (files untouched)."""
    release = _foreign(slurm_series)
    if release is not None:
        _in_container(ctx, release)
    report = _sandbox(root, progress=_progress).start_nodes(_hostlist(nodes_text))
    click.echo(f"started {', '.join(report.started) or 'nothing (all running)'} ({report.seconds:.1f} s)")


@sandbox.command()
@_root_option
@_slurm_option
@_json_option
@click.pass_context
def env(ctx: click.Context, root: Path | None, slurm_series: str | None, as_json: bool) -> None:
    """Print `export NAME=value` lines: SLURM_CONF, SLURM_GPUPOOL_SIM_DIR, SLURM_GPUPOOL_SANDBOX.

    For a release in a container these are the values inside it (where
    `gpupool sandbox exec --slurm SERIES` sets them already).
    """
    release = _foreign(slurm_series)
    if release is not None:
        _in_container(ctx, release)
    from slurm_gpupool.sandbox.cluster import env_lines

    values = _sandbox(root).env()
    if as_json:
        emit_json(values)
    else:
        click.echo(env_lines(values), nl=False)


@sandbox.command()
@_root_option
@_slurm_option
@click.option("--purge", is_flag=True, help="Also delete the sandbox directory (database, logs, simulated GPUs).")
@_json_option
@click.pass_context
def down(ctx: click.Context, root: Path | None, slurm_series: str | None, purge: bool, as_json: bool) -> None:
    """Stop every process the sandbox started (by pid), and remove pid files.

    For a release in a container, the container stops too (--purge deletes it).
    """
    release = _foreign(slurm_series)
    if release is not None:
        _container_down(ctx, release, purge)
    sb = _sandbox(root, progress=None if as_json else _progress)
    stopped = sb.down(purge=purge)
    if as_json:
        emit_json({"root": str(sb.root), "stopped": stopped, "purged": purge})
        return
    what = ", ".join(stopped) if stopped else "nothing was running"
    click.echo(f"sandbox down at {sb.root}: {what}" + (" (directory deleted)" if purge else ""))


@sandbox.command()
@_root_option
@_slurm_option
@click.option("--controller", is_flag=True, help="Restart slurmctld.")
@click.option("--nodes", "nodes_text", metavar="HOSTLIST", help="Restart these nodes' slurmd (e.g. a100n[1-2],h100n1).")
@click.option(
    "--no-files",
    is_flag=True,
    help="Only restart the daemons, as `systemctl restart` would: leave gres.conf and the includes as they are.",
)
@_json_option
@click.pass_context
def restart(
    ctx: click.Context,
    root: Path | None,
    slurm_series: str | None,
    controller: bool,
    nodes_text: str | None,
    no_files: bool,
    as_json: bool,
) -> None:
    """Restart slurmctld and/or slurmds (all of them without options).

    Slurm 22.05 applies changed GRES counts only after a restart of slurmctld
    and the node's slurmd; `scontrol reconfigure` is not enough.  Without
    --no-files the sandbox first re-installs GRES from the nodes' live state.
    Exit 1 if a daemon does not come back (e.g. slurmctld refuses its config).
    """
    release = _foreign(slurm_series)
    if release is not None:
        _in_container(ctx, release)
    nodes = _hostlist(nodes_text) if nodes_text else None
    sb = _sandbox(root, progress=None if as_json else _progress)
    report = sb.restart(controller=controller, nodes=nodes, files=not no_files)
    if as_json:
        emit_json(report.to_dict())
        return
    names = report.restarted + report.started
    click.echo(f"restarted {', '.join(names)} ({report.seconds:.1f} s)")


def _container_down(ctx: click.Context, release: Any, purge: bool) -> None:
    from slurm_gpupool.sandbox.container import Container

    container = Container(release)
    code = 0
    if container.running():
        code = container.run(["gpupool", "sandbox", "down", *_forwarded_args(ctx)]).returncode
        container.stop()
        click.echo(f"container for Slurm {release.series} stopped")
    if purge:
        container.purge()
        click.echo(f"deleted {container.paths.dir}")
    ctx.exit(code)


@sandbox.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_root_option
@_slurm_option
@click.option("-e", "--env", "env_items", metavar="NAME=VALUE", multiple=True, help="Set a variable (repeatable).")
@click.option(
    "--bind",
    "binds",
    type=click.Path(exists=True, path_type=Path),
    multiple=True,
    help="Mount this host path at the same place in the container, read-only (repeatable).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(
    root: Path | None,
    slurm_series: str | None,
    env_items: tuple[str, ...],
    binds: tuple[Path, ...],
    command: tuple[str, ...],
) -> None:
    """Run COMMAND against the sandbox: `gpupool sandbox exec --slurm 24.11 -- sinfo`.

    The command gets the sandbox's environment (SLURM_CONF, ...).  For a release in
    a container it runs inside it (its own Slurm tools, this package mounted, the
    current directory if it is mounted there, else /), and the container is started
    if it is not running; the exit code is the command's.
    """
    from slurm_gpupool.errors import UsageError
    from slurm_gpupool.sandbox.cluster import Sandbox

    extra = {}
    for item in env_items:
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier():
            raise UsageError(f"--env {item}", "not NAME=VALUE")
        extra[name] = value
    release = _foreign(slurm_series)
    if release is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(Sandbox(root).env())
        env.update(extra)
        os.execvpe(command[0], list(command), env)
    from slurm_gpupool.sandbox.container import ensure_running

    container = ensure_running(release, _progress)
    for path in binds:
        container.bind(path.resolve())
    inside = Sandbox(root).env()
    inside.update(extra)
    argv = container.argv(list(command), inside, cwd=os.getcwd())
    os.execvp(argv[0], argv)
