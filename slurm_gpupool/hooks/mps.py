"""CUDA MPS for time-sliced (shard) GPUs: one control daemon per GPU, one user at a time.

Facts from NVIDIA's MPS documentation (docs/hooks.md lists the pages):

* a CUDA client runs under MPS only if it reaches a control daemon through
  ``CUDA_MPS_PIPE_DIRECTORY`` (the same directory the daemon was started with); if it
  cannot connect it runs without MPS, as if there were none;
* the daemon starts one server per user: a client of another user than the running
  server's is *queued* until every client of that server has ended, so it hangs at CUDA
  initialisation for as long as the other user's jobs run;
* the daemon writes ``nvidia-cuda-mps-control.pid`` into its pipe directory;
  ``echo get_server_list | nvidia-cuda-mps-control`` asks it something (our liveness probe)
  and ``echo quit | nvidia-cuda-mps-control`` stops it;
* ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
  (``"<device ordinal>=<N>M"``, the ordinal as the client enumerates devices) are read by
  the client, and only take effect under MPS.

So the Prolog (root) keeps, per GPU, a record of the user whose server it is and the jobs
that use it (``<pipe_dir>/<gpu uuid>.json``, under a lock).  The first shard job of a GPU
starts its daemon; a later job of the same user joins; a job of another user runs
*without* MPS (plain time slicing: no pipe directory, so CUDA never waits for the
daemon), with a note in its output and in syslog.  The Epilog of the last job stops the
daemon.  A dead or unanswering daemon is replaced when no job uses it, and otherwise
left alone for its jobs (a new job then runs without MPS).  The job's decision goes into
``<run_dir>/<job id>.mps`` for the TaskProlog, which exports what :func:`client_env` says.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

from slurm_gpupool.hooks.runtime import HookError, locked, log, node_path, open_dir, read_in_dir, write_in_dir

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any

PID_FILE = "nvidia-cuda-mps-control.pid"  # the daemon writes it into its pipe directory
LOCK = ".gpupool-mps.lock"


def lock_wait_s(settings: dict[str, Any]) -> float:
    """How long a hook waits for the node's MPS lock: as long as its holder may keep it.  A
    Prolog replacing a daemon asks it (``timeout_s``), stops it (``quit``: ``timeout_s``, then
    up to ``timeout_s`` for it to end) and starts another (``-d``: ``timeout_s``); an Epilog
    stopping a wedged one, two of those.  A fixed 15 s was shorter than that with a
    ``timeout_s`` of 5 s and more: the Epilogs ending beside a wedged daemon's gave up, and
    no one removed the dead daemon's pipes (an integration test, a quiet machine, 20 s)."""
    return max(15.0, 4 * float(settings["mps"].get("timeout_s", 5.0)) + 5.0)


_UUID = re.compile(r"(GPU|MIG)-[0-9a-fA-F-]{8,64}")  # a GPU's, or a MIG device's (R470+ form, no '/')
_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"


# ---------------------------------------------------------------- pure: what a client gets


def thread_percentage(shards: int, shares: int) -> int:
    """The SM share a client may use: its shards of the GPU's shares, 1-100 %."""
    return max(1, min(100, round(100 * shards / max(1, shares))))


def share_limits(
    shards: int, shares: int, gpu_memory_mib: int | None, mem_request_mib: int | None = None
) -> tuple[int, int | None]:
    """``(SM percent, memory MiB or None)`` of a shard job: the one share rule that MPS and a
    preload library both enforce, so the two modes can never disagree on a job's numbers.

    The memory is its shards of the GPU's memory, or less if it asked for less
    (``mem_request_mib`` is job-controlled, so it can only lower the limit); None when the
    GPU's memory is unknown."""
    mib = None
    if gpu_memory_mib:
        mib = gpu_memory_mib * shards // max(1, shares)
        if mem_request_mib and mem_request_mib > 0:
            mib = min(mib, mem_request_mib)
        mib = max(1, mib)
    return thread_percentage(shards, shares), mib


