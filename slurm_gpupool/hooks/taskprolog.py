"""``gpupool-taskprolog``: Slurm TaskProlog (as the job's user, before each task).

Slurm applies the ``export NAME=value`` lines it prints.  Without NVML in Slurm,
``CUDA_VISIBLE_DEVICES`` holds GRES indices, which are wrong for MIG (and for
whole GPUs listed after MIG records): this hook replaces them with the UUIDs of
exactly the allocated devices; an allocation that mixes types (``--exclusive``) is
narrowed to the types the job asked for (``SLURM_TRES_PER_NODE``).  Shard jobs get their
MPS limits (``hooks/mps.py`` ``client_env``), and under MPS their GPU's pipe and log
directories; a shard job the Prolog kept off MPS gets a ``print`` note instead, and every
shard job ``SLURM_GRES=shard:N`` so its plain ``srun`` steps ask for untyped shards.  With
``hooks.share_enforcement: preload`` shard jobs get the site's limiter library appended to
``LD_PRELOAD`` and its limit variables, from the same share rule.  It prints nothing when
it cannot help (fail open).
"""

from __future__ import annotations

import os
import sys

from slurm_gpupool.hooks.cli import wants_help
from slurm_gpupool.hooks.runtime import (
    HookError,
    gpu_indices,
    load_settings,
    log,
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
devices, shard jobs get CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (and with
hooks.share_enforcement: preload, LD_PRELOAD and CUDA_DEVICE_*_LIMIT) and SLURM_GRES=shard:N
(their srun steps then ask for untyped shards), and every GPU job
gets SLURM_GPUPOOL_LAYOUT and SLURM_GPUPOOL_PROFILE.
"""


def exports(
    env: dict[str, str], state: dict, settings: dict, mps: dict | None = None, preload: str | None = None
) -> list[tuple[str, str]]:
    """The variables to set for this task (pure: environment, node state, the Prolog's MPS
    decision for the job and the usable preload library (:func:`preload_library`) in)."""
    from slurm_gpupool.hooks.allocation import devices_for, for_request, requested_gpu_types, visible_devices

    raw = env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS")
    if not raw:
        return []  # no GPUs
    allocated = devices_for(state, gpu_indices(raw))
    # Slurm's record of the request (23.11+), else what gpupool-sbatch handed down (22.05)
    request = env.get("SLURM_TRES_PER_NODE") or env.get("SLURM_GPUPOOL_GRES")
    devices = for_request(allocated, requested_gpu_types(request))
    out: list[tuple[str, str]] = []
    if not (env.get("CUDA_VISIBLE_DEVICES", "").startswith(("MIG-", "GPU-")) and devices == allocated):
        # (else Slurm, built with NVML, already set the UUIDs of exactly these devices)
        out.append(("CUDA_VISIBLE_DEVICES", visible_devices(devices)))
        if state.get("layout"):
            out.append(("SLURM_GPUPOOL_LAYOUT", str(state["layout"])))
        out.append(("SLURM_GPUPOOL_PROFILE", ",".join(d.get("profile") or d["type"] for d in devices)))
    shards = env.get("SLURM_SHARDS_ON_NODE")
    if shards and shards.isdigit() and devices and all(d["kind"] == "shared" for d in devices):
        from slurm_gpupool.hooks.mps import client_env

        shares = sum(d.get("shares", 0) for d in devices) // len(devices) or 1
        daemon = mps if mps and mps.get("pipe_dir") else None
        request = env.get("SLURM_GPUPOOL_GPU_MEM_MIB", "")
        out += client_env(
            int(shards),
            shares,
            devices[0].get("memory_mib") or state_gpu_memory(state, devices[0]["gpu"]),  # a MIG device's own
            mps=daemon,
            memory_limit=bool(settings.get("shard_memory_limit")),
            mem_request_mib=int(request) if request.isdigit() and len(request) < 10 else None,
            preload=preload,
            ld_preload=env.get("LD_PRELOAD", ""),
        )
        if not env.get("SLURM_GRES"):
            # srun reads SLURM_GRES as --gres: a step of the job's untyped shards.  Without it a
            # plain `srun` inherits a typed shard request (--gpu-share's shard:<type>:k), which
            # 22.05, 24.11 and 26.05 refuse for steps: "Invalid generic resource (gres) specification"
            out.append(("SLURM_GRES", f"shard:{int(shards)}"))
    return out


def mps_lines(env: dict[str, str], settings: dict, node: str, mps: dict | None) -> list[str]:
    """Lines for a GPU job not admitted to an MPS daemon: for a shard job the Prolog kept off
    MPS, a note in its output (Slurm writes a TaskProlog's ``print`` lines to the task's
    stdout); and for any such job, no pipe directory of ours inherited from where it was
    submitted (sbatch's ``--export=ALL`` from inside an MPS job), so CUDA never waits for
    another user's server nor reaches another GPU's daemon."""
    if mps and mps.get("pipe_dir"):
        return []  # admitted: its exports name its own daemon
    out = []
    if mps and mps.get("note"):
        out.append(f"print gpupool: this job runs without CUDA MPS: {mps['note']}; its shard limits are not enforced")
    inherited = os.path.normpath(env.get("CUDA_MPS_PIPE_DIRECTORY") or "/")
    base = os.path.normpath(node_path(settings.get("mps", {}), "pipe_dir", node)) if settings.get("mps") else ""
    if base not in ("", "/") and (inherited == base or inherited.startswith(base + "/")):
        out.append("unset CUDA_MPS_PIPE_DIRECTORY")
    return out


def preload_library(settings: dict) -> tuple[str | None, str]:
    """``(path, why not)``: the limiter library of ``hooks.share_enforcement: preload`` if this
    node can use it.  The path comes only from the root-owned settings (a job's string is
    never a path here); one that is not absolute, would split ``LD_PRELOAD`` (``:`` or
    whitespace) or is not a file on this node is not preloaded (fail open, with a note):
    ld.so would otherwise complain in every process of the job."""
    if settings.get("share_enforcement") != "preload":
        return None, ""
    path = settings.get("preload_library")
    if not isinstance(path, str) or not path.startswith("/") or not path.isprintable() or ":" in path or " " in path:
        return None, "hooks.preload_library is not an absolute path"
    if not os.path.isfile(path):
        return None, f"the share limiter {path} is not on this node"
    return path, ""


def job_mps(env: dict[str, str], settings: dict, node: str) -> dict | None:
    """The Prolog's MPS decision for this job (``<run_dir>/<id>.mps``), None if there is none."""
    if not settings.get("mps", {}).get("enabled") or not env.get("SLURM_SHARDS_ON_NODE"):
        return None
    from slurm_gpupool.hooks.runtime import job_id

    try:
        found = read_json(os.path.join(node_path(settings, "run_dir", node), f"{job_id(env)}.mps"))
    except (OSError, ValueError, HookError):
        return None  # no decision: the job runs without MPS and no pipe directory is given
    return found if isinstance(found, dict) else None


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
    mps = job_mps(env, settings, node)
    library, why = preload_library(settings)
    pairs = exports(env, state, settings, mps, library)
    lines = [f"export {k}={v}" for k, v in pairs]
    if env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS"):
        lines += mps_lines(env, settings, node, mps)
        if why and any(k == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" for k, _ in pairs):  # a shard job
            log("taskprolog", env.get("SLURM_JOB_ID"), f"no preload: {why}", 4)
            lines.append(f"print gpupool: {why}; this job's shard limits are not enforced")
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    if wants_help(sys.argv[1:] if argv is None else argv, USAGE):
        return 0
    return run_hook("taskprolog", _body)


if __name__ == "__main__":
    sys.exit(main())
