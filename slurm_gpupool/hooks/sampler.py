"""The node's GPU usage sampler: peak memory, utilization and activity of running jobs.

NVML cannot say after the fact how much memory a job used, and has no
utilization for MIG devices at all, so the Epilog alone cannot record a peak.
The Prolog starts this sampler (one per node, if none runs) and leaves it a
``<run_dir>/<job>.devices`` file; every ``usage_interval_s`` the sampler reads
memory in use per device (MIG devices included), for whole GPUs utilization,
on Hopper and later GPM's SM, tensor and DRAM activity per MIG instance or GPU,
and on a shared GPU the job's own processes' memory and share of the utilization,
keeping per-job sums and peaks in ``<job>.usage.json``.  The Epilog merges
them into the spool record.  With no job left for a few rounds, it exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

from slurm_gpupool.hooks.runtime import (
    HookError,
    load_settings,
    log,
    node_name,
    node_path,
    open_dir,
    open_regular,
    write_in_dir,
)

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


PID_FILE = "sampler.pid"
LOCK_FILE = "sampler.lock"  # held by the running sampler: what says one runs
IDLE_ROUNDS = 3


def _alive(run_dir: str) -> bool:
    """A sampler holds ``sampler.lock`` for as long as it runs (``run``): a lock this process
    can take means none does.  The pid file named a process that could be gone with its
    pid reused, or a user's look-alike whose command line named the sampler: then no job on
    the node was sampled.  A sampler starting while this looks finds the lock taken and
    leaves, and this one, having taken it, starts another: never none."""
    import fcntl

    try:
        fd = open_regular(os.path.join(run_dir, LOCK_FILE))
    except (OSError, HookError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # and with it the lock, if it was taken
    return False


def ensure_running(settings: dict[str, Any], node: str, env: dict[str, str]) -> None:
    """Start the sampler for this node unless one runs (called by the Prolog)."""
    run_dir = node_path(settings, "run_dir", node)
    if _alive(run_dir):
        return
    import subprocess

    child_env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": node}
    if env.get("SLURM_CONF"):
        child_env["SLURM_CONF"] = env["SLURM_CONF"]
    subprocess.Popen(
        # the run directory on the command line only labels the process (ps, sandbox down)
        [sys.executable, "-IS", "-c", child_code(), run_dir],
        env=child_env,
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def child_code() -> str:
    """What the sampler's interpreter runs: this one's import path, then :func:`main` as a
    launcher runs a hook (isolated: ``-IS``, no ``site``, no ``PYTHON*``, not the working
    directory).  A launcher may name the system's interpreter, which finds neither
    ``slurm_gpupool`` nor ``pynvml`` by itself: ``python -m slurm_gpupool.hooks.sampler``
    died at its import there, and no job was sampled (#30)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [package, *(p for p in sys.path if os.path.isabs(p) and p != package)]
    return (
        f"import sys; sys.path.extend({paths!r}); "
        "from slurm_gpupool.hooks.launcher import run; run('slurm_gpupool.hooks.sampler')"
    )


def _sample(
    backend: Any, devices: list[dict[str, Any]], prev: dict[str, Any], job: str = "", uid: str | None = None
) -> dict[str, Any]:
    """One round for one job: peak memory per device; SM / tensor / DRAM activity where GPM
    measures it (a MIG instance or a whole GPU, Hopper and later); utilization where NVML
    gives it (whole GPUs), and on a shared GPU the job's own processes' memory and its
    share of the GPU's utilization (no per-job counter exists for time slices)."""
    out = {"samples": prev.get("samples", 0) + 1, "devices": {}}
    for d in devices:
        key = str(d["index"])
        old = prev.get("devices", {}).get(key, {})
        entry = dict(old)
        u = backend.device_usage(d["gpu"], d.get("mig_uuid"))
        mem = u.get("memory_used_mib") or 0
        util = u.get("utilization_pct")
        if d.get("kind") == "shared" and job:
            mem, util = _own_share(backend, d["gpu"], job, util, uid)
            entry["own_processes"] = True
        entry["peak_memory_mib"] = max(mem, old.get("peak_memory_mib", 0))
        entry["memory_mib"] = mem  # the latest, for `gpupool metrics` (as `nvidia-smi dmon -s m`)
        if u.get("memory_total_mib"):
            entry["memory_total_mib"] = u["memory_total_mib"]
        if util is not None:
            _add(entry, "util", util)
        if d.get("kind") != "shared":  # GPM of a shared GPU is every job's: not this one's
            act = _activity(backend, d, job)
            if act:
                for name, value in act.items():
                    if value is not None:
                        _add(entry, name.removesuffix("_pct"), value)
        out["devices"][key] = entry
    return out


def _add(entry: dict[str, Any], name: str, value: float) -> None:
    """Running sum, count, peak and latest value of one measure (``util`` keeps its historic
    names); the latest is what `gpupool metrics` exports per slice, as dcgm-exporter would."""
    entry[f"{name}_sum"] = entry.get(f"{name}_sum", 0) + value
    entry[f"{name}_last"] = value
    entry[f"{name}_samples"] = entry.get(f"{name}_samples", 0) + 1
    peak = "peak_utilization_pct" if name == "util" else f"peak_{name}_pct"
    entry[peak] = max(value, entry.get(peak, 0))


def _activity(backend: Any, d: dict[str, Any], job: str) -> dict[str, float | None] | None:
    """GPM since the previous round (None: unsupported, or the first round); never fatal."""
    try:
        return backend.activity(d["gpu"], d.get("mig_uuid"))
    except Exception as e:  # memory is still worth recording without activity
        log("sampler", job, f"activity of GPU {d['gpu']} not sampled: {type(e).__name__}: {e}", 6)
        return None


def _own_share(backend: Any, gpu: int, job: str, util: int | None, uid: str | None) -> tuple[int, float | None]:
    """The job's processes' memory on a shared GPU, and the GPU's utilization split by their
    share of the memory its processes use (``nvidia-smi --query-compute-apps=pid,used_memory``).
    A process is the job's only if the job's user runs it (``uid``, as the Epilog asks): any
    user can put ``SLURM_JOB_ID=<another job>`` in a process's environment."""
    from slurm_gpupool.hooks.leftovers import belongs_to_job

    procs = [p for p in backend.process_records(gpu) if p.get("used_memory_mib") is not None]
    total = sum(p["used_memory_mib"] for p in procs)
    own = sum(p["used_memory_mib"] for p in procs if belongs_to_job(p["pid"], job, uid))
    share = None if util is None or not total else round(util * own / total, 1)
    return own, share


def run(env: dict[str, str]) -> int:
    settings = load_settings(env)
    node = node_name(env)
    run_dir = node_path(settings, "run_dir", node)
    fd = open_dir(run_dir)
    lock = open_regular(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600, dir_fd=fd)
    import fcntl

    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another sampler serves this node (two prologs raced to start one)
    write_in_dir(fd, PID_FILE, f"{os.getpid()}\n".encode())
    interval = float(settings.get("usage_interval_s", 10))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from slurm_gpupool.hw import open_backend

    with open_backend(node, settings.get("sim_dir")) as backend:
        while True:
            idle = 0
            while idle < IDLE_ROUNDS:
                idle = 0 if sample_round(fd, backend) else idle + 1
                time.sleep(interval)
            if not _hand_over(fd, lock):
                return 0
            write_in_dir(fd, PID_FILE, f"{os.getpid()}\n".encode())


def _hand_over(fd: int, lock: int) -> bool:
    """Leave the node without a sampler, unless a job started meanwhile; True: keep sampling.

    A Prolog writes its job's ``.devices`` file, then starts a sampler unless one runs: one
    that found this sampler still alive must not be left with none.  So the pid file goes
    first (a later Prolog starts a new sampler), then the lock (that new one can take it),
    and only then does this one look again: a job that came meanwhile is served by whoever
    holds the lock next, this one if it gets it back."""
    import fcntl

    with contextlib.suppress(FileNotFoundError):
        os.unlink(PID_FILE, dir_fd=fd)
    fcntl.flock(lock, fcntl.LOCK_UN)
    if not any(n.endswith(".devices") for n in os.listdir(fd)):
        return False
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # a sampler a Prolog started meanwhile serves the node
    return True


def sample_round(fd: int, backend: Any) -> int:
    """One sample of every running job's devices (``<job>.devices`` in the run dir); returns how many jobs."""
    jobs = [n[: -len(".devices")] for n in os.listdir(fd) if n.endswith(".devices")]
    for job in jobs:
        try:
            devices = json.loads(_read(fd, f"{job}.devices"))
            try:
                prev = json.loads(_read(fd, f"{job}.usage.json"))
            except FileNotFoundError:
                prev = {}
            sample = _sample(backend, devices, prev, job, _uid(fd, job))
            write_in_dir(fd, f"{job}.usage.json", json.dumps(sample).encode())
            if not _exists(fd, f"{job}.devices"):  # the Epilog cleaned up meanwhile
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{job}.usage.json", dir_fd=fd)
        except (OSError, ValueError) as e:  # the job ended meanwhile, or a device vanished
            log("sampler", job, f"sample skipped: {e}", 6)
        except Exception as e:
            log("sampler", job, f"sample failed: {type(e).__name__}: {e}", 4)
    return len(jobs)


def _uid(dir_fd: int, job: str) -> str | None:
    """The job's user as its Prolog wrote it (``<job>.uid``); None for a job whose Prolog
    predates that file."""
    try:
        uid = _read(dir_fd, f"{job}.uid").strip()
    except (OSError, ValueError):
        return None
    return uid if uid.isascii() and uid.isdigit() else None


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _read(dir_fd: int, name: str) -> str:
    with os.fdopen(open_regular(name, dir_fd=dir_fd)) as f:
        return f.read()


def main() -> int:
    """The sampler's process (started by :func:`ensure_running`)."""
    return run(dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
