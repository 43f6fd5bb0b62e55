"""The CUDA MPS control daemon for time-sliced GPUs (optional, per site).

One control daemon per shared GPU, with its own pipe directory, started by the
Prolog if it is not running (``nvidia-cuda-mps-control -d``) and left running:
MPS outlives single jobs, and shard jobs on the GPU share it.
"""

from __future__ import annotations

import os
import subprocess

from slurm_gpupool.hooks.runtime import log

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


def pipe_dir(settings: dict[str, Any], node: str, gpu_uuid: str) -> str:
    base = str(settings["mps"]["pipe_dir"]).replace("{node}", node)
    return os.path.join(base, gpu_uuid)


def start_mps(settings: dict[str, Any], node: str, devices: list[dict[str, Any]]) -> None:
    control = str(settings["mps"]["control"])
    for d in {d["gpu_uuid"]: d for d in devices}.values():
        pipes = pipe_dir(settings, node, d["gpu_uuid"])
        if os.path.exists(os.path.join(pipes, "control")):
            continue  # already running for this GPU
        os.makedirs(pipes, mode=0o755, exist_ok=True)
        env = {
            "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
            "CUDA_VISIBLE_DEVICES": d["gpu_uuid"],
            "CUDA_MPS_PIPE_DIRECTORY": pipes,
            "CUDA_MPS_LOG_DIRECTORY": pipes,
        }
        try:
            subprocess.run([control, "-d"], env=env, timeout=10, check=True, capture_output=True)
            log("prolog", None, f"started MPS for GPU {d['gpu']} ({pipes})")
        except (OSError, subprocess.SubprocessError) as e:
            log("prolog", None, f"could not start MPS for GPU {d['gpu']}: {e}", 4)
