"""``job_submit.lua``: the wrapper's rules, enforced by slurmctld for every submission.

Rendered from ``templates/job_submit.lua.j2`` with the submit catalog embedded as
Lua tables, so slurmctld needs no file of ours at run time.  Friendly requests
reach it as ``--comment="gpupool: gpu-mem=18G"`` (or ``gpu-share=``,
``gpus-nvlink=``); plain typed multi-GPU requests get the NVLink constraint; the
site's rules (untyped GPUs, GRES binding, switches) apply to every job.
"""

from __future__ import annotations

import json
from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.controller.versions import cluster_version
from slurm_gpupool.core.gres.render import HEADER, environment
from slurm_gpupool.pool.submit_catalog import submit_catalog
from slurm_gpupool.slurm.versions import tres_gres_prefix

FILE_NAME = "job_submit.lua"


def lua_value(v: Any) -> str:
    """A JSON-like value as a Lua literal (tables for lists and dicts)."""
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid Lua string literal for our ASCII data
    if isinstance(v, list | tuple):
        return "{" + ", ".join(lua_value(x) for x in v) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"[{json.dumps(str(k))}] = {lua_value(x)}" for k, x in sorted(v.items())) + "}"
    raise TypeError(f"no Lua literal for {type(v).__name__}")


def render_job_submit(cfg: PoolConfig, installed: str | None = None) -> str:
    env = environment(cfg.slurm.templates_dir)
    env.filters["lua"] = lua_value
    catalog = submit_catalog(cfg, installed)
    offset = None
    if cfg.schedule is not None and cfg.schedule.tz is not None:
        from datetime import datetime

        # Lua has no time zones: the schedule's zone as a fixed offset, as of rendering
        delta = cfg.schedule.tz.utcoffset(datetime.now())
        offset = int(delta.total_seconds()) if delta is not None else None

    return env.get_template("job_submit.lua.j2").render(
        header=HEADER,
        source=cfg.source,
        catalog=catalog,
        utc_offset=offset,
        gres_prefix=tres_gres_prefix(cluster_version(cfg)),
    )
