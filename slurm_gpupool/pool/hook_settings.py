"""``gpupool-hooks.json``: what the job hooks need to know, written beside slurm.conf.

The hooks must not parse YAML (speed) nor trust the job's environment for paths,
so ``gpupool gres install`` writes this small JSON file from the pool config into
Slurm's configuration directory; the hooks find it next to ``$SLURM_CONF``.
"""

from __future__ import annotations

from typing import Any

from slurm_gpupool.config.model import PoolConfig

FILE_NAME = "gpupool-hooks.json"


def hook_settings(cfg: PoolConfig) -> dict[str, Any]:
    h = cfg.hooks
    return {
        "schema": 1,
        "source": cfg.source,
        "state_dir": cfg.paths.state_dir,
        "run_dir": cfg.paths.run_dir,
        "spool_dir": cfg.paths.spool_dir,
        "sim_dir": cfg.sim_dir,
        "kmsg": f"{cfg.sim_dir}/{{node}}.kmsg" if cfg.sim_dir else h.kmsg,
        "health": {
            "ecc_uncorrected_max": h.ecc_uncorrected_max,
            "temperature_margin_c": h.temperature_margin_c,
            "xid_window_s": h.xid_window_s,
            "critical_xids": list(h.critical_xids),
            "check_mig_drift": h.check_mig_drift,
        },
        "mps": {
            "enabled": h.mps,
            "control": h.mps_control,
            "pipe_dir": f"{cfg.paths.run_dir}/mps",
            "timeout_s": h.mps_timeout_s,
        },
        "shard_memory_limit": h.shard_memory_limit,
        "share_enforcement": h.share_enforcement,
        "preload_library": h.preload_library or None,
        "epilog_kill_grace_s": h.epilog_kill_grace_s,
        "usage_interval_s": h.usage_interval_s,
        "dcgm_job_mapping_dir": h.dcgm_job_mapping_dir or None,
    }
