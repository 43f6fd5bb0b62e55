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
    node: str | None = None
    sim_dir: str | None = None
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

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()


def _gpu(ctx: AppContext) -> Any:
    from slurm_gpupool.hw import open_backend

    return open_backend(ctx.node, ctx.sim_dir)


_DEFAULTS: dict[str, Callable[[AppContext], Any]] = {"gpu": _gpu}

pass_app = click.make_pass_decorator(AppContext)
