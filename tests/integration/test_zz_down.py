"""``gpupool sandbox down`` leaves nothing running.  Named to run last; later users re-up."""

from __future__ import annotations

import os

import pytest

from slurm_gpupool.sandbox.procs import MARK_ENV, is_alive, read_pid, same_mount_namespace

from .repartition_support import wait_until

pytestmark = pytest.mark.integration

DAEMONS = {"munged", "mariadbd", "mysqld", "slurmdbd", "slurmctld", "slurmscriptd", "slurmd", "slurmstepd"}


def _proc_file(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def processes_of(root) -> list[tuple[int, str, str]]:
    """Live processes tied to this root: by command line, by the daemons' mark, or a job's SLURM_CONF;
    in our mount namespace (the other releases' containers run sandboxes at the same path)."""
    marks = [f"{MARK_ENV}={root}".encode(), f"SLURM_CONF={root}/etc/slurm.conf".encode()]
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me or not is_alive(int(entry)):
            continue
        if not same_mount_namespace(int(entry)):  # a container's sandbox may have the same root path
            continue
        pid = int(entry)
        comm = _proc_file(pid, "comm").decode().strip()
        cmdline = _proc_file(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace")
        environ = _proc_file(pid, "environ").split(b"\0")
        if (comm in DAEMONS and str(root) in cmdline) or any(m in environ for m in marks):
            found.append((pid, comm, cmdline))
    return found


def test_down_leaves_nothing_running(sandbox):
    root = sandbox.root
    # a running job, so slurmstepd and the job's own processes must go too
    sandbox.run(["sbatch", "--gres=gpu:a30:1", "-o", "/dev/null", "--wrap", "sleep 600"])
    wait_until(lambda: "RUNNING" in sandbox.run(["squeue", "-h", "-o", "%T"]).stdout, "the job to start", interval=0.2)
    pids = {p.stem: read_pid(p) for p in (root / "run").glob("*.pid")}
    assert {"munged", "mysqld", "slurmdbd", "slurmctld"} <= set(pids)
    assert all(is_alive(pid) for pid in pids.values())
    assert processes_of(root)

    sandbox.brought_down = True
    out = sandbox.gpupool("sandbox", "down", "--root", str(root)).stdout
    assert "slurmctld" in out and "munged" in out

    assert [name for name, pid in pids.items() if is_alive(pid)] == []
    assert processes_of(root) == []
    assert list((root / "run").glob("*.pid")) == []
    assert list((root / "run" / "slurm").glob("*.pid")) == []

    again = sandbox.gpupool("sandbox", "down", "--root", str(root)).stdout
    assert "nothing was running" in again
