"""The simulated GPUs of one node, kept in one JSON file shared by every process.

The prolog, the CLI and the repartitioner run in different processes, so the
simulated GPUs live in a file: ``<sim_dir>/<node>.json``.  Writers take an
exclusive ``flock`` on ``<node>.json.lock`` and replace the file atomically
(write, fsync, rename); readers need no lock because a rename is atomic, and
they re-read only when the file changed (inode, size, mtime).  A reader that pairs
the state with the clock (a GPM sample) takes a shared lock (``SimStore.consistent``).

The state is self-contained: it is built once from a machine description and the
catalog, so the simulated library never parses YAML.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator

from slurm_gpupool.errors import StateError

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


SCHEMA = 1
DEFAULT_DRIVER = "550.90.07"
DEFAULT_CUDA = 12040  # nvmlSystemGetCudaDriverVersion: 12.4


class SimStore:
    """Locked, cached access to one node's simulated-GPU state file."""

    def __init__(self, path: Path | str) -> None:
        self._path = os.fspath(path)  # plain strings: pathlib costs the hooks ~10 ms to import
        self._lock_path = self._path + ".lock"
        self._cache: dict[str, Any] | None = None
        self._cache_key: tuple[int, int, int, int] | None = None
        self._held: _Held | None = None  # the file the cache was parsed from, open (see _keep)
        self.parses = 0  # how often the file was parsed: a cache hit costs a stat, not a parse

    @property
    def path(self) -> Path:
        from pathlib import Path

        return Path(self._path)

    def exists(self) -> bool:
        return os.path.isfile(self._path)

    def _load(self, cached: bool = True) -> dict[str, Any]:
        """The state, parsed again only when the file changed (a ``stat``, not an open, per
        NVML call: a ``node assert`` makes thousands); ``cached=False``: a private copy."""
        try:
            if cached and self._cache is not None and _key(os.stat(self._path)) == self._cache_key:
                return self._cache
            fd = os.open(self._path, os.O_RDONLY)
            try:
                key = _key(os.fstat(fd))
                with open(fd, "rb", closefd=False) as f:
                    data = json.loads(f.read())
            except BaseException:
                os.close(fd)
                raise
        except FileNotFoundError:
            raise StateError(
                f"simulated GPU state {self.path}",
                "no such file",
                hint="create it with `gpupool sim init` or `gpupool sandbox up`",
            ) from None
        except (OSError, ValueError) as e:
            raise StateError(f"simulated GPU state {self.path}", f"unreadable: {e}") from None
        self.parses += 1
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            os.close(fd)
            raise StateError(f"simulated GPU state {self.path}", f"unknown schema (expected {SCHEMA})")
        if cached:
            self._keep(data, key, fd)
        else:
            os.close(fd)
        return data

    def _keep(self, data: dict[str, Any] | None, key: tuple[int, int, int, int] | None, fd: int) -> None:
        """Make ``data`` the cache, valid while the file's key is ``key``, holding ``fd``
        open on that file.  Writers replace the file by a rename, so a change always shows
        as another inode; holding the old one open keeps the file system from giving its
        number to a later file, which could otherwise match in size and (coarse) mtime."""
        self._cache, self._cache_key, self._held = data, key, _Held(fd) if fd >= 0 else None

    def read(self) -> dict[str, Any]:
        """The current state.  Treat it as read-only: it may be the cached object."""
        return self._load()

    @contextlib.contextmanager
    def consistent(self) -> Iterator[dict[str, Any]]:
        """The state, held under a shared ``flock`` so that no writer replaces it meanwhile.

        A reader that pairs the state with the clock (a GPM sample: counters and their time)
        needs both of one instant, as the hardware's are.  A writer stamps a change under its
        exclusive lock and renames the file later; read without the lock between the two, the
        old state was paired with a time the new one is already dated from, and a GPM interval
        measured more than was set (24.5 % for 20, on 24.11 under load).  Read-only and never
        creating the lock (``create_node_state`` does), so a root reader leaves no lock a
        later writer could not open; without one (or unreadable) it reads unlocked.  Not
        within ``modify`` in the same process: the two locks are on separate descriptors."""
        try:
            fd = os.open(self._lock_path, os.O_RDONLY)
        except OSError:
            fd = -1
        if fd < 0:
            yield self._load()
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            yield self._load()
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def modify(self) -> Iterator[dict[str, Any]]:
        """Exclusive read-modify-write.  Nothing is written if the body raises.  Written
        compact (the C encoder; an indented dump takes json's pure-Python path, and a
        ``node apply`` writes the state once per NVML change) and without an fsync (see
        ``write_bytes_atomic``); what was written is then the cache."""
        from slurm_gpupool.util.atomic import write_bytes_atomic

        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._keep(None, None, -1)
            data = self._load(cached=False)  # freshly parsed: private
            yield data
            write_bytes_atomic(self.path, json.dumps(data, separators=(",", ":")).encode(), durable=False)
            held = os.open(self._path, os.O_RDONLY)  # still what we wrote: we hold the lock
            self._keep(data, _key(os.fstat(held)), held)
        finally:
            os.close(fd)


