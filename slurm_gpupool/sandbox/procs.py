"""Daemons of the sandbox as pid files: start detached, check alive, stop by pid.

Every daemon runs in the foreground mode of its program (``slurmctld -D``,
``munged -F``, ...) so the pid we record is the daemon itself, with no pid file
race.  A tiny trampoline forks it into its own session and exits, so the daemon
is never a child of the (possibly long-lived) Python process: no zombies to
reap and no ``ResourceWarning`` from a discarded ``Popen``.

Each daemon carries ``SLURM_GPUPOOL_SANDBOX=<root>`` in its environment.  That
mark is how we tell our process from an unrelated one that reused the pid, and
how ``down`` finds anything of this sandbox left behind (like ``pgrep -f``,
but keyed to the root).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from slurm_gpupool.errors import SlurmUnavailableError

MARK_ENV = "SLURM_GPUPOOL_SANDBOX"

# Runs as ``python -I -S -c _TRAMPOLINE LOG CWD ARGV...``: fork, detach, exec;
# print the daemon's pid, or the exec error and exit 127.
_TRAMPOLINE = r"""
import os, sys
log, cwd, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.close(r)
        os.setsid()
        os.chdir(cwd)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        nul = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nul, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.execvp(argv[0], argv)
    except BaseException as e:
        os.write(w, f"{type(e).__name__}: {e}".encode())
    os._exit(127)
os.close(w)
err = os.read(r, 4096)
if err:
    sys.stderr.write(err.decode(errors="replace"))
    sys.exit(127)
print(pid)
"""


def read_pid(pidfile: Path) -> int | None:
    """The pid recorded in a pid file, or None if missing or garbage."""
    try:
        text = pidfile.read_text().split()
        return int(text[0]) if text else None
    except (OSError, ValueError):
        return None


def write_pid(pidfile: Path, pid: int) -> None:
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    tmp = pidfile.with_name(f".{pidfile.name}.tmp")
    tmp.write_text(f"{pid}\n")
    os.replace(tmp, pidfile)


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as dead)."""
    if pid <= 0:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it happens to be our child
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # "pid (comm) S ...": the state follows the last ')'
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state not in (b"Z", b"X", b"")


