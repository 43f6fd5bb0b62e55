"""A Slurm release the host does not have, run in a container of its own.

The container is Linux namespaces around a cached Debian root
(:mod:`slurm_gpupool.sandbox.image`), with nothing but util-linux on the host::

    unshare --mount --net --pid --uts --ipc --fork --propagation private
      overlay: the cached root (read-only) + <dir>/upper (this container's writes)
      /proc (its own pids), /dev and /sys (the host's), /run (tmpfs), /tmp (<dir>/tmp)
      the package mounted at the same path, so the same code runs inside
      chroot, lo up plus a /32 address (slurmdbd 24.11 needs a non-loopback IPv4), tini as pid 1

Its own network namespace gives it its own ports, so sandboxes of several
releases run side by side.  The sandbox inside is the ordinary one
(:mod:`slurm_gpupool.sandbox.cluster`), driven by ``gpupool`` run in the
container: ``nsenter`` into the namespaces and the root (``gpupool sandbox exec``).

Host layout, one directory per release (``/var/tmp/slurm-gpupool-slurm/<series>``,
env ``SLURM_GPUPOOL_CONTAINERS``)::

    container.json   the init's pid, the image, the mounts (written when it starts)
    upper/ work/     the overlay's writable layer: the sandbox root lives in upper/var/tmp
    merged/          the mount point (mounted only inside the container's namespace)
    tmp/             the container's /tmp, readable from the host
    init.log         what the namespace set-up printed
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import slurm_gpupool
from slurm_gpupool.errors import SlurmUnavailableError, UsageError
from slurm_gpupool.sandbox import procs
from slurm_gpupool.sandbox.image import VENV, WHEELS, Image, ensure_image, prune
from slurm_gpupool.sandbox.versions import SlurmRelease
from slurm_gpupool.sandbox.versions import release as release_of

CONTAINERS_ENV = "SLURM_GPUPOOL_CONTAINERS"
CONTAINER_ENV = "SLURM_GPUPOOL_CONTAINER"  # set inside: the release series
DEFAULT_CONTAINERS = Path("/var/tmp/slurm-gpupool-slurm")
LIB = "/opt/gpupool/lib"  # where an installed (wheel) package is mounted
ADDRESS = "10.254.0.1"  # the container's non-loopback IPv4 (a /32 on lo)
PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSED_ENV = ("TERM", "COLUMNS", "LINES", "NO_COLOR")

# Run in the container by its own Python: make the mounted package importable from
# the venv (a .pth file) and write its console scripts, as pip would.
_SYNC = r"""
import json, os, sys, sysconfig
spec = json.loads(sys.argv[1])
site = sysconfig.get_paths()["purelib"]
with open(os.path.join(site, "slurm_gpupool_mounted.pth"), "w") as f:
    f.write(spec["path"] + "\n")
bindir = sysconfig.get_paths()["scripts"]
for name, target in spec["scripts"].items():
    module, func = target.split(":")
    text = (f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\n"
            f"if __name__ == '__main__':\n    sys.exit({func}())\n")
    path = os.path.join(bindir, name)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.chmod(path + ".tmp", 0o755)
    os.replace(path + ".tmp", path)
"""


def containers_dir() -> Path:
    return Path(os.environ.get(CONTAINERS_ENV) or DEFAULT_CONTAINERS)


@dataclass(frozen=True)
class PackageMount:
    """Where this package lives on the host, and what the container's venv points at."""

    host: Path  # mounted at the same path inside (a checkout), or at LIB/slurm_gpupool
    inside: Path  # the directory on sys.path inside
    scripts: dict[str, str]  # console script name -> "module:function"

    @property
    def mounts(self) -> list[tuple[Path, Path]]:
        if self.inside == self.host:
            return [(self.host, self.host)]
        return [(self.host / "slurm_gpupool", self.inside / "slurm_gpupool")]


