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
* a hook never waits for another: it states its edit in a small file of DIR (an
  *intent*, ``.gpupool.<gpu>.<stamp>.<job>.<add|del>``, the keys of that GPU it
  touches, written atomically), then takes the GPU's lock (``.gpupool.<gpu>.lock``) only
  if no one holds it.  The holder applies every intent of the GPU in stamp order
  (``CLOCK_MONOTONIC``), replaces each file it changes atomically, deletes the intents
  it applied, releases, and looks again: if an intent came meanwhile, it takes the lock
  again unless someone else has.  So an intent written while the lock is held is
  applied by its holder or by a later one, and no hook fails or waits on the lock: under
  a burst (benchmarks/bench_hook_burst.py: 40 jobs starting on one node, on two cores)
  hooks that waited 2 s for a lock whose holder got no CPU lost their job's label; now
  the holder lists them all in one write.  A holder killed in between (Slurm's
  PrologEpilogTimeout) leaves its intents for the next hook on that GPU.  dcgm-exporter
  skips dot names.  (A hook of an older version still running during an upgrade takes
  ``.gpupool.lock``, or a GPU's lock without applying others' intents, so a label may
  lag in that window until the next hook on the GPU.)  The files are not fsynced: they
  mean nothing after a crash (the node's jobs are gone with it);
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

from slurm_gpupool.hooks.runtime import HookError, open_dir, open_regular, try_lock, write_in_dir

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


def lock_name(gpu: str) -> str:
    """The lock of one GPU's mapping files (a dot name: dcgm-exporter skips it)."""
    return f".gpupool.{gpu}.lock"


MAX_READ = 1 << 16
_N = r"(?:0|[1-9][0-9]{0,4})"  # as device_keys writes them: no leading zero (03 would be GPU 3 to dcgm-exporter)
_KEY = re.compile(rf"({_N})(?:\.{_N})?")
_INTENT = re.compile(rf"\.gpupool\.({_N})\.([0-9]{{1,20}})\.([0-9]{{1,12}})\.(add|del)")
MAX_ROUNDS = 1000  # looks again after each release while intents keep coming (never reached in practice)
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


def add_job(directory: str, keys: list[str], job: str, run_dir: str) -> None:
    """List ``job`` in each of ``keys``' files (Prolog)."""
    _edit(directory, job, run_dir, keys, add=True)


def remove_job(directory: str, job: str, run_dir: str, keys: list[str] | None = None) -> None:
    """Take ``job`` out of ``keys``' files, the ones its Prolog listed it in (None: out of
    every mapping file); files left empty are deleted (Epilog)."""
    _edit(directory, job, run_dir, keys, add=False)


def read_jobs(dir_fd: int, key: str) -> list[str]:
    """The job ids a mapping file lists (missing file: none); other lines are ignored."""
    out: list[str] = []
    for line in _read_lines(dir_fd, key, "mapping file") or []:
        if _JOB.fullmatch(line) and line not in out:
            out.append(line)
    return out


def pending(dir_fd: int, gpu: str | None = None) -> list[tuple[int, str, str, bool]]:
    """The intents not applied yet (of one GPU, or all), oldest first: (stamp, name, job, add)."""
    return _intents(os.listdir(dir_fd), gpu)


def _intents(names: list[str], gpu: str | None) -> list[tuple[int, str, str, bool]]:
    out = []
    for name in names:
        m = _INTENT.fullmatch(name)
        if m and (gpu is None or m[1] == gpu):
            out.append((int(m[2]), name, m[3], m[4] == "add"))
    return sorted(out)


def _edit(directory: str, job: str, run_dir: str, keys: list[str] | None, add: bool) -> None:
    """State the edit as one intent per GPU, then apply what is pending on each of those GPUs
    unless another hook holds its lock (that one applies ours: see the module's docstring)."""
    if not _JOB.fullmatch(job):
        raise HookError(f"bad job id {job!r}")
    fd = open_dir(directory)
    try:
        by_gpu: dict[str, list[str]] = {}
        if keys is None:  # an Epilog without the node state: every GPU with a file or an intent
            for name in os.listdir(fd):
                m = _KEY.fullmatch(name) or _INTENT.fullmatch(name)
                if m:
                    by_gpu.setdefault(m[1], [])
        for key in keys or []:
            if not _KEY.fullmatch(key):
                raise HookError(f"bad mapping file name {key!r}")
            by_gpu.setdefault(key.split(".")[0], []).append(key)
        op = "add" if add else "del"
        for gpu, gpu_keys in by_gpu.items():  # an empty list: every file of the GPU
            body = "".join(f"{k}\n" for k in gpu_keys).encode()
            write_in_dir(fd, f".gpupool.{gpu}.{time.monotonic_ns()}.{job}.{op}", body, 0o600, durable=False)
        failed: list[str] = []
        for gpu in by_gpu:  # one GPU's failure (a FIFO among its files) stops no other's
            try:
                _settle(fd, gpu, run_dir)
            except (HookError, OSError) as e:
                failed.append(f"GPU {gpu}: {e}")
        if failed:
            raise HookError("; ".join(failed))
    finally:
        os.close(fd)


def _settle(fd: int, gpu: str, run_dir: str) -> None:
    """Apply the GPU's intents until none is left or another hook holds the lock.  Looking
    again after the release is what makes the hand-over safe: an intent written while we
    held the lock is seen here, or by whoever took the lock after us."""
    for _ in range(MAX_ROUNDS):
        lock = try_lock(fd, lock_name(gpu))
        if lock is None:
            return
        try:
            _apply(fd, gpu, run_dir)
        finally:
            os.close(lock)
        if not pending(fd, gpu):
            return


def _apply(fd: int, gpu: str, run_dir: str) -> None:
    """Every pending intent of the GPU, in order, in one write per file (its lock held); then
    the intents are deleted oldest first (re-applying a left-over tail changes nothing)."""
    names = os.listdir(fd)  # one listing for the intents and the GPU's files
    intents = _intents(names, gpu)
    ops: list[tuple[str, bool, list[str] | None]] = []  # (job, add, keys; None: every file of the GPU)
    for _, name, job, add in intents:
        try:
            lines = _read_lines(fd, name, "intent")
        except HookError:  # not a regular file: only root could have put it there; dropped below
            continue
        keys = [k for k in lines or [] if _KEY.fullmatch(k) and k.split(".")[0] == gpu]
        if keys or (lines is not None and not add):  # no keys: every file, for a "del" only
            ops.append((job, add, keys or None))
    touched: set[str] = set().union(*(k for _, _, k in ops if k))
    if any(k is None for _, _, k in ops):
        touched |= {n for n in names if _KEY.fullmatch(n) and n.split(".")[0] == gpu}
    for key in sorted(touched):
        _rewrite(fd, key, run_dir, [(job, add) for job, add, k in ops if k is None or key in k])
    for _, name, _, _ in intents:
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass


def _rewrite(fd: int, key: str, run_dir: str, ops: list[tuple[str, bool]]) -> None:
    """One mapping file with the jobs added or taken out, in order, and dead jobs dropped."""
    before = read_jobs(fd, key)
    last = dict(ops)  # each job's last edit
    listed = {j for j in before if j not in last and _alive(run_dir, j)} | {j for j, add in last.items() if add}
    after = sorted(listed, key=int)
    if after == before:
        return
    if after:
        write_in_dir(fd, key, "".join(f"{j}\n" for j in after).encode(), 0o644, durable=False)
    else:
        try:
            os.unlink(key, dir_fd=fd)
        except FileNotFoundError:
            pass


def _read_lines(dir_fd: int, name: str, what: str) -> list[str] | None:
    """A small file's stripped lines (None: no such file); never a FIFO (it would block, lock held)."""
    try:
        fd = open_regular(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except HookError as e:
        raise HookError(f"{what} {e}") from None
    with os.fdopen(fd, "rb") as f:
        text = f.read(MAX_READ).decode("ascii", "replace")
    return [line.strip() for line in text.splitlines()]


def _alive(run_dir: str, job: str) -> bool:
    """A job still has its Prolog's ``<run_dir>/<id>.devices`` (removed by its Epilog)."""
    try:
        os.stat(os.path.join(run_dir, f"{job}.devices"), follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return True  # unsure: keep it
