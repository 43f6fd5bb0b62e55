"""GPU health rules, shared by the Prolog, the Epilog and ``gpupool health``.

A GPU fails when it has uncorrectable ECC errors beyond the threshold, a pending
or failed row remap / page retirement, a temperature near its slowdown point, a
recent critical Xid in the kernel log, or MIG instances that differ from the ones
the node state (and so Slurm's GRES) describes.  Pure, except ``recent_xids``,
which reads the kernel log (``/dev/kmsg`` records, or the simulation's copy).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\): (\d+)")


def problems(h: Mapping[str, Any], rules: dict[str, Any]) -> list[str]:
    """Why this GPU should not run jobs (empty: healthy).  ``h``: the fields of a
    :class:`~slurm_gpupool.model.GpuHealth` as a mapping (``backend.health_counters``), so
    the hooks never load the model's dataclasses."""
    out = []
    gpu = h["gpu_index"]
    limit = int(rules.get("ecc_uncorrected_max", 0))
    ecc = h.get("ecc_uncorrected_volatile")
    if ecc is not None and ecc > limit:
        out.append(f"GPU {gpu}: {ecc} uncorrectable ECC errors since driver load")
    if h.get("remapped_rows_failure"):
        out.append(f"GPU {gpu}: row remapping failed")
    if h.get("remapped_rows_pending"):
        out.append(f"GPU {gpu}: row remapping pending (GPU reset needed)")
    if h.get("retired_pages_pending"):
        out.append(f"GPU {gpu}: page retirement pending (GPU reset needed)")
    margin = int(rules.get("temperature_margin_c", 3))
    temp, slowdown = h.get("temperature_c"), h.get("temperature_slowdown_c")
    if temp is not None and slowdown is not None and temp >= slowdown - margin:
        out.append(f"GPU {gpu}: {temp} C, slowdown at {slowdown} C")
    critical = set(rules.get("critical_xids", ()))
    for xid in h.get("recent_xids", ()):
        if xid in critical:
            out.append(f"GPU {gpu}: recent Xid {xid}")
    return out


def mig_drift(recorded: dict[str, Any], live_uuids: Iterable[str], live_mig_on: bool) -> str | None:
    """A GPU whose MIG instances differ from the recorded ones (Slurm's GRES would lie)."""
    want = sorted(i["uuid"] for i in recorded.get("instances", []))
    have = sorted(live_uuids)
    gpu = recorded["index"]
    if bool(recorded.get("mig_current")) != live_mig_on:
        was = "on" if recorded.get("mig_current") else "off"
        return f"GPU {gpu}: MIG mode is {'on' if live_mig_on else 'off'}, recorded {was}"
    if want != have:
        return f"GPU {gpu}: MIG instances changed since the layout was applied ({len(have)} live, {len(want)} recorded)"
    return None


def _pci_key(bus_id: str) -> str:
    """NVML ``00000000:07:00.0`` → the kernel's ``0000:07:00``."""
    dom, bus, devfn = bus_id.lower().split(":")
    return f"{int(dom, 16):04x}:{bus}:{devfn.split('.')[0]}"


def _boot_time() -> float:
    with open("/proc/uptime") as f:
        return time.time() - float(f.read().split()[0])


def _kmsg_records(path: str) -> list[str]:
    """Kernel log records: ``/dev/kmsg`` read record by record (non-blocking), or a file."""
    if path == "/dev/kmsg":
        out = []
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            while True:
                try:
                    rec = os.read(fd, 8192)
                except BlockingIOError:
                    break
                except OSError:  # EPIPE: a record was overwritten; keep reading
                    continue
                if not rec:
                    break
                out.append(rec.decode(errors="replace"))
        finally:
            os.close(fd)
        return out
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def recent_xids(path: str, bus_ids: Iterable[str], window_s: float) -> dict[str, list[int]]:
    """Xids logged for these GPUs (NVML bus ids) in the last ``window_s`` seconds."""
    keys = {_pci_key(b): b for b in bus_ids}
    out: dict[str, list[int]] = {b: [] for b in keys.values()}
    since_usec = (time.time() - window_s - _boot_time()) * 1e6
    for rec in _kmsg_records(path):
        head, _, msg = rec.partition(";")
        m = _XID.search(msg)
        if not m:
            continue
        fields = head.split(",")
        try:
            usec = int(fields[2])
        except (IndexError, ValueError):
            continue
        bus = keys.get(m.group(1).lower())
        if bus is not None and usec >= since_usec:
            out[bus].append(int(m.group(2)))
    return out


def check_gpus(backend: Any, state: dict[str, Any], indices: Iterable[int], settings: dict[str, Any]) -> list[str]:
    """Health problems of these GPUs (by NVML index), including MIG drift."""
    rules = settings["health"]
    recorded = {g["index"]: g for g in state.get("gpus", [])}
    idx = sorted(set(indices))
    bus = {i: recorded[i]["pci_bus_id"] for i in idx if i in recorded}
    kmsg = str(settings.get("kmsg") or "/dev/kmsg").replace("{node}", str(state.get("node", "")))
    xids = recent_xids(kmsg, bus.values(), float(rules.get("xid_window_s", 3600)))
    out = []
    for i in idx:
        counters = {**backend.health_counters(i), "recent_xids": tuple(xids.get(bus.get(i, ""), []))}
        out.extend(problems(counters, rules))
        if rules.get("check_mig_drift", True) and i in recorded:
            mig_on, uuids = backend.mig_state(i)
            drift = mig_drift(recorded[i], uuids, mig_on)
            if drift:
                out.append(drift)
    return out