def client_env(
    shards: int,
    shares: int,
    gpu_memory_mib: int | None,
    *,
    mps: dict[str, str] | None = None,
    memory_limit: bool = False,
    mem_request_mib: int | None = None,
    preload: str | None = None,
    ld_preload: str = "",
) -> list[tuple[str, str]]:
    """The share variables of a shard job's tasks: the one place that defines them.

    ``mps``: the job's daemon (``pipe_dir``, ``log_dir``) if it runs under MPS, else None.
    Under MPS the job gets the pipe and log directories, its thread percentage and its
    pinned memory limit (:func:`share_limits`).  Without MPS it gets the thread percentage
    (a hint for MPS-aware programs) and, with ``memory_limit``, the memory limit: both are
    ignored by CUDA there.

    ``preload``: the limiter library's absolute path (from the root-owned settings, never
    from the job), for ``hooks.share_enforcement: preload``: ``LD_PRELOAD`` gets it appended
    to the job's own ``ld_preload`` and the HAMi-core variables carry the same limits
    (``CUDA_DEVICE_SM_LIMIT`` in percent, ``CUDA_DEVICE_MEMORY_LIMIT`` with an ``m`` suffix).
    """
    pct, mib = share_limits(shards, shares, gpu_memory_mib, mem_request_mib)
    out: list[tuple[str, str]] = []
    if mps:
        out += [("CUDA_MPS_PIPE_DIRECTORY", mps["pipe_dir"]), ("CUDA_MPS_LOG_DIRECTORY", mps["log_dir"])]
    out.append(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(pct)))
    if (mps or memory_limit) and mib:
        # device ordinal 0: the job sees exactly its one GPU (CUDA_VISIBLE_DEVICES=<uuid>)
        out.append(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", f"0={mib}M"))
    if preload:
        out.append(("LD_PRELOAD", preload_list(ld_preload, preload)))
        out.append(("CUDA_DEVICE_SM_LIMIT", str(pct)))
        if mib:
            out.append(("CUDA_DEVICE_MEMORY_LIMIT", f"{mib}m"))
    return out


def preload_list(existing: str, library: str) -> str:
    """``LD_PRELOAD`` with ``library`` appended: the job's own entries stay first and are never
    dropped (a value that would break the TaskProlog's output line is not echoed back)."""
    entries = [e for e in existing.replace(" ", ":").split(":") if e] if existing.isprintable() else []
    return ":".join(entries if library in entries else [*entries, library])


def admission(record: dict[str, Any] | None, uid: str, live_jobs: set[str], daemon: str) -> tuple[str, str]:
    """What a new shard job of user ``uid`` does on a GPU: ``(action, why)``.

    ``record``: the GPU's MPS record (``uid``, ``user``, ``jobs``) or None; ``live_jobs``:
    the node's running jobs (their ``.devices`` file is there); ``daemon``: ``absent``,
    ``running``, ``dead`` (pid file left, process gone) or ``wedged`` (alive, not answering).
    Actions: ``start`` a daemon, ``join`` the running one, ``restart`` (stop what is there,
    then start), ``plain`` (run without MPS, ``why`` says why).
    """
    jobs = [j for j in (record or {}).get("jobs", []) if j in live_jobs]
    if not jobs:
        if daemon == "absent":
            return "start", ""
        if daemon == "running" and record is not None and str(record.get("uid")) == uid:
            return "join", ""
        return (
            "restart",
            f"{daemon} MPS daemon with no job of ours" if daemon != "running" else "another user's idle MPS daemon",
        )
    if daemon != "running":
        return "plain", f"the GPU's MPS daemon is {daemon}; it is left to the jobs using it ({', '.join(jobs)})"
    if str(record.get("uid") if record else "") != uid:
        owner = (record or {}).get("user") or f"uid {(record or {}).get('uid')}"
        return (
            "plain",
            f"the GPU's MPS server serves another user ({owner}, job {jobs[0]}) and serves one user at a time",
        )
    return "join", ""


# ---------------------------------------------------------------- I/O: the daemon


def daemon_key(device: dict[str, Any]) -> str:
    """The UUID a shard device's daemon is keyed by: its MIG device's for a time-sliced MIG
    device (NVIDIA runs one MPS daemon per MIG device), else its GPU's."""
    return str(device.get("mig_uuid") or device["gpu_uuid"])


def daemon_dirs(settings: dict[str, Any], node: str, gpu_uuid: str) -> tuple[str, str, str]:
    """(base, pipe_dir, log_dir) of a GPU's (or MIG device's) daemon; the UUID comes from the node state.
    Public: ``scripts/gpu-check`` starts its real-GPU daemon in this same layout."""
    if not _UUID.fullmatch(gpu_uuid):
        raise HookError(f"unexpected GPU UUID {gpu_uuid[:80]!r}")
    base = node_path(settings["mps"], "pipe_dir", node)
    return base, os.path.join(base, gpu_uuid), os.path.join(base, gpu_uuid + ".log")


def control_env(settings: dict[str, Any], node: str, gpu_uuid: str, pipes: str, logs: str) -> dict[str, str]:
    """The environment ``nvidia-cuda-mps-control`` runs in for one GPU's daemon."""
    env = {
        "PATH": _PATH,
        "CUDA_VISIBLE_DEVICES": gpu_uuid,
        "CUDA_MPS_PIPE_DIRECTORY": pipes,
        "CUDA_MPS_LOG_DIRECTORY": logs,
    }
    if settings.get("sim_dir"):  # the simulated stand-in finds its node's GPUs here
        env["SLURM_GPUPOOL_SIM_STATE"] = os.path.join(node_path(settings, "sim_dir", node), f"{node}.json")
    return env


def control(settings: dict[str, Any], env: dict[str, str], args: list[str], stdin: bytes | None) -> bool:
    """Run ``nvidia-cuda-mps-control ARGS`` (``-d``, or commands on stdin); True if it answered."""
    import subprocess

    timeout = float(settings["mps"].get("timeout_s", 5.0))
    # -d: the daemon may keep inherited descriptors; a captured pipe would then never close
    out = subprocess.DEVNULL if args == ["-d"] else subprocess.PIPE
    try:
        proc = subprocess.run(
            [str(settings["mps"]["control"]), *args],
            input=stdin,
            env=env,
            timeout=timeout,
            stdout=out,
            stderr=out,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _daemon_pid(pipes: str) -> int | None:
    """The pid in ``<pipe_dir>/nvidia-cuda-mps-control.pid`` if that process is the daemon
    of this pipe directory (``/proc/<pid>/environ`` names it: a reused pid is not)."""
    from slurm_gpupool.hooks.runtime import open_regular

    try:
        with os.fdopen(open_regular(os.path.join(pipes, PID_FILE)), "rb") as f:
            pid = int(f.read(32).strip() or b"0")
    except (FileNotFoundError, ValueError, HookError, OSError):
        return None
    if pid <= 1:
        return None
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read(1 << 20).split(b"\0")
    except OSError:
        return None
    return pid if ("CUDA_MPS_PIPE_DIRECTORY=" + pipes).encode() in environ else None


def _running(pid: int) -> bool:
    """The process exists and has not exited (a zombie nobody reaped yet has)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :][:1] != b"Z"


def daemon_state(settings: dict[str, Any], env: dict[str, str], pipes: str) -> tuple[str, int | None]:
    """``absent``, ``running``, ``dead`` or ``wedged``, and the daemon's pid
    (``echo get_server_list | nvidia-cuda-mps-control`` is the probe)."""
    if not os.path.exists(os.path.join(pipes, PID_FILE)):
        return "absent", None
    pid = _daemon_pid(pipes)
    if pid is None:
        return "dead", None
    if control(settings, env, [], b"get_server_list\n"):
        return "running", pid
    return "wedged", pid


def stop_daemon(settings: dict[str, Any], env: dict[str, str], pipes: str) -> None:
    """``echo quit | nvidia-cuda-mps-control``; a daemon that does not answer is killed (only
    the process this pipe directory names); then the directory is emptied and removed, so a
    crashed daemon leaves no pipes behind and a GPU that is gone leaves no directory (a
    fresh start makes it again; the log directory stays for the admin)."""
    import signal
    import time

    pid = _daemon_pid(pipes)
    if pid is not None and not control(settings, env, [], b"quit\n"):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + float(settings["mps"].get("timeout_s", 5.0))
    while pid is not None and _running(pid) and time.monotonic() < deadline:
        time.sleep(0.01)  # the daemon ends
    with contextlib.suppress(OSError):
        fd = os.open(pipes, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for name in os.listdir(fd):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)  # never follows a symlink
        finally:
            os.close(fd)
        os.rmdir(pipes)  # empty now, and a real directory (the open refused a symlink)


def _live_jobs(run_dir: str) -> set[str]:
    """Jobs whose Prolog ran and whose Epilog has not (their ``<id>.devices``)."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return set()
    return {n[: -len(".devices")] for n in names if n.endswith(".devices") and n[:-8].isdigit()}


def _read_record(fd: int, name: str) -> dict[str, Any] | None:
    try:
        rec = read_in_dir(fd, name)
    except FileNotFoundError:
        return None
    except ValueError:
        return None  # replaced atomically, so never torn; a bad one is forgotten
    return rec if isinstance(rec, dict) else None


def start_mps(
    settings: dict[str, Any], node: str, env: dict[str, str], devices: list[dict[str, Any]]
) -> dict[str, Any]:
    """The Prolog's part: admit this job to its GPU's MPS daemon (starting it if needed) or
    decide it runs without MPS.  Returns what goes into ``<run_dir>/<id>.mps``."""
    jid = env["SLURM_JOB_ID"]
    uid = env.get("SLURM_JOB_UID", "")[:16]
    user = env.get("SLURM_JOB_USER", "")[:64]
    gpus = sorted({daemon_key(d) for d in devices})
    if len(gpus) != 1:
        return {"note": f"the job's shards span {len(gpus)} GPUs; a client reaches one GPU's MPS daemon"}
    if not uid.isdigit():
        return {"note": "no SLURM_JOB_UID"}
    gpu = gpus[0]
    base, pipes, logs = daemon_dirs(settings, node, gpu)
    cenv = control_env(settings, node, gpu, pipes, logs)
    run_dir = node_path(settings, "run_dir", node)
    fd = open_dir(base)
    try:
        with locked(fd, LOCK, lock_wait_s(settings)):
            record = _read_record(fd, gpu + ".json")
            daemon, _ = daemon_state(settings, cenv, pipes)
            live = _live_jobs(run_dir) - {jid}
            action, why = admission(record, uid, live, daemon)
            if action == "plain":
                log("prolog", jid, f"GPU {gpu}: runs without MPS: {why}")
                return {"note": why}
            if action == "restart":
                log("prolog", jid, f"GPU {gpu}: replacing the MPS daemon ({why})")
                stop_daemon(settings, cenv, pipes)
            if action in ("start", "restart"):
                for d in (pipes, logs):
                    os.makedirs(d, mode=0o755, exist_ok=True)
                if not control(settings, cenv, ["-d"], None):  # nvidia-cuda-mps-control -d
                    log("prolog", jid, f"GPU {gpu}: could not start the MPS daemon ({pipes})", 4)
                    return {"note": "the GPU's MPS daemon did not start"}
                log("prolog", jid, f"GPU {gpu}: started the MPS daemon for user {user or uid} ({pipes})")
                record = None
            jobs = [j for j in (record or {}).get("jobs", []) if j in live]
            new = {"uid": uid, "user": user, "gpu_uuid": gpu, "jobs": [*jobs, jid]}
            write_in_dir(fd, gpu + ".json", (json.dumps(new) + "\n").encode(), 0o644)
            return {"pipe_dir": pipes, "log_dir": logs, "gpu_uuid": gpu}
    finally:
        os.close(fd)


def release_mps(settings: dict[str, Any], node: str, jid: str, devices: list[dict[str, Any]]) -> None:
    """The Epilog's part: take the job off its GPUs' records; the last one stops the daemon
    (``echo quit | nvidia-cuda-mps-control``).  A daemon no live job uses is stopped too
    (one whose last Epilog never ran), whatever its state."""
    run_dir = node_path(settings, "run_dir", node)
    for gpu in sorted({daemon_key(d) for d in devices}):
        base, pipes, logs = daemon_dirs(settings, node, gpu)
        if not os.path.isdir(base):
            continue
        fd = open_dir(base, create=False)
        try:
            with locked(fd, LOCK, lock_wait_s(settings)):
                record = _read_record(fd, gpu + ".json")
                live = _live_jobs(run_dir) - {jid}
                jobs = [j for j in (record or {}).get("jobs", []) if j in live]
                if jobs and record is not None:
                    if jobs != record.get("jobs"):
                        write_in_dir(fd, gpu + ".json", (json.dumps({**record, "jobs": jobs}) + "\n").encode(), 0o644)
                    continue
                if record is None and not os.path.exists(os.path.join(pipes, PID_FILE)):
                    continue
                stop_daemon(settings, control_env(settings, node, gpu, pipes, logs), pipes)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(gpu + ".json", dir_fd=fd)
                log("epilog", jid, f"GPU {gpu}: stopped the MPS daemon (no job uses it)")
        finally:
            os.close(fd)
