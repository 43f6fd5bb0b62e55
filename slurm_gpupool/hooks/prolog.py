"""``gpupool-prolog``: Slurm Prolog (root, on the node, before the job starts).

1. Health check of the job's GPUs.  On a failure it writes the reason to the
   root-owned ``health.json`` in the state directory (``gpupool health --show``)
   and to syslog, and exits 1: Slurm drains the node and requeues the job.
2. A job → GPU record in the spool (``jobs/<id>.json``), written atomically.
3. For shard jobs, if the site enables it, the GPU's MPS control daemon (started for the
   first job of a user, joined by that user's next ones; another user's job runs without
   MPS: ``hooks/mps.py``).

It never calls a Slurm command.  Any error of its own (no NVML, a corrupt
state file, an unwritable spool) fails open: exit 0, logged.
"""

from __future__ import annotations

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
    read_json,
    record_health,
    run_hook,
    write_in_dir,
)

USAGE = """
usage: gpupool-prolog

Slurm Prolog for slurm_gpupool (slurm.conf: Prolog=/usr/bin/gpupool-prolog,
PrologFlags=Alloc).  Slurm runs it as root with the job's environment
(SLURM_JOB_ID, SLURM_JOB_GPUS, ...); it takes no arguments.  It checks the health
of the job's GPUs (exit 1 drains the node and requeues the job), records which
GPUs the job got, and starts MPS for shard jobs where enabled.  It fails open on
its own errors.
"""


def job_record(env: dict[str, str], node: str, state: dict, devices: list[dict]) -> dict:
    """What the spool keeps about a job; strings from the job are data, never paths."""

    def clip(name: str) -> str:
        return env.get(name, "")[:256]

    return {
        "job_id": job_id(env),
        "node": node,
        "user": clip("SLURM_JOB_USER"),
        "uid": clip("SLURM_JOB_UID"),
        "account": clip("SLURM_JOB_ACCOUNT"),
        "partition": clip("SLURM_JOB_PARTITION"),
        "layout": state.get("layout"),
        "start_time": int(time.time()),
        "devices": devices,
    }


def _body(env: dict[str, str]) -> int:
    settings = load_settings(env)
    node = node_name(env)
    jid = job_id(env)
    state_dir = node_path(settings, "state_dir", node)
    indices = gpu_indices(env.get("SLURM_JOB_GPUS"))
    if not indices:
        return 0  # not a GPU job: nothing to check or record
    try:
        state = read_json(os.path.join(state_dir, "node-state.json"))
    except FileNotFoundError:
        raise HookError("no node state (run `gpupool node apply` on this node)") from None
    from slurm_gpupool.hooks.allocation import devices_for, gpus_of

    devices = devices_for(state, indices)
    found = check(settings, node, state, [g["index"] for g in gpus_of(state, devices)])
    if found:
        record_health(state_dir, "fail", "prolog", jid, found)
        log("prolog", jid, "GPU health check failed: " + "; ".join(found), 3)
        count_event(state_dir, "health_drains", "prolog")  # exit 1: Slurm drains the node
        return 1
    spool = node_path(settings, "spool_dir", node)
    fd = open_dir(spool, "jobs")
    try:
        rec = job_record(env, node, state, devices)
        write_in_dir(fd, f"{jid}.json", (json.dumps(rec, indent=1) + "\n").encode(), 0o644)
    finally:
        os.close(fd)
    run_fd = open_dir(node_path(settings, "run_dir", node))
    try:  # the job's devices (and its user, whose processes alone are the job's), for the node's usage sampler
        uid = env.get("SLURM_JOB_UID", "")
        if uid.isascii() and uid.isdigit():
            write_in_dir(run_fd, f"{jid}.uid", uid.encode(), 0o644)
        write_in_dir(run_fd, f"{jid}.devices", json.dumps(devices).encode(), 0o644)
    finally:
        os.close(run_fd)
    if float(settings.get("usage_interval_s", 10)) > 0:
        from slurm_gpupool.hooks.sampler import ensure_running

        ensure_running(settings, node, env)
    shared = [d for d in devices if d["kind"] == "shared"]
    if settings["mps"].get("enabled") and shared:
        admit_mps(settings, node, env, shared)
    if settings.get("dcgm_job_mapping_dir"):
        map_job(settings, node, env, state, devices)
    return 0


def admit_mps(settings: dict, node: str, env: dict[str, str], shared: list[dict]) -> None:
    """Admit the job to its GPU's MPS daemon, or decide it runs without MPS; the decision
    goes to ``<run_dir>/<id>.mps`` for the TaskProlog.  A failure here is logged and
    counted, and the job runs on without MPS (no file: the TaskProlog gives no pipe
    directory, so CUDA never waits for a daemon)."""
    from slurm_gpupool.hooks.mps import start_mps

    jid = job_id(env)
    try:
        decision = start_mps(settings, node, env, shared)
        run_fd = open_dir(node_path(settings, "run_dir", node))
        try:
            write_in_dir(run_fd, f"{jid}.mps", json.dumps(decision).encode(), 0o644)
        finally:
            os.close(run_fd)
    except Exception as e:  # fail open
        log("prolog", jid, f"MPS not set up, the job runs without it: {type(e).__name__}: {e}", 3)
        count_failure("prolog", env)


def map_job(settings: dict, node: str, env: dict[str, str], state: dict, devices: list[dict]) -> None:
    """List the job in dcgm-exporter's mapping files of its GPUs and MIG instances; a failure
    here is logged and counted, and the job goes on (it only loses its DCGM label)."""
    from slurm_gpupool.hooks.jobmap import add_job, device_keys

    jid = job_id(env)
    try:
        keys = device_keys(state, devices)
        add_job(node_path(settings, "dcgm_job_mapping_dir", node), keys, jid, node_path(settings, "run_dir", node))
    except Exception as e:  # fail open
        log("prolog", jid, f"DCGM job mapping not written: {type(e).__name__}: {e}", 3)
        count_failure("prolog", env)


def check(settings: dict, node: str, state: dict, gpu_indices_: list[int]) -> list[str]:
    """Health problems of the job's GPUs, through NVML (or the simulation)."""
    from slurm_gpupool.hooks.health import check_gpus
    from slurm_gpupool.hw import open_backend

    sim = settings.get("sim_dir")
    with open_backend(node, sim) as backend:
        return check_gpus(backend, state, gpu_indices_, settings)


def main(argv: list[str] | None = None) -> int:
    if wants_help(sys.argv[1:] if argv is None else argv, USAGE):
        return 0
    return run_hook("prolog", _body)


if __name__ == "__main__":
    sys.exit(main())
