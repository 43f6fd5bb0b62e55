"""What every job hook shares: settings, the job's identity, logging, safe writes.

Hooks run as root (Prolog, Epilog) or as the job's user (TaskProlog) on every
job.  So this module imports only the standard library; it trusts no
job-controlled string as a path; it writes through a directory file descriptor
with ``O_NOFOLLOW`` and renames atomically; and it lets callers fail open.

Settings come from ``gpupool-hooks.json`` beside ``$SLURM_CONF`` (slurmd sets
that variable for Prolog and Epilog, not for the HealthCheckProgram: then beside
``/etc/slurm/slurm.conf``), else ``/etc/slurm-gpupool/hooks.json``.
``gpupool gres install`` writes the file from the pool config.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import sys
import syslog
import time
from collections.abc import Callable, Iterator, Mapping

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


SETTINGS_NAME = "gpupool-hooks.json"
FALLBACK_SETTINGS = "/etc/slurm-gpupool/hooks.json"
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
SCHEMA = 1
# fullmatch, always: "$" also matches before a trailing newline ("900010\n")
_JOB_ID = re.compile(r"[0-9]{1,12}")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_INDICES = re.compile(r"[0-9]{1,5}(,[0-9]{1,5}){0,1023}")

DEFAULTS: dict[str, Any] = {
    "schema": SCHEMA,
    "state_dir": "/var/lib/slurm-gpupool",
    "run_dir": "/run/slurm-gpupool",
    "spool_dir": "/var/spool/slurm-gpupool",
    "sim_dir": None,
    "kmsg": "/dev/kmsg",
    "health": {
        "ecc_uncorrected_max": 0,
        "temperature_margin_c": 3,
        "xid_window_s": 3600,
        "critical_xids": [48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120],
        "check_mig_drift": True,
    },
    # gpupool-hooks.json's "mps" is written by pool/hook_settings.py from the config's hooks.mps*
    # (test_hooks_mps.py holds the three equal): pipe_dir/<gpu uuid> is each GPU's daemon
    "mps": {
        "enabled": False,
        "control": "nvidia-cuda-mps-control",
        "pipe_dir": "/run/slurm-gpupool/mps",
        "timeout_s": 5.0,
    },
    "shard_memory_limit": False,
    # hooks.share_enforcement / hooks.preload_library (the same test holds them equal); MPS
    # itself still follows "mps"."enabled", so a file written before these keys keeps working
    "share_enforcement": "none",
    "preload_library": None,
    "epilog_kill_grace_s": 3.0,
    "usage_interval_s": 10.0,
    "dcgm_job_mapping_dir": None,
}
STATS_NAME = "hook-stats.json"  # <state_dir>/: counts `gpupool metrics` exports
LOCK_WAIT_S = 2.0


class HookError(Exception):
    """A hook's own failure (bad input, missing state): logged, then the hook fails open."""


