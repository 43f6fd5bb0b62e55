"""The files besides gres.conf that ``gpupool gres install`` puts next to slurm.conf."""

from __future__ import annotations

from pathlib import Path

from slurm_gpupool.config import PoolConfig


def install_support_files(cfg: PoolConfig, installed: str | None = None) -> list[Path]:
    """Hook settings, the submit catalog and job_submit.lua, written atomically.

    ``installed``: the layout the GRES just installed come from (every node in it),
    which the wrapper and the Lua then treat as what is offered now."""
    from slurm_gpupool.ops.hook_settings import write_hook_settings
    from slurm_gpupool.ops.job_submit import write_job_submit_lua
    from slurm_gpupool.ops.submit_catalog import write_submit_catalog

    return [write_hook_settings(cfg), write_submit_catalog(cfg, installed), write_job_submit_lua(cfg, installed)]
