"""``gpupool``: the admin command.  Thin click commands over ``ops`` and ``hw``."""

from __future__ import annotations

import sys

import click

from slurm_gpupool import __version__
from slurm_gpupool.cli.context import AppContext
from slurm_gpupool.cli.errors import run


class LazyGroup(click.Group):
    """Subcommands live in their own modules and are imported on first use."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self._lazy:
            module, attr = self._lazy[name].split(":")
            mod = __import__(module, fromlist=[attr])
            return getattr(mod, attr)
        return super().get_command(ctx, name)


COMMANDS = {
    "inventory": "slurm_gpupool.cli.inventory:inventory",
    "sim": "slurm_gpupool.cli.sim:sim",
    "sandbox": "slurm_gpupool.cli.sandbox:sandbox",
    "layout": "slurm_gpupool.cli.layout:layout",
    "node": "slurm_gpupool.cli.node:node",
    "gres": "slurm_gpupool.cli.gres:gres",
    "health": "slurm_gpupool.cli.health:health",
    "repartition": "slurm_gpupool.cli.repartition:repartition",
    "status": "slurm_gpupool.cli.repartition:status",
    "report": "slurm_gpupool.cli.report:report",
    "simulate": "slurm_gpupool.cli.simulate:simulate",
    "schedule": "slurm_gpupool.cli.repartition:schedule",
    "metrics": "slurm_gpupool.cli.metrics:metrics",
    "qos": "slurm_gpupool.cli.qos:qos",
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