def log(hook: str, job: str | None, message: str, priority: int = syslog.LOG_INFO) -> None:
    """syslog with the job id (``journalctl -t gpupool-prolog``), and stderr for Slurm's log."""
    text = f"job {job}: {message}" if job else message
    try:
        syslog.openlog(f"gpupool-{hook}", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(priority, text)
    except OSError:
        pass
    try:
        sys.stderr.write(f"gpupool-{hook}: {text}\n")
    except (OSError, ValueError, AttributeError):  # stderr full, closed or None: syslog has it; fail open
        pass


def load_settings(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The hook settings; defaults where the file is missing or a key is absent."""
    environ: Mapping[str, str] = os.environ if env is None else env
    candidates = []
    conf = environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF  # the HealthCheckProgram gets no SLURM_CONF
    if conf.startswith("/"):
        candidates.append(os.path.join(os.path.dirname(conf), SETTINGS_NAME))
    candidates.append(FALLBACK_SETTINGS)
    for path in candidates:
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if os.geteuid() == 0 and (st.st_uid != 0 or st.st_mode & stat.S_IWOTH):
                    raise HookError(f"{path} must be owned by root and not world-writable")
                data = json.loads(f.read())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            raise HookError(f"unreadable hook settings {path}: {e}") from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise HookError(f"hook settings {path}: unknown schema")
        merged = {**DEFAULTS, **data}
        merged["health"] = {**DEFAULTS["health"], **(data.get("health") or {})}
        merged["mps"] = {**DEFAULTS["mps"], **(data.get("mps") or {})}
        merged["source"] = path
        return merged
    return {**DEFAULTS, "source": None}


def node_name(env: dict[str, str]) -> str:
    """The node this hook runs for (``SLURMD_NODENAME``, set by slurmd)."""
    name = env.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    if not _NODE.fullmatch(name):
        raise HookError(f"bad node name {name!r}")
    return name


def job_id(env: dict[str, str]) -> str:
    jid = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    if not _JOB_ID.fullmatch(jid):
        raise HookError(f"bad or missing SLURM_JOB_ID {jid!r}")
    return jid


def gpu_indices(value: str | None) -> list[int]:
    """``SLURM_JOB_GPUS``: comma-separated GRES indices (empty: no GPUs)."""
    if not value:
        return []
    if not _INDICES.fullmatch(value):
        raise HookError(f"unexpected GPU index list {value[:80]!r}")
    return [int(x) for x in value.split(",")]


def node_path(settings: dict[str, Any], key: str, node: str) -> str:
    """A settings path with ``{node}`` filled in (node is validated, never job-controlled)."""
    return str(settings[key]).replace("{node}", node)


def open_regular(name: str, flags: int = os.O_RDONLY, mode: int = 0o600, dir_fd: int | None = None) -> int:
    """An fd for a regular file, opened without following a symlink and without blocking:
    a FIFO (or a device, a socket) put where our file goes would make ``open`` wait for a
    writer forever (O_RDONLY on a FIFO), with a lock held.  It is opened ``O_NONBLOCK``,
    checked with ``fstat`` and refused (HookError) unless regular; then it blocks again.
    Raises FileNotFoundError as ``os.open`` does (callers treat a missing file)."""
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise HookError(f"{name}: {e.strerror} (a symlink is refused)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HookError(f"{name}: not a regular file (a FIFO, device or socket is refused)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_json(path: str) -> Any:
    """Read JSON, refusing a symlink at the final component and anything but a regular file."""
    with os.fdopen(open_regular(path), "rb") as f:
        return json.loads(f.read())


def open_dir(path: str, *below: str, create: bool = True, mode: int = 0o755) -> int:
    """An fd for a directory we own: ``path`` (as configured) and then each of ``below``
    inside it, every one opened without following a symlink (``O_NOFOLLOW`` on each
    component we walk, not just the last) and refused if others can write to it."""
    if create:
        os.makedirs(path, mode=mode, exist_ok=True)
    fd = _own_dir(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW), path)
    where = path
    for name in below:
        if "/" in name or name in ("", ".", ".."):
            os.close(fd)
            raise HookError(f"bad directory name {name!r}")
        where = os.path.join(where, name)
        try:
            if create:
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                except FileExistsError:
                    pass
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as e:
            raise HookError(f"{where}: {e.strerror} (a symlink is refused)") from None
        finally:
            os.close(fd)
        fd = _own_dir(sub, where)
    return fd


def _own_dir(fd: int, path: str) -> int:
    st = os.fstat(fd)
    if os.geteuid() == 0 and (st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
        os.close(fd)
        raise HookError(f"{path} is not a root-owned directory closed to others")
    return fd


def write_in_dir(dir_fd: int, name: str, data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Atomically write ``name`` inside an opened directory (temp + fsync + rename).  Not
    ``durable``: no fsync, for files that mean nothing after a crash (readers still never see
    a torn file: the rename is atomic), where the fsync would be paid under a lock."""
    if "/" in name or name in (".", ".."):
        raise HookError(f"bad file name {name!r}")
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def read_in_dir(dir_fd: int, name: str) -> Any:
    with os.fdopen(open_regular(name, dir_fd=dir_fd), "rb") as f:
        return json.loads(f.read())


@contextlib.contextmanager
def locked(dir_fd: int, name: str, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """An exclusive ``flock`` on ``name`` in an opened directory, waited for at most ``wait_s``
    (a hook never hangs on a lock: HookError, and the caller fails open)."""
    fd = open_regular(name, os.O_RDWR | os.O_CREAT, 0o600, dir_fd=dir_fd)
    try:
        deadline = time.monotonic() + wait_s
        while not _flock_now(fd, name):
            if time.monotonic() > deadline:
                raise HookError(f"lock {name}: not taken within {wait_s:g} s")
            time.sleep(0.01)
        yield
    finally:
        os.close(fd)


def try_lock(dir_fd: int, name: str) -> int | None:
    """An exclusive ``flock`` on ``name`` in an opened directory if no one holds it (the lock's
    fd: closing it releases the lock), else None at once."""
    fd = open_regular(name, os.O_RDWR | os.O_CREAT, 0o600, dir_fd=dir_fd)
    try:
        if _flock_now(fd, name):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def _flock_now(fd: int, name: str) -> bool:
    """``flock(LOCK_EX | LOCK_NB)``: False while another open file holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise HookError(f"lock {name}: {e.strerror}") from None
    return True


def record_health(state_dir: str, status: str, by: str, job: str | None, found: list[str]) -> None:
    """``health.json``: what ``gpupool health --show`` and ``gpupool status`` read (a hook's or
    the HealthCheckProgram's last verdict on this node's GPUs)."""
    fd = open_dir(state_dir)
    try:
        data = {"status": status, "by": by, "job": job, "problems": found, "checked_at": int(time.time())}
        write_in_dir(fd, "health.json", (json.dumps(data, indent=1) + "\n").encode(), 0o644)
    finally:
        os.close(fd)


def count_event(state_dir: str, group: str, name: str) -> None:
    """Add one to ``group.name`` in ``<state_dir>/hook-stats.json`` (``gpupool metrics`` exports
    the counts): ``hook_failures.<hook>`` when a hook failed open, ``health_drains.<by>`` when a
    health failure drained the node.  Atomic under a lock; raises HookError or OSError."""
    fd = open_dir(state_dir)
    try:
        with locked(fd, STATS_NAME + ".lock"):
            try:
                stats = read_in_dir(fd, STATS_NAME)
            except FileNotFoundError:
                stats = {}
            except ValueError:
                stats = {}  # a torn file cannot be: it is replaced atomically; start over if it is bad
            if not isinstance(stats, dict):
                stats = {}
            found = stats.get(group)
            counts: dict[str, Any] = found if isinstance(found, dict) else {}
            counts[name] = int(counts.get(name, 0)) + 1
            stats.update({"schema": SCHEMA, group: counts, "updated_at": int(time.time())})
            write_in_dir(fd, STATS_NAME, (json.dumps(stats, sort_keys=True) + "\n").encode(), 0o644)
    finally:
        os.close(fd)


def count_failure(hook: str, env: dict[str, str]) -> None:
    """Count a hook's fail-open error in its node's stats; never raises (it runs in the error path)."""
    try:
        settings = load_settings(env)
        node = node_name(env)
        count_event(node_path(settings, "state_dir", node), "hook_failures", hook)
    except Exception:  # the TaskProlog (the job's user) cannot write root's state: only syslog has it
        pass


def run_hook(hook: str, body: Callable[[dict[str, str]], int], env: dict[str, str] | None = None) -> int:
    """Run a hook body and fail open: only a health failure may return non-zero.

    ``body`` returns the exit code it wants; any exception is logged and becomes 0,
    because a non-zero Prolog/Epilog drains the node and requeues the job.
    """
    env = dict(os.environ if env is None else env)
    t0 = time.monotonic()
    try:
        return body(env)
    except Exception as e:  # fail open: a bug or bad input here must not drain the node
        jid = env.get("SLURM_JOB_ID", "")
        log(
            hook,
            jid if _JOB_ID.fullmatch(jid) else None,
            f"internal error, failing open: {type(e).__name__}: {e}",
            syslog.LOG_ERR,
        )
        count_failure(hook, env)
        return 0
    finally:
        if os.environ.get("SLURM_GPUPOOL_HOOK_TIMING"):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                sys.stderr.write(f"gpupool-{hook}: {1000 * (time.monotonic() - t0):.1f} ms\n")
