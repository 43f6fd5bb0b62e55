"""The sandbox's pool config: the user's config, moved into the sandbox root.

The sandbox plays every node of a pool config on one machine.  It writes
``<root>/etc/gpupool.yaml``: the same node sets, layouts and schedule, with
every path under the root and ``{node}`` in the per-node ones, Slurm files in
``<root>/etc``, and each node's ``NodeAddr=``/``Port=`` as node parameters.
Every gpupool command run with ``gpupool sandbox env`` uses it.
"""

from __future__ import annotations

import copy
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_gpupool.errors import ConfigError

if TYPE_CHECKING:  # only typed here: `sandbox start|stop|restart` load no pool config
    from slurm_gpupool.config.model import PoolConfig


def node_map(cfg: PoolConfig) -> dict[str, str]:
    """Node → machine description, for every node of the config (all need one here)."""
    out: dict[str, str] = {}
    for ns in cfg.nodesets.values():
        if ns.machine is None:
            raise ConfigError(
                cfg.source,
                f"nodesets.{ns.name}.machine",
                "the sandbox needs a machine description for every node set",
            )
        for n in ns.nodes:
            out[n] = ns.machine.name
    return out


def sandbox_config(cfg: PoolConfig, root: Path, addresses: Mapping[str, tuple[str, int]]) -> dict[str, Any]:
    """The derived config (as data); relative paths of the original are made absolute."""
    raw = copy.deepcopy(cfg.raw)
    base = Path(cfg.source).resolve().parent
    paths = dict(raw.get("paths") or {})
    if paths.get("machines_dir"):
        paths["machines_dir"] = str((base / paths["machines_dir"]).resolve())
    paths.update(
        {
            "state_dir": f"{root}/nodes/{{node}}/state",
            "run_dir": f"{root}/nodes/{{node}}/run",
            "spool_dir": f"{root}/nodes/{{node}}/spool",
            "controller_dir": f"{root}/controller",
        }
    )
    raw["paths"] = paths
    if (raw.get("reports") or {}).get("spool_dirs"):
        # the site's collected spools are not the sandbox nodes': its reports read each node's
        # paths.spool_dir under the root, where the sandbox's hooks write (#30)
        raw["reports"] = {k: v for k, v in raw["reports"].items() if k != "spool_dirs"}
    if raw.get("mig_parted"):
        mp = dict(raw["mig_parted"])
        mp["file"] = str((base / mp["file"]).resolve())
        raw["mig_parted"] = mp
    slurm = dict(raw.get("slurm") or {})
    if slurm.get("templates_dir"):
        slurm["templates_dir"] = str((base / slurm["templates_dir"]).resolve())
    slurm.update(
        {
            "config_dir": f"{root}/etc",
            "gres_conf": "gres.conf",
            "nodes_include": "nodes.conf",
            "gres_include": "gres-types.conf",
            "dev_root": f"{root}/nodes/{{node}}/dev",
            "node_params": {n: f"NodeAddr={addr} Port={port}" for n, (addr, port) in sorted(addresses.items())},
        }
    )
    raw["slurm"] = slurm
    raw["simulation"] = {"sim_dir": f"{root}/sim"}
    # dcgm-exporter's job mapping files per node (tests/integration/test_metrics_slurm.py reads them)
    # and the simulated GPUs' nvidia-cuda-mps-control (configs.mps_control_stand_in), for hooks.mps: true
    hooks = {
        "usage_interval_s": 1.0,
        "dcgm_job_mapping_dir": f"{root}/nodes/{{node}}/dcgm-job-map",
        "mps_control": f"{root}/libexec/nvidia-cuda-mps-control",
    }
    raw["hooks"] = {**hooks, **(raw.get("hooks") or {})}
    # the repartitioner runs gpupool on the nodes through srun, and restarts the sandbox's daemons
    gpupool = str(Path(sysconfig.get_path("scripts")) / "gpupool")
    sandbox = [gpupool, "sandbox"]
    raw["repartition"] = {
        "node_command": [gpupool],
        "stop_slurmd": [*sandbox, "stop", "--root", str(root), "--nodes", "{nodes}"],
        "restart_slurmctld": [*sandbox, "restart", "--root", str(root), "--no-files", "--controller"],
        "start_slurmd": [*sandbox, "start", "--root", str(root), "--nodes", "{nodes}"],
        "command_timeout": "5m",
        "launch_timeout": "20s",
        "verify_timeout": "2m",
        **(raw.get("repartition") or {}),
    }
    return raw
