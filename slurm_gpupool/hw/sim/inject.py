"""Things that happen *to* simulated GPUs, from outside NVML.

GPU reset and reboot (``nvidia-smi --gpu-reset``, a power cycle), processes
appearing, ECC errors, Xid events, heat, other NVML clients, and injected NVML
call failures.  Tests and the sandbox use these, and ``gpupool sim ...`` exposes
them on the command line; ``docs/simulation.md`` documents each one.
"""

from __future__ import annotations

import time
from pathlib import Path

from slurm_gpupool.core.mig import catalog
from slurm_gpupool.errors import GpuBusyError, UsageError
from slurm_gpupool.hw.sim.procs import pid_alive, process_start
from slurm_gpupool.hw.sim.state import SimStore

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


# Xid numbers and the text the driver logs for them (NVIDIA Xid catalog).
XID_TEXT = {
    13: "Graphics Engine Exception",
    31: "MMU Fault",
    43: "Reset Channel Verif Error",
    45: "Preemptive Cleanup, due to previous errors",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU",
    63: "Row remapping event",
    64: "Row remapper failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
}


def _gpu(st: dict[str, Any], index: int) -> dict[str, Any]:
    if not 0 <= index < len(st["gpus"]):
        raise UsageError(f"GPU {index}", f"node {st['node']} has GPUs 0-{len(st['gpus']) - 1}")
    return st["gpus"][index]


def kmsg_path(store: SimStore) -> Path:
    """The simulated kernel log of the node (same record format as ``/dev/kmsg``)."""
    return store.path.with_suffix(".kmsg")


def reset_gpu(store: SimStore, index: int) -> None:
    """``nvidia-smi --gpu-reset``: applies a pending MIG mode and loses all instances.

    Refused while processes run on the GPU, like the real command.
    """
    with store.modify() as st:
        g = _gpu(st, index)
        pids = [p["pid"] for p in g["processes"] if pid_alive(p["pid"])]
        if pids:
            raise GpuBusyError(f"reset GPU {index} on {st['node']}", "processes are running on it", pids)
        if g["mig"] is not None:
            g["mig"]["current"] = g["mig"]["pending"]
        g["gis"] = []
        g["processes"] = []
        g.pop("activity", None)  # no process, no load
        h = g["health"]
        h["ecc"]["corrected"][0] = h["ecc"]["uncorrected"][0] = 0
        h["retired_pending"] = 0
        h["remapped_rows"]["pending"] = 0
        st["calls"]["simGpuReset"] = st["calls"].get("simGpuReset", 0) + 1


def reboot(store: SimStore) -> None:
    """A power cycle: instances are lost; Ampere keeps MIG mode (InfoROM), Hopper does not."""
    with store.modify() as st:
        for g in st["gpus"]:
            if g["mig"] is not None:
                persistent = catalog.get_model(g["model"]).mig_mode_needs_reset
                g["mig"]["current"] = g["mig"]["pending"] if persistent else 0
                g["mig"]["pending"] = g["mig"]["current"]
            g["gis"] = []
            g["processes"] = []
            g.pop("activity", None)
            h = g["health"]
            h["ecc"]["corrected"][0] = h["ecc"]["uncorrected"][0] = 0
            h["retired_pending"] = 0
            h["remapped_rows"]["pending"] = 0


def add_process(store: SimStore, index: int, pid: int, used_memory_mib: int = 0, mig_uuid: str | None = None) -> None:
    """A compute process on a GPU, or on the MIG device with ``mig_uuid``.

    The process must exist: a pid that is gone no longer holds the GPU, nor does
    another process that later gets the same pid (its start time differs).
    """
    with store.modify() as st:
        g = _gpu(st, index)
        entry: dict[str, Any] = {"pid": pid, "used_memory_mib": used_memory_mib, "start": process_start(pid)}
        if mig_uuid:
            for gi in g["gis"]:
                for ci in gi["cis"]:
                    if ci["uuid"] == mig_uuid:
                        entry.update(gi=gi["id"], ci=ci["id"])
            if "gi" not in entry:
                raise UsageError(f"MIG device {mig_uuid}", f"not on GPU {index} of {st['node']}")
        g["processes"] = [p for p in g["processes"] if p["pid"] != pid] + [entry]


def remove_process(store: SimStore, pid: int) -> None:
    with store.modify() as st:
        for g in st["gpus"]:
            g["processes"] = [p for p in g["processes"] if p["pid"] != pid]


def add_ecc_errors(store: SimStore, index: int, uncorrected: int = 0, corrected: int = 0) -> None:
    """Volatile and aggregate ECC counters go up; an uncorrectable error also
    marks a page for retirement (Volta) or a row for remapping (Ampere+)."""
    with store.modify() as st:
        g = _gpu(st, index)
        h = g["health"]
        for kind, n in (("uncorrected", uncorrected), ("corrected", corrected)):
            h["ecc"][kind][0] += n
            h["ecc"][kind][1] += n
        if uncorrected:
            if catalog.get_model(g["model"]).architecture == "volta":
                base = 0x1F000000 + len(h["retired_pages"]["dbe"]) * 0x1000
                h["retired_pages"]["dbe"].extend(base + k * 0x1000 for k in range(uncorrected))
                h["retired_pending"] = 1
            else:
                h["remapped_rows"]["uncorrectable"] += uncorrected
                h["remapped_rows"]["pending"] = 1


