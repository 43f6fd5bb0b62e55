"""The batch script as sbatch finds and reads it: bytes, bounded (I/O for gpupool-sbatch).

sbatch looks for a script named without a leading ``/`` or ``.`` in ``--chdir`` (the
working directory by default), then in each ``PATH`` directory (src/common/proc_args.c
``search_path``), and reads at most 512 MiB of it (``MAX_BATCH_SCRIPT_SIZE``, from
23.02; 22.05 reads without a bound).  The wrapper reads the same file, with the same
bound, and stops at a NUL byte, which Slurm refuses in a script anyway: ``/dev/zero``
is refused at once instead of filling memory.
"""

from __future__ import annotations

import os
import stat

from slurm_gpupool.core.submit.sbatch_script import MAX_SCRIPT_BYTES

CHUNK = 1 << 20


class ScriptError(Exception):
    """A script sbatch would refuse for its size or bytes (exit 2, said plainly)."""


def read_all(fd: int, what: str, limit: int = MAX_SCRIPT_BYTES) -> bytes:
    """Everything ``fd`` gives, up to ``limit`` bytes."""
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            data = os.read(fd, CHUNK)
        except OSError as e:  # /proc/self/mem, a device, a closed descriptor: said, not a traceback
            raise ScriptError(f"{what} cannot be read: {e.strerror or e}") from e
        if not data:
            return b"".join(chunks)
        if b"\0" in data:
            raise ScriptError(f"{what} holds a NUL byte: Slurm does not take scripts that contain one")
        total += len(data)
        if total > limit:
            raise ScriptError(f"{what} is too big: more than {_size(limit)}, the most sbatch reads")
        chunks.append(data)


def _size(n: int) -> str:
    return f"{n // (1 << 20)} MiB" if n >= 1 << 20 else f"{n} bytes"


def resolve(name: str, chdir: str | None, path_env: str | None, cwd: str) -> str:
    """The file sbatch takes for the script ``name`` (``search_path(chdir, name, ...)``)."""
    if name.startswith(("/", ".")):
        return name
    base = chdir if chdir is None or chdir.startswith("/") else os.path.join(cwd, chdir)
    dirs = [base or cwd] + [d for d in (path_env or "").split(":") if d]
    for d in dirs:
        cand = os.path.join(base or cwd, d, name) if d.startswith(".") else os.path.join(d, name)
        try:
            if not stat.S_ISDIR(os.stat(cand).st_mode):
                return cand
        except OSError:
            continue
    return name


def read_path(path: str, limit: int = MAX_SCRIPT_BYTES) -> tuple[bytes | None, bool]:
    """(the script's bytes, whether it is a regular file); None when it cannot be opened
    (sbatch says why).  A regular file larger than ``limit`` is refused without reading."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None, True
    try:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            return None, True
        if regular and st.st_size > limit:
            raise ScriptError(f"script {path} is too big: {st.st_size} bytes, more than {_size(limit)}")
        return read_all(fd, f"script {path}", limit), regular
    finally:
        os.close(fd)
