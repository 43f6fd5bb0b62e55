"""dcgm-exporter's HPC job mapping files, kept by the Prolog and the Epilog.

dcgm-exporter started with ``--hpc-job-mapping-dir DIR`` (or
``DCGM_HPC_JOB_MAPPING_DIR``) reads every file of DIR named after a GPU index
(``0``; ``strconv.Atoi`` of the name) and labels every metric whose ``gpu`` is that
index ``hpc_job=<id>``, one series per job id listed in the file, one id per line
(NVIDIA/dcgm-exporter ``internal/pkg/transformation/hpc.go`` and its tests).  It has
no per-MIG-instance file (its issue #369; a fork reads ``<gpu>-<gi>``), and a MIG
instance's metrics carry their GPU's index.  So:

* a whole GPU's file lists its job; a time-shared GPU's file every shard job on it;
  a MIG GPU's file every job on any of its instances (what dcgm-exporter reads: each
  instance's metrics get one series per job on that GPU), and each instance has its
  own ``<gpu>.<gi>`` file listing its job alone, for tools that attribute per
  instance (dcgm-exporter ignores that name);
* the Prolog adds the job's id to the files of its devices, the Epilog removes
  it from the same files (the node state names them; without it, from every file), so
  under the lock it reads one or two files, not every GPU's (a file left empty is
  deleted);
* a GPU's files (``<gpu>`` and its ``<gpu>.<gi>``) are edited under that GPU's
  exclusive lock (``.gpupool.<gpu>.lock`` in DIR: dcgm-exporter ignores names that
  are not GPU ids), each file replaced atomically, so two shard jobs starting on
  one GPU at once both end up listed, while jobs on other GPUs of the node do not
  wait.  One lock for the whole directory made every hook of a node queue behind
  each other: under a burst (benchmarks/bench_hook_burst.py: 40 jobs starting on
  one node) hooks waited more than the lock's 2 s and lost the job's label.  A
  hook takes one GPU's lock at a time (no lock order to keep), all of them within one
  2 s wait.  (A hook of an older version still running during an upgrade takes the old
  ``.gpupool.lock``, so a label may be lost in that window; the old file can be
  deleted.)  The files are not fsynced: they mean nothing after a crash (the node's
  jobs are gone with it);
* an id whose job has no ``<run_dir>/<id>.devices`` any more (its Epilog never
  ran: slurmd was killed) is dropped the next time the file is written.

Standard library only; names are built from validated numbers, never from a
job-controlled string; the directory is opened without following symlinks and
must be root-owned and closed to others (``runtime.open_dir``).
"""

from __future__ import annotations

import os
import re
import time

from slurm_gpupool.hooks.runtime import LOCK_WAIT_S, HookError, locked, open_dir, open_regular, write_in_dir

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


def lock_name(gpu: str) -> str:
    """The lock of one GPU's mapping files (a dot name: dcgm-exporter skips it)."""
    return f".gpupool.{gpu}.lock"


MAX_READ = 1 << 16
_N = r"(?:0|[1-9][0-9]{0,4})"  # as device_keys writes them: no leading zero (03 would be GPU 3 to dcgm-exporter)
_KEY = re.compile(rf"{_N}(?:\.{_N})?")
_JOB = re.compile(r"[0-9]{1,12}")


def device_keys(state: dict[str, Any], devices: list[dict[str, Any]]) -> list[str]:
    """The mapping files of the job's devices, in order: ``<gpu>`` for a whole or shared GPU;
    ``<gpu>.<gi>`` and then ``<gpu>`` for a MIG instance (the GPU's file is the one
    dcgm-exporter reads)."""
    gi_of = {
        i.get("uuid"): i.get("gi_id") for g in state.get("gpus", []) for i in g.get("instances", []) if i.get("uuid")
    }
    keys: list[str] = []
    for d in devices:
        gpu = d.get("gpu")
        if not isinstance(gpu, int):
            raise HookError(f"device {d.get('index')} names no GPU index")
        key = str(gpu)
        if d.get("mig_uuid"):
            gi = gi_of.get(d["mig_uuid"])
            if not isinstance(gi, int):
                raise HookError(f"MIG device {d['mig_uuid']} is not in the node state's instances")
            keys.extend(k for k in (f"{gpu}.{gi}",) if k not in keys)
        if key not in keys:
            keys.append(key)
    return keys