def _read_proc(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def same_mount_namespace(pid: int) -> bool:
    """Whether the process sees the files we see: a container's sandbox may use the same
    root path for its own files, and its processes are not ours (``/proc/PID/ns/mnt``)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return False


def belongs_to(pid: int, root: Path) -> bool:
    """Whether the process carries this sandbox's mark (environment or command line),
    and lives in our mount namespace.  The root must appear as a whole path (followed by
    ``/`` or the end of an argument): ``/var/tmp/sb`` is not ``/var/tmp/sb-gw0``, whose
    daemons a ``down`` of the first one killed (a plain substring test)."""
    if not same_mount_namespace(pid):
        return False
    mark = f"{MARK_ENV}={root}".encode()
    if mark in _read_proc(pid, "environ").split(b"\0"):
        return True
    return _names_root(_read_proc(pid, "cmdline"), root)


def _names_root(cmdline: bytes, root: Path) -> bool:
    """Does a NUL-separated command line name ``root`` or a path under it (as an argument or
    an option's value: ``-f ROOT/...``, ``--socket=ROOT/...``)?"""
    pattern = rb"(?:^|[\x00=:,])" + re.escape(str(root).rstrip("/").encode()) + rb"(?:/|\x00|$)"
    return re.search(pattern, cmdline) is not None


def running_pid(pidfile: Path, root: Path, comm: str | tuple[str, ...] | None = None) -> int | None:
    """The recorded pid if that process is alive, ours, and (if given) named ``comm``; else None."""
    pid = read_pid(pidfile)
    if pid is None or not is_alive(pid) or not belongs_to(pid, root):
        return None
    names = (comm,) if isinstance(comm, str) else comm
    if names is not None and proc_comm(pid) not in {n[:15] for n in names}:
        return None
    return pid


def spawn(argv: list[str], log: Path, pidfile: Path, env: Mapping[str, str], cwd: Path, timeout_s: float = 30) -> int:
    """Start ``argv`` detached (own session, stdin /dev/null, output to ``log``); record its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _TRAMPOLINE, str(log), str(cwd), *argv],
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        raise SlurmUnavailableError(f"cannot start {argv[0]}", proc.stderr.strip() or f"exit {proc.returncode}")
    pid = int(proc.stdout.strip())
    write_pid(pidfile, pid)
    return pid


def stop(pid: int, timeout_s: float = 15, sig: int = signal.SIGTERM) -> bool:
    """``kill -TERM pid``, wait up to ``timeout_s``, then ``kill -KILL``.  True if it was alive."""
    return bool(stop_many([pid], timeout_s, sig))


def stop_many(pids: Iterable[int], timeout_s: float = 15, sig: int = signal.SIGTERM) -> list[int]:
    """``kill -TERM`` each of ``pids``, then wait for them together (up to ``timeout_s``), then
    ``kill -KILL`` what is left: a batch of slurmds stops in one wait, not one after the other
    (#29); the pids that were alive."""
    alive = [p for p in pids if is_alive(p)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            os.kill(pid, signal.SIGCONT)  # a stopped process handles the signal only once it runs
    if alive and not wait_dead(alive, timeout_s):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                if is_alive(pid):
                    os.kill(pid, signal.SIGKILL)
        wait_dead(alive, 5)
    return alive


def wait_dead(pids: Iterable[int], timeout_s: float) -> bool:
    """Poll until none of ``pids`` is alive; False on timeout."""
    pids = list(pids)
    deadline = time.monotonic() + timeout_s
    while any(is_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def proc_comm(pid: int) -> str:
    return _read_proc(pid, "comm").decode(errors="replace").strip()


def _fds_under(pid: int, root: Path) -> bool:
    prefix = str(root).rstrip("/") + "/"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                return True
    return False


def sandbox_processes(root: Path, names: Iterable[str]) -> list[tuple[int, str]]:
    """Live processes named in ``names`` that belong to this sandbox root.

    A process belongs if it carries the mark (environment or command line), or,
    for ``slurmstepd`` (which rewrites its own environment and command line),
    if it holds a file open under the root (the slurmd log and spool).
    """
    wanted = set(names)
    me = os.getpid()
    out: list[tuple[int, str]] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        comm = proc_comm(pid)
        if comm not in wanted or not is_alive(pid):
            continue
        if belongs_to(pid, root) or (comm == "slurmstepd" and same_mount_namespace(pid) and _fds_under(pid, root)):
            out.append((pid, comm))
    return sorted(out)


def job_processes(root: Path, cluster: str) -> list[int]:
    """A job's own processes left behind by this sandbox's Slurm (``pgrep``-like, keyed to the root).

    ``proctrack/linuxproc`` finds a job's processes by walking its process tree: a
    ``sleep`` forked while ``scancel`` killed its shell had left the tree and outlived
    ``down`` (CI, 22.05 and 26.05).  A job's process carries what slurmstepd gives every
    job of this cluster (``SLURM_JOB_ID``, ``SLURM_CLUSTER_NAME=cluster``) and this
    root's mark or ``slurm.conf`` in its environment: a process of another cluster's job
    (a developer's ``salloc`` shell that took the sandbox's environment) is not one.  Our
    own process and its ancestors are never one (a shell started with the sandbox's
    environment, even from within such a job).
    """
    marks = {f"{MARK_ENV}={root}".encode(), f"SLURM_CONF={root}/etc/slurm.conf".encode()}
    ours = f"SLURM_CLUSTER_NAME={cluster}".encode()
    from slurm_gpupool.hooks.leftovers import lineage  # the Epilog's own guard: this process and its ancestors

    spared = lineage()
    out: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        environ = _read_proc(int(entry), "environ").split(b"\0")
        if marks.isdisjoint(environ) or ours not in environ:
            continue
        has_job = any(e.startswith(b"SLURM_JOB_ID=") for e in environ)
        if has_job and is_alive(int(entry)) and same_mount_namespace(int(entry)):
            out.append(int(entry))
    return sorted(out)


def sampler_processes(root: Path) -> list[int]:
    """This sandbox's GPU usage samplers (started by the Prolog, labelled with their run dir)."""
    return _processes_naming(root, b"slurm_gpupool.hooks.sampler")


def mps_daemons(root: Path) -> list[int]:
    """This sandbox's simulated MPS control daemons (``<root>/libexec/nvidia-cuda-mps-control -d``,
    started by Prologs and left to the last job's Epilog)."""
    return _processes_naming(root, b"nvidia-cuda-mps-control")


def _processes_naming(root: Path, program: bytes) -> list[int]:
    """Processes in our mount namespace whose command line holds ``program`` and names ``root``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            cmd = _read_proc(int(entry), "cmdline")
            if program in cmd and _names_root(cmd, root) and same_mount_namespace(int(entry)):
                out.append(int(entry))
    return sorted(out)


def tcp_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port (like ``nc -z``)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def unix_open(path: Path, timeout_s: float = 0.5) -> bool:
    """Whether something accepts connections on a Unix socket."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log file (empty if unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def wait_until(
    ready: Callable[[], bool],
    *,
    what: str,
    timeout_s: float,
    pid: int | None = None,
    logs: Iterable[Path] = (),
    interval_s: float = 0.25,
) -> None:
    """Poll ``ready`` until true.  Fail fast if ``pid`` dies; the error carries the log tails.
    Every 0.25 s: a probe is a Slurm command (``scontrol ping``, ``sacctmgr``) that costs
    slurmctld and munged as much as the caller, and a daemon starts in seconds (#29)."""
    logs = list(logs)
    deadline = time.monotonic() + timeout_s
    while True:
        if ready():
            return
        died = pid is not None and not is_alive(pid)
        if died or time.monotonic() > deadline:
            why = "the process exited" if died else f"not ready after {timeout_s:.0f} s"
            raise SlurmUnavailableError(what, why + log_excerpt(logs), hint="see the log files named above")
        time.sleep(interval_s)


def log_excerpt(logs: Iterable[Path], lines: int = 12) -> str:
    """The tail of the first of ``logs`` that has content (a daemon's own log, else its stdout)."""
    logs = list(logs)
    for log in logs:
        text = tail(log, lines)
        if text:
            return f"\n--- last lines of {log} ---\n{text}"
    return "\n(no log output in " + ", ".join(str(p) for p in logs) + ")" if logs else ""
