"""CUDA MPS on the simulated GPUs: control daemons and the clients CUDA would make.

What NVIDIA's MPS documentation says, and the simulation holds (docs/simulation.md):

* a CUDA process reaches MPS only through a control daemon listening in the
  ``CUDA_MPS_PIPE_DIRECTORY`` it was given (default ``/tmp/nvidia-mps``); with none there
  (or a dead one) it runs without MPS, as a plain time-sliced process;
* the daemon runs one server at a time, as the user of its first client; a client of
  another user is queued (it waits in CUDA initialisation) until every client of the
  running server has ended, then a server of the waiting user starts;
* on Volta and later, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``"0=4096M"``) makes an
  allocation beyond the limit fail, and ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` caps the
  client's share of the SMs (bookkept here: ``thread_percentages``); earlier GPUs ignore
  both.

State lives in the node's state file (``st["mps"]``: one entry per daemon, by pipe
directory), so the stand-in ``nvidia-cuda-mps-control`` (``mps_control.py``), the
hooks and the tests see the same daemons.  Clients are real processes (pids), like the
simulation's other GPU processes.
"""

from __future__ import annotations

import re

from slurm_gpupool.errors import GpuOperationError, UsageError
from slurm_gpupool.hw.sim.procs import pid_alive, process_start
from slurm_gpupool.hw.sim.state import SimStore

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"
PRE_VOLTA = ("kepler", "maxwell", "pascal")  # MPS there has no per-client limits
_LIMIT = re.compile(r"\s*(\d+)\s*=\s*(\d+)\s*([KMG]?)B?\s*", re.IGNORECASE)


class SimMpsError(GpuOperationError):
    """What CUDA would report to a simulated MPS client (an allocation over its limit, a
    client of no daemon, a wrong device)."""


