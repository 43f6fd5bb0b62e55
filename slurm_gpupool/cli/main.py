"""``gpupool``: the admin command.  Thin click commands over ``ops`` and ``hw``.

Admins, cron and CI start it all day, so its start is kept short: this module imports click and
nothing heavy; each subcommand's module is imported only when that command runs, and imports
its own heavy dependencies inside the command (benchmarks/bench_cli.py measures it)."""

from __future__ import annotations

import importlib
import sys
from typing import Any, NamedTuple

import click

from slurm_gpupool import __version__
from slurm_gpupool.cli.context import AppContext
from slurm_gpupool.cli.errors import run


class Lazy(NamedTuple):
    """Where a subcommand lives, and the first paragraph of its help (what ``--help`` lists)."""

    target: str  # "module:attribute"
    summary: str


class LazyGroup(click.Group):
    """Subcommands live in their own modules and are imported on first use (click's documented
    LazyGroup pattern).  ``gpupool --help`` lists them from the static table without importing
    any: tests/unit/test_cli_startup.py holds the table equal to the commands' own help."""

    def __init__(self, *args: Any, lazy: dict[str, Lazy] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self._lazy and name not in self.commands:
            module, attr = self._lazy[name].target.split(":")
            self.commands[name] = getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own listing, with a stand-in carrying the summary for a command not imported yet
        (click shortens it to the line exactly as it shortens the real command's help)."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name) or click.Command(name, help=self._lazy[name].summary)
            if not cmd.hidden:
                rows.append((name, cmd))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])


COMMANDS = {
    "avail": Lazy(
        "slurm_gpupool.cli.avail:avail",
        "What each GPU type and share offers now, per node set and partition; the layouts and the next switch.",
    ),
    "inventory": Lazy(
        "slurm_gpupool.cli.inventory:inventory",
        "Show GPUs, MIG mode, GPU and compute instances, and topology.",
    ),
    "sim": Lazy(
        "slurm_gpupool.cli.sim:sim",
        "Simulated GPUs: create nodes, inject processes, errors and NVML faults.",
    ),
    "sandbox": Lazy(
        "slurm_gpupool.cli.sandbox:sandbox",
        "A real Slurm cluster on this machine: emulated GPU nodes, simulated GPUs.",
    ),
    "layout": Lazy(
        "slurm_gpupool.cli.layout:layout",
        "Layouts: check a config, list a GPU model's MIG profiles, see what is due.",
    ),
    "node": Lazy(
        "slurm_gpupool.cli.node:node",
        "Make this node's GPUs match a layout (mig-parted style, done incrementally).",
    ),
    "gres": Lazy(
        "slurm_gpupool.cli.gres:gres",
        "Slurm GRES for the pool: gres.conf, NodeName lines, GresTypes and TRES.",
    ),
    "health": Lazy(
        "slurm_gpupool.cli.health:health",
        "Check every GPU of this node: ECC, row remapping, temperature, Xids, MIG drift.",
    ),
    "repartition": Lazy(
        "slurm_gpupool.cli.repartition:repartition",
        "Switch nodes to a layout without killing a job (controller, as root).",
    ),
    "status": Lazy(
        "slurm_gpupool.cli.repartition:status",
        "Per node: active and desired layout, switch state, since when and why; the next switch.",
    ),
    "report": Lazy(
        "slurm_gpupool.cli.report:report",
        "Reports from Slurm accounting: usage, utilization, waits, cost, efficiency, quota, advice, and a "
        "summary per user (printed or mailed).",
    ),
    "simulate": Lazy(
        "slurm_gpupool.cli.simulate:simulate",
        "Replay jobs against the pool's layouts and schedule, side by side.",
    ),
    "schedule": Lazy(
        "slurm_gpupool.cli.repartition:schedule",
        "The cron entry (or systemd timer) that runs `gpupool repartition --scheduled`.",
    ),
    "metrics": Lazy(
        "slurm_gpupool.cli.metrics:metrics",
        "Pool capacity, allocation and pending demand per GRES type, MIG profile and shard type"
        " (devices and GPU-equivalents, by layout); per node layout and switch state; repartition"
        " runs, outcomes and out-of-service time; hook failures and health drains.",
    ),
    "qos": Lazy(
        "slurm_gpupool.cli.qos:qos",
        "Service tiers (QOS priority, preemption, grace) and GPU quotas, via sacctmgr.",
    ),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpupool")
@click.option("--node", metavar="NAME", help="Node to act on (default: SLURMD_NODENAME or the host name).")
@click.option(
    "--sim-dir",
    metavar="DIR",
    envvar="SLURM_GPUPOOL_SIM_DIR",
    help="Use simulated GPUs from DIR (env SLURM_GPUPOOL_SIM_DIR) instead of NVML.",
)
@click.option(
    "--config",
    "config_path",
    metavar="FILE",
    envvar="SLURM_GPUPOOL_CONFIG",
    help="Pool config (env SLURM_GPUPOOL_CONFIG; default /etc/slurm-gpupool/gpupool.yaml).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def cli(ctx: click.Context, node: str | None, sim_dir: str | None, config_path: str | None, debug: bool) -> None:
    """Manage a Slurm cluster's NVIDIA GPUs as an elastic pool."""
    app = ctx.ensure_object(AppContext)
    app.node = node or app.node
    app.sim_dir = sim_dir or app.sim_dir
    app.config_path = config_path or app.config_path
    app.debug = debug
    ctx.call_on_close(app.close)


def main(argv: list[str] | None = None) -> int:
    return run(lambda: cli.main(args=argv, prog_name="gpupool", standalone_mode=False))


if __name__ == "__main__":
    sys.exit(main())
