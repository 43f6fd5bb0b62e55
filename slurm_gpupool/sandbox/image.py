"""A cached Debian root with another Slurm release, for the sandbox's container.

``mmdebstrap`` (minbase) builds the suite that ships the release with Slurm,
slurmdbd, munge, MariaDB and Python; then, in the root, a virtual environment
``/opt/gpupool/venv`` with the package's dependencies (and its test tools) and a
wheelhouse ``/opt/gpupool/wheels`` so pip works inside the container, which has
no network.  The package itself is not copied in: the container mounts it.

Roots live in ``/var/cache/slurm-gpupool/roots/<suite>-<key>`` (env
``SLURM_GPUPOOL_IMAGE_CACHE``), where the key hashes everything the build
depends on; a finished root carries ``.gpupool-image.json`` and is never changed
again (containers mount it read-only, as an overlay's lower layer).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from slurm_gpupool.errors import SlurmUnavailableError, UsageError
from slurm_gpupool.sandbox.tools import install_packages
from slurm_gpupool.sandbox.versions import SlurmRelease

CACHE_ENV = "SLURM_GPUPOOL_IMAGE_CACHE"
MIRROR_ENV = "SLURM_GPUPOOL_DEBIAN_MIRROR"
DEFAULT_CACHE = Path("/var/cache/slurm-gpupool/roots")
STAMP = ".gpupool-image.json"
IMAGE_SCHEMA = 1
VENV = "/opt/gpupool/venv"
WHEELS = "/opt/gpupool/wheels"

# What the sandbox runs (the daemons and their tools), tini as the container's init,
# iproute2 for its loopback address, and a Python with venv for the package (and for
# the Ansible role run against the sandbox).
DEBIAN_PACKAGES = (
    "slurm-wlm",
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "slurm-client",
    "munge",
    "mariadb-server",
    "python3",
    "python3-venv",
    "python3-packaging",  # Ansible's pip module imports it on the target
    "iproute2",
    "procps",
    "ca-certificates",
    "tini",
    "prometheus",  # tests/integration/test_metrics_slurm.py scrapes `gpupool metrics` (and promtool)
)
# The package's extras installed in the root's venv: the sandbox, reports and the tests.
EXTRAS = ("reports", "test", "dev")
# What only the host's static checks and unit tests use (lint, types, the import contracts,
# property tests, the in-process Lua, ansible-lint, wheel building): a container runs the
# integration tests and the demo only, and each of these made every CI run's two root
# builds longer (CI builds them afresh, beside the unit tests, on the same two cores).
NOT_IN_IMAGE = ("ruff", "mypy", "types-pyyaml", "ansible-lint", "hypothesis", "import-linter", "lupa", "build")
# What pip inside the container may install from (the Ansible role builds the package).
WHEELHOUSE = ("setuptools>=64", "wheel", "pip")


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def requirements(requires: list[str], extras: tuple[str, ...] = EXTRAS) -> list[str]:
    """Requirement strings of the distribution's metadata, for its base and ``extras``.

    ``"pytest>=7.4; extra == \\"test\\""`` counts when its extra is wanted; lint
    and type-checking tools are left out.  Pure, sorted, deduplicated.
    """
    out = set()
    for req in requires:
        spec, _, marker = req.partition(";")
        found = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        if found and found.group(1) not in extras:
            continue
        name = re.split(r"[<>=!~\[ ]", spec.strip(), maxsplit=1)[0].lower()
        if name in NOT_IN_IMAGE:
            continue
        out.add(spec.strip())
    return sorted(out)


def package_requirements() -> list[str]:
    """The installed distribution's requirements (base + reports + test + dev extras)."""
    from importlib import metadata

    try:
        requires = metadata.requires("slurm-gpupool") or []
    except metadata.PackageNotFoundError:
        raise UsageError(
            "slurm-gpupool", "not installed (the container needs its metadata)", hint="scripts/bootstrap"
        ) from None
    return requirements(requires)


