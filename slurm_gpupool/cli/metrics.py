"""``gpupool metrics``: Prometheus metrics of the pool (docs/metrics.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from slurm_gpupool.cli.context import AppContext, pass_app

# observe.metrics.SCOPES, spelt here so that `gpupool metrics --help` loads no metrics code (a test holds them equal)
SCOPES = ("all", "pool", "node")


def parse_listen(text: str) -> tuple[str, int]:
    """``:9810``, ``9810``, ``127.0.0.1:9810`` or ``[::1]:9810`` → (host, port)."""
    from slurm_gpupool.errors import UsageError

    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"metrics --listen {text}", "expected [HOST]:PORT, e.g. :9810")
    return host, int(port)


@click.command()
@click.option(
    "--scope",
    type=click.Choice(SCOPES),
    default="all",
    show_default=True,
    help="pool: Slurm and the repartition journal (run it on the controller); node: the hooks' counts "
    "of the nodes whose state directory this host sees (run it on each GPU node); all: both.",
)
@click.option(
    "--textfile",
    metavar="PATH",
    help="Write the metrics to PATH atomically (node_exporter's textfile collector: a *.prom file in its "
    "--collector.textfile.directory), instead of printing them.",
)
@click.option(
    "--listen",
    metavar="[HOST]:PORT",
    help="Serve them over HTTP at /metrics (e.g. :9810) until stopped, instead of printing them.",
)
@click.option(
    "--min-interval",
    type=float,
    default=5.0,
    show_default=True,
    help="With --listen: gather at most this often (seconds); closer scrapes get the last result.",
)
@click.option(
    "--per-job",
    is_flag=True,
    help="Slice activity series per running job too (a job label): one series per job and slice, "
    "new ones with every job; off, they are one per slice in use (docs/metrics.md).",
)
@pass_app
def metrics(
    app: AppContext, scope: str, textfile: str | None, listen: str | None, min_interval: float, per_job: bool
) -> None:
    """Pool capacity, allocation and pending demand per GRES type, MIG profile and shard type
    (devices and GPU-equivalents, by layout); per node layout and switch state; repartition
    runs, outcomes and out-of-service time; hook failures and health drains.

    Per GPU slice in use (node scope), its jobs' latest SM, tensor and DRAM activity and
    memory, one series per slice (--per-job: per job too).

    Prometheus text format, printed, written to a textfile, or served with --listen.
    """
    from slurm_gpupool.errors import UsageError
    from slurm_gpupool.observe.metrics import collect, serve, write_textfile

    if textfile and listen:
        raise UsageError("metrics", "give --textfile or --listen, not both")
    cfg = app.config()
    node = app.node_name()  # a GPU node's own hook counts, where paths.state_dir has no {node}
    if listen:
        address = parse_listen(listen)

        def ready(bound: tuple) -> None:
            click.echo(f"gpupool metrics: serving http://{bound[0] or '*'}:{bound[1]}/metrics", err=True)

        serve(address, lambda: collect(cfg, scope=scope, local_node=node, per_job=per_job).text(), min_interval, ready)
        return
    text = collect(cfg, scope=scope, local_node=node, per_job=per_job).text()
    if textfile:
        write_textfile(Path(textfile), text)
        return
    sys.stdout.write(text)
