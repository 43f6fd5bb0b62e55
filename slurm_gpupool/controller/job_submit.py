"""``job_submit.lua``: the wrapper's rules, enforced by slurmctld for every submission.

Rendered from ``templates/job_submit.lua.j2`` with the submit catalog embedded as
Lua tables, so slurmctld needs no file of ours at run time.  Friendly requests
reach it as ``--comment="gpupool: gpu-mem=18G"`` (or ``gpu-share=``,
``gpus-nvlink=``); plain typed multi-GPU requests get the NVLink constraint; the
site's rules (untyped GPUs, GRES binding, switches) apply to every job.
"""

from __future__ import annotations

from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.controller.versions import cluster_version
from slurm_gpupool.core.gres.render import HEADER, environment, render_template
from slurm_gpupool.pool.submit_catalog import submit_catalog
from slurm_gpupool.slurm.versions import tres_gres_prefix
from slurm_gpupool.util.quoting import Quoted, lua_string

FILE_NAME = "job_submit.lua"


def lua_value(v: Any) -> Quoted:
    """A JSON-like value as a Lua literal (tables for lists and dicts; strings quoted for
    Lua 5.1 by util/quoting.py, whatever they hold)."""
    return Quoted(_lua(v))


def _lua(v: Any) -> str:
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        if v != v or v in (float("inf"), float("-inf")):
            raise TypeError(f"no Lua literal for {v!r}")
        return repr(v)
    if isinstance(v, str):
        return lua_string(v)
    if isinstance(v, list | tuple):
        return "{" + ", ".join(_lua(x) for x in v) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"[{lua_string(str(k))}] = {_lua(x)}" for k, x in sorted(v.items())) + "}"
    raise TypeError(f"no Lua literal for {type(v).__name__}")


def render_job_submit(cfg: PoolConfig, installed: str | None = None) -> str:
    env = environment(cfg.slurm.templates_dir, "lua")
    env.filters["lua"] = lua_value
    catalog = submit_catalog(cfg, installed)
    offset = None
    if cfg.schedule is not None and cfg.schedule.tz is not None:
        from datetime import datetime

        # Lua has no time zones: the schedule's zone as a fixed offset, as of rendering
        delta = cfg.schedule.tz.utcoffset(datetime.now())
        offset = int(delta.total_seconds()) if delta is not None else None

    ctx = {
        "header": HEADER,
        "source": cfg.source,
        "catalog": catalog,
        "utc_offset": offset,
        "gres_prefix": tres_gres_prefix(cluster_version(cfg)),
    }
    return render_template(env, "job_submit.lua.j2", ctx)
