"""``gpupool sandbox``: a real local Slurm cluster with emulated GPU nodes.

Thin commands over :class:`slurm_gpupool.sandbox.cluster.Sandbox`.
"""

from __future__ import annotations

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
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Pool config whose nodes the sandbox plays (default: the last one used, else the shipped "
    "etc/gpupool.yaml). Every node set needs a machine description.",
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
def up(
    root: Path | None,
    config_path: Path | None,
    layout: str | None,
    port_base: int | None,
    no_install: bool,
    fresh: bool,
    as_json: bool,
) -> None:
    """Start (or repair) the cluster; a fast no-op when it is already up."""
    if fresh:
        _sandbox(root, progress=None if as_json else _progress).down(purge=True)
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
@_json_option
@click.pass_context
def status(ctx: click.Context, root: Path | None, as_json: bool) -> None:
    """Each daemon and node: running or not, and Slurm's node states (sinfo).

    Exits 1 when something is not running.
    """
    st = _sandbox(root).status()
    if as_json:
        emit_json(st)
    else:
        click.echo(render_status(st))
    if not st["up"]:
        ctx.exit(EXIT_FAILED)


def _hostlist(text: str) -> list[str]:
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    from slurm_gpupool.errors import UsageError

    try:
        return list(NodeSet(text))
    except NodeSetParseError as e:
        raise UsageError(f"--nodes {text}", f"not a hostlist ({e})") from None


@sandbox.command()
@_root_option
@click.option("--nodes", "nodes_text", metavar="HOSTLIST", required=True, help="The nodes whose slurmd to stop.")
def stop(root: Path | None, nodes_text: str) -> None:
    """Stop nodes' slurmd, as `systemctl stop slurmd` would (start them with `sandbox start`)."""
    stopped = _sandbox(root, progress=_progress).stop_nodes(_hostlist(nodes_text))
    click.echo(f"stopped slurmd on {', '.join(stopped) or 'no node (none was running)'}")


@sandbox.command()
@_root_option
@click.option("--nodes", "nodes_text", metavar="HOSTLIST", required=True, help="The nodes whose slurmd to start.")
def start(root: Path | None, nodes_text: str) -> None:
    """Start nodes' slurmd if they are not running, as `systemctl start slurmd` would (files untouched)."""
    report = _sandbox(root, progress=_progress).start_nodes(_hostlist(nodes_text))
    click.echo(f"started {', '.join(report.started) or 'nothing (all running)'} ({report.seconds:.1f} s)")


@sandbox.command()
@_root_option
@_json_option
def env(root: Path | None, as_json: bool) -> None:
    """Print `export NAME=value` lines: SLURM_CONF, SLURM_GPUPOOL_SIM_DIR, SLURM_GPUPOOL_SANDBOX."""
    from slurm_gpupool.sandbox.cluster import env_lines

    values = _sandbox(root).env()
    if as_json:
        emit_json(values)
    else:
        click.echo(env_lines(values), nl=False)


@sandbox.command()
@_root_option
@click.option("--purge", is_flag=True, help="Also delete the sandbox directory (database, logs, simulated GPUs).")
@_json_option
def down(root: Path | None, purge: bool, as_json: bool) -> None:
    """Stop every process the sandbox started (by pid), and remove pid files."""
    sb = _sandbox(root, progress=None if as_json else _progress)
    stopped = sb.down(purge=purge)
    if as_json:
        emit_json({"root": str(sb.root), "stopped": stopped, "purged": purge})
        return
    what = ", ".join(stopped) if stopped else "nothing was running"
    click.echo(f"sandbox down at {sb.root}: {what}" + (" (directory deleted)" if purge else ""))


@sandbox.command()
@_root_option
@click.option("--controller", is_flag=True, help="Restart slurmctld.")
@click.option("--nodes", "nodes_text", metavar="HOSTLIST", help="Restart these nodes' slurmd (e.g. a100n[1-2],h100n1).")
@click.option(
    "--no-files",
    is_flag=True,
    help="Only restart the daemons, as `systemctl restart` would: leave gres.conf and the includes as they are.",
)
@_json_option
def restart(root: Path | None, controller: bool, nodes_text: str | None, no_files: bool, as_json: bool) -> None:
    """Restart slurmctld and/or slurmds (all of them without options).

    Slurm 22.05 applies changed GRES counts only after a restart of slurmctld
    and the node's slurmd; `scontrol reconfigure` is not enough.  Without
    --no-files the sandbox first re-installs GRES from the nodes' live state.
    Exit 1 if a daemon does not come back (e.g. slurmctld refuses its config).
    """
    nodes = _hostlist(nodes_text) if nodes_text else None
    sb = _sandbox(root, progress=None if as_json else _progress)
    report = sb.restart(controller=controller, nodes=nodes, files=not no_files)
    if as_json:
        emit_json(report.to_dict())
        return
    names = report.restarted + report.started
    click.echo(f"restarted {', '.join(names)} ({report.seconds:.1f} s)")
