"""Ending a finished job's leftover GPU processes, and only that job's.

A process is the job's when its cgroup names the job (``job_<id>``) or its
environment carries ``SLURM_JOB_ID=<id>``, and it runs as the job's user.  On a
MIG GPU only processes on the job's own MIG devices are considered; on a shared
GPU other jobs' processes share the device, so the ownership test decides.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def lineage(pid: int | None = None) -> set[int]:
    """``pid`` (default: this process) and its ancestors, from ``/proc/<pid>/stat``.

    The epilog carries the job's SLURM_JOB_ID in its own environment, so without
    this guard a stale GPU-process entry whose pid was reused by the epilog (or by
    slurmd) would look like the job's, and the epilog would signal itself."""
    out: set[int] = set()
    p = os.getpid() if pid is None else pid
    while p > 1 and p not in out:
        out.add(p)
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                stat = f.read()
            p = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def belongs_to_job(pid: int, job: str, uid: str | None, spare: set[int] | frozenset[int] = frozenset()) -> bool:
    """Is ``pid`` part of Slurm job ``job`` (run by ``uid`` if given)?  ``spare``: never (see lineage)."""
    if pid in spare:
        return False
    if uid and uid.isdigit() and _owner(pid) != int(uid):
        return False
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as f:
            if f"/job_{job}/".encode() in f.read():
                return True
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"SLURM_JOB_ID={job}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def candidates(backend: Any, state: dict[str, Any], devices: Iterable[dict[str, Any]]) -> list[tuple[int, int]]:
    """(GPU index, pid) of processes on the job's devices: its MIG devices, or its GPUs."""
    mig_ids = {}
    for g in state.get("gpus", []):
        for inst in g.get("instances", []):
            mig_ids[inst["uuid"]] = (g["index"], inst["gi_id"], inst["ci_id"])
    out = []
    by_gpu: dict[int, list[dict[str, Any]]] = {}
    for d in devices:
        by_gpu.setdefault(d["gpu"], []).append(d)
    for gpu, devs in sorted(by_gpu.items()):
        mine = {mig_ids[d["mig_uuid"]][1:] for d in devs if d.get("mig_uuid") in mig_ids}
        for p in backend.process_records(gpu):
            if mine and (p["gi_id"], p["ci_id"]) not in mine:
                continue  # another MIG device of the same GPU: another job's
            out.append((gpu, p["pid"]))
    return out


def end_processes(pids: list[int], grace_s: float) -> list[int]:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL; returns the pids signalled."""
    sent = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            sent.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in sent):
        time.sleep(0.05)
    for pid in sent:
        if os.path.exists(f"/proc/{pid}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return sent