def image_key(rel: SlurmRelease, reqs: list[str]) -> str:
    """Hash of every input of a build: a changed one builds a new root."""
    blob = json.dumps(
        {"schema": IMAGE_SCHEMA, "suite": rel.suite, "packages": DEBIAN_PACKAGES, "pip": reqs, "wheels": WHEELHOUSE},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Image:
    release: SlurmRelease
    path: Path

    @property
    def stamp(self) -> Path:
        return self.path / STAMP

    def ready(self) -> bool:
        return self.stamp.is_file()

    def info(self) -> dict:
        try:
            return json.loads(self.stamp.read_text())
        except (OSError, ValueError):
            return {}


def image_for(rel: SlurmRelease, reqs: list[str] | None = None) -> Image:
    reqs = package_requirements() if reqs is None else reqs
    return Image(rel, cache_dir() / f"{rel.suite}-{image_key(rel, reqs)}")


def _run(argv: list[str], what: str, timeout_s: float, env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
            env=env or dict(os.environ),
        )
    except FileNotFoundError:
        raise SlurmUnavailableError(what, f"{argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise SlurmUnavailableError(what, f"timed out after {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise SlurmUnavailableError(what, f"exit {proc.returncode}\n{tail}")
    return proc.stdout


def _chroot(root: Path, script: str, what: str, timeout_s: float = 1800) -> str:
    """``chroot ROOT /bin/sh -ec SCRIPT`` with a clean environment (the host's network)."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    passed = ("http_proxy", "https_proxy", "no_proxy", "pip_index_url", "pip_extra_index_url", "pip_trusted_host")
    env.update({k: v for k, v in os.environ.items() if k.lower() in passed})
    return _run(["chroot", str(root), "/bin/sh", "-ec", script], what, timeout_s, env)


@contextlib.contextmanager
def _build_lock(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    fd = os.open(cache / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_image(
    rel: SlurmRelease, progress: Callable[[str], None] = lambda _m: None, install_tools: bool = True
) -> Image:
    """The cached root for ``rel``, built first if there is none (about 2 minutes)."""
    reqs = package_requirements()
    image = image_for(rel, reqs)
    if image.ready():
        return image
    with _build_lock(image.path.parent):
        if image.ready():  # another process built it while we waited
            return image
        if shutil.which("mmdebstrap") is None:
            if not install_tools:
                raise SlurmUnavailableError("mmdebstrap", "not installed", hint="apt-get install -y mmdebstrap")

            progress("installing mmdebstrap")
            install_packages(["mmdebstrap"])
        _build(image, reqs, progress)
    return image


def _build(image: Image, reqs: list[str], progress: Callable[[str], None]) -> None:
    rel = image.release
    tmp = image.path.with_name(f".{image.path.name}.building")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    mirror = os.environ.get(MIRROR_ENV, "http://deb.debian.org/debian")
    progress(f"building a {rel.debian} root with Slurm {rel.series} (mmdebstrap, {mirror})")
    _run(
        [
            "mmdebstrap",
            "--variant=minbase",
            '--aptopt=Acquire::Check-Valid-Until "false"',  # sid's Release may outlive this clock
            "--include=" + ",".join(DEBIAN_PACKAGES),
            rel.suite,
            str(tmp),
            mirror,
        ],
        f"mmdebstrap {rel.suite}",
        timeout_s=1800,
    )
    # The host's own CAs (a site's proxy) and name service, so pip can reach an index.
    local_cas = Path("/usr/local/share/ca-certificates")
    if local_cas.is_dir():
        shutil.copytree(local_cas, tmp / "usr/local/share/ca-certificates", dirs_exist_ok=True)
    shutil.copy2("/etc/resolv.conf", tmp / "etc/resolv.conf")
    if Path("/etc/pip.conf").is_file():  # a site's index or proxy settings
        shutil.copy2("/etc/pip.conf", tmp / "etc/pip.conf")
    progress(f"installing Python packages in {VENV} and a wheelhouse in {WHEELS}")
    quoted = " ".join(f"'{r}'" for r in reqs)
    wheels = " ".join(f"'{w}'" for w in WHEELHOUSE)
    _chroot(
        tmp,
        f"update-ca-certificates >/dev/null\n"
        f"python3 -m venv {VENV}\n"
        f"{VENV}/bin/pip install -q --disable-pip-version-check --upgrade pip setuptools wheel\n"
        f"{VENV}/bin/pip install -q --disable-pip-version-check {quoted}\n"
        f"{VENV}/bin/pip download -q --disable-pip-version-check -d {WHEELS} {quoted} {wheels}\n",
        "pip in the new root",
    )
    versions = _chroot(tmp, "dpkg-query -W -f '${Package} ${Version}\\n' slurmctld mariadb-server python3", "dpkg")
    found = dict(line.split(" ", 1) for line in versions.splitlines() if " " in line)
    slurm = found.get("slurmctld", "")
    if not slurm.startswith(rel.series + "."):
        raise SlurmUnavailableError(
            f"Debian {rel.suite}",
            f"ships Slurm {slurm or 'nothing'}, not {rel.series}",
            hint="Debian's archive moved on: update slurm_gpupool/sandbox/versions.py",
        )
    stamp = {
        "schema": IMAGE_SCHEMA,
        "suite": rel.suite,
        "series": rel.series,
        "packages": found,
        "pip": reqs,
        "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "build_seconds": round(time.monotonic() - t0, 1),
    }
    (tmp / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    os.replace(tmp, image.path)
    progress(f"root ready at {image.path} ({stamp['build_seconds']:.0f} s; Slurm {slurm})")


def prune(suite: str, keep: set[Path]) -> list[Path]:
    """Delete the suite's cached roots not in ``keep`` (the newest, those a container runs on)."""
    cache = cache_dir()
    removed = []
    with _build_lock(cache):
        for path in sorted(cache.glob(f"{suite}-*")):
            if path.is_dir() and path not in keep and (path / STAMP).exists():
                shutil.rmtree(path)
                removed.append(path)
    return removed