class _Held:
    """An open descriptor, closed with its last reference (so exactly once, whichever thread
    replaces the cache), and only by the process that opened it: a forked child may have
    closed its inherited descriptors (the stand-in MPS daemon does), and the number may since
    be another file's, such as the lock's, whose close would drop the lock mid-write."""

    __slots__ = ("fd", "pid")
    _close = staticmethod(os.close)  # still there while the interpreter shuts down
    _getpid = staticmethod(os.getpid)

    def __init__(self, fd: int) -> None:
        self.fd, self.pid = fd, os.getpid()

    def __del__(self) -> None:
        if self._getpid() == self.pid:
            self._close(self.fd)


def _key(st: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when the state file is replaced (inode) or rewritten (size, mtime)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def model_facts(model: Any) -> dict[str, Any]:
    """What a job hook's NVML calls need of a GPU's catalog model (a ``GpuModel``), kept in
    the node's state so that they need not load the catalog."""
    return {
        "architecture": model.architecture,
        "max_mig_devices": model.mig.max_mig_devices if model.mig is not None else 0,
        "temp_shutdown_c": model.temp_shutdown_c,
        "temp_slowdown_c": model.temp_slowdown_c,
        # nvmlDeviceGetMemoryInfo of a GPU and of a MIG device (every Epilog asks, #29)
        "memory_mib": model.memory_mib,
        "gi_memory_mib": {str(p.profile_id): p.memory_mib for p in model.mig.profiles} if model.mig else {},
    }


def _hex(seed: str, n: int) -> str:
    import hashlib  # here: only node creation needs it, not every hook's NVML call (#29)

    return hashlib.sha256(seed.encode()).hexdigest()[:n]


def gpu_uuid(node: str, index: int) -> str:
    """A stable GPU UUID for a simulated GPU (``GPU-`` + 8-4-4-4-12 hex)."""
    h = _hex(f"gpu/{node}/{index}", 32)
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def mig_uuid(gpu_uuid_: str, serial: int) -> str:
    """A MIG device UUID: stable for the CI's lifetime, new when it is re-created.

    Real R470+ MIG UUIDs look version-5 style (third group starts with 5).
    """
    h = _hex(f"mig/{gpu_uuid_}/{serial}", 32)
    return f"MIG-{h[:8]}-{h[8:12]}-5{h[13:16]}-{h[16:20]}-{h[20:32]}"


def new_node_state(
    node: str, machine: Any, driver_version: str = DEFAULT_DRIVER, dev_root: str = "/dev"
) -> dict[str, Any]:
    """The state of a freshly booted node of this machine type: MIG off everywhere.

    ``machine`` is a :class:`slurm_gpupool.config.machines.MachineSpec`.
    """
    from slurm_gpupool.core.mig.catalog import get_model

    level_code = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
    switch_bus = [f"00000000:{0xC0 + k:02X}:00.0" for k in range(6)]  # NVSwitch PCI functions
    gpus = []
    for g in machine.gpus:
        model = get_model(g.model)
        links: list[list[Any]] = []  # [remote_bus_id, remote_type] per link index
        if machine.interconnect == "nvswitch":
            for k in range(machine.nvswitch_links_per_gpu):
                links.append([switch_bus[k % len(switch_bus)], 2])  # NVML_NVLINK_DEVICE_TYPE_SWITCH
        else:
            for other in machine.gpus:
                for _ in range(machine.nvlinks(g.index, other.index)):
                    links.append([other.pci_bus_id, 0])  # NVML_NVLINK_DEVICE_TYPE_GPU
        gpus.append(
            {
                "index": g.index,
                "model": model.key,
                "model_facts": model_facts(model),
                "uuid": gpu_uuid(node, g.index),
                "serial": str(1560000000000 + int(_hex(f"serial/{node}/{g.index}", 8), 16) % 10**9),
                "minor": g.minor,
                "pci_bus_id": g.pci_bus_id,
                "pci_device_id": g.device_id,
                "numa_node": g.numa_node,
                "cpus": list(g.cpus),
                "nvlinks": links,
                "pcie_levels": [
                    0 if o.index == g.index else level_code[machine.pcie_level(g.index, o.index)] for o in machine.gpus
                ],
                "mig": {"current": 0, "pending": 0} if model.mig_capable else None,
                "gis": [],
                "processes": [],
                # other NVML clients (nvidia-persistenced, DCGM): on Ampere they make the
                # reset inside nvmlDeviceSetMigMode fail, so the change stays pending.
                "clients": 1 if model.mig_mode_needs_reset else 0,
                "utilization": {"gpu": 0, "memory": 0},
                "health": {
                    "ecc": {"corrected": [0, 0], "uncorrected": [0, 0]},  # [volatile, aggregate]
                    "retired_pages": {"sbe": [], "dbe": []},
                    "retired_pending": 0,
                    "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": 0, "failure": 0},
                    "temperature_c": 34,
                },
            }
        )
    return {
        "schema": SCHEMA,
        "node": node,
        "machine": machine.name,
        "driver_version": driver_version,
        "dev_root": dev_root,
        "cuda_version": DEFAULT_CUDA,
        "next_serial": 1,
        "gpus": gpus,
        "faults": [],
        "calls": {},
    }


def create_node_state(
    path: Path | str, node: str, machine: Any, overwrite: bool = False, dev_root: str = "/dev"
) -> bool:
    """Create the state file; returns False (and changes nothing) if it exists."""
    from pathlib import Path

    from slurm_gpupool.util.atomic import write_json_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not overwrite:
        return False
    write_json_atomic(path, new_node_state(node, machine, dev_root=dev_root))
    os.close(os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644))  # readers lock it too (consistent)
    return True