def set_temperature(store: SimStore, index: int, celsius: int) -> None:
    with store.modify() as st:
        _gpu(st, index)["health"]["temperature_c"] = celsius


def set_utilization(store: SimStore, index: int, gpu_pct: int, memory_pct: int = 0) -> None:
    with store.modify() as st:
        _gpu(st, index)["utilization"] = {"gpu": gpu_pct, "memory": memory_pct}


def set_activity(
    store: SimStore,
    index: int,
    sm_pct: float,
    tensor_pct: float = 0.0,
    dram_pct: float = 0.0,
    mig_uuid: str | None = None,
    when: float | None = None,
) -> None:
    """A load on a GPU, or on the GPU instance of MIG device ``mig_uuid``, from ``when`` (now) on.

    GPM samples (Hopper and later) then measure it: SM activity, tensor activity and DRAM
    bandwidth in percent, the time-weighted mean between two samples.  A load on a whole
    GPU also sets the utilization NVML reports on every architecture (``nvidia-smi dmon``'s
    ``sm`` and ``mem``), as a busy GPU would; a MIG instance has none (NVML gives none).
    """
    from slurm_gpupool.hw.sim.gpm import fold

    load = {"sm": float(sm_pct), "tensor": float(tensor_pct), "dram": float(dram_pct)}
    if not all(0 <= v <= 100 for v in load.values()):
        raise UsageError(f"activity on GPU {index}", "percentages are 0-100")
    with store.modify() as st:
        # the load's start is taken once the state is ours, just before it is written: taken
        # before the lock, a sampler reading the old state meanwhile saw no load for a time the
        # new one is back-dated over, and measured more than was set (20.1 % for 20, under load)
        now = time.time() if when is None else when
        g = _gpu(st, index)
        if mig_uuid is None:
            g["activity"] = fold(g.get("activity"), load, now)
            g["utilization"] = {"gpu": round(sm_pct), "memory": round(dram_pct)}
            return
        for gi in g["gis"]:
            if any(ci["uuid"] == mig_uuid for ci in gi["cis"]):
                gi["activity"] = fold(gi.get("activity"), load, now)
                return
        raise UsageError(f"MIG device {mig_uuid}", f"not on GPU {index} of {st['node']}")


def set_compute_mode(store: SimStore, index: int, mode: int) -> None:
    """The GPU's compute mode as ``nvidia-smi -c`` would set it (0 DEFAULT, 2 PROHIBITED,
    3 EXCLUSIVE_PROCESS): what a site may have chosen before our tools run."""
    if mode not in (0, 2, 3):
        raise ValueError(f"compute mode {mode}: 0, 2 or 3")
    with store.modify() as st:
        _gpu(st, index)["compute_mode"] = mode


def set_clients(store: SimStore, index: int, clients: int) -> None:
    """Other NVML clients holding the GPU (nvidia-persistenced, DCGM)."""
    with store.modify() as st:
        _gpu(st, index)["clients"] = clients


def add_xid(store: SimStore, index: int, xid: int, when: float | None = None) -> str:
    """Log an Xid as the driver does: ``NVRM: Xid (PCI:0000:07:00): 79, ...``.

    The record goes to the node's simulated kernel log, in ``/dev/kmsg`` format
    with the timestamp in microseconds since boot.
    """
    st = store.read()
    g = _gpu(st, index)
    dom, bus, devfn = g["pci_bus_id"].split(":")
    pci = f"{int(dom, 16):04x}:{bus.lower()}:{devfn.split('.')[0]}"
    text = XID_TEXT.get(xid, "Unknown Error")
    msg = f"NVRM: Xid (PCI:{pci}): {xid}, pid=0, name=, {text}"
    usec = int(((when or time.time()) - boot_time()) * 1e6)
    path = kmsg_path(store)
    with open(path, "a") as f:
        f.write(f"3,{_next_seq(path)},{usec},-;{msg}\n")
    return msg


def _next_seq(path: Path) -> int:
    try:
        return sum(1 for _ in open(path))
    except FileNotFoundError:
        return 0


def boot_time() -> float:
    """Wall-clock time of boot, from /proc/uptime."""
    with open("/proc/uptime") as f:
        return time.time() - float(f.read().split()[0])


def add_fault(store: SimStore, call: str, code: int, gpu: int | None = None, after: int = 0, times: int = 1) -> None:
    """Make the libnvidia-ml symbol ``call`` return ``code``.

    ``after`` matching calls succeed first; then ``times`` calls fail.  ``gpu``
    limits it to calls on one GPU.  Example: the 3rd GI creation on GPU 2 fails
    with NVML_ERROR_UNKNOWN: ``add_fault(s, "nvmlDeviceCreateGpuInstanceWithPlacement", 999, gpu=2, after=2)``.
    """
    from slurm_gpupool.hw.sim.lib import supported_symbols

    if call not in supported_symbols():
        raise UsageError(f"fault on {call}", "the simulation does not implement that NVML symbol")
    with store.modify() as st:
        st["faults"].append({"call": call, "code": code, "gpu": gpu, "after": after, "times": times})


def clear_faults(store: SimStore) -> None:
    with store.modify() as st:
        st["faults"] = []


def call_counts(store: SimStore) -> dict[str, int]:
    """How many state-changing NVML calls the node has seen, per symbol."""
    return dict(store.read().get("calls", {}))