def parse_mem_limit(value: str) -> dict[int, int]:
    """``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``"0=4096M,1=2G"``): MiB per device ordinal."""
    out: dict[int, int] = {}
    for part in value.split(","):
        if not part.strip():
            continue
        m = _LIMIT.fullmatch(part)
        if m is None:
            raise SimMpsError("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", f"cannot parse {part!r} (expected <dev>=<N>M)")
        n, unit = int(m.group(2)), m.group(3).upper()
        out[int(m.group(1))] = {"K": n // 1024, "M": n, "G": n * 1024, "": n >> 20}[unit]
    return out


def _alive(d: dict[str, Any]) -> bool:
    return pid_alive(d["pid"], d.get("start"))


def daemons(st: dict[str, Any]) -> list[dict[str, Any]]:
    return st.setdefault("mps", [])


def daemon_at(st: dict[str, Any], pipe_dir: str) -> dict[str, Any] | None:
    """The live daemon listening in ``pipe_dir``, if any."""
    for d in daemons(st):
        if d["pipe_dir"] == pipe_dir and _alive(d):
            return d
    return None


def register_daemon(store: SimStore, pipe_dir: str, log_dir: str, gpu_uuid: str, pid: int) -> None:
    """``nvidia-cuda-mps-control -d`` came up in ``pipe_dir`` for ``gpu_uuid`` (its
    ``CUDA_VISIBLE_DEVICES``: a GPU's UUID, or a MIG device's, one daemon per MIG device);
    a dead daemon's entry for that directory is replaced."""
    with store.modify() as st:
        if _find(st, gpu_uuid) is None:
            raise UsageError(f"GPU {gpu_uuid}", f"not on node {st['node']}")
        if daemon_at(st, pipe_dir) is not None:
            raise GpuOperationError(f"MPS control daemon in {pipe_dir}", "one is already running there")
        st["mps"] = [d for d in daemons(st) if d["pipe_dir"] != pipe_dir] + [
            {
                "pipe_dir": pipe_dir,
                "log_dir": log_dir,
                "gpu_uuid": gpu_uuid,
                "pid": pid,
                "start": process_start(pid),
                "server": None,  # {"id", "uid"}: the one running server
                "servers_started": 0,
                "clients": [],
                "queued": [],
            }
        ]


def unregister_daemon(store: SimStore, pipe_dir: str) -> None:
    """``echo quit | nvidia-cuda-mps-control``: the daemon and its server are gone."""
    with store.modify() as st:
        st["mps"] = [d for d in daemons(st) if d["pipe_dir"] != pipe_dir]


def _start_server(d: dict[str, Any], uid: int) -> None:
    d["servers_started"] += 1
    d["server"] = {"id": d["pid"] * 100 + d["servers_started"], "uid": uid}


def _find(st: dict[str, Any], uuid: str) -> tuple[dict[str, Any], dict[str, int]] | None:
    """The GPU of a GPU or MIG device UUID, and ``{"gi", "ci"}`` for a MIG device (else {})."""
    for g in st["gpus"]:
        if g["uuid"] == uuid:
            return g, {}
        for gi in g.get("gis") or ():
            for ci in gi["cis"]:
                if ci["uuid"] == uuid:
                    return g, {"gi": gi["id"], "ci": ci["id"]}
    return None


def _gpu(st: dict[str, Any], uuid: str) -> tuple[dict[str, Any], dict[str, int]]:
    found = _find(st, uuid)
    if found is None:
        raise SimMpsError(f"GPU {uuid}", f"not on node {st['node']}")
    return found


def _total_mib(g: dict[str, Any], proc: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """The memory of the device a process runs on (a MIG device's: its GPU instance's
    profile) and the processes sharing that memory."""
    from slurm_gpupool.core.mig.catalog import get_model

    model = get_model(g["model"])
    if "gi" not in proc or model.mig is None:
        return model.memory_mib, g["processes"]
    gi = next(x for x in g["gis"] if x["id"] == proc["gi"])
    prof = model.mig.by_id(gi["profile_id"])
    assert prof is not None
    return prof.memory_mib, [p for p in g["processes"] if p.get("gi") == proc["gi"]]


def _client_of(st: dict[str, Any], pid: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    for d in daemons(st):
        for c in d["clients"]:
            if c["pid"] == pid:
                return d, c
    return None, None


def _prune(st: dict[str, Any]) -> None:
    """Clients whose process is gone disconnect; a server with no client left ends when a
    client of another user waits, and that user's server starts (the daemon's queue)."""
    for d in daemons(st):
        d["clients"] = [c for c in d["clients"] if pid_alive(c["pid"], c.get("start"))]
        d["queued"] = [c for c in d["queued"] if pid_alive(c["pid"], c.get("start"))]
        if d["clients"] or not d["queued"]:
            continue
        uid = d["queued"][0]["uid"]
        _start_server(d, uid)
        d["clients"] = [c for c in d["queued"] if c["uid"] == uid]
        d["queued"] = [c for c in d["queued"] if c["uid"] != uid]
    for g in st["gpus"]:
        g["processes"] = [p for p in g["processes"] if pid_alive(p["pid"], p.get("start"))]


def cuda_init(store: SimStore, env: dict[str, str], uid: int, pid: int) -> str:
    """A process initialises CUDA with ``env`` on one GPU (``CUDA_VISIBLE_DEVICES=<uuid>``):
    ``"mps"`` (a client of the daemon in its pipe directory), ``"queued"`` (that daemon's
    server belongs to another user: CUDA waits) or ``"plain"`` (no daemon reached)."""
    uuid = env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0]
    pipes = env.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIR
    with store.modify() as st:
        _prune(st)
        g, on_mig = _gpu(st, uuid)
        d = daemon_at(st, pipes)
        entry: dict[str, Any] = {"pid": pid, "start": process_start(pid), "uid": uid}
        if d is None:
            g["processes"] = [p for p in g["processes"] if p["pid"] != pid] + [
                {"pid": pid, "used_memory_mib": 0, "start": entry["start"], **on_mig}
            ]
            return "plain"
        if d["gpu_uuid"] != uuid:
            raise SimMpsError(f"MPS client {pid}", f"its daemon ({pipes}) serves GPU {d['gpu_uuid']}, not {uuid}")
        volta = g["model_facts"]["architecture"] not in PRE_VOLTA
        pct = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "")
        limits = parse_mem_limit(env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", ""))
        entry["thread_pct"] = max(1, min(100, int(pct))) if volta and pct.isdigit() else 100
        entry["mem_limit_mib"] = limits.get(0) if volta else None
        entry["used_mib"] = 0
        if d["server"] is None:
            _start_server(d, uid)
        if d["server"]["uid"] != uid:
            d["queued"].append(entry)
            return "queued"
        d["clients"].append(entry)
        g["processes"] = [p for p in g["processes"] if p["pid"] != pid] + [
            {"pid": pid, "used_memory_mib": 0, "start": entry["start"], **on_mig}
        ]
        return "mps"


def allocate(store: SimStore, pid: int, mib: int) -> None:
    """``cudaMalloc`` of ``mib`` by a process :func:`cuda_init` set up: refused (SimMpsError,
    as cudaErrorMemoryAllocation) beyond the client's pinned limit or its device's free
    memory (a MIG device's own)."""
    with store.modify() as st:
        _prune(st)
        d, c = _client_of(st, pid)
        if d is None and any(q["pid"] == pid for x in daemons(st) for q in x["queued"]):
            raise SimMpsError(f"process {pid}", "still waiting for its MPS server (CUDA init has not returned)")
        gpu = next((g for g in st["gpus"] for p in g["processes"] if p["pid"] == pid), None)
        if gpu is None:
            raise SimMpsError(f"process {pid}", "has not initialised CUDA")
        proc = next(p for p in gpu["processes"] if p["pid"] == pid)
        if c is not None and c["mem_limit_mib"] is not None and c["used_mib"] + mib > c["mem_limit_mib"]:
            raise SimMpsError(
                f"allocation of {mib} MiB by MPS client {pid}",
                f"over its pinned device memory limit ({c['used_mib']} of {c['mem_limit_mib']} MiB in use)",
            )
        total, sharing = _total_mib(gpu, proc)
        if sum(p.get("used_memory_mib", 0) for p in sharing) + mib > total:
            raise SimMpsError(f"allocation of {mib} MiB by process {pid}", f"out of memory on a {total} MiB device")
        proc["used_memory_mib"] = proc.get("used_memory_mib", 0) + mib
        if c is not None:
            c["used_mib"] += mib


def cuda_exit(store: SimStore, pid: int) -> None:
    """The process ends its CUDA context (or exits): it leaves its server, and a waiting
    user's server may start."""
    with store.modify() as st:
        for d in daemons(st):
            d["clients"] = [c for c in d["clients"] if c["pid"] != pid]
            d["queued"] = [c for c in d["queued"] if c["pid"] != pid]
        for g in st["gpus"]:
            g["processes"] = [p for p in g["processes"] if p["pid"] != pid]
        _prune(st)


def status(store: SimStore, pid: int) -> str:
    """``mps``, ``queued`` (a waiting client may have been admitted since), ``plain`` or ``none``."""
    with store.modify() as st:
        _prune(st)
        if _client_of(st, pid)[1] is not None:
            return "mps"
        if any(q["pid"] == pid for d in daemons(st) for q in d["queued"]):
            return "queued"
        return "plain" if any(p["pid"] == pid for g in st["gpus"] for p in g["processes"]) else "none"


def thread_percentages(store: SimStore, pipe_dir: str) -> dict[int, int]:
    """The active thread percentage of each client of the daemon in ``pipe_dir``."""
    st = store.read()
    for d in st.get("mps", []):
        if d["pipe_dir"] == pipe_dir:
            return {c["pid"]: c["thread_pct"] for c in d["clients"]}
    return {}
