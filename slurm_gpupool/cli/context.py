"""Lazily built resources shared by commands (flask-style): tests inject them.

Commands ask the context for a GPU backend, a config, a Slurm runner; nothing
is opened until a command needs it, so ``gpupool --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click


@dataclass
class AppContext:
    """What every command shares: the global options and what is loaded once (config, backend)."""

    node: str | None = None
    sim_dir: str | None = None
    config_path: str | None = None
    debug: bool = False
    json_output: bool = False
    factories: dict[str, Callable[[AppContext], Any]] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict)
    _closers: list[Callable[[], None]] = field(default_factory=list)

    def get(self, name: str) -> Any:
        if name not in self._cache:
            factory = self.factories.get(name) or _DEFAULTS[name]
            self._cache[name] = factory(self)
            closer = getattr(self._cache[name], "close", None)
            if callable(closer):
                self._closers.append(closer)
        return self._cache[name]

    def gpu_backend(self) -> Any:
        return self.get("gpu")

    def config(self) -> Any:
        """The validated pool config (slurm_gpupool.config.model.PoolConfig)."""
        return self.get("config")

    def node_name(self) -> str:
        from slurm_gpupool.hw import node_name

        return node_name(self.node)

    def state_dir(self) -> Any:
        """This node's state directory, from the config's paths (or its defaults)."""
        from pathlib import Path

        from slurm_gpupool.config.model import DEFAULT_PATHS, PATH_ENV
        from slurm_gpupool.errors import ConfigError

        try:
            return self.config().paths.for_node("state_dir", self.node_name())
        except ConfigError:  # no readable config: defaults and environment still apply
            import os

            raw = os.environ.get(PATH_ENV["state_dir"]) or DEFAULT_PATHS["state_dir"]
            return Path(raw.replace("{node}", self.node_name()))

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()


def _gpu(ctx: AppContext) -> Any:
    """NVML, or the simulation named by --sim-dir / $SLURM_GPUPOOL_SIM_DIR / the config."""
    from slurm_gpupool.errors import ConfigError
    from slurm_gpupool.hw import open_backend

    sim = ctx.sim_dir
    if not sim:
        try:
            sim = ctx.config().sim_dir
        except ConfigError:
            sim = None
    return open_backend(ctx.node, sim)


def _config(ctx: AppContext) -> Any:
    from slurm_gpupool.config.load import load_config

    return load_config(ctx.config_path)


_DEFAULTS: dict[str, Callable[[AppContext], Any]] = {"gpu": _gpu, "config": _config}

pass_app = click.make_pass_decorator(AppContext)