def package_mount() -> PackageMount:
    """The running package: a source checkout (with setup.cfg) or an installed copy."""
    from importlib import metadata

    pkg = Path(slurm_gpupool.__file__).resolve().parent
    scripts = {
        ep.name: ep.value
        for ep in metadata.entry_points(group="console_scripts")
        if ep.value.startswith("slurm_gpupool.")
    }
    if (pkg.parent / "setup.cfg").is_file():
        return PackageMount(pkg.parent, pkg.parent, scripts)
    return PackageMount(pkg.parent, Path(LIB), scripts)


@dataclass(frozen=True)
class ContainerPaths:
    dir: Path

    upper = property(lambda self: self.dir / "upper")
    work = property(lambda self: self.dir / "work")
    merged = property(lambda self: self.dir / "merged")
    tmp = property(lambda self: self.dir / "tmp")
    state = property(lambda self: self.dir / "container.json")
    log = property(lambda self: self.dir / "init.log")
    lock = property(lambda self: self.dir / ".lock")
    unshare_pid = property(lambda self: self.dir / "unshare.pid")

    def host_path(self, inside: str | Path) -> Path:
        """Where a file the container wrote (outside its mounts) is on the host."""
        p = Path(inside)
        if p.is_relative_to("/tmp"):
            return self.tmp / p.relative_to("/tmp")
        return self.upper / p.relative_to("/")


