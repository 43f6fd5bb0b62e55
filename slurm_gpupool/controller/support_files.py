"""The files besides gres.conf that ``gpupool gres install`` puts next to slurm.conf.

Rendered first, then written, so ``gpupool gres diff`` compares them too (a pool
config change that only touches the hooks or the submit rules still shows).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.controller import job_submit
from slurm_gpupool.controller.versions import cluster_version
from slurm_gpupool.pool import hook_settings, submit_catalog
from slurm_gpupool.util.atomic import write_text_atomic
from slurm_gpupool.util.oplog import log as syslog_line

SYSLOG = "gres-install"  # journalctl -t gpupool-gres-install: every file gres install writes


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def render_support_files(cfg: PoolConfig, installed: str | None = None) -> dict[Path, str]:
    """Path → text: hook settings, the submit catalog and job_submit.lua.

    ``installed``: the layout the GRES just installed come from (every node in it),
    which the wrapper and the Lua then treat as what is offered now."""

    base = Path(cfg.slurm.config_dir)
    catalog = submit_catalog.submit_catalog(cfg, installed)
    # which sbatch's option table gpupool-sbatch reads command lines with (the cluster's release)
    catalog["sbatch"] = "{}.{:02d}".format(*cluster_version(cfg)[:2])
    return {
        base / hook_settings.FILE_NAME: _json(hook_settings.hook_settings(cfg)),
        base / submit_catalog.FILE_NAME: _json(catalog),
        base / job_submit.FILE_NAME: job_submit.render_job_submit(cfg, installed),
    }


def install_support_files(cfg: PoolConfig, installed: str | None = None) -> list[Path]:
    """Write them atomically (mode 644, root-owned when run as root); their paths."""

    files = render_support_files(cfg, installed)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            same = path.read_text() == text
        except OSError:
            same = False
        if same and path.name == job_submit.FILE_NAME:
            continue  # rewritten, it would carry this second again: slurmctld could skip a newer one
        before = _mtime(path)
        write_text_atomic(path, text, 0o644)
        if not same:
            if path.name == job_submit.FILE_NAME:
                _newer_than_any_load(path, before)
            syslog_line(SYSLOG, f"installed {path}")
    return list(files)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _newer_than_any_load(path: Path, before: float) -> None:
    """slurmctld reloads job_submit.lua only when its mtime, in whole seconds, is later
    than when it last loaded it (src/lua/slurm_lua.c: ``st_mtime <= *load_time``: skip).
    A script rewritten in the second slurmctld loaded the previous one (a switch's
    ``gres install`` then a config change, say) would never be read: date it one second
    ahead, and after the previous one's mtime."""
    import os
    import time

    stamp = float(max(int(time.time()), int(before)) + 1)
    os.utime(path, (stamp, stamp))
