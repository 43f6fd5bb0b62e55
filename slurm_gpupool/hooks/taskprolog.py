"""``gpupool-taskprolog``: Slurm TaskProlog (as the job's user, before each task).

Slurm applies the ``export NAME=value`` lines it prints.  Without NVML in Slurm,
``CUDA_VISIBLE_DEVICES`` holds GRES indices, which are wrong for MIG (and for
whole GPUs listed after MIG records): this hook replaces them with the UUIDs of
exactly the allocated devices; an allocation that mixes types (``--exclusive``) is
narrowed to the types the job asked for (``SLURM_TRES_PER_NODE``).  Shard jobs get an MPS thread percentage in
proportion to their shares.  It prints nothing when it cannot help (fail open).
"""

from __future__ import annotations

import os
import sys

from slurm_gpupool.hooks.cli import wants_help
from slurm_gpupool.hooks.runtime import (
    HookError,
    gpu_indices,
    load_settings,
    node_name,
    node_path,
    read_json,
    run_hook,
)

USAGE = """
usage: gpupool-taskprolog

Slurm TaskProlog for slurm_gpupool (slurm.conf: TaskProlog=/usr/bin/gpupool-taskprolog).
Slurm runs it before each task and applies the `export NAME=value` lines it
prints: CUDA_VISIBLE_DEVICES becomes the MIG (or GPU) UUIDs of the allocated
devices, shard jobs get CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, and every GPU job
gets SLURM_GPUPOOL_LAYOUT and SLURM_GPUPOOL_PROFILE.
"""


def exports(env: dict[str, str], state: dict, settings: dict) -> list[tuple[str, str]]:
    """The variables to set for this task (pure: environment and node state in)."""
    from slurm_gpupool.hooks.allocation import devices_for, for_request, requested_gpu_types, visible_devices

    raw = env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS")
    if not raw:
        return []  # no GPUs
    allocated = devices_for(state, gpu_indices(raw))
    # Slurm's record of the request (23.11+), else what gpupool-sbatch handed down (22.05)
    request = env.get("SLURM_TRES_PER_NODE") or env.get("SLURM_GPUPOOL_GRES")
    devices = for_request(allocated, requested_gpu_types(request))
    if env.get("CUDA_VISIBLE_DEVICES", "").startswith(("MIG-", "GPU-")) and devices == allocated:
        return []  # Slurm (built with NVML) already set the UUIDs of exactly these devices
    out = [("CUDA_VISIBLE_DEVICES", visible_devices(devices))]
    if state.get("layout"):
        out.append(("SLURM_GPUPOOL_LAYOUT", str(state["layout"])))
    out.append(("SLURM_GPUPOOL_PROFILE", ",".join(d.get("profile") or d["type"] for d in devices)))
    shards = env.get("SLURM_SHARDS_ON_NODE")
    if shards and shards.isdigit() and devices and all(d["kind"] == "shared" for d in devices):
        shares = sum(d.get("shares", 0) for d in devices) // len(devices) or 1
        pct = max(1, min(100, round(100 * int(shards) / shares)))
        out.append(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(pct)))
        limit = settings.get("shard_memory_limit")
        mem = state_gpu_memory(state, devices[0]["gpu"])
        if limit and mem:
            out.append(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", f"0={mem * int(shards) // shares}M"))
    return out


def state_gpu_memory(state: dict, index: int) -> int | None:
    for g in state.get("gpus", []):
        if g.get("index") == index:
            return g.get("memory_mib")
    return None


def _body(env: dict[str, str]) -> int:
    settings = load_settings(env)
    node = node_name(env)
    try:
        state = read_json(os.path.join(node_path(settings, "state_dir", node), "node-state.json"))
    except FileNotFoundError:
        raise HookError("no node state (run `gpupool node apply` on this node)") from None
    lines = "".join(f"export {k}={v}\n" for k, v in exports(env, state, settings))
    sys.stdout.write(lines)
    return 0


def main(argv: list[str] | None = None) -> int:
    if wants_help(sys.argv[1:] if argv is None else argv, USAGE):
        return 0
    return run_hook("taskprolog", _body)


if __name__ == "__main__":
    sys.exit(main())
