"""``gpupool-epilog``: Slurm Epilog (root, on the node, after the job ends).

1. Ends leftover processes of *this* job on *its* GPUs or MIG devices, never
   another job's process on another MIG device of the same GPU.
2. Adds the job's GPU usage to its spool record (memory per device and
   utilization where NVML gives them; Slurm has no MIG utilization).
3. Runs the post-job health check: a failure exits 1, which drains the node.
4. Takes the job off its GPU's MPS daemon; the last job stops the daemon.
5. Removes the job's runtime files.

Like the Prolog it fails open on its own errors and calls no Slurm command.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

from slurm_gpupool.hooks.cli import wants_help
from slurm_gpupool.hooks.runtime import (
    HookError,
    count_event,
    count_failure,
    gpu_indices,
    job_id,
    load_settings,
    log,
    node_name,
    node_path,
    open_dir,
    read_in_dir,
    read_json,
    run_hook,
    write_in_dir,
)

USAGE = """
usage: gpupool-epilog

Slurm Epilog for slurm_gpupool (slurm.conf: Epilog=/usr/bin/gpupool-epilog).
Slurm runs it as root after the job; it takes no arguments.  It ends leftover
processes of this job on its GPUs, records the job's GPU usage, re-checks the
GPUs' health (exit 1 drains the node) and removes the job's runtime files.
"""


def usage(backend, devices: list[dict], sampled: dict) -> list[dict]:
    """Per device: peak memory (the sampler's peaks and what is in use now), utilization where
    NVML gives it (whole GPUs; never MIG devices), and the sampler's GPM activity (Hopper+).
    On a shared GPU the sampler measured the job's own processes: what the device holds now
    is every job's, so it does not count."""
    out = []
    for d in devices:
        entry = {"index": d["index"], "type": d["type"], "gpu": d["gpu"], "mig_uuid": d.get("mig_uuid")}
        now = backend.device_usage(d["gpu"], d.get("mig_uuid"))
        seen = sampled.get("devices", {}).get(str(d["index"]), {})
        entry["memory_total_mib"] = now["memory_total_mib"]
        entry["memory_used_at_end_mib"] = now["memory_used_mib"]
        at_end = 0 if seen.get("own_processes") else now["memory_used_mib"] or 0
        entry["peak_memory_mib"] = max(at_end, seen.get("peak_memory_mib", 0))
        if d.get("shares"):
            entry["shares"] = d["shares"]
        if seen.get("util_samples"):
            entry["mean_utilization_pct"] = round(seen["util_sum"] / seen["util_samples"], 1)
            entry["peak_utilization_pct"] = seen["peak_utilization_pct"]
            if seen.get("own_processes"):
                entry["utilization_source"] = "share of the GPU's, by the job's process memory"
        else:
            entry["mean_utilization_pct"] = None if seen.get("own_processes") else now["utilization_pct"]
        if seen.get("sm_activity_samples"):
            entry["activity_source"] = "gpm"
            for name in ("sm_activity", "tensor_activity", "dram_bw"):
                n = seen.get(f"{name}_samples")
                if n:
                    entry[f"mean_{name}_pct"] = round(seen[f"{name}_sum"] / n, 1)
                    entry[f"peak_{name}_pct"] = seen.get(f"peak_{name}_pct")
        entry["samples"] = sampled.get("samples", 0)
        out.append(entry)
    return out


def _sampled(run_dir: str, jid: str) -> dict:
    try:
        return read_json(os.path.join(run_dir, f"{jid}.usage.json"))
    except (OSError, ValueError):
        return {}


def _body(env: dict[str, str]) -> int:
    settings = load_settings(env)
    node = node_name(env)
    jid = job_id(env)
    indices = gpu_indices(env.get("SLURM_JOB_GPUS"))
    run_dir = node_path(settings, "run_dir", node)
    state: dict | None = None
    devices: list[dict] | None = None  # the job's devices, named from the node state once
    try:
        if not indices:
            return 0
        state_dir = node_path(settings, "state_dir", node)
        try:
            state = read_json(os.path.join(state_dir, "node-state.json"))
        except FileNotFoundError:
            raise HookError("no node state (run `gpupool node apply` on this node)") from None
        from slurm_gpupool.hooks.allocation import devices_for, gpus_of
        from slurm_gpupool.hooks.health import check_gpus
        from slurm_gpupool.hooks.leftovers import belongs_to_job, candidates, end_processes, lineage
        from slurm_gpupool.hw import open_backend

        devices = devices_for(state, indices)
        with open_backend(node, settings.get("sim_dir")) as backend:
            used = usage(backend, devices, _sampled(run_dir, jid))  # before leftovers go
            spare = lineage()
            found = [
                (g, p)
                for g, p in candidates(backend, state, devices)
                if belongs_to_job(p, jid, env.get("SLURM_JOB_UID"), spare)
            ]
            killed = end_processes([p for _, p in found], float(settings["epilog_kill_grace_s"]))
            if killed:
                log("epilog", jid, f"ended leftover GPU processes {', '.join(map(str, killed))}")
            problems = check_gpus(backend, state, [g["index"] for g in gpus_of(state, devices)], settings)
        _update_record(settings, node, jid, {"end_time": int(time.time()), "usage": used, "killed": killed})
        if problems:
            from slurm_gpupool.hooks.prolog import record_health

            record_health(state_dir, "fail", "epilog", jid, problems)
            log("epilog", jid, "GPU health check failed: " + "; ".join(problems), 3)
            count_event(state_dir, "health_drains", "epilog")  # exit 1: Slurm drains the node
            return 1
        return 0
    finally:
        if indices:  # MPS on or not now: a daemon its Prolog started is stopped all the same
            release_mps(settings, node, env, jid, state, devices)
        if indices and settings.get("dcgm_job_mapping_dir"):
            unmap_job(settings, node, env, jid, run_dir, state, devices)
        _cleanup(run_dir, jid)


def release_mps(
    settings: dict, node: str, env: dict[str, str], jid: str, state: dict | None, devices: list[dict] | None
) -> None:
    """Take the job off its GPUs' MPS daemons; the last job's Epilog stops a daemon (logged,
    counted on failure; it runs before the job's runtime files go).  ``devices``: the job's,
    as the body named them (None where the node state could not name them: nothing to do).

    Whether MPS is on *now* does not matter: an admin may turn it off (a switch's ``gres
    install`` rewrites the hooks' settings) while jobs run under daemons, and nothing after
    this Epilog would stop them.  A node that never ran a daemon has no pipe directory, and
    the release looks no further (``hooks.mps.release_mps``)."""
    try:
        if state is None:
            return
        if devices is None:
            if settings["mps"].get("enabled"):
                raise HookError("the node state does not name the job's devices")
            return
        shared = [d for d in devices if d["kind"] == "shared"]
        if shared:
            from slurm_gpupool.hooks.mps import release_mps as release

            release(settings, node, jid, shared)
    except Exception as e:  # fail open
        log("epilog", jid, f"MPS daemon not released: {type(e).__name__}: {e}", 3)
        count_failure("epilog", env)


def unmap_job(
    settings: dict,
    node: str,
    env: dict[str, str],
    jid: str,
    run_dir: str,
    state: dict | None,
    devices: list[dict] | None,
) -> None:
    """Take the job out of dcgm-exporter's mapping files, whatever else failed (logged,
    counted): out of its devices' files, named from the node state as its Prolog named them
    (under a burst of 40 jobs on one node, reading every GPU's file under the lock held it too
    long); without them, out of all (``hooks.jobmap``: an intent per GPU, no lock waited for)."""
    from slurm_gpupool.hooks.jobmap import device_keys, remove_job

    try:
        keys = None
        if state is not None and devices is not None:
            with contextlib.suppress(HookError):  # a device that names no GPU: every file, as before
                keys = device_keys(state, devices)
        remove_job(node_path(settings, "dcgm_job_mapping_dir", node), jid, run_dir, keys)
    except Exception as e:  # fail open
        log("epilog", jid, f"DCGM job mapping not cleared: {type(e).__name__}: {e}", 3)
        count_failure("epilog", env)


def _update_record(settings: dict, node: str, jid: str, extra: dict) -> None:
    fd = open_dir(node_path(settings, "spool_dir", node), "jobs")
    try:
        try:
            rec = read_in_dir(fd, f"{jid}.json")
        except FileNotFoundError:
            rec = {"job_id": jid, "node": node}
        rec.update(extra)
        write_in_dir(fd, f"{jid}.json", (json.dumps(rec, indent=1) + "\n").encode(), 0o644)
    finally:
        os.close(fd)


def _cleanup(run_dir: str, jid: str) -> None:
    """Remove ``<run_dir>/<job id>.*`` (names we made; the job id is validated digits).

    ``.devices`` goes first: the sampler writes ``.usage.json`` and then checks that
    ``.devices`` is still there (removing what it wrote if not), so a sample racing
    this cleanup never leaves a file behind."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        names = sorted(n for n in os.listdir(fd) if n.startswith(f"{jid}."))
        for name in sorted(names, key=lambda n: not n.endswith(".devices")):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    if wants_help(sys.argv[1:] if argv is None else argv, USAGE):
        return 0
    return run_hook("epilog", _body)


if __name__ == "__main__":
    sys.exit(main())
