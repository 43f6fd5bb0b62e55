"""``gpupool schedule install``: the cron entry (or systemd timer) that runs the repartitioner.

Rendered from ``templates/cron.j2`` or ``templates/systemd/*.j2`` (site
overridable like the GRES templates); ``repartition.cron`` says how often.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.gres.render import environment, render_template
from slurm_gpupool.errors import ConfigError, UsageError
from slurm_gpupool.util.atomic import write_text_atomic
from slurm_gpupool.util.quoting import UnsafeValue, breaking_char, cron_command, systemd_command

HEADER = "managed by slurm_gpupool; do not edit: changes are overwritten by `gpupool schedule install`"
CRON_FILE = "/etc/cron.d/slurm-gpupool"
SYSTEMD_DIR = "/etc/systemd/system"
UNIT = "gpupool-repartition"


# cron's @ keywords (crontab(5)) as systemd calendar events (systemd.time(7))
CALENDAR_KEYWORDS = {
    "@hourly": "hourly",
    "@daily": "daily",
    "@midnight": "daily",
    "@weekly": "weekly",
    "@monthly": "monthly",
    "@yearly": "yearly",
    "@annually": "yearly",
}


def on_calendar(cron: str) -> str:
    """The systemd OnCalendar= of the cron specs we support: the @ keywords, ``*/N * * * *``,
    ``M * * * *``, ``M H * * *``."""
    if cron in CALENDAR_KEYWORDS:
        return CALENDAR_KEYWORDS[cron]
    minute, hour, dom, month, dow = cron.split()
    if (dom, month, dow) != ("*", "*", "*"):
        raise UsageError(f"repartition.cron {cron!r}", "only minute and hour fields convert to a systemd timer")
    m = re.fullmatch(r"\*/(\d+)", minute)
    if m and hour == "*":
        return f"*:0/{int(m.group(1))}"
    if minute.isdigit() and hour == "*":
        return f"*:{int(minute):02d}"
    if minute.isdigit() and hour.isdigit():
        return f"*-*-* {int(hour):02d}:{int(minute):02d}:00"
    raise UsageError(f"repartition.cron {cron!r}", "cannot convert to OnCalendar=", hint="use the cron entry instead")


def _argv(cfg: PoolConfig, gpupool: str | None) -> list[str]:
    exe = gpupool or str(Path(sys.executable).parent / "gpupool")
    return [exe, "--config", _source(cfg), "repartition", "--scheduled", "--quiet"]


def _source(cfg: PoolConfig) -> str:
    """The config's path made absolute but not resolved: a symlinked /etc/slurm-gpupool
    stays as given, as the role and the hooks name it, so renderings agree."""
    return os.path.abspath(cfg.source)


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_env(items: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """``NAME=VALUE`` options as pairs, for the cron file's variable lines and ``Environment=``.

    Cron strips a value's outer quotes and blanks, systemd splits on quotes and
    backslashes: a value with a quote, a backslash, a newline or outer blanks would
    reach the two differently, so it is refused rather than mangled.
    """
    pairs = []
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not ENV_NAME.fullmatch(name):
            raise UsageError(f"--env {item!r}", "expected NAME=VALUE with NAME a shell variable name")
        if any(c in value for c in "\"'\\") or breaking_char(value) or value != value.strip():
            raise UsageError(
                f"--env {item!r}",
                "a value cannot hold a quote, a backslash, a newline (or other control character) or outer blanks",
            )
        pairs.append((name, value))
    return pairs


def render_schedule(
    cfg: PoolConfig, systemd: bool = False, gpupool: str | None = None, env_vars: list[tuple[str, str]] | None = None
) -> dict[str, str]:
    """File name → text: the cron file, or the service and timer units.

    ``env_vars`` (e.g. SLURM_CONF for a slurm.conf outside /etc/slurm) go into the
    cron file's variable lines or the service's ``Environment=``.
    """
    argv = _argv(cfg, gpupool)
    common = {"header": HEADER, "source": _source(cfg), "cron": cfg.repartition.cron, "env": env_vars or []}
    if not systemd:
        try:
            command = cron_command(argv)
        except UnsafeValue as e:  # the config's path or gpupool's: cron has no quoting for a newline
            raise ConfigError(
                repr(e.value)[:120],
                "",
                f"this path cannot be written into a cron command: {e.why}",
                hint="move it to a path without control characters (or install a systemd timer: --systemd)",
            ) from None
        env = environment(cfg.slurm.templates_dir, "cron")
        return {CRON_FILE: render_template(env, "cron.j2", {**common, "command": command})}
    env = environment(cfg.slurm.templates_dir, "systemd")
    common["command"] = systemd_command(argv)
    timer = {**common, "on_calendar": on_calendar(cfg.repartition.cron)}
    return {
        f"{SYSTEMD_DIR}/{UNIT}.service": render_template(env, "systemd/gpupool-repartition.service.j2", common),
        f"{SYSTEMD_DIR}/{UNIT}.timer": render_template(env, "systemd/gpupool-repartition.timer.j2", timer),
    }


def install_schedule(files: dict[str, str], dest: Path | None = None) -> list[Path]:
    """Write the files (under ``dest`` instead of / if given), atomically."""
    written = []
    for name, text in files.items():
        path = Path(dest, name.lstrip("/")) if dest else Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text, 0o644)
        written.append(path)
    return written


def uninstall_schedule(cfg: PoolConfig, systemd: bool = False, dest: Path | None = None) -> list[Path]:
    """Remove the files ``install_schedule`` writes (those present); returns them."""
    removed = []
    for name in render_schedule(cfg, systemd):
        path = Path(dest, name.lstrip("/")) if dest else Path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
    return removed