def add_job(directory: str, keys: list[str], job: str, run_dir: str, wait_s: float = LOCK_WAIT_S) -> None:
    """List ``job`` in each of ``keys``' files (Prolog)."""
    _edit(directory, job, run_dir, wait_s, keys, add=True)


def remove_job(
    directory: str, job: str, run_dir: str, keys: list[str] | None = None, wait_s: float = LOCK_WAIT_S
) -> None:
    """Take ``job`` out of ``keys``' files, the ones its Prolog listed it in (None: out of
    every mapping file); files left empty are deleted (Epilog)."""
    _edit(directory, job, run_dir, wait_s, keys, add=False)


def read_jobs(dir_fd: int, key: str) -> list[str]:
    """The job ids a mapping file lists (missing file: none); other lines are ignored."""
    try:
        fd = open_regular(key, dir_fd=dir_fd)  # a FIFO there blocked the hook, lock held
    except FileNotFoundError:
        return []
    except HookError as e:
        raise HookError(f"mapping file {e}") from None
    with os.fdopen(fd, "rb") as f:
        text = f.read(MAX_READ).decode("ascii", "replace")
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if _JOB.fullmatch(line) and line not in out:
            out.append(line)
    return out


def _edit(directory: str, job: str, run_dir: str, wait_s: float, keys: list[str] | None, add: bool) -> None:
    """Edit each GPU's files under its lock, one GPU at a time.  The wait for all the locks
    together is ``wait_s`` (one deadline, not one per GPU: an Epilog clearing eight GPUs must
    not wait 8 × 2 s); a GPU whose lock is not taken in time is skipped and the others are
    still edited, then the hook fails open naming the skipped ones."""
    if not _JOB.fullmatch(job):
        raise HookError(f"bad job id {job!r}")
    fd = open_dir(directory)
    try:
        if keys is None:  # an Epilog without the node state: every mapping file
            keys = [n for n in os.listdir(fd) if _KEY.fullmatch(n)]
        by_gpu: dict[str, list[str]] = {}
        for key in keys:
            if not _KEY.fullmatch(key):
                raise HookError(f"bad mapping file name {key!r}")
            by_gpu.setdefault(key.split(".")[0], []).append(key)
        deadline = time.monotonic() + wait_s
        missed: list[str] = []
        for gpu, gpu_keys in by_gpu.items():
            try:
                with locked(fd, lock_name(gpu), max(0.0, deadline - time.monotonic())):
                    for key in gpu_keys:
                        _rewrite(fd, key, job, run_dir, add)
            except HookError as e:
                missed.append(f"GPU {gpu}: {e}")
        if missed:
            raise HookError("; ".join(missed))
    finally:
        os.close(fd)


def _rewrite(fd: int, key: str, job: str, run_dir: str, add: bool) -> None:
    """One mapping file with ``job`` added or taken out and dead jobs dropped (the GPU's lock held)."""
    before = read_jobs(fd, key)
    kept = {j for j in before if j != job and _alive(run_dir, j)}
    after = sorted(kept | ({job} if add else set()), key=int)
    if after == before:
        return
    if after:
        write_in_dir(fd, key, "".join(f"{j}\n" for j in after).encode(), 0o644, durable=False)
    else:
        try:
            os.unlink(key, dir_fd=fd)
        except FileNotFoundError:
            pass


def _alive(run_dir: str, job: str) -> bool:
    """A job still has its Prolog's ``<run_dir>/<id>.devices`` (removed by its Epilog)."""
    try:
        os.stat(os.path.join(run_dir, f"{job}.devices"), follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return True  # unsure: keep it