class Container:
    """The container of one Slurm release (see the module docstring)."""

    def __init__(self, release: SlurmRelease, base: Path | None = None) -> None:
        self.release = release
        self.paths = ContainerPaths((base or containers_dir()) / release.series)

    # ------------------------------------------------------------ state

    def _state(self) -> dict:
        try:
            return json.loads(self.paths.state.read_text())
        except (OSError, ValueError):
            return {}

    def init_pid(self) -> int | None:
        """The host pid of the container's init (tini), if it is running."""
        pid = self._state().get("init_pid")
        if not isinstance(pid, int) or not procs.is_alive(pid) or procs.proc_comm(pid) != "tini":
            return None
        try:
            root = os.readlink(f"/proc/{pid}/root")
        except OSError:
            return None
        return pid if root == str(self.paths.merged) else None

    def running(self) -> bool:
        return self.init_pid() is not None

    @property
    def hostname(self) -> str:
        return "slurm" + self.release.series.replace(".", "")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.paths.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # ------------------------------------------------------------ start / stop

    def start(self, image: Image, mounts: Sequence[tuple[Path, Path, bool]] = (), timeout_s: float = 30) -> int:
        """Start the container on ``image`` (no-op if running); returns the init's pid.

        ``mounts`` are (host path, path inside, read-only) bind mounts.
        """
        with self._locked():
            pid = self.init_pid()
            if pid is not None:
                if self._state().get("image") != str(image.path):
                    raise UsageError(
                        f"container for Slurm {self.release.series}",
                        f"runs on another root ({self._state().get('image')})",
                        hint=f"gpupool sandbox down --slurm {self.release.series}, then up",
                    )
                return pid
            if os.geteuid() != 0:
                raise UsageError("sandbox container", "needs root (namespaces, mounts)", hint="run it with sudo")
            p = self.paths
            for d in (p.upper, p.work, p.merged, p.tmp):
                d.mkdir(parents=True, exist_ok=True)
            os.chmod(p.tmp, 0o1777)
            script = self._init_script(image, mounts)
            with contextlib.suppress(FileNotFoundError):
                p.log.unlink()
            argv = ["unshare", "--mount", "--net", "--pid", "--uts", "--ipc", "--fork", "--propagation", "private"]
            argv += ["/bin/sh", "-ec", script]
            env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", procs.MARK_ENV: str(p.dir)}
            unshare = procs.spawn(argv, p.log, p.unshare_pid, env, p.dir)
            init = self._wait_init(unshare, timeout_s)
            state = {
                "release": self.release.series,
                "image": str(image.path),
                "init_pid": init,
                "unshare_pid": unshare,
                "mounts": [[str(h), str(i), ro] for h, i, ro in mounts],
                "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
            tmp = p.state.with_name(".container.json.tmp")
            tmp.write_text(json.dumps(state, indent=1) + "\n")
            os.replace(tmp, p.state)
            return init

    def _init_script(self, image: Image, mounts: Sequence[tuple[Path, Path, bool]]) -> str:
        m = shlex.quote(str(self.paths.merged))
        q = shlex.quote
        lines = [
            f"mount -t overlay overlay -o lowerdir={q(str(image.path))},upperdir={q(str(self.paths.upper))},"
            f"workdir={q(str(self.paths.work))} {m}",
            f"mount -t proc proc {m}/proc",
            f"mount --rbind /dev {m}/dev",
            f"mount --rbind /sys {m}/sys",
            f"mount -t tmpfs -o mode=755 tmpfs {m}/run",
            f"mount --bind {q(str(self.paths.tmp))} {m}/tmp",
        ]
        for host, inside, ro in mounts:
            lines += self._bind_lines(host, inside, ro)
        # No DNS in here: the host name must resolve from /etc/hosts (slurmctld looks up the
        # submit host of every srun), and a lookup of anything else must fail at once.
        name = self.hostname
        inner = (
            f"ip link set lo up && ip addr add {ADDRESS}/32 dev lo && hostname {name} && "
            f"printf '127.0.0.1 localhost\\n{ADDRESS} {name}\\n' > /etc/hosts && "
            "printf '# no network in this container\\noptions timeout:1 attempts:1\\n' > /etc/resolv.conf && "
            "exec tini -s -- sleep infinity"
        )
        lines.append(f"exec chroot {m} /bin/sh -ec {q(inner)}")
        return "\n".join(lines)

    def _bind_lines(self, host: Path, inside: Path, ro: bool) -> list[str]:
        target = shlex.quote(f"{self.paths.merged}{inside}")
        lines = [f"mkdir -p {target}", f"mount --bind {shlex.quote(str(host))} {target}"]
        if ro:
            lines.append(f"mount -o remount,bind,ro {target}")
        return lines

    def _wait_init(self, unshare: int, timeout_s: float) -> int:
        """The pid of unshare's child once it has become tini inside the root."""
        found: list[int] = []

        def ready() -> bool:
            if not procs.is_alive(unshare):
                raise SlurmUnavailableError(
                    f"container for Slurm {self.release.series}",
                    "its set-up failed" + procs.log_excerpt([self.paths.log]),
                )
            for child in _children(unshare):
                if procs.proc_comm(child) == "tini":
                    found.append(child)
                    return True
            return False

        procs.wait_until(ready, what=f"container for Slurm {self.release.series}", timeout_s=timeout_s)
        return found[0]

    def stop(self, timeout_s: float = 15) -> bool:
        """Kill the container: its init dies, and the kernel ends every process in it."""
        with self._locked():
            pid = self.init_pid()
            unshare = procs.read_pid(self.paths.unshare_pid)
            if pid is None:
                return False
            procs.stop(pid, timeout_s=timeout_s)
            if unshare and procs.is_alive(unshare):
                procs.stop(unshare, timeout_s=5)
            return True

    def purge(self) -> None:
        """Delete the container's directory (its sandbox, logs and writes); it must be stopped."""
        if self.running():
            raise UsageError(f"container for Slurm {self.release.series}", "is running", hint="stop it first")
        if self.paths.dir.exists():
            shutil.rmtree(self.paths.dir)

    # ------------------------------------------------------------ inside

    def bind(self, host: Path, inside: Path | None = None, ro: bool = True) -> None:
        """Mount a host path into the running container (a config file's directory, say)."""
        pid = self._require_running()
        inside = inside or host
        script = "\n".join(self._bind_lines(host, inside, ro))
        if _is_mounted(pid, inside):
            if _same_dir(host, Path(f"/proc/{pid}/root{inside}")):
                return
            # a stale mount: the checkout was deleted and made again at the same path since the
            # container started (commands inside would find no working directory)
            target = shlex.quote(f"{self.paths.merged}{inside}")
            script = f"umount -l {target}\n{script}"
        _check(["nsenter", "-t", str(pid), "-m", "/bin/sh", "-ec", script], f"bind {host} into the container")

    def sync_package(self, pkg: PackageMount) -> None:
        """Point the container's venv at the mounted package and write its console scripts."""
        with self._locked():  # two commands starting at once mount it once
            for host, inside in pkg.mounts:
                self.bind(host, inside, ro=False)
            spec = json.dumps({"path": str(pkg.inside), "scripts": pkg.scripts})
            _check(self.argv([f"{VENV}/bin/python", "-I", "-c", _SYNC, spec]), "install the package in the container")

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a command inside: nothing of the host's but the terminal."""
        env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        env.update({k: os.environ[k] for k in PASSED_ENV if k in os.environ})
        env[CONTAINER_ENV] = self.release.series  # how a command inside knows where it runs
        # pip inside has no network: the root's wheelhouse is its index
        env.update({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": WHEELS, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        env.update(extra or {})
        return env

    def argv(self, cmd: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None) -> list[str]:
        """``nsenter`` into the namespaces and the root, then ``env -i -C CWD ... CMD``."""
        pid = self._require_running()
        where = cwd if cwd and _inside_dir_exists(pid, cwd) else "/"
        values = [f"{k}={v}" for k, v in self.env(env).items()]
        ns = ["nsenter", "-t", str(pid), "-m", "-n", "-p", "-u", "-i", "-r"]
        return [*ns, "/usr/bin/env", "-i", "-C", where, *values, *cmd]

    def run(
        self,
        cmd: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        capture: bool = False,
        timeout_s: float | None = None,
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(cmd, env, cwd),
            capture_output=capture,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )

    def _require_running(self) -> int:
        pid = self.init_pid()
        if pid is None:
            raise UsageError(
                f"container for Slurm {self.release.series}",
                "is not running",
                hint=f"gpupool sandbox up --slurm {self.release.series}",
            )
        return pid


@dataclass(frozen=True)
class RunningContainer:
    release: str
    image: str | None


def running_containers() -> list[RunningContainer]:
    """The containers under :func:`containers_dir` that run now, with their images."""

    out = []
    for state in sorted(containers_dir().glob("*/container.json")):
        with contextlib.suppress(OSError, ValueError, UsageError):
            data = json.loads(state.read_text())
            if Container(release_of(data["release"]), state.parent.parent).running():
                out.append(RunningContainer(data["release"], data.get("image")))
    return out


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _is_mounted(pid: int, inside: Path) -> bool:
    """Whether ``inside`` is a mount point in the container (its /proc/PID/mountinfo)."""
    try:
        text = Path(f"/proc/{pid}/mountinfo").read_text()
    except OSError:
        return False
    return any(line.split()[4] == str(inside) for line in text.splitlines() if len(line.split()) > 4)


def _same_dir(a: Path, b: Path) -> bool:
    """Whether two paths are the same directory (device and inode), e.g. a host checkout and
    what the container sees at its mount point (a deleted directory is no longer the same)."""
    try:
        sa, sb = a.stat(), b.stat()
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _inside_dir_exists(pid: int, path: str) -> bool:
    return Path(f"/proc/{pid}/root{path}").is_dir()


def _check(argv: list[str], what: str, timeout_s: float = 60) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailableError(what, f"timed out after {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise SlurmUnavailableError(what, (proc.stderr or proc.stdout).strip() or f"exit {proc.returncode}")


def ensure_running(
    release: SlurmRelease, progress: Callable[[str], None] = lambda _m: None, install_tools: bool = True
) -> Container:
    """The release's container, running, with this package mounted in it."""

    container = Container(release)
    if not container.running():
        image = ensure_image(release, progress, install_tools)
        in_use = {Path(c.image) for c in running_containers() if c.image}
        for old in prune(release.suite, {image.path} | in_use):
            progress(f"deleted the outdated root {old}")
        progress(f"starting the Slurm {release.series} container ({container.paths.dir})")
        container.start(image)
    container.sync_package(package_mount())
    return container
