"""``down``: cancel the jobs (``scancel``), stop every process of the root by pid, delete it.

Only what carries this root's mark is stopped (never by program name), so another
sandbox or the system's own Slurm on the same machine is left alone.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from slurm_gpupool.errors import BusyError, GpupoolError, SlurmUnavailableError, UsageError
from slurm_gpupool.sandbox import procs
from slurm_gpupool.sandbox.client import SlurmCommand
from slurm_gpupool.sandbox.daemons import DAEMON_COMMS, DAEMON_NAMES
from slurm_gpupool.sandbox.paths import SandboxPaths

ESCAPE_ROUNDS = 3  # scans for a job's escaped processes (a kill may race a fork)


def cancel_jobs(slurm: SlurmCommand, progress: Callable[[str], None]) -> None:
    """``scancel`` every job, so slurmstepd kills job processes itself; then wait briefly."""
    proc = slurm("squeue", "-h", "-o", "%i", timeout_s=10)
    ids = proc.stdout.split() if proc.returncode == 0 else []
    if not ids:
        return
    progress(f"cancelling {len(ids)} job(s)")
    slurm("scancel", *ids, timeout_s=20)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        proc = slurm("squeue", "-h", "-t", "all", "-o", "%i %T", timeout_s=10)
        if proc.returncode != 0 or not any(
            w in proc.stdout for w in ("RUNNING", "COMPLETING", "PENDING", "CONFIGURING")
        ):
            return
        time.sleep(0.2)


def stop_all(paths: SandboxPaths, slurm: SlurmCommand, progress: Callable[[str], None]) -> list[str]:
    """Stop what ``up`` started (by pid: TERM, wait, KILL) and remove pid files; the names stopped.

    Order: jobs, slurmctld (saves its state), slurmds, slurmdbd, MariaDB, munged.
    Then a job's processes that escaped their step's kill, and anything left that
    carries this root's mark (a slurmstepd, a daemon whose pid file was lost).
    """
    root = paths.root
    stopped: list[str] = []
    recorded = sorted(p.stem for p in paths.run.glob("*.pid")) if paths.run.is_dir() else []
    order = ["slurmctld", *sorted(n for n in recorded if n.startswith("slurmd-")), "slurmdbd", "mysqld"]
    order += ["munged"]
    ctld_pid = procs.read_pid(paths.pidfile("slurmctld"))
    if ctld_pid and procs.is_alive(ctld_pid) and procs.belongs_to(ctld_pid, root):
        with contextlib.suppress(SlurmUnavailableError):
            cancel_jobs(slurm, progress)
    for name in order:
        pidfile = paths.pidfile(name)
        comm = DAEMON_NAMES.get("slurmd" if name.startswith("slurmd-") else name)
        pid = procs.running_pid(pidfile, root, comm)
        if pid is not None:
            progress(f"stopping {name} (pid {pid})")
            procs.stop(pid, timeout_s=30 if name == "mysqld" else 15)
            stopped.append(name)
        pidfile.unlink(missing_ok=True)
    for pidfile in paths.run.glob("*.pid") if paths.run.is_dir() else []:
        pidfile.unlink(missing_ok=True)  # stale: its process is gone or not ours
    for pidfile in paths.slurm_run.glob("*.pid") if paths.slurm_run.is_dir() else []:
        pidfile.unlink(missing_ok=True)
    (paths.munge_dir / "munged.pid").unlink(missing_ok=True)
    for pid in procs.mps_daemons(root):
        progress(f"stopping simulated MPS daemon (pid {pid})")
        procs.stop(pid, timeout_s=10)
        stopped.append(f"mps[{pid}]")
    for pid in procs.sampler_processes(root):
        progress(f"stopping usage sampler (pid {pid})")
        procs.stop(pid, timeout_s=10)
        stopped.append(f"sampler[{pid}]")
    stopped += stop_escaped_job_processes(root, _cluster_name(paths), progress)
    leftovers = procs.sandbox_processes(root, DAEMON_COMMS)
    for pid, program_name in leftovers:
        progress(f"stopping leftover {program_name} (pid {pid})")
        procs.stop(pid, timeout_s=10)
        stopped.append(f"{program_name}[{pid}]")
    return stopped


def stop_escaped_job_processes(root: Path, cluster: str, progress: Callable[[str], None]) -> list[str]:
    """Stop the processes of this cluster's jobs that outlived their step (see
    :func:`procs.job_processes`); looked for again after each stop, since a job's shell may
    fork while it is being killed (at most ``ESCAPE_ROUNDS`` times)."""
    stopped: list[str] = []
    for _ in range(ESCAPE_ROUNDS):
        jobs = procs.job_processes(root, cluster)
        if not jobs:
            break
        progress(f"stopping {len(jobs)} job process(es) that outlived their step: {' '.join(map(str, jobs))}")
        stopped += [f"job[{pid}]" for pid in procs.stop_many(jobs, timeout_s=5)]
    return stopped


def _cluster_name(paths: SandboxPaths) -> str:
    """The ClusterName ``up`` recorded (``sandbox.json``), or the sandbox's default."""
    from slurm_gpupool.sandbox.state import CLUSTER, read_state

    try:
        recorded = read_state(paths.state_file)
    except GpupoolError:  # unreadable: `down` still stops what it can
        recorded = None
    return str((recorded or {}).get("cluster") or CLUSTER)


def purge(root: Path, progress: Callable[[str], None]) -> None:
    """``rm -rf`` the root, only if it looks like a sandbox; retried while a process still writes."""
    root = root.resolve()
    if root == Path("/") or len(root.parts) < 3:
        raise UsageError(f"sandbox root {root}", "refusing to delete a top-level directory")
    looks_ours = (root / "sandbox.json").exists() or not any(p.name not in {".lock"} for p in root.iterdir())
    if not looks_ours:
        raise UsageError(f"sandbox root {root}", "has no sandbox.json: not deleting a directory that is not a sandbox")
    progress(f"deleting {root}")
    for attempt in range(5):  # a job step that outlived its slurmd may still write there
        try:
            shutil.rmtree(root)
            return
        except OSError as e:  # a file that appeared (not empty) or vanished meanwhile
            if not root.exists():
                return
            if attempt == 4:
                raise BusyError(
                    f"sandbox root {root}",
                    f"cannot delete it: {e.strerror} ({e.filename})",
                    hint=f"a process may still use it (fuser -vm {root}); try again",
                ) from None
            time.sleep(1)
